"""The benchmark interface and registry.

A benchmark turns data rows into `Item`s, items into generation (or log-likelihood) requests, and model outputs
into scored per-sample fields; `aggregate` turns the per-sample records into metrics.

    class Params(BenchmarkSpec):                      # the benchmark's own fields, range-checked
        name: Literal["my_bench"]

    @register_benchmark("my_bench")
    class MyBench(Benchmark[Params]):
        params = Params
        def parse_row(self, row, index): ...          # -> Item (raise ValueError for a bad row)
        def build_request(self, item, shots, chat): ... # -> GenerationRequest
        def score(self, item, output): ...              # -> {"extracted": ..., "correct": bool, ...}

Records (one per item and sample) always hold: `id`, `sample_index`, `prompt`, `output`, `extracted`,
`reference`, `correct`, `latency_s`, plus benchmark-specific fields.

What differs between benchmarks is asked of the class, never decided on its name elsewhere: its params model (the
EvalConfig union member), `run_options` / `score_options` (which `tp eval` options set which of its fields),
`use_sandbox` (benchmarks that run programs), `run_info`, `items_from_predictions` / `score_predicted` /
`scored_row` (`tp eval score`) and `report_reference` (the report's reference column).
"""

from __future__ import annotations

import gzip
import json
from abc import ABC, abstractmethod
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Generic, TypeVar, get_args

from training_platform.core.errors import InvalidInput
from training_platform.evaluation.generation import GenerationRequest
from training_platform.evaluation.metrics import Metric, accuracy_metric, pass_at_k_metrics
from training_platform.evaluation.specs import BenchmarkSpec, SandboxSpec

__all__ = [
    "BENCHMARKS",
    "Benchmark",
    "EvalDataError",
    "Item",
    "benchmark_class",
    "benchmark_spec",
    "get_benchmark",
    "load_rows",
    "register_benchmark",
]


class EvalDataError(InvalidInput):
    """A data file is missing, unreadable or has bad rows (`errors`: 'file:line: reason' strings)."""

    def __init__(self, message: str, errors: Sequence[str] = ()):
        super().__init__(
            [("", e) for e in errors] or message,
            message=message if not errors else f"{message}\n" + "\n".join(errors[:20]),
        )
        self.messages = list(errors)


@dataclass
class Item:
    id: str
    row: dict[str, Any]
    reference: Any
    index: int = 0
    extra: dict[str, Any] = field(default_factory=dict)


BENCHMARKS: dict[str, type[Benchmark[Any]]] = {}

B = TypeVar("B", bound="type[Benchmark[Any]]")


def register_benchmark(*names: str) -> Callable[[B], B]:
    """Class decorator: the benchmark under `names`; its `params` model must name exactly these in `name`."""

    def decorator(cls: B) -> B:
        declared = set(get_args(cls.params.model_fields["name"].annotation))
        if cls.params is BenchmarkSpec or declared != set(names):
            raise ValueError(f"{cls.__name__}.params needs its own model with name: Literal{sorted(names)}")
        for name in names:
            if name in BENCHMARKS:
                raise ValueError(f"benchmark {name!r} is already registered")
            BENCHMARKS[name] = cls
        return cls

    return decorator


def benchmark_class(name: str) -> type[Benchmark[Any]]:
    try:
        return BENCHMARKS[name]
    except KeyError:
        known = ", ".join(sorted(BENCHMARKS))
        raise ValueError(f"unknown benchmark {name!r}; known: {known}") from None


def benchmark_spec(fields: dict[str, Any]) -> BenchmarkSpec:
    """`fields` validated as the params of the benchmark its `name` names (ValueError for an unknown name,
    pydantic's ValidationError for bad fields)."""
    return benchmark_class(str(fields.get("name"))).params.model_validate(fields)


def get_benchmark(spec: BenchmarkSpec | str) -> Benchmark[Any]:
    """An instance of the benchmark named by `spec` (its params, a plain BenchmarkSpec, or a bare name)."""
    name = spec if isinstance(spec, str) else spec.name
    cls = benchmark_class(name)
    if isinstance(spec, str):
        spec = cls.params(name=name)
    elif type(spec) is not cls.params:
        spec = cls.params.model_validate(spec.model_dump(exclude_unset=True) | {"name": name})
    return cls(spec)


def load_rows(path: str | Path) -> list[dict[str, Any]]:
    """Rows of a JSONL (optionally .gz) file or a JSON list."""
    path = Path(path).expanduser()
    if not path.is_file():
        raise EvalDataError(f"data file not found: {path}")
    opener = gzip.open if path.suffix == ".gz" else open
    try:
        with opener(path, "rt", encoding="utf-8") as f:
            text = f.read()
    except (OSError, UnicodeDecodeError) as exc:
        raise EvalDataError(f"cannot read {path}: {exc}") from None
    stem_suffix = Path(path.stem).suffix if path.suffix == ".gz" else path.suffix
    if stem_suffix == ".json":
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise EvalDataError(f"{path}: invalid JSON: {exc}") from None
        if not isinstance(data, list) or not all(isinstance(r, dict) for r in data):
            raise EvalDataError(f"{path}: a .json data file must hold a list of objects")
        return data
    rows, errors = [], []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            errors.append(f"{path}:{number}: invalid JSON: {exc.msg}")
            continue
        if not isinstance(row, dict):
            errors.append(f"{path}:{number}: expected a JSON object, got {type(row).__name__}")
            continue
        row["__line__"] = number
        rows.append(row)
    if errors:
        raise EvalDataError(f"{path}: {len(errors)} bad line(s)", errors)
    return rows


