"""Offline demo assets: tiny model/tokenizer, reward model, synthetic arithmetic data."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from training_platform.demo import prepare_demo  # noqa: E402
from training_platform.demo.arithmetic import DATA_FILES, synth_arithmetic  # noqa: E402
from training_platform.demo.tiny_model import (  # noqa: E402
    CHAT_TEMPLATE,
    QWEN2_PRETOKENIZE_REGEX,
    build_tokenizer,
    render_chatml,
)

pytestmark = pytest.mark.unit

CONV = [{"role": "user", "content": "3+5="}, {"role": "assistant", "content": "8"}]


def _read_jsonl(path: Path) -> list[dict]:
    with path.open(encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return prepare_demo(tmp_path_factory.mktemp("tp_data"))


@pytest.fixture(scope="module")
def tokenizer(demo):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(demo["model"])


# ---------------------------------------------------------------- tokenizer


def test_pretokenize_regex_matches_installed_qwen2():
    from transformers.models.qwen2 import tokenization_qwen2

    assert QWEN2_PRETOKENIZE_REGEX == tokenization_qwen2.PRETOKENIZE_REGEX


def test_tokenizer_loads_with_expected_specials(demo, tokenizer):
    assert type(tokenizer).__name__ == "Qwen2Tokenizer"
    assert tokenizer.eos_token == "<|im_end|>"
    assert tokenizer.pad_token == "<|endoftext|>"
    assert tokenizer.bos_token is None
    assert tokenizer.convert_tokens_to_ids("<|im_start|>") is not None
    assert len(tokenizer) <= 512
    gen = json.loads((demo["model"] / "generation_config.json").read_text())
    assert gen["eos_token_id"] == tokenizer.convert_tokens_to_ids("<|im_end|>")
    assert gen["pad_token_id"] == tokenizer.convert_tokens_to_ids("<|endoftext|>")


def test_auto_tokenizer_encoding_matches_raw_tokenizers(demo, tokenizer):
    from tokenizers import Tokenizer

    raw = Tokenizer.from_file(str(demo["model"] / "tokenizer.json"))
    chat = tokenizer.apply_chat_template(CONV, tokenize=False)
    prompt = tokenizer.apply_chat_template(CONV[:1], tokenize=False, add_generation_prompt=True)
    texts = [
        chat,
        prompt,
        "12+7=19",
        "Hello world, what's the answer? It's 42.",
        "  leading spaces\n\n\ttabs and newlines\r\n",
        "ünïcödé café 😀 日本語",
        "What is 3+5?\n3+5=8\n#### 8",
    ]
    for text in texts:
        ids = tokenizer(text).input_ids
        assert ids == raw.encode(text).ids, text
        assert tokenizer.decode(ids) == text
    # Special tokens are single ids, digits are split one per token.
    ids = tokenizer(chat).input_ids
    assert ids[0] == tokenizer.convert_tokens_to_ids("<|im_start|>")
    assert tokenizer.convert_tokens_to_ids("<|im_end|>") in ids
    assert tokenizer.convert_ids_to_tokens(tokenizer("123").input_ids) == ["1", "2", "3"]


def test_chat_template_renders_chatml(tokenizer):
    assert tokenizer.chat_template == CHAT_TEMPLATE
    full = tokenizer.apply_chat_template(CONV, tokenize=False)
    assert full == "<|im_start|>user\n3+5=<|im_end|>\n<|im_start|>assistant\n8<|im_end|>\n"
    assert full == render_chatml(CONV)
    prompt = tokenizer.apply_chat_template(CONV[:1], tokenize=False, add_generation_prompt=True)
    assert prompt == "<|im_start|>user\n3+5=<|im_end|>\n<|im_start|>assistant\n"
    assert full.startswith(prompt)
    sys_conv = [{"role": "system", "content": "Be brief."}, *CONV]
    assert tokenizer.apply_chat_template(sys_conv, tokenize=False) == render_chatml(sys_conv)


def test_assistant_tokens_mask(tokenizer):
    out = tokenizer.apply_chat_template(CONV, tokenize=True, return_dict=True, return_assistant_tokens_mask=True)
    mask = out["assistant_masks"]
    assert len(mask) == len(out["input_ids"])
    masked = [t for t, m in zip(out["input_ids"], mask, strict=True) if m]
    assert masked, "assistant mask is empty"
    assert tokenizer.decode(masked) == "8<|im_end|>"


def test_trl_template_checks(tokenizer):
    from trl.chat_template_utils import has_generation_markers, is_chat_template_stop_token_trained

    assert has_generation_markers(tokenizer.chat_template)
    assert is_chat_template_stop_token_trained(tokenizer)


def test_tokenizer_training_is_deterministic():
    a = build_tokenizer(["some extra corpus text"])
    b = build_tokenizer(["some extra corpus text"])
    assert a.to_str() == b.to_str()
    assert a.get_vocab_size() == 512


# ---------------------------------------------------------------- models


def test_model_forward_finite(demo, tokenizer):
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(demo["model"])
    assert model.config.model_type == "qwen2"
    assert model.config.vocab_size == len(tokenizer)
    batch = tokenizer(["3+5=", "12+7=19"], return_tensors="pt", padding=True)
    with torch.no_grad():
        logits = model(**batch).logits
    assert logits.shape == (2, batch["input_ids"].shape[1], model.config.vocab_size)
    assert torch.isfinite(logits).all()


def test_reward_model_outputs_one_score(demo):
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(demo["reward_model"])
    model = AutoModelForSequenceClassification.from_pretrained(demo["reward_model"])
    assert model.config.num_labels == 1
    assert model.config.pad_token_id == tok.pad_token_id
    texts = [tok.apply_chat_template(CONV, tokenize=False), "1+1=2", "hello"]
    batch = tok(texts, return_tensors="pt", padding=True)
    with torch.no_grad():
        scores = model(**batch).logits
    assert scores.shape == (3, 1)
    assert torch.isfinite(scores).all()


def test_prepare_demo_skips_existing(demo):
    before = {k: (p / ("split.json" if k == "data" else "config.json")).stat().st_mtime_ns for k, p in demo.items()}
    again = prepare_demo(demo["model"].parent.parent)
    assert again == demo
    after = {k: (p / ("split.json" if k == "data" else "config.json")).stat().st_mtime_ns for k, p in demo.items()}
    assert before == after


def test_prepare_demo_gives_a_kept_model_the_current_chat_template(demo):
    """A demo built before the template learnt tools gets the new template file; weights and vocabulary stay."""
    from transformers import AutoTokenizer

    files = ("model.safetensors", "tokenizer.json")
    before = {(k, f): (demo[k] / f).stat().st_mtime_ns for k in ("model", "reward_model") for f in files}
    for kind in ("model", "reward_model"):
        (demo[kind] / "chat_template.jinja").write_text("{{ messages[0]['content'] }}", encoding="utf-8")
    prepare_demo(demo["model"].parent.parent)
    for kind in ("model", "reward_model"):
        assert (demo[kind] / "chat_template.jinja").read_text(encoding="utf-8") == CHAT_TEMPLATE
        assert AutoTokenizer.from_pretrained(demo[kind]).chat_template == CHAT_TEMPLATE
    assert before == {(k, f): (demo[k] / f).stat().st_mtime_ns for k in ("model", "reward_model") for f in files}


# ---------------------------------------------------------------- data

EXPECTED_KEYS = {
    "sft": {"messages"},
    "sft_eval": {"messages"},
    "sft_alpaca": {"instruction", "input", "output"},
    "sft_prompt_completion": {"prompt", "completion"},
    "preference": {"prompt", "chosen", "rejected"},
    "preference_eval": {"prompt", "chosen", "rejected"},
    "kto": {"prompt", "completion", "label"},
    "kto_eval": {"prompt", "completion", "label"},
    "rl": {"prompt", "answer"},
    "rl_eval": {"prompt", "answer"},
    "gsm8k_eval": {"question", "prompt", "answer"},
}


def _parse_prompt(text: str) -> tuple[int, int]:
    assert text.endswith("=")
    a, b = text[:-1].split("+")
    return int(a), int(b)


def _pairs_of(key: str, row: dict) -> tuple[int, int]:
    if key.startswith("sft_alpaca"):
        a, b = row["input"].split("+")
        return int(a), int(b)
    if key == "gsm8k_eval":
        return _parse_prompt(row["question"].removeprefix("What is ").removesuffix("?") + "=")
    if key.startswith("sft") and "messages" in row:
        return _parse_prompt(row["messages"][0]["content"])
    return _parse_prompt(row["prompt"][0]["content"])


def test_data_files_parse_with_right_keys(demo):
    data = demo["data"]
    assert sorted(p.name for p in data.iterdir()) == sorted(DATA_FILES.values())
    for key, keys in EXPECTED_KEYS.items():
        rows = _read_jsonl(data / DATA_FILES[key])
        assert rows, key
        for row in rows:
            assert set(row) == keys, (key, row)
            a, b = _pairs_of(key, row)
            ans = str(a + b)
            if key.startswith("sft_alpaca"):
                assert row["instruction"] == "Add the two numbers." and row["output"] == ans
            elif key.startswith("sft_prompt"):
                assert row["prompt"] == [{"role": "user", "content": f"{a}+{b}="}]
                assert row["completion"] == [{"role": "assistant", "content": ans}]
            elif key.startswith("sft"):
                assert row["messages"] == [
                    {"role": "user", "content": f"{a}+{b}="},
                    {"role": "assistant", "content": ans},
                ]
            elif key.startswith("preference"):
                assert row["chosen"] == [{"role": "assistant", "content": ans}]
                assert row["rejected"][0]["role"] == "assistant"
                wrong = int(row["rejected"][0]["content"])
                assert wrong >= 0 and wrong != a + b and abs(wrong - (a + b)) <= 3
            elif key.startswith("kto"):
                content = row["completion"][0]["content"]
                assert isinstance(row["label"], bool)
                assert (content == ans) == row["label"]
                assert int(content) >= 0 and abs(int(content) - (a + b)) <= 3
            elif key.startswith("rl"):
                assert row["answer"] == ans
            else:
                assert row["answer"] == f"{a}+{b}={ans}\n#### {ans}"


def test_kto_has_desirable_and_undesirable_per_pair(demo):
    rows = _read_jsonl(demo["data"] / "kto.jsonl")
    by_pair: dict[tuple[int, int], set[bool]] = {}
    for row in rows:
        by_pair.setdefault(_pairs_of("kto", row), set()).add(row["label"])
    assert all(labels == {True, False} for labels in by_pair.values())


def test_eval_pairs_disjoint_from_train(demo):
    data = demo["data"]
    split = json.loads((data / "split.json").read_text())
    train_keys = [k for k in EXPECTED_KEYS if not k.endswith("_eval")]
    eval_keys = [k for k in EXPECTED_KEYS if k.endswith("_eval")]
    train = {frozenset(_pairs_of(k, r)) for k in train_keys for r in _read_jsonl(data / DATA_FILES[k])}
    evals = {frozenset(_pairs_of(k, r)) for k in eval_keys for r in _read_jsonl(data / DATA_FILES[k])}
    assert train and evals
    assert not train & evals
    assert evals == {frozenset(p) for p in split["eval_pair_list"]}
    # Every operand pair is covered by exactly one side.
    n = split["max_operand"]
    assert train | evals == {frozenset((a, b)) for a in range(n + 1) for b in range(n + 1)}
    assert split["train_pairs"] == len(_read_jsonl(data / "sft.jsonl"))
    assert split["eval_pairs"] == len(_read_jsonl(data / "sft_eval.jsonl")) == len(split["eval_pair_list"])


def test_synth_arithmetic_deterministic(tmp_path):
    a = synth_arithmetic(tmp_path / "a", max_operand=9, seed=3)
    b = synth_arithmetic(tmp_path / "b", max_operand=9, seed=3)
    c = synth_arithmetic(tmp_path / "c", max_operand=9, seed=4)
    assert a.keys() == b.keys() == set(DATA_FILES)
    for key in a:
        assert a[key].read_bytes() == b[key].read_bytes(), key
    assert a["sft_eval"].read_bytes() != c["sft_eval"].read_bytes()
    assert not list(tmp_path.glob("*/.*.tmp")), "temp files left behind"


def test_the_ui_default_evaluation_is_the_demo_example():
    """The evaluation form starts from the demo's example evaluation (the demo model's own prompt format)."""
    from training_platform.demo.arithmetic import DEMO_EVAL_BENCHMARK, DEMO_EVAL_GENERATION

    def ts(obj: dict) -> str:
        return "{ " + ", ".join(f"{k}: {v!r}" for k, v in obj.items()) + " }"

    text = (Path(__file__).resolve().parents[2] / "frontend/src/evalDefaults.ts").read_text()
    assert f"benchmarks: [{ts(DEMO_EVAL_BENCHMARK)}]" in text
    assert f"generation: {ts(DEMO_EVAL_GENERATION)}" in text
