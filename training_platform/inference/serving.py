"""Loaded models (an LRU cache per process) and streaming chat generation with a real `model.generate`.

    cache = ModelCache(size=2)
    model, hit = cache.get("runs/job-3/final")
    result = generate(model, [{"role": "user", "content": "2+3="}], GenerateParams(max_new_tokens=16, seed=1),
                      on_text=lambda index, piece: print(piece, end=""))
    result.choices[0].text, result.choices[0].finish_reason, result.prompt_tokens

The cache key is the resolved directory; an entry is reused only while the directory's signature (its inode and
the newest mtime of its top-level files) is unchanged, so a re-written `final/` is loaded again. Loading reuses
`evaluation.generation.TransformersBackend` (CUDA when available, else CPU; the model's dtype on CUDA, float32 on
CPU; pad/eos ids; context length). Chat messages go through the tokenizer's chat template, or, for a tokenizer
without one, a plain `System:/User:/Assistant:` transcript.

Sampling: temperature 0 is greedy; otherwise nucleus sampling (top_p, no top-k) seeded with `seed` (same seed,
same model, same device -> same text). `n` choices are generated one after another from one seeded stream.
Generation stops at an eos token ("stop"), a stop string ("stop"; the text is cut before it, and streamed pieces
never include any part of it), `max_new_tokens` ("length"), a cancel ("cancelled") or the deadline ("timeout").

Pooling (the `/pooling` route, vLLM's shape): a model whose config names only classification heads (a reward model such
as `demo-reward` or a reward job's `final/`) is loaded by `load_served` as a `Classifier`, and `pool` scores texts with
it (both in evaluation/classifier.py, which verl's PPO reward server shares): each text tokenized as a whole (the
tokenizer's own special tokens, no chat template), one forward pass per text (no padding, so a text's score does not
depend on its neighbours), and the head's raw outputs returned (one number for a 1-label reward model: its score; a
classifier's logits, no softmax).

    classifier, _ = cache.get("runs/job-4/final")          # a cache built with loader=load_served
    result = pool(classifier, ["2+3=5", "2+3=7"])
    result.data == [[0.41...], [-0.12...]]; result.prompt_tokens == [5, 5]
"""

from __future__ import annotations

import functools
import gc
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from training_platform.evaluation.classifier import (
    Classifier,
    PoolResult,
    PromptError,
    is_classifier,
    load_classifier,
    pool,
)

__all__ = [
    "Choice",
    "Classifier",
    "PoolResult",
    "Completion",
    "GenerateParams",
    "ModelCache",
    "PromptError",
    "ToolsNotRendered",
    "generate",
    "is_classifier",
    "load_classifier",
    "load_model",
    "load_served",
    "model_signature",
    "pool",
    "render_prompt",
]

OnText = Callable[[int, str], None]


@dataclass(frozen=True)
class GenerateParams:
    max_new_tokens: int = 128
    temperature: float = 0.7
    top_p: float = 1.0
    seed: int = 0
    n: int = 1
    stop: tuple[str, ...] = ()

    @property
    def greedy(self) -> bool:
        return self.temperature <= 0.0


@dataclass
class Choice:
    index: int
    text: str
    finish_reason: str  # stop | length | cancelled | timeout
    completion_tokens: int


@dataclass
class Completion:
    choices: list[Choice]
    prompt_tokens: int
    generate_s: float
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def completion_tokens(self) -> int:
        return sum(c.completion_tokens for c in self.choices)


# ---------------------------------------------------------------------------------------------- the cache


def model_signature(path: Path) -> tuple[int, int, int]:
    """(inode of the directory, newest mtime_ns among it and its top-level entries, number of entries): changes
    when the directory is replaced or any of its files is written."""
    st = path.stat()
    newest, count = st.st_mtime_ns, 0
    with os.scandir(path) as entries:
        for entry in entries:
            try:
                newest = max(newest, entry.stat(follow_symlinks=True).st_mtime_ns)
            except OSError:
                continue
            count += 1
    return st.st_ino, newest, count


def load_model(path: str, *, device: str = "auto"):
    """A local model directory, ready to generate (a TransformersBackend: model, tokenizer, eos ids, context)."""
    from training_platform.evaluation.generation import TransformersBackend

    return TransformersBackend(path, batch_size=1, device=device, dtype="auto")


def load_served(path: str, *, device: str = "auto"):
    """What the inference worker's cache loads: a Classifier for a classification model, else a generator."""
    return load_classifier(path, device=device) if is_classifier(path) else load_model(path, device=device)


def _free(model: Any) -> None:
    close = getattr(model, "close", None)
    if callable(close):
        close()
    gc.collect()
    import sys

    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available():
        torch.cuda.empty_cache()


