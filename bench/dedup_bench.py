"""Near-duplicate dedup: training_platform's MinHash LSH (`tp data dedup`) vs datatrove's MinHash pipeline, on the same
generated corpus with the same parameters.

The corpus (the tests' `tests/data/synthetic_corpus.py`) has N rows of random made-up words with planted
duplicates at known word-5-gram Jaccard similarities (0.8, 0.85, 0.9, 0.95, exact copies, case/punctuation variants)
and hard negatives (0.3, 0.45, 0.6); the ground truth is measured exactly on the shingle sets. Each engine runs in
its own fresh process on the same JSONL file and writes a deduplicated JSONL; we record its wall time (input read to
output written, imports excluded), rows/s, peak RSS (VmHWM of that process, imports included) and pairwise
precision/recall of its
duplicate clusters against the truth (plus recall per planted similarity bucket).

Same parameters: word 5-grams, and the same LSH banding (bands x rows, from `--threshold`/`--num-perm` as
`tp data dedup` picks it) for datatrove's `MinhashConfig(num_buckets=bands, hashes_per_bucket=rows)`. datatrove is
also run with its own defaults (14 x 8) as a second anchor row. datatrove gets a whitespace word tokenizer (its
English one needs nltk; the corpus has no punctuation, so both engines see the same words), runs 1 task / 1 worker
(like ours: one process), and keeps all its stages (signatures, buckets, clusters, filter). Its JSONL reader needs
`orjson`, and with xxhash >= 4 its str hashing needs the one-line shim `_patch_datatrove_xxhash` (bench-only
installs: `pip install datatrove orjson`).

    .venv/bin/python bench/dedup_bench.py                      # 100k rows
    .venv/bin/python bench/dedup_bench.py --rows 20000 --anchor-configs same
    .venv/bin/python bench/dedup_bench.py --smoke      # 400 rows; datatrove (`same` only) when it is installed
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import SMOKE_HELP, smoke_report  # noqa: E402 - the bench dir is not a package

# ---------------------------------------------------------------------------------------------- children


def _corpus():
    """The planted-duplicates corpus generator the dedup tests use (a test fixture, not part of the product)."""
    import importlib
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "data"))
    return importlib.import_module("synthetic_corpus")


def child_ours(args: argparse.Namespace) -> dict[str, Any]:
    from training_platform.data.dedup import DedupConfig, dedup_file

    config = DedupConfig(threshold=args.threshold, num_perm=args.num_perm, ngram=args.ngram)
    start = time.perf_counter()
    report = dedup_file(args.input, Path(args.workdir) / "ours_out.jsonl", config, fmt="text")
    seconds = time.perf_counter() - start
    return {
        "seconds": seconds,
        "clusters": report["clusters"],
        "output_rows": report["output_rows"],
        "timings_s": report["timings_s"],
        "params": report["params"],
    }


def _patch_datatrove_xxhash() -> None:
    """datatrove 0.10 passes str to xxhash, which xxhash >= 4 refuses ("Strings must be encoded before hashing").
    Encode first: the same hash values as xxhash 3 gave for str, at the cost of one str.encode per shingle."""
    import xxhash
    from datatrove.utils.hashes import xxhash as dt_xxhash

    try:
        xxhash.xxh64_intdigest("probe")
        return
    except TypeError:
        pass
    dt_xxhash.xxhash32 = lambda data: xxhash.xxh32_intdigest(data.encode() if isinstance(data, str) else data)
    dt_xxhash.xxhash64 = lambda data: xxhash.xxh64_intdigest(data.encode() if isinstance(data, str) else data)


def child_datatrove(args: argparse.Namespace) -> dict[str, Any]:
    import logging

    _patch_datatrove_xxhash()
    from datatrove.executor.local import LocalPipelineExecutor
    from datatrove.pipeline.dedup.minhash import (
        MinhashConfig,
        MinhashDedupBuckets,
        MinhashDedupCluster,
        MinhashDedupFilter,
        MinhashDedupSignature,
    )
    from datatrove.pipeline.readers import JsonlReader
    from datatrove.pipeline.writers import JsonlWriter
    from datatrove.utils.word_tokenizers import WordTokenizer
    from loguru import logger

    logger.remove()
    logging.disable(logging.WARNING)

    class WhitespaceTokenizer(WordTokenizer):
        def word_tokenize(self, text: str) -> list[str]:
            return text.split()

        def sent_tokenize(self, text: str) -> list[str]:
            return [text]

        def span_tokenize(self, text: str) -> list[tuple[int, int]]:
            return [(0, len(text))]

    work = Path(args.workdir) / f"datatrove_{args.bands}x{args.rows}"
    shutil.rmtree(work, ignore_errors=True)
    config = MinhashConfig(n_grams=args.ngram, num_buckets=args.bands, hashes_per_bucket=args.rows, seed=1)
    source = str(Path(args.input).parent)
    pattern = Path(args.input).name

    def reader():
        return JsonlReader(source, glob_pattern=pattern, id_key="id", text_key="text")

    start = time.perf_counter()
    stages = [
        LocalPipelineExecutor(
            pipeline=[
                reader(),
                MinhashDedupSignature(output_folder=str(work / "sigs"), config=config, language=WhitespaceTokenizer()),
            ],
            tasks=1,
            workers=1,
            logging_dir=str(work / "logs1"),
        ),
        LocalPipelineExecutor(
            pipeline=[
                MinhashDedupBuckets(input_folder=str(work / "sigs"), output_folder=str(work / "buckets"), config=config)
            ],
            tasks=config.num_buckets,
            workers=1,
            logging_dir=str(work / "logs2"),
        ),
        LocalPipelineExecutor(
            pipeline=[
                MinhashDedupCluster(
                    input_folder=str(work / "buckets"),
                    output_folder=str(work / "remove"),
                    config=config,
                    save_cluster_id=True,
                )
            ],
            tasks=1,
            workers=1,
            logging_dir=str(work / "logs3"),
        ),
        LocalPipelineExecutor(
            pipeline=[
                reader(),
                MinhashDedupFilter(
                    input_folder=str(work / "remove"),
                    load_cluster_ids=True,
                    exclusion_writer=JsonlWriter(str(work / "removed"), compression=None),
                ),
                JsonlWriter(str(work / "kept"), compression=None),
            ],
            tasks=1,
            workers=1,
            logging_dir=str(work / "logs4"),
        ),
    ]
    timings = {}
    for i, stage in enumerate(stages, start=1):
        t = time.perf_counter()
        stage.run()
        timings[f"stage{i}"] = round(time.perf_counter() - t, 3)
    seconds = time.perf_counter() - start

    members: dict[int, list[int]] = {}
    kept = 0
    for folder in ("kept", "removed"):
        for path in sorted((work / folder).glob("*.jsonl")):
            with path.open(encoding="utf-8") as f:
                for line in f:
                    doc = json.loads(line)
                    kept += folder == "kept"
                    metadata = doc.get("metadata", {})
                    cluster = metadata.get("minhash_cluster_id", -1)
                    if cluster != -1:
                        members.setdefault(int(cluster), []).append(int(metadata["row"]))
    clusters = sorted(sorted(m) for m in members.values() if len(m) >= 2)
    return {
        "seconds": seconds,
        "clusters": clusters,
        "output_rows": kept,
        "timings_s": timings,
        "params": {"ngram": args.ngram, "bands": args.bands, "rows": args.rows},
    }


# ---------------------------------------------------------------------------------------------- parent


def _peak_rss_mib() -> float:
    """This process's peak RSS (VmHWM of its own address space). Not getrusage/wait4: Linux carries ru_maxrss
    over exec, so a child would report the parent's size at fork time if that was larger."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def run_child(engine: str, args: argparse.Namespace, **extra: Any) -> dict[str, Any]:
    """Run one engine in a fresh process (it reports its own peak RSS)."""
    out = Path(args.workdir) / f"result_{engine}_{extra.get('bands', '')}x{extra.get('rows', '')}.json"
    cmd = [
        sys.executable,
        __file__,
        "--child",
        engine,
        "--input",
        str(args.input),
        "--workdir",
        str(args.workdir),
        "--threshold",
        str(args.threshold),
        "--num-perm",
        str(args.num_perm),
        "--ngram",
        str(args.ngram),
        "--child-output",
        str(out),
    ]
    for key, value in extra.items():
        cmd += [f"--{key}", str(value)]
    env = {**os.environ, "TOKENIZERS_PARALLELISM": "false", "PYTHONUNBUFFERED": "1"}
    start = time.perf_counter()
    proc = subprocess.run(cmd, env=env, cwd=REPO, check=False)
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"{engine} failed with exit code {proc.returncode}")
    result = json.loads(out.read_text())
    result["process_wall_s"] = wall
    return result


