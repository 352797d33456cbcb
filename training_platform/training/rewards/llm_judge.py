"""`llm_judge`: a reward scored by a language model behind an operator-named OpenAI-compatible endpoint.

Each completion is put into `template` ({prompt}, {completion}) and sent to `<endpoint>/chat/completions` with
`model`; the score is read from the reply (`parse`: a regex or a JSON field, else the first number) and normalised
from `min_score`..`max_score` to [0, 1] (`normalize: false` keeps the raw number). The client, its cache, the parser
and the retries are the data factory's (`data/score.py` JudgeClient, `data/judge_parse.py`).

- endpoint: the NAME of an endpoint the operator defined (TP_ENDPOINTS / TP_ENDPOINTS_FILE; the platform's own
  served models too, through the endpoint the operator points at `/api/v1/openai/v1`); never a URL. Its key is
  read from the endpoint's environment variable by the client and is never logged or written anywhere.
- a batch is scored by a thread pool of at most `max_concurrency` requests; each request has `timeout_s`, and is
  retried `retries` times with exponential backoff (`backoff_s`, doubled each time) on transport errors, 429/5xx
  and replies without a score. A completion still unscored is None (TRL: missing, left out of the mean; verl: 0)
  and counts as an error.
- cache (on by default, in memory for the process): keyed by model, template, prompt, completion and how the
  reply is read (parse, score range, temperature, max_tokens).
- counters (`metrics()`, logged in every metrics.jsonl row of TRL runs): judge/<name>/calls (completions scored),
  cache_hits, billable_calls (HTTP requests sent, retries included), errors (completions left unscored), warnings
  (anti-simulation warnings so far): cumulative since the process started (a resumed run starts again at 0);
  latency_p50_ms / latency_p95_ms over the last 1024 requests. <name> is `name` (default: the endpoint's name).
- anti-simulation (`JudgeMonitor`): over the last `window` calls, a cache-hit rate above `warn_cache_hit_rate`
  (0.90) is a loud WARNING (train.log + run.json `warnings`), above `fail_cache_hit_rate` (0.95) the reward raises
  JudgeStoppedMeasuring and the run fails (error.json names the judge and the rate); `window` scores all equal is
  the same loud warning, or a failure with `zero_variance: fail`.
- preflight (`probe_judge`, called by training/preflight.py unless --dry-run): one real uncached call with a fixed
  prompt/completion; its latency and score go to `<run dir>/judge_probe.json`; no answer or no score = a config
  error at `rewards[i]`, and the job does not start.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field, field_validator, model_validator

from training_platform.data.judge_parse import JudgeParse, judge_cache_key
from training_platform.training.rewards import RewardFn, RewardParams, completion_text, register_reward

if TYPE_CHECKING:  # pragma: no cover
    from concurrent.futures import ThreadPoolExecutor

    from training_platform.data.score import JudgeClient

log = logging.getLogger("training_platform.train")

DEFAULT_TEMPLATE = (
    "You are grading an answer. Rate how correct and helpful the answer is to the question on a scale from 0 to 10. "
    "Reply with the number only.\n\n### Question\n{prompt}\n\n### Answer\n{completion}\n\n### Score"
)
PROBE_PROMPT = "What is 2 + 3?"
PROBE_COMPLETION = "2 + 3 = 5."
MAX_WARNINGS = 100
_PLACEHOLDER = re.compile(r"\{(prompt|completion)\}")


class JudgeStoppedMeasuring(RuntimeError):
    """The judge answers from its cache (or says the same number) so often that the reward no longer measures."""


class LLMJudgeParams(RewardParams):
    endpoint: str = Field(
        max_length=64,
        description="The NAME of an endpoint the operator defined (TP_ENDPOINTS; "
        "GET /api/v1/endpoints lists them), never a URL.",
    )
    model: str = Field(min_length=1, max_length=256, description="The judge model, as the endpoint names it.")
    template: str = Field(
        DEFAULT_TEMPLATE,
        min_length=1,
        max_length=20_000,
        description="The judge's prompt: {prompt} and {completion} are replaced.",
    )
    parse: JudgeParse = Field(
        default_factory=JudgeParse, description="{regex: ...} or {json_field: ...}; default: the first number."
    )
    min_score: float = Field(0.0, ge=-1e6, le=1e6)
    max_score: float = Field(10.0, ge=-1e6, le=1e6)
    normalize: bool = Field(True, description="Map min_score..max_score to [0, 1] (clamped).")
    max_tokens: int = Field(16, ge=1, le=4096)
    temperature: float = Field(0.0, ge=0, le=2)
    max_concurrency: int = Field(4, ge=1, le=64, description="Requests in flight at once.")
    timeout_s: float = Field(30.0, gt=0, le=600)
    retries: int = Field(2, ge=0, le=10)
    backoff_s: float = Field(0.5, ge=0, le=30, description="First retry delay, doubled at each retry.")
    cache: bool = True
    max_chars: int = Field(8000, ge=16, le=200_000, description="Prompt and completion are cut to this length.")
    window: int = Field(64, ge=2, le=100_000, description="Calls the anti-simulation checks look back on.")
    warn_cache_hit_rate: float = Field(0.90, gt=0, le=1)
    fail_cache_hit_rate: float = Field(0.95, gt=0, le=1)
    zero_variance: Literal["warn", "fail"] = Field(
        "warn", description="`window` equal scores in a row: a loud warning, or the run fails."
    )
    name: str | None = Field(
        None,
        pattern=r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,63}$",
        description="Metric name judge/<name>/... (default: the endpoint's name).",
    )

    @field_validator("endpoint")
    @classmethod
    def _endpoint_name(cls, value: str) -> str:
        from training_platform.core.endpoints import endpoint_reference

        return endpoint_reference(value)

    @field_validator("template")
    @classmethod
    def _placeholders(cls, value: str) -> str:
        if "{completion}" not in value:
            raise ValueError("the template must contain {completion} (and usually {prompt})")
        return value

    @model_validator(mode="after")
    def _ranges(self) -> LLMJudgeParams:
        if self.min_score >= self.max_score:
            raise ValueError(f"min_score ({self.min_score:g}) must be < max_score ({self.max_score:g})")
        if self.warn_cache_hit_rate > self.fail_cache_hit_rate:
            raise ValueError(
                f"warn_cache_hit_rate ({self.warn_cache_hit_rate:g}) must be <= fail_cache_hit_rate "
                f"({self.fail_cache_hit_rate:g})"
            )
        return self

    @property
    def label(self) -> str:
        return self.name or self.endpoint


def judge_config(params: LLMJudgeParams):
    """The data factory's JudgeConfig for these params (one client for both)."""
    from training_platform.data.score import JudgeConfig

    # The same keyword list as the TRL builders' config calls by shape only (the duplicates tool pairs them).
    return JudgeConfig(
        endpoint=params.endpoint,
        model=params.model,
        mode="judge",
        prompt_template=params.template,
        max_score=params.max_score,
        min_score=params.min_score,
        normalize=params.normalize,
        parse=params.parse,
        max_tokens=params.max_tokens,
        temperature=params.temperature,
        timeout_s=params.timeout_s,
        max_retries=params.retries,
        backoff_s=params.backoff_s,
        max_text_chars=max(100, params.max_chars),
    )


