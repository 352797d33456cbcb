# Over 600 lines: three backends (transformers, vLLM, OpenAI endpoint) behind one interface, read side by side.
"""Generation backends: local transformers models, vLLM (when installed) and any OpenAI-compatible endpoint.

    backend = load_backend(ModelSpec(path="runs/abc/final"))
    outs = backend.generate([GenerationRequest(messages=[{"role": "user", "content": "2+2?"}])],
                            SamplingParams(max_new_tokens=32, stop=("\\n\\n",)))
    outs[0][0].text

Every backend returns, per request, `n` `Generation`s (text with the stop sequence and anything after it removed,
the wall time of the call that produced it, and why it ended). Greedy decoding when temperature == 0, sampling
otherwise (seeded). `loglikelihood([(context, continuation), ...])` returns (sum of log-probs of the continuation,
whether it is the greedy continuation), as lm-evaluation-harness computes it (trailing spaces of the context move
to the continuation).

torch / transformers / vllm / httpx are imported inside the backends: importing this module is cheap.
"""

from __future__ import annotations

import json
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from training_platform.core.endpoints import Endpoint, Endpoints
    from training_platform.evaluation.specs import ModelSpec

__all__ = [
    "Backend",
    "Generation",
    "GenerationRequest",
    "OpenAIBackend",
    "SamplingParams",
    "TransformersBackend",
    "VLLMBackend",
    "cut_at_stop",
    "load_backend",
]

Progress = Callable[[int], None] | None


@dataclass
class GenerationRequest:
    """A completion-style `prompt` or a chat `messages` list (rendered with the model's chat template)."""

    prompt: str | None = None
    messages: list[dict[str, str]] | None = None

    def __post_init__(self) -> None:
        if (self.prompt is None) == (self.messages is None):
            raise ValueError("a GenerationRequest has exactly one of prompt or messages")


@dataclass(frozen=True)
class SamplingParams:
    max_new_tokens: int = 256
    temperature: float = 0.0
    top_p: float = 1.0
    n: int = 1
    stop: tuple[str, ...] = ()
    seed: int = 0

    @property
    def greedy(self) -> bool:
        return self.temperature <= 0.0


@dataclass
class Generation:
    text: str
    latency_s: float
    finish_reason: str | None = None  # "stop" (stop sequence), "eos", "length"
    num_tokens: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)


def cut_at_stop(text: str, stop: Sequence[str]) -> tuple[str, bool]:
    """Text before the earliest stop sequence; (text, whether one was found)."""
    cut = len(text)
    for s in stop:
        if s:
            i = text.find(s)
            if 0 <= i < cut:
                cut = i
    return text[:cut], cut < len(text)


def _chunks(items: list, size: int) -> list[list]:
    return [items[i : i + size] for i in range(0, len(items), size)]


class Backend(ABC):
    name: str = "backend"

    @abstractmethod
    def supports_chat(self) -> bool: ...

    @abstractmethod
    def render(self, request: GenerationRequest) -> str:
        """The prompt as the model receives it (recorded with each sample)."""

    @abstractmethod
    def generate(
        self, requests: Sequence[GenerationRequest], params: SamplingParams, *, progress: Progress = None
    ) -> list[list[Generation]]: ...

    def loglikelihood(self, pairs: Sequence[tuple[str, str]], *, progress: Progress = None) -> list[tuple[float, bool]]:
        raise NotImplementedError(f"the {self.name} backend does not compute log-likelihoods")

    def generation_batches(self, requests: Sequence[GenerationRequest], params: SamplingParams) -> list[list[int]]:
        """The groups of request indices `generate` runs together, in the order it runs them. Requests of one group
        share a padded batch (padding changes logits slightly); a subset made of whole groups, kept in the original
        order, is run in exactly these groups again -- so whole groups spread over processes (the Ray executor)
        decode greedily to the same outputs as one process. Default: every request on its own."""
        return [[i] for i in range(len(requests))]

    def loglikelihood_batches(self, pairs: Sequence[tuple[str, str]]) -> list[list[int]]:
        """`generation_batches` for `loglikelihood`: the groups of pair indices it scores together, in order."""
        return [[i] for i in range(len(pairs))]

    def describe(self) -> dict[str, Any]:
        return {"backend": self.name}

    def close(self) -> None:  # noqa: B027 - optional hook
        pass


