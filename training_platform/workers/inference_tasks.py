"""Generation for the playground and the OpenAI-compatible route (queue `inference`).

`generate(request_id, payload)` is a request, not a job: nothing is written to the database. The worker claims the
request in Redis (the API may have given up on it already: then the message is dropped), loads the model through
this process's LRU cache (`inference.serving.ModelCache`, TP_INFERENCE_CACHE models), generates, and pushes every
piece of text to the request's event list, then `done` (finish reasons, usage, timings) or `error` (a status and
a message the API answers with). The protocol is `inference.channel`.

A payload with `"kind": "pool"` (the `/openai/v1/pooling` route) scores `inputs` with a sequence-classification
model (a reward model) instead of generating: no token events, one `done` event with `data` (the head's outputs per
input, `inference.serving.pool`) and `prompt_tokens` per input. The same cache holds both kinds of model
(`serving.load_served` picks the loader from the model's config).

A worker consuming `inference` announces itself every few seconds (`channel.heartbeat`) once torch and
transformers are imported, so the API answers 503 at once when no inference worker runs. `tp up` starts one (solo
pool: the task runs in the worker's own process, one request at a time, the cache lives as long as the process).
The message is acknowledged when the task starts (acks_late off): a request is never run twice; one whose worker
died ends in the API's 504.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import threading
import time
from pathlib import Path
from typing import Any

from celery.signals import worker_ready, worker_shutdown

from training_platform.inference import channel
from training_platform.taskqueue.app import INFERENCE_TASK, app

log = logging.getLogger("training_platform.workers.inference")

MAX_NEW_TOKENS = 4096  # the API's bounds are tighter; these only keep a forged message finite
MAX_MESSAGES = 1024
MAX_PROMPT_CHARS = 1_000_000
MAX_CHOICES = 16
MAX_POOL_INPUTS = 256
MAX_TOOLS = 32
MAX_TOOL_CALLS = 64

_cache = None
_client = None
_warm_up: threading.Thread | None = None
_stop = threading.Event()
_warmed = threading.Event()  # torch and transformers imported (by the heartbeat thread)


def redis_client():
    global _client
    if _client is None:
        import redis

        _client = redis.Redis.from_url(app.conf.broker_url, socket_connect_timeout=5, socket_timeout=30)
    return _client


def model_cache():
    global _cache
    if _cache is None:
        from training_platform.core.settings import get_settings
        from training_platform.inference.serving import ModelCache, load_served

        settings = get_settings()
        device = settings.inference_device
        _cache = ModelCache(settings.inference_cache_size, loader=lambda path: load_served(path, device=device))
    return _cache


# ---------------------------------------------------------------------------------------------- worker lifecycle


def _consumes_inference(sender: Any) -> bool:
    try:
        return "inference" in set(sender.app.amqp.queues.consume_from)
    except AttributeError:
        return False


def _warm_up_and_heartbeat(worker: str) -> None:
    """Import the heavy modules first (a request must not pay for them), then announce this worker until it stops."""
    try:
        import torch  # noqa: F401
        import transformers  # noqa: F401

        from training_platform.evaluation import generation  # noqa: F401
    except Exception as exc:  # noqa: BLE001 - the first request reports the real import problem
        log.warning("inference warm-up import failed: %s", exc)
    _warmed.set()
    log.info("inference worker %s ready (model cache: %d)", worker, model_cache().size)
    while not _stop.is_set():
        try:
            channel.heartbeat(redis_client(), worker)
        except Exception as exc:  # noqa: BLE001 - Redis restarting: try again at the next beat
            log.warning("inference heartbeat failed: %s", exc)
        _stop.wait(channel.HEARTBEAT_INTERVAL_S)


@worker_ready.connect
def _on_worker_ready(sender=None, **_kwargs) -> None:
    global _warm_up
    if sender is None or not _consumes_inference(sender):
        return
    worker = getattr(sender, "hostname", None) or f"inference-{os.getpid()}"
    _warm_up = threading.Thread(
        target=_warm_up_and_heartbeat, args=(worker,), name="tp-inference-heartbeat", daemon=True
    )
    _warm_up.start()


@worker_shutdown.connect
def _on_worker_shutdown(sender=None, **_kwargs) -> None:
    if _warm_up is None:
        return
    _stop.set()
    worker = getattr(sender, "hostname", None)
    if worker:
        with contextlib.suppress(Exception):  # its heartbeat ages out anyway
            channel.remove_worker(redis_client(), worker)


# ---------------------------------------------------------------------------------------------- the task


class RequestRefused(Exception):
    def __init__(self, status: int, message: str, loc: str | None = None):
        super().__init__(message)
        self.status, self.message, self.loc = status, message, loc


def _parse(payload: Any):
    """The message again, checked (the API validated it; a message on the broker is not trusted further)."""
    from training_platform.core.path_policy import inside_allowed_roots
    from training_platform.core.settings import get_settings
    from training_platform.inference.serving import GenerateParams

    if not isinstance(payload, dict):
        raise RequestRefused(400, "malformed inference request")
    try:
        path = Path(str(payload["path"])).resolve()
        messages = [_message(m) for m in payload["messages"][:MAX_MESSAGES]]
        tools = _tools(payload.get("tools"))
        stop = tuple(str(s) for s in payload.get("stop") or ())[:4]
        params = GenerateParams(
            max_new_tokens=max(1, min(int(payload["max_new_tokens"]), MAX_NEW_TOKENS)),
            temperature=min(max(float(payload["temperature"]), 0.0), 2.0),
            top_p=min(max(float(payload["top_p"]), 1e-6), 1.0),
            seed=int(payload["seed"]),
            n=max(1, min(int(payload.get("n", 1)), MAX_CHOICES)),
            stop=stop,
        )
        timeout_s = max(0.1, float(payload["timeout_s"]))
    except (AttributeError, KeyError, TypeError, ValueError) as exc:
        raise RequestRefused(400, f"malformed inference request: {type(exc).__name__}: {exc}") from None
    chars = sum(len(m["content"] or "") + len(json.dumps(m.get("tool_calls") or [])) for m in messages)
    if chars > MAX_PROMPT_CHARS:
        raise RequestRefused(422, "the messages are too long", "messages")
    if tools is not None and len(json.dumps(tools)) > MAX_PROMPT_CHARS:
        raise RequestRefused(422, "the tools are too long", "tools")
    settings = get_settings()
    if not inside_allowed_roots(path, settings) or not (path / "config.json").is_file():
        raise RequestRefused(404, f"model {payload.get('label')!r}: no model directory there any more")
    if not generates_text(path):
        raise RequestRefused(
            422,
            f"model {payload.get('label')!r} is a classifier (e.g. a reward model): it does not generate text",
            "model",
        )
    return path, messages, tools, params, timeout_s


def _message(m: Any) -> dict[str, Any]:
    """One chat message, rebuilt from the wire: role and content (a string; None only beside tool calls), an
    assistant's `tool_calls` ({id, type, function: {name, arguments: object}}) and a tool result's `tool_call_id`."""
    role = str(m["role"])
    content = m.get("content")
    out: dict[str, Any] = {"role": role, "content": None if content is None else str(content)}
    calls = m.get("tool_calls")
    if calls:
        if not isinstance(calls, list) or len(calls) > MAX_TOOL_CALLS:
            raise ValueError(f"tool_calls must be a list of at most {MAX_TOOL_CALLS} calls")
        out["tool_calls"] = [_tool_call(c) for c in calls]
    elif content is None:
        raise ValueError("a message without tool_calls needs content")
    if m.get("tool_call_id") is not None:
        out["tool_call_id"] = str(m["tool_call_id"])
    return out


def _tool_call(call: Any) -> dict[str, Any]:
    fn = call["function"]
    arguments = fn["arguments"]
    if not isinstance(arguments, dict):
        raise TypeError("a tool call's arguments must be an object")
    function = {"name": str(fn["name"]), "arguments": arguments}
    return {"id": str(call.get("id", "")), "type": "function", "function": function}


def _tools(tools: Any) -> list[dict[str, Any]] | None:
    """The OpenAI function schemas offered to the model, or None."""
    if tools is None:
        return None
    if not isinstance(tools, list) or len(tools) > MAX_TOOLS or not all(isinstance(t, dict) for t in tools):
        raise ValueError(f"tools must be a list of at most {MAX_TOOLS} objects")
    return tools or None


def _model_dir(payload: dict) -> Path:
    from training_platform.core.path_policy import inside_allowed_roots
    from training_platform.core.settings import get_settings

    path = Path(str(payload["path"])).resolve()
    if not inside_allowed_roots(path, get_settings()) or not (path / "config.json").is_file():
        raise RequestRefused(404, f"model {payload.get('label')!r}: no model directory there any more")
    return path


def _parse_pool(payload: dict):
    """A pooling message, checked: (model dir, input texts, timeout)."""
    from training_platform.inference.serving import is_classifier

    try:
        inputs = payload["inputs"]
        if not isinstance(inputs, list) or not inputs or len(inputs) > MAX_POOL_INPUTS:
            raise ValueError(f"inputs must be a list of 1..{MAX_POOL_INPUTS} texts")
        texts = [str(text) for text in inputs]
        timeout_s = max(0.1, float(payload["timeout_s"]))
        path = _model_dir(payload)
    except (KeyError, TypeError, ValueError) as exc:
        raise RequestRefused(400, f"malformed pooling request: {type(exc).__name__}: {exc}") from None
    if sum(len(t) for t in texts) > MAX_PROMPT_CHARS:
        raise RequestRefused(422, "the inputs are too long", "input")
    if not is_classifier(path):
        raise RequestRefused(
            422,
            f"model {payload.get('label')!r} generates text: /pooling serves sequence-classification models "
            f"(reward models); use /chat/completions",
            "model",
        )
    return path, texts, timeout_s


def generates_text(path: Path) -> bool:
    """False for a model whose config names only classification heads (reward models, classifiers)."""
    import json

    try:
        architectures = json.loads((path / "config.json").read_text()).get("architectures") or []
    except (OSError, ValueError, AttributeError):
        return True  # loading reports what is wrong with it
    return not architectures or not all("Classification" in str(a) for a in architectures)


def _scrub(text: str, path: Path, label: str) -> str:
    from training_platform.core.settings import get_settings
    from training_platform.training.rundir import redact

    text = redact(text).replace(str(path), label)
    root = str(get_settings().data_path)
    return text.replace(root + os.sep, "").replace(root, ".")[:1000]


@app.task(name=INFERENCE_TASK, bind=True, acks_late=False, ignore_result=True)
def generate(self, request_id: str, payload: dict) -> str:
    from training_platform.inference.serving import PromptError
    from training_platform.inference.serving import generate as run_generation

    worker = self.request.hostname or f"inference-{os.getpid()}"
    try:
        chan = channel.WorkerChannel(redis_client(), request_id, worker)
    except ValueError as exc:
        log.error("dropped an inference message: %s", exc)
        return "malformed"
    if not chan.claim():
        log.info("inference request %s: already abandoned by the API (no worker took it in time); dropped", request_id)
        return "abandoned"
    chan.push({"type": "started", "worker": worker})
    label = str(payload.get("label", "")) if isinstance(payload, dict) else ""
    if isinstance(payload, dict) and payload.get("kind") == "pool":
        return _run_pool(request_id, chan, payload, label)
    path = Path("/nonexistent")
    started = time.monotonic()
    try:
        path, messages, tools, params, timeout_s = _parse(payload)
        deadline = started + timeout_s
        if _warm_up is not None:  # transformers' lazy imports are not thread-safe: let the warm-up finish
            _warmed.wait(timeout=max(0.0, deadline - time.monotonic()))
        model, cached = model_cache().get(path)
        load_s = time.monotonic() - started
        result = run_generation(
            model,
            messages,
            params,
            tools=tools,
            on_text=lambda index, piece: chan.push({"type": "token", "index": index, "text": piece}),
            should_stop=chan.cancelled,
            deadline=deadline,
        )
    except RequestRefused as exc:
        chan.push({"type": "error", "status": exc.status, "message": exc.message, "loc": exc.loc})
        return "refused"
    except PromptError as exc:
        loc = getattr(exc, "loc", "messages")  # ToolsNotRendered: "tools"
        chan.push({"type": "error", "status": 422, "message": _scrub(str(exc), path, label), "loc": loc})
        return "refused"
    except Exception as exc:  # noqa: BLE001 - reported to the caller, with the traceback in the worker's log
        log.exception("inference request %s on %s failed", request_id, label)
        message = _scrub(
            f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}", path, label
        )
        chan.push({"type": "error", "status": 500, "message": f"generation failed on {label}: {message}"})
        return "failed"
    chan.push(
        {
            "type": "done",
            "prompt_tokens": result.prompt_tokens,
            "choices": [
                {
                    "index": c.index,
                    "text": c.text,
                    "finish_reason": c.finish_reason,
                    "completion_tokens": c.completion_tokens,
                }
                for c in result.choices
            ],
            "timings": {"load_s": round(load_s, 4), "generate_s": round(result.generate_s, 4), "cached": cached},
            "device": result.extra.get("device"),
        }
    )
    log.info(
        "inference request %s on %s: %d+%d tokens in %.2fs (%s)",
        request_id,
        label,
        result.prompt_tokens,
        result.completion_tokens,
        result.generate_s,
        "cached" if cached else f"loaded in {load_s:.2f}s",
    )
    return "done"


def _run_pool(request_id: str, chan: channel.WorkerChannel, payload: dict, label: str) -> str:
    """Score the payload's inputs with its classification model; one `done` event (or `error`)."""
    from training_platform.inference.serving import PromptError, pool

    path = Path("/nonexistent")
    started = time.monotonic()
    try:
        path, texts, timeout_s = _parse_pool(payload)
        deadline = started + timeout_s
        if _warm_up is not None:  # transformers' lazy imports are not thread-safe: let the warm-up finish
            _warmed.wait(timeout=max(0.0, deadline - time.monotonic()))
        classifier, cached = model_cache().get(path)
        load_s = time.monotonic() - started
        result = pool(classifier, texts, should_stop=chan.cancelled, deadline=deadline)
    except RequestRefused as exc:
        chan.push({"type": "error", "status": exc.status, "message": exc.message, "loc": exc.loc})
        return "refused"
    except PromptError as exc:
        chan.push({"type": "error", "status": 422, "message": _scrub(str(exc), path, label), "loc": "input"})
        return "refused"
    except Exception as exc:  # noqa: BLE001 - reported to the caller, with the traceback in the worker's log
        log.exception("pooling request %s on %s failed", request_id, label)
        message = _scrub(
            f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}", path, label
        )
        chan.push({"type": "error", "status": 500, "message": f"pooling failed on {label}: {message}"})
        return "failed"
    chan.push(
        {
            "type": "done",
            "data": result.data,
            "prompt_tokens": result.prompt_tokens,
            "timed_out": result.timed_out,
            "cancelled": result.cancelled,
            "timings": {"load_s": round(load_s, 4), "pool_s": round(result.pool_s, 4), "cached": cached},
            "device": str(classifier.device),
        }
    )
    log.info(
        "pooling request %s on %s: %d inputs, %d tokens in %.2fs (%s)",
        request_id,
        label,
        len(result.data),
        sum(result.prompt_tokens),
        result.pool_s,
        "cached" if cached else f"loaded in {load_s:.2f}s",
    )
    return "done"
