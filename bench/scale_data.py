"""The data factory on one process vs a local 2-node Ray cluster: rows/s of `clean` and `dedup`, the same answer, and
the peak memory of each Ray worker.

A JSONL corpus of N rows (the tests' planted-duplicates generator: random made-up words, ~25% planted near and exact
duplicates) goes through a cleaning recipe (unicode fix, whitespace, e-mail redaction, length and repetition
filters) and through dedup (MinHash LSH, 64 permutations), once with `executor: local` (this process, one core) and
once with `executor: ray` on a `ray.cluster_utils.Cluster` of two nodes with one CPU each (the tests' cluster). Each
side is timed from the call to the output written; the Ray side includes planning the row ranges, the driver's
merge and write, and Ray Data's task start-up, but not starting the cluster. Peak memory: the RSS of every Ray
worker process (`ray::` processes) sampled every 0.2 s, the largest seen per process; and this process's own peak.
The outputs' sha256 must be equal (the bench fails otherwise).

    .venv/bin/python bench/scale_data.py                   # 200k rows -> bench/results/scale_data.json
    .venv/bin/python bench/scale_data.py --rows 1000000 --steps clean --output bench/results/scale_data_1m_clean.json
    .venv/bin/python bench/scale_data.py --smoke           # 2,000 rows

The honest caveat (bench/README.md): this machine has 2 cores, so the "2-node cluster" is two processes sharing them
with the driver; the ratio says what the distribution costs and keeps, not what more machines buy.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "data"))

from _common import RESULTS_DIR, SMOKE_HELP, machine_info, print_table, smoke_report, write_json  # noqa: E402

RECIPE = {
    "operators": [
        {"op": "fix_unicode"},
        {"op": "normalize_whitespace"},
        {"op": "redact_pii", "kinds": ["email"]},
        {"op": "length_filter", "unit": "words", "min": 4, "max": 400},
        {"op": "repetition_filter"},
    ]
}


def write_corpus(path: Path, rows: int) -> None:
    from synthetic_corpus import planted_corpus

    corpus = planted_corpus(rows, seed=7, min_words=20, max_words=60)
    with path.open("w") as f:
        for i, text in enumerate(corpus.texts):
            f.write(json.dumps({"text": text if i % 97 else f"mail me at u{i}@example.com {text}", "id": i}) + "\n")


class RaySampler(threading.Thread):
    """Peak RSS per Ray worker process (`ray::...` command lines), sampled while a step runs."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.peaks: dict[int, int] = {}
        self._done = threading.Event()

    def run(self) -> None:
        import psutil

        while not self._done.wait(0.2):
            for proc in psutil.process_iter(["pid", "cmdline", "memory_info"]):
                cmd = " ".join(proc.info["cmdline"] or [])
                if cmd.startswith("ray::") and proc.info["memory_info"] is not None:
                    rss = proc.info["memory_info"].rss
                    self.peaks[proc.info["pid"]] = max(self.peaks.get(proc.info["pid"], 0), rss)

    def stop(self) -> dict[str, Any]:
        self._done.set()
        self.join(timeout=2)
        values = sorted(self.peaks.values())
        return {
            "processes": len(values),
            "max_mb": round(values[-1] / 2**20, 1) if values else None,
            "median_mb": round(values[len(values) // 2] / 2**20, 1) if values else None,
        }


def run_step(step: str, source: Path, out: Path, executor) -> tuple[float, dict[str, Any]]:
    from training_platform.data.clean import clean_file
    from training_platform.data.dedup import DedupConfig, dedup_file

    start = time.perf_counter()
    if step == "clean":
        report = clean_file(source, out, RECIPE, executor=executor)
    else:
        report = dedup_file(source, out, DedupConfig(num_perm=64), executor=executor)
    return time.perf_counter() - start, report


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--block-rows", type=int, default=5_000)
    parser.add_argument("--output", type=Path, default=None)
    parser.add_argument("--steps", default="clean,dedup", help="Which operations to run, comma-separated.")
    parser.add_argument("--smoke", action="store_true", help=SMOKE_HELP)
    args = parser.parse_args()
    if not args.steps or set(args.steps.split(",")) - {"clean", "dedup"}:
        parser.error(f"--steps: clean and/or dedup, comma-separated; got {args.steps!r}")
    if args.smoke:
        args.rows, args.block_rows = 2_000, 500
    report_path = (
        smoke_report("scale_data", args.output) if args.smoke else (args.output or RESULTS_DIR / "scale_data.json")
    )
    os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"  # before Ray is imported: the cluster stays on loopback
    import tempfile

    from ray.cluster_utils import Cluster

    from training_platform.data.executors import get_executor

    work = Path(tempfile.mkdtemp(prefix="tp_scale_data_"))
    source = work / "corpus.jsonl"
    t0 = time.perf_counter()
    write_corpus(source, args.rows)
    print(f"corpus: {args.rows} rows, {source.stat().st_size / 2**20:.1f} MB in {time.perf_counter() - t0:.1f} s")
    node = {"num_cpus": 1, "object_store_memory": 200 * 2**20, "node_ip_address": "127.0.0.1"}
    cluster = Cluster(initialize_head=True, head_node_args={**node, "include_dashboard": False})
    results: dict[str, Any] = {}
    try:
        cluster.add_node(**node)
        cluster.wait_for_nodes()
        local = get_executor("local", block_rows=args.block_rows)
        ray = get_executor("ray", address=cluster.address, block_rows=args.block_rows)
        for step in args.steps.split(","):
            seconds_local, report_local = run_step(step, source, work / f"{step}.local.jsonl", local)
            sampler = RaySampler()
            sampler.start()
            seconds_ray, report_ray = run_step(step, source, work / f"{step}.ray.jsonl", ray)
            memory = sampler.stop()
            same = report_ray["output_sha256"] == report_local["output_sha256"]
            results[step] = {
                "local_s": round(seconds_local, 2),
                "ray_s": round(seconds_ray, 2),
                "local_rows_per_s": round(args.rows / seconds_local),
                "ray_rows_per_s": round(args.rows / seconds_ray),
                "ray_over_local": round(seconds_local / seconds_ray, 3),
                "same_output": same,
                "output_rows": report_local["output_rows"],
                "ray_workers": report_ray["executor"]["workers"],
                "ray_worker_peak_rss": memory,
            }
            if not same:
                raise SystemExit(f"{step}: the Ray output differs from the local one")
    finally:
        cluster.shutdown()
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    out = {
        "bench": "scale_data",
        "rows": args.rows,
        "block_rows": args.block_rows,
        "results": results,
        "driver_peak_rss_mb": round(peak_mb, 1),
        "machine": machine_info(),
    }
    write_json(report_path, out)
    print_table(
        ["step", "local rows/s", "ray rows/s", "ray / local (speed)", "same output", "ray worker peak MB"],
        [
            [
                step,
                str(r["local_rows_per_s"]),
                str(r["ray_rows_per_s"]),
                f"{r['ray_over_local']:.2f}",
                str(r["same_output"]),
                str(r["ray_worker_peak_rss"]["max_mb"]),
            ]
            for step, r in results.items()
        ],
    )
    print(f"report: {report_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