class ModelCache:
    """The `size` most recently used models of this process. Not shared between processes."""

    def __init__(self, size: int = 2, loader: Callable[[str], Any] | None = None):
        if size < 1:
            raise ValueError("the model cache holds at least one model")
        self.size = size
        self._loader = loader or load_model
        self._entries: OrderedDict[str, tuple[tuple[int, int, int], Any]] = OrderedDict()
        self._lock = threading.Lock()
        self.loads = 0

    def __len__(self) -> int:
        return len(self._entries)

    def paths(self) -> list[str]:
        """Cached directories, least recently used first."""
        return list(self._entries)

    def get(self, path: str | Path) -> tuple[Any, bool]:
        """(the loaded model, whether it came from the cache). Loads it, evicting the least recently used model
        first when the cache is full, or when the directory changed since it was loaded."""
        key = str(Path(path).resolve())
        signature = model_signature(Path(key))
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None and entry[0] == signature:
                self._entries.move_to_end(key)
                return entry[1], True
            if entry is not None:  # re-written since it was loaded
                _free(self._entries.pop(key)[1])
            while len(self._entries) >= self.size:
                _, (_, evicted) = self._entries.popitem(last=False)
                _free(evicted)
            model = self._loader(key)
            self.loads += 1
            self._entries[key] = (signature, model)
            return model, False

    def clear(self) -> None:
        with self._lock:
            while self._entries:
                _free(self._entries.popitem()[1][1])


# ---------------------------------------------------------------------------------------------- prompts


def plain_transcript(messages: Sequence[dict[str, Any]]) -> str:
    """The prompt for a tokenizer without a chat template."""
    names = {"system": "System", "developer": "System", "user": "User", "assistant": "Assistant"}
    turns = [f"{names.get(m['role'], m['role'].title())}: {m.get('content') or ''}" for m in messages]
    return "\n\n".join(turns) + "\n\nAssistant:"


class ToolsNotRendered(PromptError):
    """`tools` were given, but this model's chat template does not show them to the model."""

    loc = "tools"


def _apply_template(model, turns: list[dict[str, Any]], tools: Sequence[dict[str, Any]] | None) -> str:
    try:
        return model.tokenizer.apply_chat_template(
            turns, tools=list(tools) if tools else None, tokenize=False, add_generation_prompt=True
        )
    except Exception as exc:  # noqa: BLE001 - templates raise their own errors (role order, unsupported roles)
        raise PromptError(f"the model's chat template refused the messages: {str(exc)[:300]}") from None


def render_prompt(model, messages: Sequence[dict[str, Any]], *, tools: Sequence[dict[str, Any]] | None = None) -> str:
    """The prompt the model continues: its chat template over `messages` (and `tools`, OpenAI function schemas,
    passed as `apply_chat_template(..., tools=)`, exactly as training renders them). Messages may carry
    `tool_calls` (assistant) and `tool_call_id` (role `tool`); they reach the template unchanged.

    With `tools`, a template that does not show them to the model is refused (ToolsNotRendered) rather than silently
    serving a model that cannot know the tools: no chat template at all, a rendering identical to the one without
    tools, or one in which a tool's name does not appear."""
    template = getattr(model.tokenizer, "chat_template", None)
    if not template:
        if tools:
            raise ToolsNotRendered("this model has no chat template, so it cannot be shown tools; send no `tools`")
        return plain_transcript(messages)
    # `developer` is OpenAI's newer name for the system role; chat templates know `system`.
    turns = [{**m, "role": "system" if m["role"] == "developer" else m["role"]} for m in messages]
    prompt = _apply_template(model, turns, tools)
    if tools:
        names = [str(t.get("function", {}).get("name", "")) for t in tools]
        if prompt == _apply_template(model, turns, None) or not all(name in prompt for name in names):
            raise ToolsNotRendered(
                "this model's chat template ignores `tools` (the prompt does not list them), so the model would "
                "not see them; serve a model whose template renders tools, or send no `tools`"
            )
    return prompt


# ---------------------------------------------------------------------------------------------- generation


class _Pieces:
    """Incremental decoding of one choice: each new token's text, held back while it could be the start of a stop
    string and while it ends in an incomplete UTF-8 character."""

    def __init__(self, tokenizer, stop: Sequence[str], emit: Callable[[str], None]):
        self.tokenizer = tokenizer
        self.stop = [s for s in stop if s]
        self.hold = max((len(s) for s in self.stop), default=1) - 1
        self.emit = emit
        self.ids: list[int] = []
        self.text = ""
        self.sent = 0
        self.stop_hit = False
        self.pieces: list[str] = []
        self.held = 0  # tokens held back because the text ended in an incomplete character

    def add(self, tokens: list[int]) -> None:
        if self.stop_hit:
            return
        self.ids.extend(tokens)
        text = self.tokenizer.decode(self.ids, skip_special_tokens=True)
        if text.endswith("\ufffd") and self.held < 3:
            self.held += 1  # a UTF-8 character spans at most 4 byte tokens: wait for the rest
            return
        self.held = 0
        self.text = text
        if self.stop:
            from training_platform.evaluation.generation import cut_at_stop

            cut, found = cut_at_stop(text, self.stop)
            if found:
                self.stop_hit = True
                self._send(len(cut))
                return
        self._send(len(text) - self.hold)

    def finish(self) -> str:
        if not self.stop_hit:
            self.text = self.tokenizer.decode(self.ids, skip_special_tokens=True)
            self._send(len(self.text))
        return "".join(self.pieces)

    def _send(self, end: int) -> None:
        if end > self.sent:
            piece = self.text[self.sent : end]
            self.sent = end
            self.pieces.append(piece)
            self.emit(piece)