def evaluate(result: dict[str, Any], corpus, n_rows: int) -> dict[str, Any]:
    pairwise_scores, planted_pair_recall = _corpus().pairwise_scores, _corpus().planted_pair_recall

    scores = pairwise_scores(result["clusters"], corpus)
    buckets = planted_pair_recall(result["clusters"], corpus)
    return {
        "rows_per_s": n_rows / result["seconds"],
        "seconds": result["seconds"],
        "process_wall_s": result["process_wall_s"],
        "peak_rss_mib": result["peak_rss_mib"],
        "precision": scores["precision"],
        "recall": scores["recall"],
        "predicted_pairs": scores["predicted_pairs"],
        "true_pairs": scores["true_pairs"],
        "clusters": len(result["clusters"]),
        "output_rows": result["output_rows"],
        "recall_by_bucket": {k: v["rate"] for k, v in buckets.items()},
        "timings_s": result["timings_s"],
        "params": result["params"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threshold", type=float, default=0.8)
    parser.add_argument("--num-perm", type=int, default=128)
    parser.add_argument("--ngram", type=int, default=5)
    parser.add_argument(
        "--anchor-configs",
        default="same,default",
        help="datatrove runs: same (our bands x rows), default (14 x 8); comma-separated, or none",
    )
    parser.add_argument("--workdir", type=Path, default=None, help="Scratch dir (default: a temp dir, removed).")
    parser.add_argument("--json", type=Path, default=None, help="Also write the results here.")
    parser.add_argument(
        "--smoke",
        action="store_true",
        help=SMOKE_HELP + ": 400 rows; the datatrove anchor (`same`) only when datatrove is importable",
    )
    # child mode
    parser.add_argument("--child", choices=["ours", "datatrove"], default=None, help=argparse.SUPPRESS)
    parser.add_argument("--input", type=Path, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--child-output", type=Path, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--bands", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--rows-per-band", dest="rows_per_band", type=int, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    keep_workdir = args.workdir is not None

    if args.smoke and not args.child:
        args.rows = 400
        anchor_ok = all(importlib.util.find_spec(m) is not None for m in ("datatrove", "orjson"))
        args.anchor_configs = "same" if anchor_ok else "none"
        args.json = smoke_report("dedup_bench", args.json)
        if not anchor_ok:
            print("smoke: datatrove (or orjson) not importable: our side only (pip install -e '.[bench]')")

    if args.child:
        if args.child == "datatrove":
            args.rows = args.rows_per_band
            result = child_datatrove(args)
        else:
            result = child_ours(args)
        result["peak_rss_mib"] = _peak_rss_mib()
        args.child_output.write_text(json.dumps(result))
        return

    sys.path.insert(0, str(REPO))
    from training_platform.data.dedup import DedupConfig

    planted_corpus = _corpus().planted_corpus

    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="dedup_bench_"))
    workdir.mkdir(parents=True, exist_ok=True)
    args.workdir = workdir
    try:
        t = time.perf_counter()
        corpus = planted_corpus(args.rows, seed=args.seed, ngram=args.ngram)
        args.input = workdir / "corpus.jsonl"
        with args.input.open("w", encoding="utf-8") as f:
            for i, text in enumerate(corpus.texts):
                f.write(json.dumps({"id": i, "row": i, "text": text}) + "\n")  # datatrove keeps "row" in metadata
        size_mib = args.input.stat().st_size / 2**20
        print(
            f"corpus: {args.rows} rows, {size_mib:.1f} MiB, {len(corpus.groups)} true duplicate groups, "
            f"{sum(len(g) * (len(g) - 1) // 2 for g in corpus.groups)} true pairs "
            f"(generated in {time.perf_counter() - t:.1f}s)",
            flush=True,
        )

        params = DedupConfig(threshold=args.threshold, num_perm=args.num_perm, ngram=args.ngram).resolved()
        bands, rows = params["bands"], params["rows"]
        results: dict[str, dict[str, Any]] = {}
        print("running training_platform ...", flush=True)
        results["training_platform"] = evaluate(run_child("ours", args), corpus, args.rows)
        anchors = [a for a in args.anchor_configs.split(",") if a and a != "none"]
        for anchor in anchors:
            b, r = (bands, rows) if anchor == "same" else (14, 8)
            print(f"running datatrove {b}x{r} ...", flush=True)
            results[f"datatrove_{b}x{r}"] = evaluate(
                run_child("datatrove", args, bands=b, **{"rows-per-band": r}), corpus, args.rows
            )

        print()
        header = (
            f"{'engine':22s} {'rows/s':>9s} {'seconds':>8s} {'peak MiB':>9s} {'precision':>9s} {'recall':>7s} "
            f"{'R@0.80':>7s} {'FP@0.60':>7s}"
        )
        print(header)
        print("-" * len(header))
        for name, r in results.items():
            print(
                f"{name:22s} {r['rows_per_s']:9.0f} {r['seconds']:8.1f} {r['peak_rss_mib']:9.0f} "
                f"{r['precision']:9.4f} {r['recall']:7.4f} {r['recall_by_bucket'].get('near@0.8', 0):7.4f} "
                f"{r['recall_by_bucket'].get('negative@0.6', 0):7.4f}"
            )
        ours = results["training_platform"]
        for name, r in results.items():
            if name != "training_platform":
                print(f"speed ratio training_platform / {name}: {ours['rows_per_s'] / r['rows_per_s']:.2f}x")
        summary = {
            "rows": args.rows,
            "seed": args.seed,
            "threshold": args.threshold,
            "num_perm": args.num_perm,
            "ngram": args.ngram,
            "bands": bands,
            "rows_per_band": rows,
            "corpus_mib": size_mib,
            "true_groups": len(corpus.groups),
            "cpu_count": os.cpu_count(),
            "anchors": anchors,
            "results": results,
        }
        if args.json:
            args.json.parent.mkdir(parents=True, exist_ok=True)
            args.json.write_text(json.dumps(summary, indent=2) + "\n")
            print(f"results: {args.json}")
    finally:
        if not keep_workdir:
            shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