# --- transformers ----------------------------------------------------------------------------------------------


class TransformersBackend(Backend):
    """Batched local generation: left padding, longest prompts first, greedy or seeded sampling, stop strings."""

    name = "transformers"

    def __init__(
        self,
        path: str,
        *,
        batch_size: int = 8,
        device: str = "auto",
        dtype: str = "auto",
        trust_remote_code: bool = False,
        num_threads: int | None = None,
    ):
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        if num_threads:
            torch.set_num_threads(num_threads)

        self.path = str(path)
        self.batch_size = batch_size
        if device == "auto":
            device = "cuda" if torch.cuda.is_available() else "cpu"
        self.device = torch.device(device)
        self.tokenizer: Any = AutoTokenizer.from_pretrained(self.path, trust_remote_code=trust_remote_code)
        if self.tokenizer.pad_token_id is None:
            if self.tokenizer.eos_token_id is None:
                raise ValueError(f"{self.path}: the tokenizer has neither a pad nor an eos token")
            self.tokenizer.pad_token = self.tokenizer.eos_token
        if dtype == "auto":
            torch_dtype: Any = "auto" if self.device.type == "cuda" else torch.float32
        else:
            torch_dtype = getattr(torch, dtype)
        model: Any = AutoModelForCausalLM.from_pretrained(
            self.path, dtype=torch_dtype, trust_remote_code=trust_remote_code
        )
        model.to(self.device).eval()
        self.model: Any = model
        eos: set[int] = set()
        for candidate in (
            self.tokenizer.eos_token_id,
            getattr(self.model.generation_config, "eos_token_id", None),
            getattr(self.model.config, "eos_token_id", None),
        ):
            if isinstance(candidate, int):
                eos.add(candidate)
            elif isinstance(candidate, list | tuple):
                eos.update(int(c) for c in candidate)
        self.eos_ids = sorted(eos)
        self.max_length = self._max_length()

    def _max_length(self) -> int:
        for attr in ("max_position_embeddings", "n_positions", "max_sequence_length", "seq_length"):
            value = getattr(self.model.config, attr, None)
            if isinstance(value, int) and value > 0:
                return value
        tok_max = getattr(self.tokenizer, "model_max_length", None)
        return tok_max if isinstance(tok_max, int) and 0 < tok_max < 10**8 else 2048

    def describe(self) -> dict[str, Any]:
        return {
            "backend": self.name,
            "model": self.path,
            "device": str(self.device),
            "dtype": str(self.model.dtype).replace("torch.", ""),
            "batch_size": self.batch_size,
        }

    def supports_chat(self) -> bool:
        return bool(getattr(self.tokenizer, "chat_template", None))

    def render(self, request: GenerationRequest) -> str:
        if request.messages is None:
            return request.prompt or ""
        if not self.supports_chat():
            raise ValueError(f"{self.path}: the tokenizer has no chat template; use completion prompts (chat off)")
        return self.tokenizer.apply_chat_template(request.messages, tokenize=False, add_generation_prompt=True)

    def encode(self, text: str) -> list[int]:
        # Chat renderings already carry their special tokens (BOS included); plain prompts get the tokenizer's
        # default special tokens (lm-evaluation-harness does the same).
        bos = self.tokenizer.bos_token
        add_special = not (bos and text.startswith(bos))
        return list(self.tokenizer(text, add_special_tokens=add_special)["input_ids"])

    def _decode(self, tokens: list[int]) -> str:
        return self.tokenizer.decode(tokens, skip_special_tokens=True)

    def _encoded_prompts(
        self, requests: Sequence[GenerationRequest], params: SamplingParams
    ) -> tuple[list[str], list[list[int]]]:
        texts = [self.render(r) for r in requests]
        max_ctx = max(1, self.max_length - params.max_new_tokens)
        return texts, [self.encode(t)[-max_ctx:] for t in texts]

    @staticmethod
    def _generation_order(texts: list[str], encoded: list[list[int]]) -> list[int]:
        # Longest first, ties by text: the same batches lm-evaluation-harness forms (padding changes logits slightly).
        return sorted(range(len(encoded)), key=lambda i: (-len(encoded[i]), texts[i], i))

    def generation_batches(self, requests: Sequence[GenerationRequest], params: SamplingParams) -> list[list[int]]:
        texts, encoded = self._encoded_prompts(requests, params)
        return _chunks(self._generation_order(texts, encoded), self.batch_size)

    def generate(
        self, requests: Sequence[GenerationRequest], params: SamplingParams, *, progress: Progress = None
    ) -> list[list[Generation]]:
        import torch
        from transformers import GenerationConfig, StoppingCriteria, StoppingCriteriaList

        texts, encoded = self._encoded_prompts(requests, params)
        order = self._generation_order(texts, encoded)
        results: list[list[Generation]] = [[] for _ in requests]
        pad = self.tokenizer.pad_token_id
        tokenizer, stop = self.tokenizer, tuple(s for s in params.stop if s)

        class StopStrings(StoppingCriteria):
            def __init__(self, context_len: int):
                self.context_len = context_len

            def __call__(self, input_ids: Any, scores: Any, **kwargs: Any) -> Any:
                done = [
                    any(s in tokenizer.decode(row[self.context_len :], skip_special_tokens=True) for s in stop)
                    for row in input_ids.tolist()
                ]
                return torch.tensor(done, dtype=torch.bool, device=input_ids.device)

        config_kwargs: dict[str, Any] = dict(
            max_new_tokens=params.max_new_tokens,
            num_return_sequences=params.n,
            pad_token_id=pad,
            eos_token_id=self.eos_ids or None,
            repetition_penalty=1.0,
        )
        if params.greedy:
            config_kwargs.update(do_sample=False)
        else:
            config_kwargs.update(do_sample=True, temperature=params.temperature, top_p=params.top_p, top_k=0)
        generation_config = GenerationConfig(**config_kwargs)
        torch.manual_seed(params.seed)
        for batch in _chunks(order, self.batch_size):
            width = max(len(encoded[i]) for i in batch)
            input_ids = torch.full((len(batch), width), pad, dtype=torch.long)
            attention = torch.zeros((len(batch), width), dtype=torch.long)
            for row, i in enumerate(batch):
                ids = encoded[i]
                input_ids[row, width - len(ids) :] = torch.tensor(ids, dtype=torch.long)
                attention[row, width - len(ids) :] = 1
            criteria = StoppingCriteriaList([StopStrings(width)]) if stop else None
            start = time.perf_counter()
            with torch.inference_mode():
                out = self.model.generate(
                    input_ids=input_ids.to(self.device),
                    attention_mask=attention.to(self.device),
                    generation_config=generation_config,
                    stopping_criteria=criteria,
                )
            latency = time.perf_counter() - start
            out = out[:, width:].tolist()
            for row, i in enumerate(batch):
                for j in range(params.n):
                    tokens = out[row * params.n + j]
                    finish = "length"
                    for pos, token in enumerate(tokens):
                        if token in self.eos_ids:
                            tokens, finish = tokens[:pos], "eos"
                            break
                    while tokens and tokens[-1] == pad and pad not in self.eos_ids:
                        tokens = tokens[:-1]
                    text, stopped = cut_at_stop(self._decode(tokens), stop)
                    if stopped:
                        finish = "stop"
                    results[i].append(
                        Generation(
                            text=text,
                            latency_s=latency,
                            finish_reason=finish,
                            num_tokens=len(tokens),
                            extra={"batch_size": len(batch)},
                        )
                    )
            if progress:
                progress(len(batch))
        return results

    def loglikelihood(self, pairs: Sequence[tuple[str, str]], *, progress: Progress = None) -> list[tuple[float, bool]]:
        import torch

        rows = self._loglikelihood_rows(pairs)
        results: list[tuple[float, bool]] = [(0.0, False)] * len(rows)
        order = self._loglikelihood_order(rows)
        pad = self.tokenizer.pad_token_id
        for batch in _chunks(order, self.batch_size):
            width = max(len(rows[i][0]) - 1 for i in batch)
            input_ids = torch.full((len(batch), width), pad, dtype=torch.long)
            attention = torch.zeros((len(batch), width), dtype=torch.long)
            for r, i in enumerate(batch):
                ids = rows[i][0][:-1]
                input_ids[r, : len(ids)] = torch.tensor(ids, dtype=torch.long)
                attention[r, : len(ids)] = 1
            with torch.inference_mode():
                logits = self.model(
                    input_ids=input_ids.to(self.device), attention_mask=attention.to(self.device)
                ).logits.float()
            logprobs = torch.log_softmax(logits, dim=-1).cpu()
            for r, i in enumerate(batch):
                tokens, cont_len = rows[i]
                targets = torch.tensor(tokens[-cont_len:], dtype=torch.long)
                positions = torch.arange(len(tokens) - 1 - cont_len, len(tokens) - 1)
                token_logprobs = logprobs[r, positions, targets]
                greedy = bool((logprobs[r, positions].argmax(dim=-1) == targets).all())
                results[i] = (float(token_logprobs.sum()), greedy)
            if progress:
                progress(len(batch))
        return results

    def _loglikelihood_rows(self, pairs: Sequence[tuple[str, str]]) -> list[tuple[list[int], int]]:
        """(input tokens incl. the continuation, continuation length) per pair."""
        rows: list[tuple[list[int], int]] = []
        for context, continuation in pairs:
            spaces = len(context) - len(context.rstrip())
            if spaces:
                continuation = context[-spaces:] + continuation
                context = context[:-spaces]
            whole = self.encode(context + continuation)
            context_len = len(self.encode(context))
            cont = whole[context_len:]
            if not cont:
                raise ValueError(f"empty continuation after tokenization: {continuation!r}")
            rows.append((whole[-(self.max_length + 1) :], len(cont)))
        return rows

    @staticmethod
    def _loglikelihood_order(rows: list[tuple[list[int], int]]) -> list[int]:
        return sorted(range(len(rows)), key=lambda i: -len(rows[i][0]))

    def loglikelihood_batches(self, pairs: Sequence[tuple[str, str]]) -> list[list[int]]:
        return _chunks(self._loglikelihood_order(self._loglikelihood_rows(pairs)), self.batch_size)

    def close(self) -> None:
        self.model = None


