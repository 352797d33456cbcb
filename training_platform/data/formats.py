"""Dataset row formats: read files, detect the format, validate every row, convert to the canonical shape.

Canonical shapes (what TRL trainers consume), by the kind of data an algorithm trains on:
- sft:        {"messages": [...]}, {"prompt": ..., "completion": ...} or {"text": str}
- preference: {"prompt"?: ..., "chosen": ..., "rejected": ...} (strings, or lists of chat messages)
- kto:        {"prompt": ..., "completion": ..., "label": bool}
- rl:         {"prompt": str | messages, "answer"?: str, ...other columns, passed to reward functions}

verl's RL parquet schema (`data_source`, `prompt` messages, `ability`, `reward_model: {style, ground_truth}`,
`extra_info`) is the `verl` format of the rl kind: its canonical row is an rl row whose `answer` is
`reward_model.ground_truth` (data_source, ability and extra_info stay as columns).

A bad row is reported with its line number (1-based line in JSONL, 1-based record otherwise), the field and the
reason; nothing is silently dropped.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from training_platform.core.errors import PlatformError

ROLES = {"system", "user", "assistant", "tool"}
SHAREGPT_ROLES = {
    "human": "user",
    "user": "user",
    "gpt": "assistant",
    "assistant": "assistant",
    "system": "system",
    "tool": "tool",
    "function_call": "assistant",
    "observation": "tool",
}

# Which formats each kind of training data accepts.
KIND_FORMATS: dict[str, tuple[str, ...]] = {
    "sft": ("messages", "sharegpt", "alpaca", "prompt_completion", "text"),
    "preference": ("preference",),
    "kto": ("kto",),
    "rl": ("rl_prompt",),
}
ALL_FORMATS = ("messages", "sharegpt", "alpaca", "prompt_completion", "text", "preference", "kto", "rl_prompt")
# Schema variants of a trainer format: validated by their own rules, loaded as the canonical rows of that format.
VARIANT_FORMATS: dict[str, str] = {"verl": "rl_prompt"}
# Every format the data tools (validate/convert/clean/...) understand.
DATA_FORMATS = (*ALL_FORMATS, *VARIANT_FORMATS)
SUPPORTED_SUFFIXES = (".jsonl", ".json", ".parquet", ".csv")


@dataclass(frozen=True)
class RowError:
    line: int
    field: str
    reason: str

    def __str__(self) -> str:
        return f"line {self.line}: {self.field}: {self.reason}"


class DatasetError(PlatformError):
    """Bad rows (or a file-level problem): `rows` the RowErrors (line, field, reason), `errors` the same as the
    platform's FieldErrors (`line N: field`, reason); `total_bad` counts every bad row, listed or not. Invalid input
    (422 / exit 2), but not a ValueError: code that handles a bad value must not swallow a bad file."""

    http_status = 422
    exit_code = 2
    code = "invalid"
    separator = "\n"

    def __init__(self, errors: list[RowError], total_bad: int | None = None):
        self.rows = list(errors)
        self.total_bad = total_bad if total_bad is not None else len(errors)
        super().__init__([(f"line {e.line}: {e.field}", e.reason) for e in errors])


# ---------------------------------------------------------------------------------------------- reading


DEFAULT_MAX_ROW_BYTES = 64 * 1024 * 1024  # one JSONL/CSV line or JSON array item, when the caller sets no limit
_READ_CHUNK = 1 << 20


@dataclass(frozen=True)
class ReadLimits:
    """Caps while reading an untrusted file: rows, decoded bytes (Parquet: uncompressed; other types: the file's
    size) and bytes per row (a JSONL/CSV line, a JSON array item). None: no cap."""

    max_rows: int | None = None
    max_bytes: int | None = None
    max_row_bytes: int = DEFAULT_MAX_ROW_BYTES


class LimitExceeded(DatasetError):
    """A file over one of its ReadLimits. `cap` is rows | bytes | row_bytes."""

    def __init__(self, cap: str, line: int, reason: str):
        self.cap = cap
        super().__init__([RowError(line, "<file>", reason)])


def _mb(n: int) -> str:
    if n >= 2**20:
        return f"{n / 2**20:.4g} MB"
    return f"{n / 1024:.4g} KB" if n >= 1024 else f"{n} bytes"


def row_too_long(line: int, limit: int) -> LimitExceeded:
    return LimitExceeded(
        "row_bytes", line, f"line {line} is longer than the limit of {_mb(limit)} per row; it was not read"
    )


def check_file_size(path: Path, limits: ReadLimits) -> None:
    """Text files: their size is what they expand to."""
    if limits.max_bytes is not None and path.suffix.lower() != ".parquet":
        size = path.stat().st_size
        if size > limits.max_bytes:
            raise LimitExceeded(
                "bytes", 0, f"the file is {_mb(size)}, over the limit of {_mb(limits.max_bytes)} per dataset file"
            )


def bounded_lines(f: IO, max_len: int) -> Iterator[tuple[int, Any]]:
    """(line number, line) of a file opened for reading, each read with a bound: a line longer than `max_len`
    (bytes in binary mode, characters in text mode) raises LimitExceeded instead of being held in memory."""
    line_no = 0
    while True:
        line = f.readline(max_len + 1)
        if not line:
            return
        line_no += 1
        if len(line) > max_len:
            raise row_too_long(line_no, max_len)
        yield line_no, line


def _iter_json_array(f: IO[str], max_len: int) -> Iterator[tuple[int, Any]]:
    """The items of a top-level JSON array, streamed: at most one item (<= `max_len` characters) plus one read
    chunk is held in memory."""
    decoder = json.JSONDecoder()
    buf, pos, eof, record, lines_before = "", 0, False, 0, 0

    def line_at(i: int) -> int:
        return lines_before + buf.count("\n", 0, i) + 1

    def fill() -> bool:
        nonlocal buf, pos, eof, lines_before
        chunk = f.read(_READ_CHUNK)
        lines_before += buf.count("\n", 0, pos)
        buf, pos = buf[pos:] + chunk, 0
        eof = not chunk
        return bool(chunk)

    def skip_ws() -> str:
        nonlocal pos
        while True:
            while pos < len(buf) and buf[pos] in " \t\r\n":
                pos += 1
            if pos < len(buf) or not fill():
                return buf[pos] if pos < len(buf) else ""

    if skip_ws() != "[":
        raise DatasetError([RowError(1, "<file>", "a .json dataset must be a list of objects")])
    pos += 1
    if skip_ws() == "]":
        return
    while True:
        try:
            item, end = decoder.raw_decode(buf, pos)
            complete = end < len(buf) or eof  # a number at the end of the buffer may go on in the next chunk
        except json.JSONDecodeError as exc:
            if eof:
                raise DatasetError([RowError(line_at(exc.pos), "<file>", f"invalid JSON: {exc.msg}")]) from None
            complete = False
        if not complete:
            if len(buf) - pos > max_len:
                raise row_too_long(record + 1, max_len)
            fill()
            continue
        if end - pos > max_len:
            raise row_too_long(record + 1, max_len)
        record += 1
        yield record, item
        pos = end
        sep = skip_ws()
        if sep == "]":
            return
        if sep != ",":
            raise DatasetError([RowError(line_at(pos), "<file>", "invalid JSON: expected ',' or ']' after an item")])
        pos += 1
        skip_ws()


def _parquet_batches(path: Path, limits: ReadLimits) -> Iterator[tuple[int, Any]]:
    """Rows of a Parquet file, batch by batch. Its metadata (rows, uncompressed bytes) is checked against the
    limits before any row is decoded, and the decoded bytes are counted again while reading (metadata can lie)."""
    import pyarrow.parquet as pq

    file = pq.ParquetFile(path)
    meta = file.metadata
    if limits.max_rows is not None and meta.num_rows > limits.max_rows:
        raise LimitExceeded(
            "rows", 0, f"the file holds {meta.num_rows} rows, over the limit of {limits.max_rows} rows per dataset file"
        )
    expanded = sum(meta.row_group(i).total_byte_size for i in range(meta.num_row_groups))
    if limits.max_bytes is not None and expanded > limits.max_bytes:
        raise LimitExceeded(
            "bytes",
            0,
            f"the file expands to {_mb(expanded)}, over the limit of {_mb(limits.max_bytes)} per dataset file",
        )
    import pyarrow as pa

    line, decoded = 0, 0
    for batch in file.iter_batches(batch_size=1024):
        # dictionary-encoded columns count as what they decode to (their own nbytes are the indices)
        decoded += sum(
            col.dictionary_decode().nbytes if pa.types.is_dictionary(col.type) else col.nbytes for col in batch.columns
        )
        if limits.max_bytes is not None and decoded > limits.max_bytes:
            raise LimitExceeded(
                "bytes",
                line + 1,
                f"the file expands to more than the limit of {_mb(limits.max_bytes)} per dataset file",
            )
        for row in batch.to_pylist():
            line += 1
            yield line, row


def read_rows(path: str | Path, limits: ReadLimits | None = None) -> Iterator[tuple[int, Any]]:
    """Yield (line number, row) for JSONL/JSON/Parquet/CSV. Unparseable JSONL lines raise DatasetError. Reads are
    bounded: a row longer than `limits.max_row_bytes` raises LimitExceeded (as do files over the other limits,
    except the row count, which the caller counts)."""
    path = Path(path)
    limits = limits or ReadLimits()
    suffix = path.suffix.lower()
    check_file_size(path, limits)
    if suffix in (".jsonl", ".ndjson"):
        with path.open("rb") as f:
            for line_no, raw in bounded_lines(f, limits.max_row_bytes):
                line = raw.decode("utf-8")
                if not line.strip():
                    continue
                try:
                    yield line_no, json.loads(line)
                except json.JSONDecodeError as exc:
                    raise DatasetError([RowError(line_no, "<row>", f"invalid JSON: {exc.msg}")]) from None
    elif suffix == ".json":
        with path.open(encoding="utf-8") as f:
            yield from _iter_json_array(f, limits.max_row_bytes)
    elif suffix == ".parquet":
        yield from _parquet_batches(path, limits)
    elif suffix == ".csv":
        import csv

        with path.open(encoding="utf-8", newline="") as f:
            lines = (line for _, line in bounded_lines(f, limits.max_row_bytes))
            yield from enumerate(csv.DictReader(lines), start=1)
    else:
        raise DatasetError(
            [RowError(0, "<file>", f"unsupported file type {suffix!r}; use one of {', '.join(SUPPORTED_SUFFIXES)}")]
        )


def apply_field_map(row: dict, field_map: dict[str, str]) -> dict:
    """field_map is canonical -> source column."""
    if not field_map:
        return row
    row = dict(row)
    for canonical, source in field_map.items():
        if source in row:
            row[canonical] = row.pop(source)
    return row


def detect_format(row: dict) -> str | None:
    keys = set(row)
    if {"chosen", "rejected"} <= keys:
        return "preference"
    if {"completion", "label"} <= keys:
        return "kto"
    if "messages" in keys:
        return "messages"
    if "conversations" in keys:
        return "sharegpt"
    if {"instruction", "output"} <= keys:
        return "alpaca"
    if {"prompt", "completion"} <= keys:
        return "prompt_completion"
    if {"prompt", "reward_model"} <= keys:
        return "verl"
    if "prompt" in keys:
        return "rl_prompt"
    if "text" in keys:
        return "text"
    return None


# ---------------------------------------------------------------------------------------------- validation


def _check_messages(value: Any, field: str, *, need_assistant: bool) -> list[tuple[str, str]]:
    if not isinstance(value, list) or not value:
        return [(field, f"must be a non-empty list of messages, got {_short(value)}")]
    errors = []
    for i, msg in enumerate(value):
        where = f"{field}[{i}]"
        if not isinstance(msg, dict):
            errors.append((where, f"must be an object with role and content, got {_short(msg)}"))
            continue
        if msg.get("role") not in ROLES:
            errors.append((f"{where}.role", f"must be one of {sorted(ROLES)}, got {_short(msg.get('role'))}"))
        if not isinstance(msg.get("content"), str):
            errors.append((f"{where}.content", f"must be a string, got {_short(msg.get('content'))}"))
    if need_assistant and not errors and not any(m.get("role") == "assistant" for m in value):
        errors.append((field, "has no assistant turn to learn from"))
    return errors


def _check_text_or_messages(value: Any, field: str, *, need_assistant: bool = False) -> list[tuple[str, str]]:
    if isinstance(value, str):
        return [] if value.strip() else [(field, "must not be empty")]
    if isinstance(value, list):
        return _check_messages(value, field, need_assistant=need_assistant)
    return [(field, f"must be a string or a list of messages, got {_short(value)}")]


def _short(value: Any) -> str:
    text = "null" if value is None else repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _as_bool(value: Any) -> bool | None:
    """KTO labels: JSON booleans, or the strings true/false (CSV has no booleans)."""
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    return None


def _is_messages(value: Any) -> bool:
    return isinstance(value, list)


def validate_row(fmt: str, row: Any) -> list[tuple[str, str]]:
    """(field, reason) for every problem in one row of format `fmt`."""
    if not isinstance(row, dict):
        return [("<row>", f"must be an object, got {_short(row)}")]
    if fmt == "messages":
        return _check_messages(row.get("messages"), "messages", need_assistant=True)
    if fmt == "sharegpt":
        conv = row.get("conversations")
        if not isinstance(conv, list) or not conv:
            return [("conversations", f"must be a non-empty list, got {_short(conv)}")]
        errors = []
        for i, turn in enumerate(conv):
            if not isinstance(turn, dict) or turn.get("from") not in SHAREGPT_ROLES:
                errors.append((f"conversations[{i}].from", f"must be one of {sorted(SHAREGPT_ROLES)}"))
            elif not isinstance(turn.get("value"), str):
                errors.append((f"conversations[{i}].value", f"must be a string, got {_short(turn.get('value'))}"))
        if not errors and not any(SHAREGPT_ROLES[t["from"]] == "assistant" for t in conv):
            errors.append(("conversations", "has no assistant (gpt) turn to learn from"))
        return errors
    if fmt == "alpaca":
        errors = []
        for key in ("instruction", "output"):
            if not isinstance(row.get(key), str) or not row[key].strip():
                errors.append((key, f"must be a non-empty string, got {_short(row.get(key))}"))
        if row.get("input") is not None and not isinstance(row.get("input"), str):
            errors.append(("input", f"must be a string, got {_short(row.get('input'))}"))
        return errors
    if fmt == "prompt_completion":
        errors = _check_text_or_messages(row.get("prompt"), "prompt")
        errors += _check_text_or_messages(row.get("completion"), "completion")
        if not errors and _is_messages(row["prompt"]) != _is_messages(row["completion"]):
            errors.append(("completion", "prompt and completion must both be strings or both message lists"))
        return errors
    if fmt == "text":
        text = row.get("text")
        return (
            []
            if isinstance(text, str) and text.strip()
            else [("text", f"must be a non-empty string, got {_short(text)}")]
        )
    if fmt == "preference":
        errors = []
        if "prompt" in row:
            errors += _check_text_or_messages(row.get("prompt"), "prompt")
        errors += _check_text_or_messages(row.get("chosen"), "chosen")
        errors += _check_text_or_messages(row.get("rejected"), "rejected")
        if not errors:
            kinds = {_is_messages(row[k]) for k in ("prompt", "chosen", "rejected") if k in row}
            if len(kinds) > 1:
                errors.append(("rejected", "prompt, chosen and rejected must all be strings or all message lists"))
            elif row["chosen"] == row["rejected"]:
                errors.append(("rejected", "is identical to chosen"))
        return errors
    if fmt == "kto":
        errors = _check_text_or_messages(row.get("prompt"), "prompt")
        errors += _check_text_or_messages(row.get("completion"), "completion")
        if _as_bool(row.get("label")) is None:
            errors.append(("label", f"must be true or false, got {_short(row.get('label'))}"))
        return errors
    if fmt == "rl_prompt":
        errors = _check_text_or_messages(row.get("prompt"), "prompt")
        answer = row.get("answer")
        if "answer" in row and (isinstance(answer, bool) or not isinstance(answer, str | int | float)):
            errors.append(("answer", f"must be a string or a number, got {_short(answer)}"))
        return errors
    if fmt == "verl":
        errors = []
        if not isinstance(row.get("data_source"), str) or not row["data_source"].strip():
            errors.append(("data_source", f"must be a non-empty string, got {_short(row.get('data_source'))}"))
        errors += _check_messages(row.get("prompt"), "prompt", need_assistant=False)
        if row.get("ability") is not None and not isinstance(row["ability"], str):
            errors.append(("ability", f"must be a string, got {_short(row['ability'])}"))
        reward_model = row.get("reward_model")
        if not isinstance(reward_model, dict):
            errors.append(("reward_model", f"must be an object with ground_truth, got {_short(reward_model)}"))
        else:
            truth = reward_model.get("ground_truth")
            if isinstance(truth, bool) or not isinstance(truth, str | int | float):
                errors.append(("reward_model.ground_truth", f"must be a string or a number, got {_short(truth)}"))
            if reward_model.get("style") is not None and not isinstance(reward_model["style"], str):
                errors.append(("reward_model.style", f"must be a string, got {_short(reward_model['style'])}"))
        if row.get("extra_info") is not None and not isinstance(row["extra_info"], dict):
            errors.append(("extra_info", f"must be an object, got {_short(row['extra_info'])}"))
        return errors
    return [("<row>", f"unknown format {fmt!r}")]


# ---------------------------------------------------------------------------------------------- conversion


def to_canonical(fmt: str, row: dict) -> dict:
    """Convert one valid row to the canonical shape of its kind (see module docstring)."""
    if fmt == "messages":
        return {"messages": [{"role": m["role"], "content": m["content"]} for m in row["messages"]]}
    if fmt == "sharegpt":
        return {"messages": [{"role": SHAREGPT_ROLES[t["from"]], "content": t["value"]} for t in row["conversations"]]}
    if fmt == "alpaca":
        user = row["instruction"] + (f"\n\n{row['input']}" if row.get("input") else "")
        messages = [{"role": "user", "content": user}, {"role": "assistant", "content": row["output"]}]
        if row.get("system"):
            messages.insert(0, {"role": "system", "content": row["system"]})
        return {"messages": messages}
    if fmt == "prompt_completion":
        return {"prompt": row["prompt"], "completion": row["completion"]}
    if fmt == "text":
        return {"text": row["text"]}
    if fmt == "preference":
        out = {"chosen": row["chosen"], "rejected": row["rejected"]}
        if "prompt" in row:
            out = {"prompt": row["prompt"], **out}
        return out
    if fmt == "kto":
        return {"prompt": row["prompt"], "completion": row["completion"], "label": _as_bool(row["label"])}
    if fmt == "rl_prompt":
        # Extra columns stay: reward functions receive them as keyword arguments.
        out = dict(row)
        if "answer" in out:
            out["answer"] = str(out["answer"])
        return out
    if fmt == "verl":
        out = {
            "prompt": [{"role": m["role"], "content": m["content"]} for m in row["prompt"]],
            "answer": str(row["reward_model"]["ground_truth"]),
            "data_source": row["data_source"],
        }
        for key in ("ability", "extra_info"):
            if row.get(key) is not None:
                out[key] = row[key]
        return out
    raise ValueError(f"unknown format {fmt!r}")


def load_examples(
    path: str | Path,
    *,
    kind: str,
    fmt: str = "auto",
    field_map: dict[str, str] | None = None,
    max_errors: int = 20,
    limit: int | None = None,
) -> tuple[list[dict], str]:
    """Read, validate and convert a whole file. Returns (canonical rows, format). Raises DatasetError listing up
    to `max_errors` bad rows (and how many there were in all)."""
    allowed = KIND_FORMATS[kind]
    rows: list[dict] = []
    errors: list[RowError] = []
    total_bad = 0
    for line, raw in read_rows(path):
        row = apply_field_map(raw, field_map or {}) if isinstance(raw, dict) else raw
        if fmt == "auto":
            detected = detect_format(row) if isinstance(row, dict) else None
            if detected is None:
                keys = sorted(row) if isinstance(row, dict) else type(row).__name__
                raise DatasetError(
                    [
                        RowError(
                            line,
                            "<row>",
                            f"cannot detect the format from the fields {keys}; set data.format or data.field_map",
                        )
                    ]
                )
            fmt = detected
        if fmt not in allowed and VARIANT_FORMATS.get(fmt) not in allowed:
            raise DatasetError(
                [
                    RowError(
                        line, "<row>", f"format {fmt!r} cannot train this algorithm; it needs {' or '.join(allowed)}"
                    )
                ]
            )
        problems = validate_row(fmt, row)
        if problems:
            total_bad += 1
            errors.extend(RowError(line, f, r) for f, r in problems[: max(0, max_errors - len(errors))])
            continue
        rows.append(to_canonical(fmt, row))
        if limit is not None and len(rows) >= limit:
            break
    if errors or total_bad:
        raise DatasetError(errors, total_bad)
    if not rows:
        raise DatasetError([RowError(0, "<file>", "the file has no rows")])
    return rows, fmt