def prompt_text(prompt: Any) -> str:
    """A prompt as text: a string as is; a conversation -> its messages' contents, one per line."""
    if prompt is None or isinstance(prompt, str):
        return prompt or ""
    if isinstance(prompt, Mapping):
        return completion_text(prompt)
    if isinstance(prompt, Sequence):
        return "\n".join(completion_text(m) for m in prompt)
    return str(prompt)


def render(template: str, prompt: str, completion: str) -> str:
    """One pass, so a prompt that contains "{completion}" is not substituted again."""
    values = {"prompt": prompt, "completion": completion}
    return _PLACEHOLDER.sub(lambda m: values[m.group(1)], template)


class JudgeMonitor:
    """Anti-simulation: over the last `window` calls, the cache-hit rate and the spread of the scores."""

    def __init__(self, params: LLMJudgeParams):
        self.params = params
        self.name = params.label
        self.hits: deque[bool] = deque(maxlen=params.window)
        self.scores: deque[float] = deque(maxlen=params.window)
        self.warnings: list[str] = []
        self.warning_count = 0
        self._pending: list[str] = []
        self._warned_rate = self._warned_variance = False
        self._lock = threading.Lock()

    def _warn(self, message: str) -> None:
        log.warning("!!! LLM JUDGE WARNING: %s", message)
        self.warning_count += 1
        self.warnings = (self.warnings + [message])[-MAX_WARNINGS:]
        self._pending.append(message)

    def drain(self) -> list[str]:
        with self._lock:
            pending, self._pending = self._pending, []
        return pending

    def record(self, calls: Sequence[Any]) -> None:
        p = self.params
        with self._lock:
            for call in calls:
                self.hits.append(bool(call.cached))
                if call.score is not None:
                    self.scores.append(call.score)
            if len(self.hits) == p.window:
                rate = sum(self.hits) / p.window
                what = (
                    f"judge {self.name!r} (model {p.model!r}): cache-hit rate {rate:.1%} over the last {p.window} calls"
                )
                if rate > p.fail_cache_hit_rate:
                    message = (
                        f"{what} passed fail_cache_hit_rate {p.fail_cache_hit_rate:.0%}: the reward no longer "
                        f"measures anything (the policy repeats the same completions?); the run fails"
                    )
                    self._warn(message)
                    raise JudgeStoppedMeasuring(message)
                if rate > p.warn_cache_hit_rate:
                    if not self._warned_rate:
                        self._warn(
                            f"{what} passed warn_cache_hit_rate {p.warn_cache_hit_rate:.0%} (the run fails "
                            f"above {p.fail_cache_hit_rate:.0%})"
                        )
                    self._warned_rate = True
                else:
                    self._warned_rate = False
            if len(self.scores) == p.window:
                if max(self.scores) == min(self.scores):
                    message = (
                        f"judge {self.name!r} (model {p.model!r}): the last {p.window} scores are all "
                        f"{self.scores[-1]:g} (zero variance): the reward no longer measures anything"
                    )
                    if p.zero_variance == "fail":
                        self._warn(message + "; the run fails (zero_variance: fail)")
                        raise JudgeStoppedMeasuring(message)
                    if not self._warned_variance:
                        self._warn(message)
                    self._warned_variance = True
                else:
                    self._warned_variance = False


