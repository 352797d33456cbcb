"""Exact and near-duplicate detection: datasketch-compatible signatures, planted duplicates at known Jaccard
similarities (recall >= 0.95 at J >= 0.8, precision >= 0.95), clusters, keep policies, bounded memory."""

from __future__ import annotations

import json
import tracemalloc

import numpy as np
import pytest
from data_helpers import read_jsonl, write_jsonl
from synthetic_corpus import pairwise_scores, planted_corpus, planted_pair_recall

from training_platform.data.dedup import (
    DedupConfig,
    MinHasher,
    collision_probability,
    dedup_file,
    find_duplicates,
    jaccard,
    lsh_params,
)

pytestmark = pytest.mark.unit


@pytest.fixture(scope="module")
def corpus():
    return planted_corpus(3000, seed=7)


def test_signatures_equal_datasketch_minhash():
    from datasketch import MinHash

    hasher = MinHasher(num_perm=64, ngram=3, seed=5)
    texts = ["The quick brown fox jumps over the lazy dog, twice!", "two words", "", "a b c", "Ünïcode wörds here ok"]
    signatures, counts = hasher.signatures(texts)
    assert counts.tolist() == [8, 1, 0, 1, 2]
    for text, signature in zip(texts, signatures, strict=True):
        reference = MinHash(num_perm=64, seed=5, hashfunc=int)
        reference.update_batch(hasher.shingle_hashes(text).tolist())
        assert np.array_equal(reference.hashvalues, signature)
        assert reference.scheme == "affine32"
    assert np.array_equal(MinHash(num_perm=64, seed=5).permutations, np.array([hasher.a, hasher.b]))
    from training_platform.data.dedup import to_datasketch

    lean = to_datasketch(signatures[0], seed=5)
    other = MinHash(num_perm=64, seed=5, hashfunc=int)
    other.update_batch(hasher.shingle_hashes(texts[0]).tolist())
    assert lean.jaccard(other) == 1.0


def test_shingles_ignore_case_and_punctuation():
    hasher = MinHasher(num_perm=16, ngram=2)
    assert set(hasher.shingle_hashes("Hello, World! Again").tolist()) == set(
        hasher.shingle_hashes("hello world again").tolist()
    )
    assert hasher.signature("a b c d").tolist() == hasher.signature("A  B, C. D").tolist()


def test_lsh_params_from_threshold():
    bands, rows = lsh_params(0.8, 128)
    assert (bands, rows) == (25, 5)
    assert collision_probability(0.8, bands, rows) >= 0.999
    assert lsh_params(0.5, 64)[0] * lsh_params(0.5, 64)[1] <= 64
    params = DedupConfig(threshold=0.8, num_perm=128).resolved()
    assert params["verify_threshold"] == pytest.approx(0.8 - 3 * (0.8 * 0.2 / 128) ** 0.5, abs=1e-4)
    assert DedupConfig(bands=16, rows=8).resolved()["bands"] == 16
    for bad in (
        DedupConfig(bands=20, rows=8),
        DedupConfig(bands=4),
        DedupConfig(threshold=0),
        DedupConfig(keep="last"),
    ):
        with pytest.raises(ValueError):
            bad.resolved()


def test_planted_similarities_are_what_they_claim(corpus):
    near = [p for p in corpus.pairs if p["kind"] == "near"]
    for target in (0.8, 0.85, 0.9, 0.95):
        measured = [p["jaccard"] for p in near if p["target"] == target]
        assert measured and min(measured) >= target and max(measured) < target + 0.05
    negatives = [p for p in corpus.pairs if p["kind"] == "negative"]
    assert negatives and max(p["jaccard"] for p in negatives) <= 0.6


def test_planted_duplicates_recall_and_precision(corpus):
    result = find_duplicates(corpus.texts, DedupConfig(threshold=0.8, num_perm=128, ngram=5))
    scores = pairwise_scores(result.clusters, corpus)
    assert scores["recall"] >= 0.95, scores
    assert scores["precision"] >= 0.95, scores
    by_bucket = planted_pair_recall(result.clusters, corpus)
    for bucket in ("near@0.8", "near@0.85", "near@0.9", "near@0.95", "exact", "surface"):
        assert by_bucket[bucket]["rate"] >= 0.95, (bucket, by_bucket)
    for bucket in ("negative@0.3", "negative@0.45", "negative@0.6"):
        assert by_bucket[bucket]["rate"] <= 0.05, (bucket, by_bucket)
    exact_pairs = sum(1 for p in corpus.pairs if p["kind"] == "exact")
    assert result.exact_duplicates >= exact_pairs


def test_strict_margin_trades_recall_at_the_threshold(corpus):
    strict = find_duplicates(corpus.texts, DedupConfig(margin=0.0))
    default = find_duplicates(corpus.texts, DedupConfig())
    rate = lambda r: planted_pair_recall(r.clusters, corpus)["near@0.8"]["rate"]  # noqa: E731
    assert rate(strict) < rate(default)


