"""Convert rows between compatible formats, and preview how rows render under a tokenizer's chat template.

Conversion targets (`TARGET_FORMATS`) and what they accept:
- SFT: `messages`, `sharegpt`, `alpaca`, `prompt_completion` from any of messages / sharegpt / alpaca /
  prompt_completion (through messages). `alpaca` needs a single user turn and one assistant reply (an optional system
  turn goes to `system`); `prompt_completion` takes the last assistant turn as the completion (strings when the chat
  is exactly one user turn + one reply, message lists otherwise).
- Preference: `preference_plain` (strings) <-> `preference_conversational` (message lists). Plain needs a single user
  prompt turn and single assistant replies; a conversational row without `prompt` has its prompt extracted as the
  common prefix of chosen and rejected.
- RL: `rl_prompt` <-> `verl` (verl's parquet schema: data_source, prompt messages, ability,
  reward_model {style: rule, ground_truth}, extra_info). rl_prompt columns other than prompt/answer/data_source/
  ability/extra_info go into extra_info.

Lossless round trips: messages <-> sharegpt (roles user/assistant/system/tool), messages (one user turn + reply,
optional system) <-> alpaca without input, prompt_completion (strings) <-> messages, preference plain <->
conversational (single prompt turn, single replies), verl -> rl_prompt -> verl. Alpaca `input` is merged into the
user turn (instruction + blank line + input), so alpaca with input -> messages -> alpaca is lossy.

`convert_file` settles the source format in the driver (the first parseable row's, unless given), converts the rows
block by block with `ConvertStage` on an executor (data/executors/: local, or Ray Data stages) and writes them here,
in the input's order.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from training_platform.core.errors import InvalidInput
from training_platform.data.formats import (
    DATA_FORMATS,
    SHAREGPT_ROLES,
    DatasetError,
    RowError,
    apply_field_map,
    detect_format,
    validate_row,
)
from training_platform.data.io import Record, RowWriter, iter_records
from training_platform.data.tokenizer import load_tokenizer  # noqa: F401 - re-exported (callers of convert's)

if TYPE_CHECKING:
    from training_platform.data.executors import Executor

TARGET_FORMATS = (
    "messages",
    "sharegpt",
    "alpaca",
    "prompt_completion",
    "preference_plain",
    "preference_conversational",
    "rl_prompt",
    "verl",
)
_ALIASES = {"preference": "preference_plain", "conversational_preference": "preference_conversational"}
_SFT = ("messages", "sharegpt", "alpaca", "prompt_completion")
_TO_SHAREGPT = {"user": "human", "assistant": "gpt", "system": "system", "tool": "tool"}
_RL_COLUMNS = ("prompt", "answer", "data_source", "ability", "extra_info")


class ConversionError(InvalidInput):
    def __init__(self, field: str, reason: str):
        self.field = field
        self.reason = reason
        super().__init__([(field, reason)])


def target_format(name: str) -> str:
    name = _ALIASES.get(name, name)
    if name not in TARGET_FORMATS:
        raise ValueError(f"--to: unknown target format {name!r}; use one of {', '.join(TARGET_FORMATS)}")
    return name


def can_convert(src: str, dst: str) -> bool:
    dst = _ALIASES.get(dst, dst)
    if src in _SFT:
        return dst in _SFT
    if src == "preference":
        return dst in ("preference_plain", "preference_conversational")
    if src in ("rl_prompt", "verl"):
        return dst in ("rl_prompt", "verl")
    return False


# ---------------------------------------------------------------------------------------------- SFT


def _to_messages(row: dict, src: str) -> list[dict]:
    from training_platform.data.formats import to_canonical

    if src in ("messages", "sharegpt", "alpaca"):
        return to_canonical(src, row)["messages"]
    # prompt_completion
    prompt, completion = row["prompt"], row["completion"]
    if isinstance(prompt, str):
        return [{"role": "user", "content": prompt}, {"role": "assistant", "content": completion}]
    return [{"role": m["role"], "content": m["content"]} for m in [*prompt, *completion]]


def _from_messages(messages: list[dict], dst: str) -> dict:
    if dst == "messages":
        return {"messages": messages}
    if dst == "sharegpt":
        return {"conversations": [{"from": _TO_SHAREGPT[m["role"]], "value": m["content"]} for m in messages]}
    if dst == "alpaca":
        roles = [m["role"] for m in messages]
        if roles not in (["user", "assistant"], ["system", "user", "assistant"]):
            raise ConversionError(
                "messages",
                f"alpaca holds one user turn and one assistant reply (plus an optional "
                f"system turn); this row has the turns {roles}",
            )
        out = {"instruction": messages[-2]["content"], "input": "", "output": messages[-1]["content"]}
        if roles[0] == "system":
            out["system"] = messages[0]["content"]
        return out
    if dst == "prompt_completion":
        if len(messages) < 2 or messages[-1]["role"] != "assistant":
            raise ConversionError("messages", "needs a prompt and a final assistant turn for prompt_completion")
        if [m["role"] for m in messages] == ["user", "assistant"]:
            return {"prompt": messages[0]["content"], "completion": messages[1]["content"]}
        return {"prompt": messages[:-1], "completion": messages[-1:]}
    raise ConversionError("<row>", f"cannot convert chat rows to {dst}")


# ---------------------------------------------------------------------------------------------- preference


def _common_prefix(a: list, b: list) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


def _preference(row: dict, dst: str) -> dict:
    prompt, chosen, rejected = row.get("prompt"), row["chosen"], row["rejected"]
    conversational = isinstance(chosen, list)
    if dst == "preference_conversational":
        if conversational:
            return {k: row[k] for k in ("prompt", "chosen", "rejected") if k in row}
        out = {
            "chosen": [{"role": "assistant", "content": chosen}],
            "rejected": [{"role": "assistant", "content": rejected}],
        }
        return {"prompt": [{"role": "user", "content": prompt}], **out} if prompt is not None else out
    # -> plain
    if not conversational:
        return {k: row[k] for k in ("prompt", "chosen", "rejected") if k in row}
    if prompt is None:  # implicit prompt: the shared beginning of both conversations
        n = _common_prefix(chosen, rejected)
        prompt, chosen, rejected = (chosen[:n] or None), chosen[n:], rejected[n:]
    if prompt is not None and (len(prompt) != 1 or prompt[0].get("role") != "user"):
        raise ConversionError(
            "prompt",
            f"plain preference needs a single user prompt turn; this row has the turns "
            f"{[m.get('role') for m in prompt]}",
        )
    for name, reply in (("chosen", chosen), ("rejected", rejected)):
        if len(reply) != 1 or reply[0].get("role") != "assistant":
            raise ConversionError(
                name,
                f"plain preference needs a single assistant reply; this row has the turns "
                f"{[m.get('role') for m in reply]}",
            )
    out = {"chosen": chosen[0]["content"], "rejected": rejected[0]["content"]}
    return {"prompt": prompt[0]["content"], **out} if prompt is not None else out


# ---------------------------------------------------------------------------------------------- RL


def _rl(row: dict, src: str, dst: str, *, index: int, data_source: str, ability: str | None) -> dict:
    if src == dst:
        return dict(row)
    if dst == "rl_prompt":  # verl -> rl_prompt
        out = {
            "prompt": row["prompt"],
            "answer": row["reward_model"]["ground_truth"],
            "data_source": row["data_source"],
        }
        for key in ("ability", "extra_info"):
            if row.get(key) is not None:
                out[key] = row[key]
        style = row["reward_model"].get("style")
        if style not in (None, "rule"):
            out["reward_style"] = style
        return out
    # rl_prompt -> verl
    prompt = row["prompt"]
    messages = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else prompt
    if "answer" not in row:
        raise ConversionError("answer", "verl rows need a reference answer (reward_model.ground_truth)")
    had_extra = isinstance(row.get("extra_info"), dict)
    extra = dict(row["extra_info"]) if had_extra else {"index": index}
    extra.update({k: v for k, v in row.items() if k not in _RL_COLUMNS and k != "reward_style"})
    return {
        "data_source": row.get("data_source") or data_source,
        "prompt": messages,
        "ability": row.get("ability") or ability or "general",
        "reward_model": {"style": row.get("reward_style", "rule"), "ground_truth": str(row["answer"])},
        "extra_info": extra,
    }


# ---------------------------------------------------------------------------------------------- rows and files


def convert_row(
    row: dict, src: str, dst: str, *, index: int = 0, data_source: str = "custom", ability: str | None = None
) -> dict:
    """Convert one valid row of format `src` to target `dst` (see the module docstring). Raises ConversionError
    (field, reason) when this row cannot be expressed in the target format."""
    dst = target_format(dst)
    if not can_convert(src, dst):
        raise ConversionError("<row>", f"format {src!r} cannot be converted to {dst!r}")
    if src in _SFT:
        return _from_messages(_to_messages(row, src), dst)
    if src == "preference":
        return _preference(row, dst)
    return _rl(row, src, dst, index=index, data_source=data_source, ability=ability)


@dataclass
class ConvertReport:
    input: str
    output: str
    source_format: str
    target_format: str
    rows: int = 0
    converted: int = 0
    errors: list[RowError] = field(default_factory=list)
    executor: dict[str, Any] | None = None  # where the rows were converted (Executor.describe())

    def to_dict(self) -> dict[str, Any]:
        return {
            "input": self.input,
            "output": self.output,
            "source_format": self.source_format,
            "target_format": self.target_format,
            "rows": self.rows,
            "converted": self.converted,
            "errors": [str(e) for e in self.errors],
            "executor": self.executor,
        }


@dataclass
class ConvertStage:
    """One block's rows converted: the converted rows, the parseable rows seen and the problems (line, field,
    reason) in order. The row's index (verl's extra_info.index) is its 0-based index in the file."""

    src: str | None  # None only for a file without a parseable row
    dst: str
    field_map: dict[str, str] | None = None
    data_source: str = "custom"
    ability: str | None = None

    def __call__(self, records: Sequence[Record]) -> dict[str, Any]:
        rows = 0
        converted: list[dict] = []
        errors: list[RowError] = []
        for record in records:
            if record.error is not None:
                errors.append(record.error)
                continue
            row = apply_field_map(record.row, self.field_map or {}) if isinstance(record.row, dict) else record.row
            if self.src is None:  # the driver found no parseable row; the file changed under the scan
                raise DatasetError([RowError(record.line, "<row>", "the file changed while it was read")])
            rows += 1
            problems = validate_row(self.src, row)
            if problems:
                errors.append(RowError(record.line, *problems[0]))
                continue
            try:
                converted.append(
                    convert_row(
                        row, self.src, self.dst, index=record.index, data_source=self.data_source, ability=self.ability
                    )
                )
            except ConversionError as exc:
                errors.append(RowError(record.line, exc.field, exc.reason))
        return {"rows": rows, "converted": converted, "errors": errors}


def _source_format(path: str | Path, fmt: str, dst: str, field_map: dict[str, str] | None) -> str | None:
    """The rows' format: `fmt`, else the first parseable row's (None: the file has none). The first parseable row
    must have a format that converts to `dst`, else DatasetError naming its line."""
    for record in iter_records(path):
        if record.error is not None:
            continue
        row = apply_field_map(record.row, field_map or {}) if isinstance(record.row, dict) else record.row
        src = fmt if fmt != "auto" else (detect_format(row) if isinstance(row, dict) else None)
        if src is None:
            raise DatasetError([RowError(record.line, "<row>", "cannot detect the format; pass --format")])
        if not can_convert(src, dst):
            raise DatasetError([RowError(record.line, "<row>", f"format {src!r} cannot be converted to {dst!r}")])
        return src
    return None


def convert_file(
    path: str | Path,
    output: str | Path,
    to: str,
    *,
    fmt: str = "auto",
    field_map: dict[str, str] | None = None,
    data_source: str = "custom",
    ability: str | None = None,
    executor: Executor | None = None,
) -> ConvertReport:
    """Convert a whole file. Every row must be valid in its format and convertible; otherwise DatasetError lists
    the bad rows (line, field, reason) and nothing is written. The output type follows its suffix (`.parquet` for
    verl). The rows are converted block by block on `executor` (default: local, in this process) and written here,
    in the input's order."""
    from training_platform.data.executors import get_executor

    dst = target_format(to)
    if fmt != "auto" and fmt not in DATA_FORMATS:
        raise ValueError(f"--format: unknown format {fmt!r}; use auto or one of {', '.join(DATA_FORMATS)}")
    executor = executor or get_executor("local")
    errors: list[RowError] = []
    rows = converted = 0
    with RowWriter(output) as writer:
        src = _source_format(path, fmt, dst, field_map)
        stage = ConvertStage(src, dst, field_map or None, data_source, ability)
        for part in executor.map_blocks(Path(path), stage):
            rows += part["rows"]
            errors.extend(part["errors"])
            writer.write_all(part["converted"])
            converted += len(part["converted"])
        if errors:
            raise DatasetError(errors)
        if src is None or rows == 0:
            raise DatasetError([RowError(0, "<file>", "the file has no rows")])
    return ConvertReport(str(path), str(output), src, dst, rows, converted, executor=executor.describe())


