"""The `hf` rollout server: a Ray actor that verl's agent loop calls like its vLLM server
(`generate(prompt_ids, sampling_params, request_id) -> TokenOutput`), generating with transformers.

Concurrent requests are batched: each request joins a queue; one loop takes every waiting request with the same
sampling parameters (up to `max_batch`) and generates them together in a worker thread while new requests queue
(generation.py). The actor's weights are replaced after every actor update (adapter.py pushes them); verl's
sleep / wake-up / KV-cache calls are no-ops (the model stays loaded, the KV cache lives only inside one batch).
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from dataclasses import dataclass, field
from typing import Any

from training_platform.training.engines.verl.hf_rollout.generation import Completion, Sampling, eos_ids, generate_batch

log = logging.getLogger("training_platform.train")

BATCH_WINDOW_S = 0.05  # the longest a batch waits for more requests once they stop arriving together
DTYPES = {"float32": "float32", "fp32": "float32", "bfloat16": "bfloat16", "bf16": "bfloat16", "float16": "float16"}


@dataclass
class _Request:
    prompt_ids: list[int]
    sampling: Sampling
    max_new_tokens: int
    future: asyncio.Future = field(repr=False)


class HFRolloutServer:
    """One replica's generation server (verl's vLLMHttpServer counterpart, without HTTP)."""

    def __init__(
        self,
        model_path: str,
        *,
        dtype: str = "float32",
        trust_remote_code: bool = False,
        prompt_length: int,
        response_length: int,
        max_model_len: int | None = None,
        max_batch: int = 256,
        threads: int | None = None,
    ):
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        if threads:
            torch.set_num_threads(threads)
        self.device = "cuda" if torch.cuda.is_available() else "cpu"
        model: Any = AutoModelForCausalLM.from_pretrained(
            model_path,
            dtype=getattr(torch, DTYPES.get(dtype, "float32")),
            attn_implementation="sdpa",
            trust_remote_code=trust_remote_code,
        )
        self.model: Any = model.to(self.device)
        self.model.eval()
        tokenizer = AutoTokenizer.from_pretrained(model_path, trust_remote_code=trust_remote_code)
        self.eos = eos_ids(self.model) | ({tokenizer.eos_token_id} if tokenizer.eos_token_id is not None else set())
        pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        self.pad_token_id = int(pad if pad is not None else 0)
        self.prompt_length = prompt_length
        self.response_length = response_length
        self.max_model_len = max_model_len or prompt_length + response_length
        self.max_batch = max_batch
        self.global_steps: int | None = None
        self.stats = {"requests": 0, "batches": 0, "tokens": 0, "generate_s": 0.0, "weight_updates": 0}
        self._queue: asyncio.Queue[_Request] | None = None
        self._loop_task: asyncio.Task | None = None
        self._staged: dict[str, Any] = {}

    # ---- generation
    def _budget(self, prompt_ids: list[int], params: dict[str, Any]) -> int:
        room = self.max_model_len - len(prompt_ids)
        if room < 1:
            raise ValueError(
                f"prompt length ({len(prompt_ids)}) leaves no room to generate within max_model_len "
                f"({self.max_model_len})"
            )
        wanted = params.get("max_tokens", params.get("max_new_tokens"))
        if wanted is None:  # as verl's vLLM server: the response length, within the prompt + response budget
            wanted = min(self.response_length, self.prompt_length + self.response_length - len(prompt_ids))
        return max(1, min(int(wanted), room))

    async def generate(
        self,
        prompt_ids: list[int],
        sampling_params: dict[str, Any],
        request_id: str,
        image_data: Any = None,
        video_data: Any = None,
        audio_data: Any = None,
        **kwargs: Any,
    ):
        from verl.workers.rollout.replica import TokenOutput

        if image_data is not None or video_data is not None or audio_data is not None:
            raise ValueError("the hf rollout generates from text only (no images, video or audio)")
        params = dict(sampling_params)
        budget = self._budget(list(prompt_ids), params)
        params.pop("max_new_tokens", None)
        request = _Request(
            [int(t) for t in prompt_ids],
            Sampling.from_request(params),
            budget,
            asyncio.get_running_loop().create_future(),
        )
        self._ensure_loop()
        assert self._queue is not None
        await self._queue.put(request)
        completion: Completion = await request.future
        return TokenOutput(
            token_ids=completion.token_ids,
            log_probs=completion.log_probs,
            stop_reason="completed",
            extra_fields={"global_steps": self.global_steps},
        )

    def _ensure_loop(self) -> None:
        if self._loop_task is None or self._loop_task.done():
            self._queue = asyncio.Queue()
            self._loop_task = asyncio.get_running_loop().create_task(self._batch_loop())

    async def _batch_loop(self) -> None:
        assert self._queue is not None
        pending: list[_Request] = []
        while True:
            if not pending:
                pending.append(await self._queue.get())
            # Requests the agent loop sent together arrive a few ms apart: the batch stays open while they come.
            opened = time.perf_counter()
            while time.perf_counter() - opened < BATCH_WINDOW_S:
                await asyncio.sleep(0.002)
                if self._queue.empty():
                    break
                while not self._queue.empty():
                    pending.append(self._queue.get_nowait())
            sampling = pending[0].sampling
            batch = [r for r in pending if r.sampling == sampling][: self.max_batch]
            pending = [r for r in pending if r not in batch]
            started = time.perf_counter()
            try:
                completions = await asyncio.to_thread(
                    generate_batch,
                    self.model,
                    [r.prompt_ids for r in batch],
                    sampling,
                    [r.max_new_tokens for r in batch],
                    pad_token_id=self.pad_token_id,
                    eos_token_ids=self.eos,
                )
            except Exception as exc:  # noqa: BLE001 - the requests fail with the error, the loop goes on
                for r in batch:
                    if not r.future.done():
                        r.future.set_exception(exc)
                continue
            self.stats["batches"] += 1
            self.stats["requests"] += len(batch)
            self.stats["tokens"] += sum(len(c.token_ids) for c in completions)
            self.stats["generate_s"] += time.perf_counter() - started
            for r, c in zip(batch, completions, strict=True):
                if not r.future.done():
                    r.future.set_result(c)

    # ---- weights: pushed by the actor's adapter after every update
    def update_weights(self, named_tensors: list[tuple[str, Any]]) -> int:
        """Stage a bucket of (name, tensor) in the model's parameter names; returns how many were staged."""
        self._staged.update(named_tensors)
        return len(named_tensors)

    def finish_weights_update(self, global_steps: int | None = None) -> dict[str, Any]:
        """Copy the staged tensors into the model (every parameter must be named; tied weights may be absent)."""
        import torch

        params = self.model.state_dict(keep_vars=True)  # tied weights (lm_head = embeddings) under both names
        unknown = sorted(set(self._staged) - set(params))
        if unknown:
            self._staged.clear()
            raise KeyError(f"the actor sent weights the rollout model does not have: {unknown[:5]}")
        with torch.no_grad():
            for name, tensor in self._staged.items():
                target = params[name]
                if tuple(tensor.shape) != tuple(target.shape):
                    raise ValueError(f"weight {name}: shape {tuple(tensor.shape)} != {tuple(target.shape)}")
                target.copy_(tensor.to(device=target.device, dtype=target.dtype))
        missing = sorted(set(dict(self.model.named_parameters())) - set(self._staged))
        loaded = len(self._staged)
        self._staged.clear()
        self.stats["weight_updates"] += 1
        if global_steps is not None:
            self.global_steps = global_steps
        return {"loaded": loaded, "missing": missing}

    def get_stats(self) -> dict[str, Any]:
        return dict(self.stats, pid=os.getpid())

    # ---- verl's server control calls: nothing to free or restore on a model that stays loaded
    async def wake_up(self, tags: list[str] | None = None) -> None:
        return None

    async def sleep(self) -> None:
        return None

    async def clear_kv_cache(self) -> None:
        return None

    async def release_kv_cache(self) -> None:
        return None

    async def resume_kv_cache(self) -> None:
        return None

    async def wait_for_requests_to_drain(self) -> None:
        while self._queue is not None and not self._queue.empty():
            await asyncio.sleep(0.01)

    async def abort_all_requests(self, reset_prefix_cache: bool = True, reject_request: bool = False) -> dict:
        return {"aborted_count": 0, "request_ids": []}

    async def abort_request(self, request_id: str, reset_prefix_cache: bool = True) -> dict:
        return {"aborted": False, "request_id": request_id}

    async def resume_generation(self) -> None:
        return None

    async def resume_engine_generation(self) -> None:
        return None

    async def open_submission_gate(self) -> None:
        return None

    async def set_global_steps(self, global_steps: int) -> None:
        self.global_steps = global_steps

    async def start_profile(self, **kwargs: Any) -> None:
        return None

    async def stop_profile(self) -> None:
        return None
