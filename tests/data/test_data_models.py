"""Data factory features that load the demo model or its tokenizer (built once per session by prepare_demo):
chat-template preview, token-length filter and stats, perplexity scoring."""

from __future__ import annotations

import pytest
from data_helpers import USER, read_jsonl, write_jsonl

from training_platform.data.convert import load_tokenizer, preview_chat_template, render_row
from training_platform.data.operators import OPERATORS, OpContext
from training_platform.data.report import audit_file
from training_platform.data.score import SCORES_KEY, score_file, score_then_filter

REPLY = {"role": "assistant", "content": "4"}

pytestmark = pytest.mark.integration


def removed(name: str, row, fmt="text", **params) -> str | None:
    spec = OPERATORS[name]
    _, reason = spec(spec.Params.model_validate(params), OpContext(fmt=fmt)).process(row)
    return reason


def test_chat_template_preview_with_the_demo_tokenizer(demo, tmp_path):
    src = write_jsonl(tmp_path / "chat.jsonl", [{"messages": [USER, REPLY]}, {"prompt": "x", "completion": "y"}])
    preview = preview_chat_template(src, demo["model"], n=2)
    assert len(preview) == 1  # the second row is another format: not valid as messages, skipped
    assert preview[0]["text"] == ("<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n4<|im_end|>\n")
    assert preview[0]["tokens"] > 5
    tok = load_tokenizer(demo["model"])
    assert render_row({"prompt": "2+2=", "chosen": "4", "rejected": "5"}, "preference", tok) == "2+2=4"
    assert render_row({"prompt": [USER], "answer": "4"}, "rl_prompt", tok).endswith("<|im_start|>assistant\n")


def test_length_filter_tokens_with_the_demo_tokenizer(demo):
    n = len(load_tokenizer(demo["model"])("What is 2+2?", add_special_tokens=False)["input_ids"])
    assert (
        removed("length_filter", {"text": "What is 2+2?"}, unit="tokens", tokenizer=str(demo["model"]), max=n - 1)
        == f"tokens={n} > max {n - 1}"
    )
    assert (
        removed("length_filter", {"text": "What is 2+2?"}, unit="tokens", tokenizer=str(demo["model"]), min=n, max=n)
        is None
    )


def test_token_lengths_with_the_demo_tokenizer(demo):
    report = audit_file(demo["data"] / "sft.jsonl", tokenizer=demo["model"], dedup=False)
    tokens = report["stats"]["tokens"]
    assert tokens["count"] == report["rows"]
    assert tokens["min"] > 5  # the chat template's markers are counted
    assert report["stats"]["tokenizer"] == str(demo["model"])


def test_convert_with_chat_template_preview(cli, demo, tmp_path):
    result = cli(
        "convert",
        demo["data"] / "sft_alpaca.jsonl",
        "--to",
        "messages",
        "--output",
        tmp_path / "m.jsonl",
        "--preview-tokenizer",
        demo["model"],
        "--preview",
        "2",
    )
    assert result.exit_code == 0, result
    assert result.stdout.count("--- row ") == 2
    assert "<|im_start|>assistant\n" in result.stdout


def test_perplexity_with_the_demo_model(demo, tmp_path):
    rows = read_jsonl(demo["data"] / "sft.jsonl")[:7]
    src = write_jsonl(tmp_path / "in.jsonl", rows)
    scored = score_file(src, tmp_path / "scored.jsonl", perplexity_model=demo["model"], heuristics=False, batch_size=3)
    assert scored["perplexity"]["model"] == str(demo["model"])
    ppl = [r[SCORES_KEY]["perplexity"] for r in read_jsonl(tmp_path / "scored.jsonl")]
    assert len(ppl) == 7 and all(p > 1 for p in ppl)  # an untrained model: ~ vocabulary-sized perplexities
    # batching and padding do not change a row's score
    alone = score_file(
        write_jsonl(tmp_path / "one.jsonl", rows[:1]),
        tmp_path / "one_scored.jsonl",
        perplexity_model=demo["model"],
        heuristics=False,
    )
    assert alone["scores"]["perplexity"]["mean"] == pytest.approx(ppl[0], rel=1e-3)
    report = score_then_filter(
        src,
        tmp_path / "best.jsonl",
        by="perplexity",
        top_k=5,
        lowest=True,
        perplexity_model=demo["model"],
        heuristics=False,
    )
    assert report["filter"]["output_rows"] == 5
    kept = sorted(r[SCORES_KEY]["perplexity"] for r in read_jsonl(tmp_path / "best.jsonl"))
    assert kept == sorted(ppl)[:5]
    assert not [p.name for p in tmp_path.iterdir() if ".scored." in p.name]  # the temp file is gone