def test_exact_duplicates_and_clusters():
    texts = [
        "Hello   world, this is a test of exact dedup",  # 0
        "completely different content about something else entirely",  # 1
        "hello world, THIS is a test of exact dedup",  # 2: exact after normalisation
        "hello world this is a test of exact dedup",  # 3: only punctuation differs -> near (J = 1)
        "completely different content about something else entirely",
    ]  # 4: exact copy of 1
    result = find_duplicates(texts, DedupConfig(ngram=3))
    assert result.clusters == [[0, 2, 3], [1, 4]]
    assert result.representatives == [0, 1]
    assert result.kinds == ["mixed", "exact"]
    assert (result.exact_duplicates, result.near_duplicates) == (2, 1)
    assert result.keep.tolist() == [True, True, False, False, False]
    near_only = find_duplicates(texts, DedupConfig(ngram=3, exact=False))
    assert near_only.clusters == [[0, 2, 3], [1, 4]]
    assert near_only.exact_duplicates == 0
    exact_only = find_duplicates(texts, DedupConfig(near=False))
    assert exact_only.clusters == [[0, 2], [1, 4]]


def test_empty_and_short_texts():
    result = find_duplicates(["", "  ", "!!", "ok", "ok", "fine"], DedupConfig())
    assert result.clusters == [[0, 1], [3, 4]]  # empty texts are exact duplicates of each other
    assert find_duplicates([], DedupConfig()).report()["input_rows"] == 0


def test_keep_best_quality():
    good = "The capital of France is Paris. It lies on the Seine and has about two million inhabitants today."
    worse = good.replace(" ", " #### ")  # same shingles (punctuation is ignored), mostly symbols
    from training_platform.data.score import heuristic_quality

    assert heuristic_quality(worse) < heuristic_quality(good)
    texts = [worse, "unrelated text about cooking pasta with tomatoes and basil for dinner tonight", good]
    first = find_duplicates(texts, DedupConfig(ngram=3, threshold=0.7))
    best = find_duplicates(texts, DedupConfig(ngram=3, threshold=0.7, keep="best"))
    assert first.clusters == best.clusters == [[0, 2]]
    assert first.representatives == [0] and best.representatives == [2]
    assert best.keep.tolist() == [False, True, True]


def test_dedup_file_report_and_output(tmp_path):
    rows = [
        {
            "messages": [
                {"role": "user", "content": f"Question {i}: what is the capital of country {i}?"},
                {"role": "assistant", "content": f"The capital of country {i} is city {i}."},
            ]
        }
        for i in range(6)
    ]
    rows.insert(3, rows[1])  # exact duplicate at index 3
    src = tmp_path / "in.jsonl"
    src.write_text("\n".join(json.dumps(r) for r in rows) + "\n\n")
    report = dedup_file(src, tmp_path / "out.jsonl", DedupConfig(), report_path=tmp_path / "r.json")
    on_disk = json.loads((tmp_path / "r.json").read_text())
    assert on_disk["clusters"] == report["clusters"] == [[1, 3]]
    assert (on_disk["input_rows"], on_disk["output_rows"], on_disk["exact_duplicates"], on_disk["near_duplicates"]) == (
        7,
        6,
        1,
        0,
    )
    assert on_disk["cluster_details"] == [{"size": 2, "representative": 1, "members": [1, 3], "kind": "exact"}]
    assert on_disk["format"] == "messages"
    assert read_jsonl(tmp_path / "out.jsonl") == [r for i, r in enumerate(rows) if i != 3]
    # JSONL -> JSONL keeps the kept lines byte for byte
    assert (tmp_path / "out.jsonl").read_text().splitlines() == [json.dumps(r) for i, r in enumerate(rows) if i != 3]


def test_dedup_on_selected_fields(tmp_path):
    rows = [
        {"prompt": "Same prompt here for both rows please", "completion": "answer one is long and detailed"},
        {"prompt": "Same prompt here for both rows please", "completion": "a totally different second reply"},
    ]
    src = write_jsonl(tmp_path / "pc.jsonl", rows)
    assert dedup_file(src, tmp_path / "o.jsonl")["clusters"] == []
    assert dedup_file(src, tmp_path / "o.jsonl", fields=["prompt"])["clusters"] == [[0, 1]]


def test_dedup_to_parquet(tmp_path):
    src = write_jsonl(tmp_path / "t.jsonl", [{"text": "a b c d e f g"}, {"text": "a b c d e f g"}, {"text": "x"}])
    report = dedup_file(src, tmp_path / "t.parquet")
    from data_helpers import read_parquet

    assert read_parquet(tmp_path / "t.parquet") == [{"text": "a b c d e f g"}, {"text": "x"}]
    assert report["output_rows"] == 2


def test_memory_stays_bounded_while_streaming():
    """find_duplicates consumes its input batch by batch and keeps only hashes (signatures spill to disk): its own
    peak allocations stay a small fraction of the text it was given."""
    rng = np.random.default_rng(0)
    vocab = [f"word{i}" for i in range(50_000)]
    texts = [" ".join(vocab[j] for j in rng.integers(0, len(vocab), 300)) for _ in range(3000)]
    find_duplicates(texts[:10])  # imports and one-time setup outside the measurement

    def peak_for(n: int) -> int:
        tracemalloc.start()
        result = find_duplicates(iter(texts[:n]), DedupConfig(batch_size=64))
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        assert result.n_rows == n and result.clusters == []
        return peak

    small, large = peak_for(750), peak_for(3000)
    total = sum(len(t) for t in texts)
    assert large < 1.3 * small, (small, large)  # 4x the rows, about the same peak
    assert large < total / 3, f"peak {large / 2**20:.1f} MiB for {total / 2**20:.1f} MiB of text"


def test_jaccard_helper():
    assert jaccard([1, 2, 3], [2, 3, 4]) == 0.5
    assert jaccard([], []) == 1.0