def format_template(template: str, row: dict[str, Any]) -> str:
    # Plain `{field}` names only: `{field.attr}` / `{field[0]}` would walk Python objects (templates come from users
    # over the API), and positional `{}` has nothing to refer to.
    import string

    for _, name, _, _ in string.Formatter().parse(template):
        if name is not None and not name.isidentifier():
            raise ValueError(f"prompt_template: use plain field names such as {{question}}, not {{{name}}}")

    class _Row(dict):
        def __missing__(self, key: str) -> str:
            raise KeyError(
                f"prompt_template uses {{{key}}}, which the row does not have "
                f"(fields: {', '.join(sorted(k for k in row if not k.startswith('__')))})"
            )

    return template.format_map(_Row(row))


S = TypeVar("S", bound=BenchmarkSpec)


class Benchmark(ABC, Generic[S]):
    name: str = ""  # the registry name on the class; an instance carries its spec's
    params: ClassVar[type[BenchmarkSpec]] = BenchmarkSpec  # each benchmark's own model (`name: Literal[...]`)
    kind: ClassVar[str] = "generate"  # or "loglikelihood"
    default_max_new_tokens: ClassVar[int] = 256
    primary_metric: ClassVar[str] = "accuracy"
    data_help: ClassVar[str] = ""
    # Fields of its params that the `tp eval run` / `tp eval score` options set (cli/evaluation.py maps each option
    # to its field and passes only the ones listed here).
    run_options: ClassVar[frozenset[str]] = frozenset({"n_shot"})
    score_options: ClassVar[frozenset[str]] = frozenset()
    # The record field the report's "reference" column shows.
    report_reference: ClassVar[str] = "reference"

    def __init__(self, spec: S):
        self.spec: S = spec
        self.name = spec.name

    # -- data ----------------------------------------------------------------------------------------------------
    def default_data(self) -> Path | None:
        return None

    def data_path(self) -> Path:
        if self.spec.data:
            return Path(self.spec.data).expanduser()
        default = self.default_data()
        if default is None:
            raise EvalDataError(f"{self.name} needs a local data file: --data {self.name}=FILE ({self.data_help})")
        return default

    @abstractmethod
    def parse_row(self, row: dict[str, Any], index: int) -> Item:
        """Validate one row (ValueError with the reason when it is bad) and turn it into an Item."""

    def parse_rows(self, rows: Iterable[dict[str, Any]], source: str) -> list[Item]:
        items, errors = [], []
        seen: set[str] = set()
        for index, row in enumerate(rows):
            where = f"{source}:{row.get('__line__', index + 1)}"
            try:
                item = self.parse_row(row, index)
            except (ValueError, KeyError, TypeError) as exc:
                message = exc.args[0] if isinstance(exc, KeyError) and exc.args else exc
                errors.append(f"{where}: {message}")
                continue
            if item.id in seen:
                item.id = f"{item.id}#{index}"
            seen.add(item.id)
            items.append(item)
        if errors:
            raise EvalDataError(f"{source}: {len(errors)} bad row(s) for {self.name}", errors)
        return items

    def load_items(self) -> list[Item]:
        path = self.data_path()
        items = self.parse_rows(load_rows(path), str(path))
        if not items:
            raise EvalDataError(f"{path}: no rows")
        return items[: self.spec.limit] if self.spec.limit else items

    def fewshot_items(self, items: list[Item]) -> list[Item]:
        """The pool few-shot examples are drawn from (first `n_shot` that are not the current item)."""
        if self.spec.n_shot == 0:
            return []
        if self.spec.fewshot_data:
            path = Path(self.spec.fewshot_data).expanduser()
            return self.parse_rows(load_rows(path), str(path))
        return items

    def shots_for(self, item: Item, pool: list[Item]) -> list[Item]:
        shots: list[Item] = []
        for candidate in pool:
            if len(shots) >= self.spec.n_shot:
                break
            if candidate is not item:  # the same item when the pool is the eval data itself
                shots.append(candidate)
        return shots

    # -- prompting -----------------------------------------------------------------------------------------------
    def use_chat(self, backend_supports_chat: bool) -> bool:
        return backend_supports_chat if self.spec.chat is None else self.spec.chat

    @abstractmethod
    def build_request(self, item: Item, shots: list[Item], chat: bool) -> GenerationRequest: ...

    def stop_sequences(self, chat: bool) -> tuple[str, ...]:
        return ()

    def max_new_tokens(self) -> int:
        return self.spec.max_new_tokens or self.default_max_new_tokens

    def stops(self, chat: bool) -> tuple[str, ...]:
        return tuple(self.spec.stop) if self.spec.stop is not None else self.stop_sequences(chat)

    def _messages(self, user: str, shots: list[tuple[str, str]]) -> list[dict[str, str]]:
        messages: list[dict[str, str]] = []
        if self.spec.system_prompt:
            messages.append({"role": "system", "content": self.spec.system_prompt})
        for question, answer in shots:
            messages += [{"role": "user", "content": question}, {"role": "assistant", "content": answer}]
        messages.append({"role": "user", "content": user})
        return messages

    # -- scoring -------------------------------------------------------------------------------------------------
    @abstractmethod
    def score(self, item: Item, output: str) -> dict[str, Any]:
        """Fields for the record: at least `extracted` and `correct`."""

    def score_many(
        self,
        items: Sequence[Item],
        outputs: Sequence[str],
        *,
        progress: Callable[[int], None] | None = None,
        chat: bool = False,
        completions: Sequence[str] | None = None,
    ) -> list[dict[str, Any]]:
        """Score every output; `completions` (the code to run, HumanEval) when the caller already has them."""
        results = []
        for item, output in zip(items, outputs, strict=True):
            results.append(self.score(item, output))
            if progress:
                progress(1)
        return results

    # -- log-likelihood benchmarks (kind "loglikelihood") answer these two
    def continuations(self, item: Item) -> list[str]:
        raise NotImplementedError(f"{self.name} is not a log-likelihood benchmark")

    def score_loglikelihoods(self, item: Item, scores: Sequence[tuple[float, bool]]) -> dict[str, Any]:
        raise NotImplementedError(f"{self.name} is not a log-likelihood benchmark")

    def prepare(self) -> None:  # noqa: B027 - optional hook
        """Acquire what scoring needs before generation starts (e.g. the code sandbox): fail early."""

    def use_sandbox(self, sandbox: SandboxSpec) -> None:  # noqa: B027 - optional hook
        """The sandbox limits of the run, for benchmarks that run programs (before `prepare`)."""

    def run_info(self, chat: bool) -> dict[str, Any]:
        """Benchmark-specific facts for summary.json (e.g. HumanEval's prompting mode and isolation)."""
        return {}

    # -- `tp eval score`: outputs produced elsewhere
    def items_from_predictions(self, rows: Sequence[dict[str, Any]], source: str) -> tuple[list[Item], list[str]]:
        """The items and model outputs of prediction rows (the benchmark's data fields plus `output_field()`)."""
        field = self.output_field()
        items = self.parse_rows([dict(r) for r in rows], source)
        errors = [
            f"{source}:{r.get('__line__', i + 1)}: missing {field!r}"
            for i, r in enumerate(rows)
            if not isinstance(r.get(field), str)
        ]
        if errors:
            raise EvalDataError(f"{source}: {len(errors)} row(s) without a string {field!r}", errors)
        return items, [r[field] for r in rows]

    def score_predicted(
        self, items: Sequence[Item], outputs: Sequence[str], *, progress: Callable[[int], None] | None = None
    ) -> list[dict[str, Any]]:
        return self.score_many(items, outputs, progress=progress)

    def scored_row(self, fields: dict[str, Any]) -> dict[str, Any]:
        """What a scored prediction row gains."""
        return dict(fields)

    def output_field(self) -> str:
        """The field of a predictions row (`tp eval score`) that holds the model output."""
        return "output"

    def aggregate(self, records: Sequence[dict[str, Any]]) -> dict[str, Metric]:
        metrics = {"accuracy": accuracy_metric(r.get("correct") for r in records)}
        metrics.update(self._pass_at_k(records, "correct"))
        return metrics

    def metric_names(self) -> list[str]:
        """The metrics `aggregate` reports for this spec (what a schedule's `keep_best_by` may name)."""
        return ["accuracy", *self._pass_at_k_names()]

    def _pass_at_k_names(self) -> list[str]:
        return [f"pass@{k}" for k in self.spec.k] if self.spec.n_samples > 1 else []

    def _pass_at_k(self, records: Sequence[dict[str, Any]], key: str) -> dict[str, Metric]:
        by_item: dict[str, list[bool]] = defaultdict(list)
        for r in records:
            by_item[str(r["id"])].append(bool(r.get(key)))
        if not by_item or max(len(v) for v in by_item.values()) < 2:
            return {}
        return pass_at_k_metrics(by_item, self.spec.k)

    def summary_line(self, metrics: dict[str, Metric]) -> dict[str, Any]:
        """The JSON summary `tp eval score` prints last."""
        out: dict[str, Any] = {}
        for key, metric in metrics.items():
            out[key] = metric.value
        first = next(iter(metrics.values()), None)
        out["n"] = first.n if first else 0
        for key, metric in metrics.items():
            out[f"{key}_stderr"] = metric.stderr
        return out