# --- vLLM (GPU machines; import-guarded) -----------------------------------------------------------------------


class VLLMBackend(Backend):
    name = "vllm"

    def __init__(
        self,
        path: str,
        *,
        dtype: str = "auto",
        trust_remote_code: bool = False,
        max_model_len: int | None = None,
        seed: int = 0,
    ):
        try:
            from vllm import LLM
        except ImportError as exc:
            raise RuntimeError(
                "the vllm backend needs the vllm package (GPU machines): pip install vllm; "
                "or use --backend transformers"
            ) from exc
        self.path = str(path)
        kwargs: dict[str, Any] = {
            "model": self.path,
            "dtype": dtype,
            "trust_remote_code": trust_remote_code,
            "seed": seed,
        }
        if max_model_len:
            kwargs["max_model_len"] = max_model_len
        self.llm = LLM(**kwargs)
        self.tokenizer = self.llm.get_tokenizer()

    def describe(self) -> dict[str, Any]:
        return {"backend": self.name, "model": self.path}

    def supports_chat(self) -> bool:
        return bool(getattr(self.tokenizer, "chat_template", None))

    def render(self, request: GenerationRequest) -> str:
        if request.messages is None:
            return request.prompt or ""
        return self.tokenizer.apply_chat_template(request.messages, tokenize=False, add_generation_prompt=True)

    def generate(
        self, requests: Sequence[GenerationRequest], params: SamplingParams, *, progress: Progress = None
    ) -> list[list[Generation]]:
        from vllm import SamplingParams as VSamplingParams

        stop = [s for s in params.stop if s]
        sampling = VSamplingParams(
            n=params.n,
            temperature=max(params.temperature, 0.0),
            top_p=params.top_p if not params.greedy else 1.0,
            max_tokens=params.max_new_tokens,
            stop=stop or None,
            seed=params.seed,
        )
        prompts = [self.render(r) for r in requests]
        start = time.perf_counter()
        outputs = self.llm.generate(prompts, sampling, use_tqdm=False)
        latency = time.perf_counter() - start
        results = []
        for output in outputs:
            gens = []
            for completion in output.outputs:
                text, _ = cut_at_stop(completion.text, stop)
                gens.append(
                    Generation(
                        text=text,
                        latency_s=latency,
                        finish_reason=completion.finish_reason,
                        num_tokens=len(completion.token_ids),
                    )
                )
            results.append(gens)
        if progress:
            progress(len(requests))
        return results

    def loglikelihood(self, pairs: Sequence[tuple[str, str]], *, progress: Progress = None) -> list[tuple[float, bool]]:
        from vllm import SamplingParams as VSamplingParams

        prompts, spans = [], []
        for context, continuation in pairs:
            spaces = len(context) - len(context.rstrip())
            if spaces:
                continuation, context = context[-spaces:] + continuation, context[:-spaces]
            whole = self.tokenizer(context + continuation)["input_ids"]
            context_len = len(self.tokenizer(context)["input_ids"])
            prompts.append({"prompt_token_ids": whole})
            spans.append((context_len, len(whole)))
        outputs = self.llm.generate(prompts, VSamplingParams(max_tokens=1, prompt_logprobs=1), use_tqdm=False)
        results = []
        for output, (start, end) in zip(outputs, spans, strict=True):
            total, greedy = 0.0, True
            for pos in range(start, end):
                token = output.prompt_token_ids[pos]
                entry = output.prompt_logprobs[pos]
                total += entry[token].logprob
                best = max(entry.values(), key=lambda lp: lp.logprob)
                greedy = greedy and best.logprob <= entry[token].logprob
            results.append((total, greedy))
        if progress:
            progress(len(pairs))
        return results