class JudgeReward:
    """The reward function: scores a batch through the shared JudgeClient (created on first use, so building the
    reward while validating a config sends nothing), then lets the monitor look at the batch."""

    def __init__(self, params: LLMJudgeParams, *, endpoints=None, transport=None):
        self.params = params
        self.monitor = JudgeMonitor(params)
        self._endpoints, self._transport = endpoints, transport
        self._client: JudgeClient | None = None
        self._pool: ThreadPoolExecutor | None = None
        self._lock = threading.Lock()
        self.last_calls: list[Any] = []

    @property
    def name(self) -> str:
        return self.params.label

    @property
    def client(self):
        with self._lock:
            if self._client is None:
                from training_platform.data.score import JudgeClient

                self._client = JudgeClient(
                    judge_config(self.params), endpoints=self._endpoints, transport=self._transport
                )
            return self._client

    def cache_key(self, prompt: str, completion: str) -> str:
        p = self.params
        return judge_cache_key(
            kind="llm_judge",
            model=p.model,
            template=p.template,
            prompt=prompt,
            completion=completion,
            parse=p.parse.model_dump(),
            min_score=p.min_score,
            max_score=p.max_score,
            normalize=p.normalize,
            temperature=p.temperature,
            max_tokens=p.max_tokens,
        )

    def score_one(self, prompt: str, completion: str, *, use_cache: bool | None = None):
        prompt, completion = prompt[: self.params.max_chars], completion[: self.params.max_chars]
        client = self.client
        payload = client.chat_payload(render(self.params.template, prompt, completion))
        cached = self.params.cache if use_cache is None else use_cache
        return client.call("/chat/completions", payload, self.cache_key(prompt, completion), use_cache=cached)

    def __call__(
        self, prompts: Sequence[Any] | None = None, completions: Sequence[Any] = (), **kwargs: Any
    ) -> list[float | None]:
        prompts = list(prompts) if prompts is not None else [None] * len(completions)
        pairs = [(prompt_text(p), completion_text(c)) for p, c in zip(prompts, completions, strict=True)]
        if len(pairs) <= 1 or self.params.max_concurrency == 1:
            calls = [self.score_one(p, c) for p, c in pairs]
        else:
            from concurrent.futures import ThreadPoolExecutor

            with self._lock:
                if self._pool is None:
                    self._pool = ThreadPoolExecutor(self.params.max_concurrency, thread_name_prefix="tp-judge")
            calls = list(self._pool.map(lambda pc: self.score_one(*pc), pairs))
        self.last_calls = calls
        self.monitor.record(calls)
        return [call.score for call in calls]

    def metrics(self) -> dict[str, Any]:
        from training_platform.data.score import percentile_ms

        prefix = f"judge/{self.name}/"
        client = self._client
        stats = client.stats if client is not None else {}
        latencies = list(client.latencies) if client is not None else []
        return {
            f"{prefix}calls": stats.get("rows", 0),
            f"{prefix}cache_hits": stats.get("cache_hits", 0),
            f"{prefix}billable_calls": stats.get("requests", 0),
            f"{prefix}errors": stats.get("errors", 0),
            f"{prefix}latency_p50_ms": percentile_ms(latencies, 50),
            f"{prefix}latency_p95_ms": percentile_ms(latencies, 95),
            f"{prefix}warnings": self.monitor.warning_count,
        }


