# Over 600 lines: heuristics, perplexity and the judge/reward client share one row loop, cache and report.
"""Quality scores per row: heuristics, perplexity under a local causal LM, and an LLM judge or reward model behind an
OpenAI-compatible endpoint. Scores are stored in each output row under `_scores` ({name: value}); `filter_scores`
keeps rows by threshold or top-k.

Heuristics (on the row's text fields joined by newlines; words = whitespace tokens with a letter or digit): chars,
words, alnum_ratio, special_ratio, digit_ratio,
dup_line_frac, top_2gram_char_frac, unique_word_ratio and `quality` in [0, 1], the mean of five sub-scores:
length min(1, log(1+words)/log(51)); alphanumeric clamp((alnum_ratio - 0.3) / 0.4); 1 - dup_line_frac;
1 - clamp(top_2gram_char_frac / 0.3) and clamp(unique_word_ratio / 0.5) (the last two only from 20 words on, 1 below);
0 for a text without words.

Perplexity: exp(mean token negative log-likelihood) of the text a trainer would see (the chat template rendering for
chat rows), truncated to `max_length` tokens, batched on CPU.

Judge: `mode: judge` sends the row's text in `prompt_template` to `/chat/completions` and reads the first number of
the reply as a score out of `max_score` (stored normalised to [0, 1] as `judge`); `mode: reward` posts
{"model", "input": text} to `reward_path` (vLLM's `/pooling` by default) and stores the first number of
`data[0]` as `reward`. The server is a named endpoint the operator defined (`endpoint`; see
training_platform/core/endpoints.py: TP_ENDPOINTS, or admin-defined ones the data worker looks up): its URL and key are
looked up when scoring starts, never carried in the config or the report. Answers are cached
(in memory, and in `cache_path` as JSONL when set) by model + prompt; the report counts requests, cache hits, errors
and latency, so a simulated or cached judge is visible.

`JudgeClient` is also the client of the `llm_judge` reward (training/rewards/llm_judge.py): one HTTP path, one cache,
one parser (`parse`: a regex or a JSON field, else the first number; `min_score`..`max_score` normalised to [0, 1]),
the same retries with exponential backoff. A judge reply without a score is an error (retried, never cached).
`JudgeClient` is thread-safe (the reward scores a batch with a bounded thread pool).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import tempfile
import threading
import time
from collections import deque
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, cast

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from training_platform.core.files import write_json
from training_platform.data.formats import DatasetError, RowError
from training_platform.data.io import RowWriter, iter_records, read_json_or_yaml
from training_platform.data.judge_parse import (  # noqa: F401 - re-exported
    JudgeParse,
    _first_number,
    judge_cache_key,
    parse_score,
)
from training_platform.data.quality import PerplexityScorer, _clamp, heuristic_quality, heuristic_scores

if TYPE_CHECKING:
    from training_platform.data.executors import Executor

SCORES_KEY = "_scores"


# ---------------------------------------------------------------------------------------------- judge


DEFAULT_JUDGE_PROMPT = (
    "You are grading training data for a language model. Rate the quality of the following example (correctness, "
    "helpfulness, clarity) on a scale from 0 to 10. Reply with the number only.\n\n### Example\n{text}\n\n### Score"
)


RELATIVE_PATH = re.compile(r"^/(?!/)[A-Za-z0-9._~/\-]{0,200}$")
LATENCY_SAMPLES = 1024  # the percentiles are over the most recent requests


class JudgeConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    endpoint: str = Field(
        max_length=64,
        description="The name of an endpoint the operator defined (TP_ENDPOINTS; GET /api/v1/endpoints lists them).",
    )
    model: str = Field(min_length=1, max_length=256)
    mode: Literal["judge", "reward"] = "judge"
    prompt_template: str = DEFAULT_JUDGE_PROMPT
    max_score: float = Field(10.0, gt=0, le=1e6)
    min_score: float = Field(0.0, ge=-1e6, le=1e6, description="The judge's lowest score (normalised to 0).")
    normalize: bool = Field(True, description="Map min_score..max_score to [0, 1] (clamped); off: the raw number.")
    parse: JudgeParse | None = Field(None, description="How the score is read (default: the first number).")
    backoff_s: float = Field(0.1, ge=0, le=30, description="First retry delay; doubled at each retry (max 30 s).")
    max_tokens: int = Field(8, ge=1, le=32768)
    temperature: float = Field(0.0, ge=0, le=5)
    reward_path: str = "/pooling"
    timeout_s: float = Field(30.0, gt=0, le=3600)
    max_retries: int = Field(2, ge=0, le=20)
    max_text_chars: int = Field(8000, ge=100, le=10_000_000)
    cache_path: str | None = None

    @model_validator(mode="before")
    @classmethod
    def _no_urls(cls, data: Any) -> Any:
        if isinstance(data, dict):
            for field in ("base_url", "api_key_env", "api_key"):
                if field in data:
                    raise ValueError(
                        f"`{field}` is not accepted: name an endpoint the operator defined in "
                        f"`endpoint` (TP_ENDPOINTS; GET /api/v1/endpoints lists them)"
                    )
        return data

    @model_validator(mode="after")
    def _score_range(self) -> JudgeConfig:
        if self.min_score >= self.max_score:
            raise ValueError(f"min_score ({self.min_score:g}) must be < max_score ({self.max_score:g})")
        return self

    @field_validator("reward_path")
    @classmethod
    def _relative_path(cls, path: str) -> str:
        if not RELATIVE_PATH.fullmatch(path) or ".." in path.split("/"):
            raise ValueError("a path under the endpoint's base URL, such as /pooling (no scheme, host or '..')")
        return path

    @field_validator("endpoint")
    @classmethod
    def _endpoint_name(cls, name: str) -> str:
        from training_platform.core.endpoints import EndpointError, check_name

        try:
            return check_name(name)
        except EndpointError as exc:
            raise ValueError(str(exc)) from None


def percentile_ms(samples: Any, q: float) -> float | None:
    values = list(samples)
    return round(float(np.percentile(np.asarray(values, dtype=np.float64), q)) * 1000, 1) if values else None


class JudgeCall:
    """One scored text: the score (None: could not be scored), whether the cache answered, the request latency."""

    __slots__ = ("score", "cached", "latency_s", "error")

    def __init__(self, score: float | None, cached: bool, latency_s: float | None = None, error: str | None = None):
        self.score, self.cached, self.latency_s, self.error = score, cached, latency_s, error


class JudgeClient:
    """Scores texts through a named OpenAI-compatible endpoint, with a cache and counters. `endpoints` resolves the
    name (default: the operator's TP_ENDPOINTS / TP_ENDPOINTS_FILE); `transport` (an httpx transport) lets tests
    simulate the server. EndpointError when the endpoint is unknown or does not serve the model. Thread-safe."""

    def __init__(self, config: JudgeConfig | dict, *, endpoints=None, transport=None):
        from training_platform.core.endpoints import Endpoints, has_key, keyed_client

        self.config = config if isinstance(config, JudgeConfig) else JudgeConfig.model_validate(config)
        resolver = endpoints if endpoints is not None else Endpoints.from_env()
        self.endpoint = resolver.resolve(
            self.config.endpoint, self.config.model, field="judge.endpoint", model_field="judge.model"
        )
        self.authenticated = has_key(self.endpoint)
        self._client = keyed_client(self.endpoint, timeout=self.config.timeout_s, transport=transport)
        self.cache: dict[str, float | None] = {}
        self.stats = {
            "rows": 0,
            "requests": 0,
            "cache_hits": 0,
            "errors": 0,
            "latency_total_s": 0.0,
            "latency_max_s": 0.0,
        }
        self.latencies: deque[float] = deque(maxlen=LATENCY_SAMPLES)
        self.last_error: str | None = None
        self._lock = threading.Lock()
        self._inflight: dict[str, threading.Event] = {}
        self._cache_file = None
        if self.config.cache_path:
            path = Path(self.config.cache_path)
            if path.is_file():
                for line in path.read_text(encoding="utf-8").splitlines():
                    if line.strip():
                        entry = json.loads(line)
                        self.cache[entry["key"]] = entry["score"]
            path.parent.mkdir(parents=True, exist_ok=True)
            self._cache_file = path.open("a", encoding="utf-8")

    @property
    def score_name(self) -> str:
        return "judge" if self.config.mode == "judge" else "reward"

    def _key(self, payload: dict) -> str:
        return hashlib.sha256(json.dumps([self.config.mode, payload], sort_keys=True).encode()).hexdigest()

    def chat_payload(self, content: str) -> dict:
        """The `/chat/completions` body asking the judge about `content` (the rendered prompt)."""
        return {
            "model": self.config.model,
            "temperature": self.config.temperature,
            "max_tokens": self.config.max_tokens,
            "messages": [{"role": "user", "content": content}],
        }

    def _payload(self, text: str) -> tuple[str, dict]:
        text = text[: self.config.max_text_chars]
        if self.config.mode == "judge":
            return "/chat/completions", self.chat_payload(self.config.prompt_template.replace("{text}", text))
        return self.config.reward_path, {"model": self.config.model, "input": text}

    def normalise(self, number: float) -> float:
        c = self.config
        if not c.normalize:
            return round(number, 6)
        return round(_clamp((number - c.min_score) / (c.max_score - c.min_score)), 4)

    def _parse(self, body: Any) -> float | None:
        if self.config.mode == "judge":
            content = body["choices"][0]["message"]["content"]
            number = parse_score(content, self.config.parse)
            if number is None:
                shown = content[:80] if isinstance(content, str) else type(content).__name__
                raise ValueError(f"no score in the judge's reply: {shown!r}")
            return self.normalise(number)
        number = _first_number(body["data"][0] if isinstance(body.get("data"), list) else body)
        return None if number is None else round(number, 6)

    def score(self, text: str) -> float | None:
        path, payload = self._payload(text)
        return self.call(path, payload, self._key(payload)).score

    def call(self, path: str, payload: dict, key: str, *, use_cache: bool = True) -> JudgeCall:
        """POST `payload` to `path` (cache lookup by `key` first when `use_cache`), retried on transport errors,
        429/5xx and replies without a score, with exponential backoff; after the last retry the call is an error
        (score None, counted in `errors`, never cached). With the cache, a call whose twin is in flight waits for
        it and counts as a cache hit (one request per distinct call)."""
        with self._lock:
            self.stats["rows"] += 1
        while use_cache:
            with self._lock:
                if key in self.cache:
                    self.stats["cache_hits"] += 1
                    return JudgeCall(self.cache[key], True)
                twin = self._inflight.get(key)
                if twin is None:
                    self._inflight[key] = threading.Event()
                    break
            twin.wait()  # then the cache answers, or (the twin failed) this call asks itself
        try:
            return self._request(path, payload, key, use_cache)
        finally:
            if use_cache:
                with self._lock:
                    self._inflight.pop(key).set()

    def _request(self, path: str, payload: dict, key: str, use_cache: bool) -> JudgeCall:
        import httpx

        latency = None
        for attempt in range(self.config.max_retries + 1):
            start = time.perf_counter()
            try:
                try:
                    response = self._client.post(path, json=payload)
                finally:
                    latency = time.perf_counter() - start
                    with self._lock:
                        self.stats["requests"] += 1
                        self.stats["latency_total_s"] += latency
                        self.stats["latency_max_s"] = max(self.stats["latency_max_s"], latency)
                        self.latencies.append(latency)
                if response.status_code >= 500 or response.status_code == 429:
                    raise httpx.HTTPStatusError(
                        f"HTTP {response.status_code}", request=response.request, response=response
                    )
                response.raise_for_status()
                value = self._parse(response.json())
            except (httpx.HTTPError, KeyError, IndexError, TypeError, ValueError) as exc:
                error = _error_text(exc)
                retryable = not isinstance(exc, httpx.HTTPStatusError) or exc.response.status_code >= 429
                if attempt < self.config.max_retries and retryable:
                    time.sleep(min(30.0, self.config.backoff_s * 2**attempt))
                    continue
                with self._lock:
                    self.last_error = error
                    self.stats["errors"] += 1
                return JudgeCall(None, False, latency, error)
            with self._lock:
                if use_cache:
                    self.cache[key] = value
                    if self._cache_file is not None:
                        self._cache_file.write(json.dumps({"key": key, "score": value}) + "\n")
                        self._cache_file.flush()
            return JudgeCall(value, False, latency)
        raise AssertionError("unreachable")

    def report(self) -> dict[str, Any]:
        calls = self.stats["requests"]
        return {
            "mode": self.config.mode,
            "model": self.config.model,
            "endpoint": self.endpoint.name,
            "authenticated": self.authenticated,
            **self.stats,
            "latency_total_s": round(self.stats["latency_total_s"], 4),
            "latency_max_s": round(self.stats["latency_max_s"], 4),
            "latency_mean_s": round(self.stats["latency_total_s"] / calls, 4) if calls else 0.0,
            "latency_p50_ms": percentile_ms(self.latencies, 50),
            "latency_p95_ms": percentile_ms(self.latencies, 95),
            "last_error": self.last_error,
        }

    def close(self) -> None:
        self._client.close()
        if self._cache_file is not None:
            self._cache_file.close()


def _error_text(exc: Exception) -> str:
    """A judge error for the report: the status or the failure, without the endpoint's URL (users see reports)."""
    import httpx

    if isinstance(exc, httpx.HTTPStatusError):
        status = exc.response.status_code
        extra = ": redirects are not followed" if 300 <= status < 400 else ""
        return f"HTTPStatusError: HTTP {status}{extra}"
    if isinstance(exc, httpx.HTTPError):
        return f"{type(exc).__name__}: the request to the endpoint failed"
    return f"{type(exc).__name__}: {exc}"[:500]


def load_judge_config(source: str | Path | dict | JudgeConfig) -> JudgeConfig:
    if isinstance(source, JudgeConfig):
        return source
    data = source if isinstance(source, dict) else read_json_or_yaml(source)
    return JudgeConfig.model_validate(data)


# ---------------------------------------------------------------------------------------------- files


def _stats(values: list[float]) -> dict[str, float]:
    if not values:
        return {"count": 0}
    arr = np.asarray(values, dtype=np.float64)
    return {
        "count": int(arr.size),
        "mean": round(float(arr.mean()), 4),
        "min": round(float(arr.min()), 4),
        "p10": round(float(np.percentile(arr, 10)), 4),
        "p50": round(float(np.percentile(arr, 50)), 4),
        "p90": round(float(np.percentile(arr, 90)), 4),
        "max": round(float(arr.max()), 4),
    }


def score_file(
    path: str | Path,
    output: str | Path,
    *,
    heuristics: bool = True,
    perplexity_model: str | Path | None = None,
    perplexity_max_length: int = 512,
    judge: JudgeConfig | dict | str | Path | None = None,
    judge_transport=None,
    endpoints=None,
    fmt: str | None = None,
    fields: list[str] | None = None,
    batch_size: int = 16,
    report_path: str | Path | None = None,
    executor: Executor | None = None,
) -> dict[str, Any]:
    """Score every row; write the rows with `_scores` added (atomic) and return the report (per-score
    distributions, judge counters). `endpoints` resolves the judge's endpoint name (default: TP_ENDPOINTS). The
    heuristics and perplexity run block by block on `executor` (default: local; data/stages.py `ScoreStage`); the
    judge and the writing run here, row after row in the input's order."""
    from training_platform.data.executors import get_executor
    from training_platform.data.stages import ScoreStage, format_start, model_key, perplexity_scorer, release_scorer
    from training_platform.data.stages import scored_rows as merged

    t0 = time.perf_counter()
    executor = executor or get_executor("local")
    model = model_key(perplexity_model, perplexity_max_length) if perplexity_model else None
    values: dict[str, list[float]] = {}
    rows = 0
    client = None
    try:  # the model loads here first: a bad path fails before any row is read; it scores the batches blocks cut
        scorer = perplexity_scorer(model) if model is not None else None
        if judge is not None:
            client = JudgeClient(load_judge_config(judge), endpoints=endpoints, transport=judge_transport)
        with RowWriter(output) as writer:
            fmt, fmt_from = format_start(path, fmt)
            size = max(1, batch_size)
            stage = ScoreStage(heuristics, fmt, fmt_from, fields, size, model, with_text=client is not None)
            for row, text, scores in merged(executor.map_blocks(Path(path), stage), scorer, size):
                if client is not None:
                    scores[client.score_name] = client.score(cast(str, text))
                for key, value in scores.items():
                    if isinstance(value, int | float) and value is not None:
                        values.setdefault(key, []).append(float(value))
                out = dict(row) if isinstance(row, dict) else {"value": row}
                out[SCORES_KEY] = scores
                writer.write(out)
                rows += 1
    finally:
        if client is not None:
            client.close()
        if model is not None:
            release_scorer(model)
    report: dict[str, Any] = {
        "input": str(path),
        "output": str(output),
        "format": fmt,
        "rows": rows,
        "scores": {k: _stats(v) for k, v in values.items()},
        "seconds": round(time.perf_counter() - t0, 3),
    }
    if perplexity_model:
        report["perplexity"] = {"model": str(perplexity_model), "max_length": perplexity_max_length}
    if client is not None:
        report["judge"] = client.report()
    report["executor"] = executor.describe()
    if report_path is not None:
        write_json(report_path, report)
    return report


# score_file and filter_scores end alike (a report dict, written when asked): the same shape, different fields.
def filter_scores(
    path: str | Path,
    output: str | Path,
    *,
    by: str,
    min_value: float | None = None,
    max_value: float | None = None,
    top_k: int | None = None,
    lowest: bool = False,
    report_path: str | Path | None = None,
) -> dict[str, Any]:
    """Keep rows whose `_scores[by]` is within [min_value, max_value], then (if `top_k`) the k highest (lowest
    with `lowest`, e.g. perplexity); ties keep the earlier row. Rows without that score are removed. Order is
    kept."""
    if min_value is None and max_value is None and top_k is None:
        raise ValueError("give --min, --max or --top-k")
    if top_k is not None and top_k < 1:
        raise ValueError(f"--top-k: must be >= 1, got {top_k}")
    candidates: list[tuple[int, float]] = []
    missing = rows = 0
    for record in iter_records(path):
        if record.error is not None:
            raise DatasetError([record.error])
        rows += 1
        scores = record.row.get(SCORES_KEY) if isinstance(record.row, dict) else None
        value = scores.get(by) if isinstance(scores, dict) else None
        if not isinstance(value, int | float) or isinstance(value, bool) or math.isnan(value):
            missing += 1
            continue
        if (min_value is not None and value < min_value) or (max_value is not None and value > max_value):
            continue
        candidates.append((record.index, float(value)))
    if rows and missing == rows:
        raise DatasetError([RowError(0, f"{SCORES_KEY}.{by}", "no row has this score; run `tp data score` first")])
    if top_k is not None and len(candidates) > top_k:
        ranked = sorted(candidates, key=lambda c: (c[1] if lowest else -c[1], c[0]))[:top_k]
        candidates = sorted(ranked)
    keep = {index for index, _ in candidates}
    with RowWriter(output) as writer:
        for record in iter_records(path):
            if record.index in keep:
                writer.write(record.row)
    report = {
        "input": str(path),
        "output": str(output),
        "by": by,
        "min": min_value,
        "max": max_value,
        "top_k": top_k,
        "lowest": lowest,
        "input_rows": rows,
        "output_rows": len(keep),
        "missing_score": missing,
    }
    if report_path is not None:
        write_json(report_path, report)
    return report


def score_then_filter(
    path: str | Path,
    output: str | Path,
    *,
    by: str,
    min_value: float | None = None,
    max_value: float | None = None,
    top_k: int | None = None,
    lowest: bool = False,
    report_path: str | Path | None = None,
    **score_kwargs: Any,
) -> dict[str, Any]:
    """score_file, then filter_scores into `output` (the scored rows go through a temp file next to it)."""
    output = Path(output)
    output.parent.mkdir(parents=True, exist_ok=True)
    fd, scored = tempfile.mkstemp(dir=output.parent, prefix=f".{output.stem}.", suffix=".scored.jsonl")
    os.close(fd)
    try:
        report = score_file(path, scored, **score_kwargs)
        report["output"] = str(output)
        report["filter"] = filter_scores(
            scored, output, by=by, min_value=min_value, max_value=max_value, top_k=top_k, lowest=lowest
        )
        report["filter"]["input"] = str(path)
    finally:
        Path(scored).unlink(missing_ok=True)
    if report_path is not None:
        write_json(report_path, report)
    return report


__all__ = [
    "SCORES_KEY",
    "JudgeCall",
    "JudgeClient",
    "JudgeConfig",
    "JudgeParse",
    "PerplexityScorer",
    "judge_cache_key",
    "parse_score",
    "percentile_ms",
    "filter_scores",
    "heuristic_quality",
    "heuristic_scores",
    "load_judge_config",
    "score_file",
    "score_then_filter",
]