# ---------------------------------------------------------------------------------------------- chat template preview


def render_row(row: dict, fmt: str, tokenizer) -> str:
    """The text a trainer would see for this row: chat template for conversational rows (prompt + chosen for
    preference), plain concatenation otherwise."""
    from training_platform.data.formats import to_canonical

    canonical = to_canonical(fmt, row)
    template = getattr(tokenizer, "chat_template", None)

    def chat(messages: list[dict], generation: bool = False) -> str:
        if template:
            return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=generation)
        return "\n".join(f"{m['role']}: {m['content']}" for m in messages)

    if "messages" in canonical:
        return chat(canonical["messages"])
    if "text" in canonical:
        return canonical["text"]
    prompt = canonical.get("prompt", "")
    reply = canonical.get("completion", canonical.get("chosen", ""))
    if fmt in ("rl_prompt", "verl"):  # the model generates from the prompt
        messages = prompt if isinstance(prompt, list) else [{"role": "user", "content": prompt}]
        return chat(messages, generation=True) if template else prompt if isinstance(prompt, str) else chat(messages)
    if isinstance(prompt, list) or isinstance(reply, list):

        def as_list(v):
            return v if isinstance(v, list) else ([{"role": "assistant", "content": v}] if v else [])

        return chat([*(prompt if isinstance(prompt, list) else [{"role": "user", "content": prompt}]), *as_list(reply)])
    return f"{prompt}{reply}"


def preview_chat_template(
    path: str | Path, tokenizer: str | Path | Any, *, n: int = 3, fmt: str = "auto"
) -> list[dict[str, Any]]:
    """The first `n` valid rows rendered with the tokenizer's chat template: [{index, line, text, tokens}]."""
    tok = load_tokenizer(tokenizer) if isinstance(tokenizer, str | Path) else tokenizer
    out: list[dict[str, Any]] = []
    src = None if fmt == "auto" else fmt
    for record in iter_records(path):
        if len(out) >= n:
            break
        if record.error is not None or not isinstance(record.row, dict):
            continue
        src = src or detect_format(record.row)
        if src is None or validate_row(src, record.row):
            continue
        text = render_row(record.row, src, tok)
        out.append(
            {
                "index": record.index,
                "line": record.line,
                "text": text,
                "tokens": len(tok(text, add_special_tokens=False)["input_ids"]),
            }
        )
    return out


__all__ = [
    "TARGET_FORMATS",
    "ConversionError",
    "can_convert",
    "convert_file",
    "convert_row",
    "load_tokenizer",
    "preview_chat_template",
    "render_row",
    "target_format",
    "SHAREGPT_ROLES",
]