def generate(
    model,
    messages: Sequence[dict[str, Any]],
    params: GenerateParams,
    *,
    tools: Sequence[dict[str, Any]] | None = None,
    on_text: OnText | None = None,
    should_stop: Callable[[], bool] | None = None,
    deadline: float | None = None,
) -> Completion:
    """Generate `params.n` replies to `messages` (and `tools`: see `render_prompt`) with `model` (from
    `load_model`). `on_text(index, piece)` gets every piece of text as it is produced; `should_stop()` and
    `deadline` (time.monotonic()) are checked after every token. Raises PromptError when the prompt does not fit
    the model's context with max_new_tokens."""
    import torch
    from transformers import GenerationConfig, StoppingCriteria, StoppingCriteriaList
    from transformers.generation.streamers import BaseStreamer

    prompt = render_prompt(model, messages, tools=tools)
    prompt_ids = model.encode(prompt)
    context = model.max_length
    if not prompt_ids:
        raise PromptError("the prompt is empty after tokenization")
    if len(prompt_ids) + params.max_new_tokens > context:
        raise PromptError(
            f"the prompt is {len(prompt_ids)} tokens; with max_new_tokens={params.max_new_tokens} that "
            f"exceeds the model's context of {context} tokens"
        )

    halted: list[str] = []

    class Halt(StoppingCriteria):
        def __init__(self, pieces: _Pieces):
            self.pieces = pieces

        def __call__(self, input_ids, scores, **kwargs):
            stop = self.pieces.stop_hit
            if not stop and deadline is not None and time.monotonic() > deadline:
                halted.append("timeout")
                stop = True
            if not stop and should_stop is not None and should_stop():
                halted.append("cancelled")
                stop = True
            return torch.full((input_ids.shape[0],), stop, dtype=torch.bool, device=input_ids.device)

    class Streamer(BaseStreamer):
        def __init__(self, pieces: _Pieces):
            self.pieces = pieces
            self.prompt_seen = False

        def put(self, value):
            if not self.prompt_seen:  # generate() hands over the prompt first
                self.prompt_seen = True
                return
            self.pieces.add([int(t) for t in value.reshape(-1).tolist()])

        def end(self):
            pass

    tokenizer = model.tokenizer
    pad = tokenizer.pad_token_id
    config: dict[str, Any] = dict(
        max_new_tokens=params.max_new_tokens,
        pad_token_id=pad,
        eos_token_id=model.eos_ids or None,
        repetition_penalty=1.0,
    )
    if params.greedy:
        config.update(do_sample=False)
    else:
        config.update(do_sample=True, temperature=params.temperature, top_p=params.top_p, top_k=0)
    generation_config = GenerationConfig(**config)
    input_ids = torch.tensor([prompt_ids], dtype=torch.long, device=model.device)
    attention = torch.ones_like(input_ids)
    torch.manual_seed(params.seed)
    if torch.cuda.is_available():
        torch.cuda.manual_seed_all(params.seed)

    choices: list[Choice] = []
    start = time.perf_counter()
    for index in range(params.n):
        emit: Callable[[str], None] = functools.partial(on_text, index) if on_text else (lambda piece: None)
        pieces = _Pieces(tokenizer, params.stop, emit)
        halted.clear()
        with torch.inference_mode():
            out = model.model.generate(
                input_ids=input_ids,
                attention_mask=attention,
                generation_config=generation_config,
                streamer=Streamer(pieces),
                stopping_criteria=StoppingCriteriaList([Halt(pieces)]),
            )
        new = out[0, len(prompt_ids) :].tolist()
        text = pieces.finish()
        if halted:
            finish = halted[0]
        elif pieces.stop_hit or any(t in model.eos_ids for t in new):
            finish = "stop"
        else:
            finish = "length"
        while new and new[-1] == pad and pad not in model.eos_ids:
            new.pop()
        choices.append(Choice(index=index, text=text, finish_reason=finish, completion_tokens=len(new)))
        if halted:
            break
    return Completion(
        choices=choices,
        prompt_tokens=len(prompt_ids),
        generate_s=time.perf_counter() - start,
        extra={"device": str(model.device)},
    )
