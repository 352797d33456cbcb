"""The inference workers' model cache (least recently used evicted; a re-written directory is loaded again) and the
streaming generation on a real tiny model."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from training_platform.inference.serving import GenerateParams, ModelCache, generate, model_signature


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> dict[str, Path]:
    from training_platform.demo import create_tiny_model

    root = tmp_path_factory.mktemp("inference_models")
    create_tiny_model(root / "a")
    for name in ("b", "c"):
        shutil.copytree(root / "a", root / name)
    return {name: root / name for name in ("a", "b", "c")}


def test_lru_eviction_and_reload_on_rewrite(models):
    cache = ModelCache(size=2)
    a, hit = cache.get(models["a"])
    assert not hit and cache.loads == 1
    assert cache.get(models["a"]) == (a, True)
    cache.get(models["b"])
    assert cache.get(str(models["a"]) + "/.")[1] is True  # the same directory, however named
    cache.get(models["c"])  # full: evicts b, the least recently used
    assert cache.paths() == [str(models["a"]), str(models["c"])] and cache.loads == 3
    assert a.model is not None
    assert cache.get(models["b"])[1] is False  # loaded again, evicting a
    assert a.model is None  # freed
    assert cache.paths() == [str(models["c"]), str(models["b"])] and cache.loads == 4

    # a re-written directory (here: its config's mtime) is loaded again, in place of the stale entry
    before = model_signature(models["c"])
    config = models["c"] / "config.json"
    stat = config.stat()
    os.utime(config, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))
    assert model_signature(models["c"]) != before
    fresh, hit = cache.get(models["c"])
    assert not hit and cache.loads == 5 and len(cache) == 2
    assert cache.get(models["c"]) == (fresh, True)
    cache.clear()
    assert len(cache) == 0


def test_cache_size_must_be_positive():
    with pytest.raises(ValueError):
        ModelCache(size=0)


def test_streamed_pieces_make_the_text(models):
    model, _ = ModelCache(size=1).get(models["a"])
    messages = [{"role": "user", "content": "What is 2+3?"}]
    pieces: list[tuple[int, str]] = []
    params = GenerateParams(max_new_tokens=20, temperature=1.0, top_p=0.9, seed=5)
    result = generate(model, messages, params, on_text=lambda i, p: pieces.append((i, p)))
    [choice] = result.choices
    assert "".join(p for _, p in pieces) == choice.text and len(pieces) > 1
    assert choice.completion_tokens <= 20 and result.prompt_tokens > 0
    assert generate(model, messages, params).choices[0].text == choice.text  # seeded
    # a stop string: the text ends before it, no streamed piece holds any part of it
    stop = choice.text[4:6]
    pieces.clear()
    cut = generate(
        model,
        messages,
        GenerateParams(**{**params.__dict__, "stop": (stop,)}),
        on_text=lambda i, p: pieces.append((i, p)),
    ).choices[0]
    assert cut.text == choice.text[: choice.text.find(stop)] and cut.finish_reason == "stop"
    assert "".join(p for _, p in pieces) == cut.text
    # cancelled between tokens
    halted = generate(model, messages, params, should_stop=lambda: True).choices[0]
    assert halted.finish_reason == "cancelled" and halted.completion_tokens <= 1