@register_reward(
    "llm_judge",
    LLMJudgeParams,
    "An LLM judge behind an operator-named endpoint scores each completion (template with {prompt}/{completion}, "
    "score by regex / JSON field, normalised to [0, 1]); cached, counted, probed before the run.",
)
def build_llm_judge(params: LLMJudgeParams) -> RewardFn:
    return JudgeReward(params)


# ---------------------------------------------------------------------------------------------- run wiring


def judges_of(reward_funcs: Sequence[Any]) -> list[JudgeReward]:
    """The llm_judge rewards among built reward functions (RewardFunction wraps the JudgeReward)."""
    out = []
    for function in reward_funcs:
        inner = getattr(function, "_fn", function)
        if isinstance(inner, JudgeReward):
            out.append(inner)
    return out


def judge_metrics_source(reward_funcs: Sequence[Any], writer) -> Callable[[], dict[str, Any]] | None:
    """For the TRL MetricsCallback: each call returns every judge's counters for the metric row, and copies new
    anti-simulation warnings into run.json `warnings` (they are already in train.log). None without a judge."""
    judges = judges_of(reward_funcs)
    if not judges:
        return None
    recorded: list[str] = []

    def collect() -> dict[str, Any]:
        row: dict[str, Any] = {}
        new: list[str] = []
        for judge in judges:
            row.update(judge.metrics())
            new += judge.monitor.drain()
        if new:
            recorded.extend(new)
            del recorded[:-MAX_WARNINGS]
            writer.update_run_info(warnings=list(recorded))
        return row

    return collect


# ---------------------------------------------------------------------------------------------- preflight probe


def probe_judge(params: LLMJudgeParams | Mapping[str, Any], *, endpoints=None, transport=None) -> dict[str, Any]:
    """One real, uncached call with a fixed prompt/completion. Returns {endpoint, model, name, ok, latency_ms,
    score, error, at}; `ok` false (with `error`) when the endpoint is unknown, does not answer, or its reply has no
    score. Never carries the endpoint's URL or key."""
    from training_platform.core.endpoints import EndpointError

    if not isinstance(params, LLMJudgeParams):
        params = LLMJudgeParams.model_validate(dict(params))
    result: dict[str, Any] = {
        "name": params.label,
        "endpoint": params.endpoint,
        "model": params.model,
        "prompt": PROBE_PROMPT,
        "completion": PROBE_COMPLETION,
        "ok": False,
        "latency_ms": None,
        "score": None,
        "error": None,
        "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    judge = JudgeReward(params, endpoints=endpoints, transport=transport)
    try:
        call = judge.score_one(PROBE_PROMPT, PROBE_COMPLETION, use_cache=False)
    except EndpointError as exc:
        result["error"] = str(exc)
        return result
    finally:
        if judge._client is not None:
            judge._client.close()
    result["latency_ms"] = round(call.latency_s * 1000, 1) if call.latency_s is not None else None
    result["score"] = call.score
    result["error"] = call.error
    result["ok"] = call.score is not None
    return result