# --- OpenAI-compatible HTTP endpoints --------------------------------------------------------------------------


class OpenAIBackend(Backend):
    """`/chat/completions` for chat requests, `/completions` for plain prompts, on a named endpoint (its URL and
    key come from `training_platform.core.endpoints`; the client never follows redirects nor leaves the endpoint's
    host). Errors and `describe()` name the endpoint and the model, never the URL or the key."""

    name = "openai"
    max_api_stops = 4  # OpenAI accepts at most 4 stop sequences; the rest are applied client-side

    def __init__(
        self,
        endpoint: Endpoint,
        model: str,
        *,
        max_concurrency: int = 4,
        timeout_s: float = 300.0,
        max_retries: int = 4,
        transport: Any = None,
    ):
        from training_platform.core.endpoints import has_key, keyed_client

        self.endpoint = endpoint
        self.model = model
        self.max_concurrency = max_concurrency
        self.max_retries = max_retries
        self.authenticated = has_key(endpoint)
        self._client = keyed_client(endpoint, timeout=timeout_s, transport=transport)

    def describe(self) -> dict[str, Any]:
        return {
            "backend": self.name,
            "model": self.model,
            "endpoint": self.endpoint.name,
            "authenticated": self.authenticated,
        }

    def supports_chat(self) -> bool:
        return True

    def render(self, request: GenerationRequest) -> str:
        if request.messages is None:
            return request.prompt or ""
        return json.dumps(request.messages, ensure_ascii=False)

    def _post(self, path: str, payload: dict[str, Any]) -> dict[str, Any]:
        import httpx

        where = f"endpoint {self.endpoint.name!r} {path}"
        delay = 1.0
        for attempt in range(self.max_retries + 1):
            try:
                response = self._client.post(path, json=payload)
            except httpx.TransportError as exc:
                if attempt == self.max_retries:
                    raise RuntimeError(f"{where}: {type(exc).__name__}: {exc}") from None
            else:
                if 300 <= response.status_code < 400:
                    raise RuntimeError(
                        f"{where}: HTTP {response.status_code}: the endpoint redirects; redirects "
                        f"are not followed (the operator must give the final URL)"
                    )
                if response.status_code < 300:
                    try:
                        return response.json()
                    except ValueError:
                        raise RuntimeError(f"{where}: the response is not JSON") from None
                retryable = response.status_code in (408, 409, 429) or response.status_code >= 500
                if not retryable or attempt == self.max_retries:
                    raise RuntimeError(f"{where}: HTTP {response.status_code}: {response.text[:500]}")
            time.sleep(delay)
            delay = min(delay * 2, 30.0)
        raise RuntimeError("unreachable")

    def _one(self, request: GenerationRequest, params: SamplingParams) -> list[Generation]:
        stop = [s for s in params.stop if s]
        payload: dict[str, Any] = {
            "model": self.model,
            "max_tokens": params.max_new_tokens,
            "temperature": params.temperature,
            "seed": params.seed,
        }
        if not params.greedy:
            payload["top_p"] = params.top_p
        if stop:
            payload["stop"] = stop[: self.max_api_stops]
        if request.messages is not None:
            path, payload["messages"] = "/chat/completions", request.messages
        else:
            path, payload["prompt"] = "/completions", request.prompt
        gens: list[Generation] = []
        while len(gens) < params.n:
            payload["n"] = params.n - len(gens)
            start = time.perf_counter()
            data = self._post(path, payload)
            latency = time.perf_counter() - start
            choices = data.get("choices") or []
            if not choices:
                raise RuntimeError(f"endpoint {self.endpoint.name!r} {path}: no choices in the response")
            for choice in choices[: params.n - len(gens)]:
                if request.messages is not None:
                    raw = (choice.get("message") or {}).get("content") or ""
                else:
                    raw = choice.get("text") or ""
                text, stopped = cut_at_stop(raw, stop)
                finish = "stop" if stopped else choice.get("finish_reason")
                gens.append(Generation(text=text, latency_s=latency, finish_reason=finish))
        return gens

    def generate(
        self, requests: Sequence[GenerationRequest], params: SamplingParams, *, progress: Progress = None
    ) -> list[list[Generation]]:
        def run(request: GenerationRequest) -> list[Generation]:
            result = self._one(request, params)
            if progress:
                progress(1)
            return result

        with ThreadPoolExecutor(max_workers=self.max_concurrency) as pool:
            return list(pool.map(run, requests))

    def loglikelihood(self, pairs: Sequence[tuple[str, str]], *, progress: Progress = None) -> list[tuple[float, bool]]:
        """Needs a server that supports `echo` + `logprobs` on /completions (vLLM, llama.cpp, TGI...)."""

        def run(pair: tuple[str, str]) -> tuple[float, bool]:
            context, continuation = pair
            payload = {
                "model": self.model,
                "prompt": context + continuation,
                "max_tokens": 1,
                "echo": True,
                "logprobs": 1,
                "temperature": 0.0,
            }
            data = self._post("/completions", payload)
            logprobs = data["choices"][0]["logprobs"]
            offsets, tokens = logprobs["text_offset"], logprobs["token_logprobs"]
            tops = logprobs.get("top_logprobs") or [None] * len(tokens)
            end = len(context) + len(continuation)
            total, greedy = 0.0, True
            for offset, lp, top, token in zip(offsets, tokens, tops, logprobs["tokens"], strict=False):
                if offset < len(context) or offset >= end or lp is None:
                    continue
                total += lp
                if top:
                    greedy = greedy and max(top.values()) <= lp + 1e-9 and token in top
            if progress:
                progress(1)
            return total, greedy

        with ThreadPoolExecutor(max_workers=self.max_concurrency) as pool:
            return list(pool.map(run, pairs))

    def close(self) -> None:
        self._client.close()


def load_backend(spec: ModelSpec, *, seed: int = 0, endpoints: Endpoints | None = None) -> Backend:
    """The backend `spec` names. `endpoints` resolves an openai backend's endpoint name (default: the operator's
    TP_ENDPOINTS / TP_ENDPOINTS_FILE only; the worker passes one that also sees admin-defined endpoints)."""
    if spec.backend == "transformers":
        return TransformersBackend(
            spec.path,
            batch_size=spec.batch_size,
            device=spec.device,
            dtype=spec.dtype,
            trust_remote_code=spec.trust_remote_code,
            num_threads=spec.num_threads,
        )
    if spec.backend == "vllm":
        return VLLMBackend(
            spec.path,
            dtype=spec.dtype,
            trust_remote_code=spec.trust_remote_code,
            max_model_len=spec.max_model_len,
            seed=seed,
        )
    if spec.backend == "openai":
        from training_platform.core.endpoints import Endpoints

        resolver = endpoints if endpoints is not None else Endpoints.from_env()
        endpoint = resolver.resolve(spec.endpoint, spec.path, field="model.endpoint", model_field="model.path")
        return OpenAIBackend(
            endpoint, spec.path, max_concurrency=spec.max_concurrency, timeout_s=spec.request_timeout_s
        )
    raise ValueError(f"unknown backend {spec.backend!r}")
