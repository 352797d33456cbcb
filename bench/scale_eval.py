"""The evaluation runner on one process vs a local 2-node Ray cluster: items/s of `tp eval run`, the same per-item
outputs and scores, and the peak memory of each Ray worker.

A tiny model evaluated on N generated items of each benchmark: gsm8k (addition in the demo's GSM8K format,
`prompt_template: "{prompt}"`, greedy, `--max-new-tokens` new tokens at most) and multiple_choice (4 options, scored
by log-likelihood). The model: the demo model (`tp demo prepare`, offline; reused from $TP_BENCH_DEMO_CACHE when
set), whose random weights answer every gsm8k item alike (the equality check then rests on multiple_choice's
per-option log-likelihoods), or `--model DIR`, e.g. the demo model after a short SFT (its answers differ per item):

    TP_DATA_DIR=... tp train configs/examples/sft_tiny.yaml --output /tmp/sft200 --set training.max_steps=200 \
        --set training.eval_steps=null --set data.eval_file=null --set training.save_steps=200

The same `tp eval run` command runs twice in fresh processes: `--executor local` (one process) and `--executor ray
--workers 2` on a `ray.cluster_utils.Cluster` of two nodes with one CPU each (loopback only, the tests' cluster;
started before and not timed), `--rounds` times, alternated (local, ray, then ray, local, ...; the figures are
medians). Both sides use `--threads 1` (torch's threads per model: the fastest for this model here) and the same
`--batch-size`.

Timed from the child's own output lines, stamped as they arrive: start-up = from starting `tp eval run` to its first
"<benchmark>: N items" line (interpreter, imports, checks, then the model load; on Ray also joining the cluster, the
placement group, the actors' start and each worker's model load); a benchmark = from its line to the next one (the
last: to the "report:" line, so it includes stopping the model or the Ray workers and writing the reports); wall =
the whole process. Items/s = items / that benchmark's time; "end to end" = all items / wall. Peak memory: the RSS
of the `tp eval run` process and of every Ray worker process (`ray::` command lines; the eval workers are the ones
named `EvalWorker`), sampled every 0.2 s, the largest seen per process.

Every per-item record (samples/<benchmark>.jsonl: output, extracted answer, score fields; the wall-time fields
aside) and every summary entry (metrics, n, generation settings) must be equal, or the bench exits non-zero.

    .venv/bin/python bench/scale_eval.py                    # 1,000 items per benchmark, 2 rounds -> bench/results/
    .venv/bin/python bench/scale_eval.py --items 5000 --model /tmp/sft200/final
    .venv/bin/python bench/scale_eval.py --smoke            # 32 items per benchmark, 1 round, the demo model

The honest caveat (bench/README.md): this machine has 2 cores, so the "2-node cluster" is two worker processes, each
loading the model, sharing them with the driver and Ray's own processes; the ratio says what the sharding costs and
keeps, not what more machines buy.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import (  # noqa: E402 - the bench dir is not a package
    RESULTS_DIR,
    SMOKE_HELP,
    bench_env,
    machine_info,
    prepare_demo,
    print_table,
    read_jsonl,
    smoke_report,
    tail,
    tp_command,
    write_json,
)

BENCHMARKS = ("gsm8k", "multiple_choice")
TIMING_FIELDS = {"latency_s", "exec_time_s"}  # wall times per record: the only fields allowed to differ
LOOPBACK = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}  # Ray's processes and clients stay on 127.0.0.1
BENCH_LINE = re.compile(r"^(\w+): (\d+) items from ")


# ---------------------------------------------------------------------------------------------- the data


def write_gsm8k(path: Path, items: int, seed: int = 0) -> None:
    """`items` addition questions in the demo's GSM8K format (operands 0-20: the demo tokenizer's range)."""
    rng = random.Random(seed)
    with path.open("w", encoding="utf-8") as f:
        for _ in range(items):
            a, b = rng.randint(0, 20), rng.randint(0, 20)
            row = {"question": f"What is {a}+{b}?", "prompt": f"{a}+{b}=", "answer": f"{a}+{b}={a + b}\n#### {a + b}"}
            f.write(json.dumps(row) + "\n")


def write_multiple_choice(path: Path, items: int, seed: int = 1) -> None:
    """`items` 4-option addition questions, the right option at a random place."""
    rng = random.Random(seed)
    with path.open("w", encoding="utf-8") as f:
        for _ in range(items):
            a, b = rng.randint(0, 20), rng.randint(0, 20)
            wrong = rng.sample([d for d in (-3, -2, -1, 1, 2, 3) if a + b + d >= 0], 3)
            choices = [str(a + b + d) for d in wrong]
            answer = rng.randrange(4)
            choices.insert(answer, str(a + b))
            f.write(json.dumps({"question": f"What is {a}+{b}?", "choices": choices, "answer": answer}) + "\n")


# ---------------------------------------------------------------------------------------------- memory


class RssSampler(threading.Thread):
    """Peak RSS of the `tp eval run` process and of every Ray worker process (`ray::...` command lines) of this
    bench's cluster (the descendants of this process: the raylets and their workers), sampled every 0.2 s while a
    run goes. Other Ray clusters on the machine are not counted."""

    def __init__(self, driver_pid: int) -> None:
        super().__init__(daemon=True)
        self.driver_pid = driver_pid
        self.driver_peak = 0
        self.peaks: dict[int, int] = {}
        self.eval_workers: set[int] = set()
        self._done = threading.Event()

    def run(self) -> None:
        import psutil

        me = psutil.Process()
        while True:
            for proc in me.children(recursive=True):
                try:
                    rss = proc.memory_info().rss
                    cmd = " ".join(proc.cmdline())
                except psutil.Error:
                    continue
                if proc.pid == self.driver_pid:
                    self.driver_peak = max(self.driver_peak, rss)
                elif cmd.startswith("ray::"):
                    self.peaks[proc.pid] = max(self.peaks.get(proc.pid, 0), rss)
                    if cmd.startswith("ray::EvalWorker"):
                        self.eval_workers.add(proc.pid)
            if self._done.wait(0.2):
                return

    def stop(self) -> dict[str, Any]:
        self._done.set()
        self.join(timeout=5)
        mb = lambda rss: round(rss / 2**20, 1)  # noqa: E731
        workers = sorted(self.peaks[pid] for pid in self.eval_workers)
        others = sorted(rss for pid, rss in self.peaks.items() if pid not in self.eval_workers)
        return {
            "driver_mb": mb(self.driver_peak) if self.driver_peak else None,
            "eval_workers_mb": [mb(rss) for rss in workers],
            "other_ray_workers": {"processes": len(others), "max_mb": mb(others[-1]) if others else None},
        }


# ---------------------------------------------------------------------------------------------- one run


def eval_command(args: argparse.Namespace, model: Path, files: dict[str, Path], out: Path) -> list[str]:
    cmd = [*tp_command(), "eval", "run", "--model", str(model), "--benchmarks", ",".join(files)]
    for name, path in files.items():
        cmd += ["--data", f"{name}={path}"]
    if "gsm8k" in files:
        cmd += ["--set", "gsm8k.prompt_template={prompt}"]  # the format the demo model knows (its example eval)
    cmd += ["--max-new-tokens", str(args.max_new_tokens), "--batch-size", str(args.batch_size)]
    cmd += ["--threads", str(args.threads), "--device", "cpu", "--no-progress", "--output", str(out)]
    return cmd


def run_eval(cmd: list[str], env: dict[str, str], log_path: Path) -> dict[str, Any]:
    """Run one `tp eval run`, stamping each output line as it arrives; returns its timings and peak memory."""
    lines: list[tuple[float, str]] = []
    with log_path.open("w", encoding="utf-8") as log:
        log.write("$ " + " ".join(cmd) + "\n")
        log.flush()
        start = time.perf_counter()
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1)
        sampler = RssSampler(proc.pid)
        sampler.start()
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append((time.perf_counter() - start, line.rstrip("\n")))
            log.write(f"[{lines[-1][0]:8.2f}] {line}")
        code = proc.wait()
        wall = time.perf_counter() - start
        memory = sampler.stop()
    if code != 0:
        raise SystemExit(f"tp eval run exited {code}:\n{tail(log_path, 30)}")
    marks = [(t, m.group(1), int(m.group(2))) for t, line in lines if (m := BENCH_LINE.match(line))]
    end = next((t for t, line in lines if line.startswith("report: ")), wall)
    if not marks:
        raise SystemExit(f"no '<benchmark>: N items' line in the output of tp eval run:\n{tail(log_path, 30)}")
    benchmarks = {}
    for (t, name, n), following in zip(marks, [*marks[1:], (end, "", 0)], strict=True):
        seconds = following[0] - t
        benchmarks[name] = {"items": n, "seconds": round(seconds, 2), "items_per_s": round(n / seconds, 1)}
    return {
        "wall_s": round(wall, 2),
        "startup_s": round(marks[0][0], 2),
        "benchmarks": benchmarks,
        "items_per_s_end_to_end": round(sum(b["items"] for b in benchmarks.values()) / wall, 1),
        "peak_rss": memory,
    }


def compare(local: Path, ray: Path, names: list[str]) -> dict[str, dict[str, Any]]:
    """Per benchmark: are the records (timings aside) and the summary entries (time_s aside) equal?"""
    summaries = [json.loads((d / "summary.json").read_text(encoding="utf-8")) for d in (local, ray)]
    out = {}
    for name in names:
        files = [run / "samples" / f"{name}.jsonl" for run in (local, ray)]
        records = [[{k: v for k, v in r.items() if k not in TIMING_FIELDS} for r in read_jsonl(f)] for f in files]
        entries = [{k: v for k, v in s["benchmarks"][name].items() if k != "time_s"} for s in summaries]
        differing = [i for i, (a, b) in enumerate(zip(*records, strict=False)) if a != b]
        out[name] = {
            "records": len(records[0]),
            "same_records": records[0] == records[1],
            "same_summary": entries[0] == entries[1],
            "differing_records": differing[:10],
            "distinct_outputs": len({str(r.get("output")) for r in records[0]}),
            # the runner's own stage times (summary.json): on Ray the slowest worker's generate / score
            "stage_s": {
                "local": summaries[0]["benchmarks"][name]["time_s"],
                "ray": summaries[1]["benchmarks"][name]["time_s"],
            },
            "metrics": {m: v["value"] for m, v in entries[0]["metrics"].items()},
        }
    out["_executor"] = summaries[1].get("executor", {})
    out["_model_load_s"] = {"local": summaries[0]["time_s"]["model_load"], "ray": summaries[1]["time_s"]["model_load"]}
    return out


# ---------------------------------------------------------------------------------------------- main


def summarize(names: list[str], rounds: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per benchmark over the rounds: median seconds per side, items/s and ray / local, the same-output checks."""
    results = {}
    for name in names:
        local_s = statistics.median(r["local"]["benchmarks"][name]["seconds"] for r in rounds)
        ray_s = statistics.median(r["ray"]["benchmarks"][name]["seconds"] for r in rounds)
        items = rounds[0]["local"]["benchmarks"][name]["items"]
        checks = [r["same"][name] for r in rounds]
        results[name] = {
            "kind": "loglikelihood" if name == "multiple_choice" else "generate",
            "items": items,
            "local_s": round(local_s, 2),
            "ray_s": round(ray_s, 2),
            "local_items_per_s": round(items / local_s, 1),
            "ray_items_per_s": round(items / ray_s, 1),
            "ray_over_local": round(local_s / ray_s, 3),
            "ray_over_local_per_round": [
                round(r["local"]["benchmarks"][name]["seconds"] / r["ray"]["benchmarks"][name]["seconds"], 3)
                for r in rounds
            ],
            "records": checks[0]["records"],
            "same_records": all(c["same_records"] for c in checks),
            "same_summary": all(c["same_summary"] for c in checks),
            "differing_records": [c["differing_records"] for c in checks],
            "distinct_outputs": checks[0]["distinct_outputs"],
            "metrics": checks[0]["metrics"],
            "stage_s_per_round": [c["stage_s"] for c in checks],
        }
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--items", type=int, default=1000, help="items per benchmark")
    parser.add_argument("--benchmarks", default=",".join(BENCHMARKS), help="gsm8k, multiple_choice or both")
    parser.add_argument("--workers", type=int, default=2, help="Ray workers (the cluster has one CPU per node)")
    parser.add_argument("--rounds", type=int, default=2, help="local and ray runs, alternated (ABBA); medians")
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--max-new-tokens", type=int, default=8)
    parser.add_argument("--threads", type=int, default=1, help="torch threads per model (both sides)")
    parser.add_argument(
        "--model", type=Path, default=None, help="a model dir to evaluate (default: the demo model, built here)"
    )
    parser.add_argument("--out", "--output", dest="output", type=Path, default=None)
    parser.add_argument("--smoke", action="store_true", help=SMOKE_HELP)
    args = parser.parse_args()
    if args.smoke:
        args.items, args.rounds = 32, 1
    names = [b.strip() for b in args.benchmarks.split(",") if b.strip()]
    if not names or set(names) - set(BENCHMARKS):
        parser.error(f"--benchmarks: choose from {', '.join(BENCHMARKS)}")
    report_path = (
        smoke_report("scale_eval", args.output) if args.smoke else (args.output or RESULTS_DIR / "scale_eval.json")
    )
    os.environ.update(LOOPBACK)  # before Ray is imported: the cluster and its clients stay on loopback
    for key in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE"):
        os.environ[key] = "1"  # the raylets' environment is their Ray workers' environment
    os.environ["TOKENIZERS_PARALLELISM"] = "false"

    work = Path(tempfile.mkdtemp(prefix="tp_scale_eval_"))
    data_dir = work / "tp_data"
    data_dir.mkdir()
    if args.model is None:
        t0 = time.perf_counter()
        prepare_demo(data_dir, work)
        model = data_dir / "demo" / "model"
        print(f"demo model ready in {time.perf_counter() - t0:.1f} s: {model}")
    else:
        model = args.model.resolve()
        if not (model / "config.json").is_file():
            parser.error(f"--model: no config.json in {model}")
    writers = {"gsm8k": write_gsm8k, "multiple_choice": write_multiple_choice}
    files = {}
    for name in names:
        files[name] = work / f"{name}.jsonl"
        writers[name](files[name], args.items)
    env = bench_env(data_dir, **LOOPBACK)
    load_before = [round(x, 2) for x in os.getloadavg()]

    from ray.cluster_utils import Cluster

    t0 = time.perf_counter()
    node = {"num_cpus": 1, "object_store_memory": 100 * 2**20, "node_ip_address": "127.0.0.1"}
    cluster = Cluster(initialize_head=True, head_node_args={**node, "include_dashboard": False})
    rounds: list[dict[str, Any]] = []
    try:
        for _ in range(1, args.workers):
            cluster.add_node(**node)
        cluster.wait_for_nodes()
        cluster_s = time.perf_counter() - t0
        print(f"Ray cluster of {args.workers} nodes up in {cluster_s:.1f} s at {cluster.address}")
        for number in range(args.rounds):
            runs: dict[str, Any] = {}
            for side in ("local", "ray") if number % 2 == 0 else ("ray", "local"):
                cmd = eval_command(args, model, files, work / f"{side}{number}")
                if side == "ray":
                    cmd += ["--executor", "ray", "--workers", str(args.workers), "--ray-address", cluster.address]
                print(f"round {number + 1}, {side}: {' '.join(cmd)}", flush=True)
                runs[side] = run_eval(cmd, env, work / f"{side}{number}.log")
                print(f"round {number + 1}, {side}: {runs[side]['wall_s']} s", flush=True)
            runs["same"] = compare(work / f"local{number}", work / f"ray{number}", names)
            rounds.append(runs)
    finally:
        cluster.shutdown()

    results = summarize(names, rounds)
    wall = {side: statistics.median(r[side]["wall_s"] for r in rounds) for side in ("local", "ray")}
    per_s = {side: statistics.median(r[side]["items_per_s_end_to_end"] for r in rounds) for side in ("local", "ray")}
    startup = {side: statistics.median(r[side]["startup_s"] for r in rounds) for side in ("local", "ray")}
    peak = {
        "local_tp_eval_run_mb": max(r["local"]["peak_rss"]["driver_mb"] or 0 for r in rounds),
        "ray_tp_eval_run_mb": max(r["ray"]["peak_rss"]["driver_mb"] or 0 for r in rounds),
        "ray_eval_workers_mb": max((r["ray"]["peak_rss"]["eval_workers_mb"] for r in rounds), key=max, default=[]),
    }
    out = {
        "bench": "scale_eval",
        "items": args.items,
        "rounds": args.rounds,
        "benchmarks": names,
        "settings": {
            "batch_size": args.batch_size,
            "max_new_tokens": args.max_new_tokens,
            "threads": args.threads,
            "workers": args.workers,
            "decoding": "greedy",
            "model": "demo (untrained)" if args.model is None else str(model),
        },
        "same_output": all(r["same_records"] and r["same_summary"] for r in results.values()),
        "results": results,
        "end_to_end": {
            "local_wall_s": wall["local"],
            "ray_wall_s": wall["ray"],
            "local_items_per_s": per_s["local"],
            "ray_items_per_s": per_s["ray"],
            "ray_over_local": round(wall["local"] / wall["ray"], 3),
            "local_startup_s": startup["local"],
            "ray_startup_s": startup["ray"],
        },
        "peak_rss": peak,
        "ray_executor": rounds[0]["same"]["_executor"],
        "model_load_s": [r["same"]["_model_load_s"] for r in rounds],  # on Ray: the slowest worker's setup
        "cluster_start_s": round(cluster_s, 2),
        "runs": [{side: r[side] for side in ("local", "ray")} for r in rounds],
        "machine": {**machine_info(), "load_avg_before": load_before},
    }
    write_json(report_path, out)
    rows = [
        [
            name,
            str(r["local_items_per_s"]),
            str(r["ray_items_per_s"]),
            f"{r['ray_over_local']:.2f}",
            str(r["same_records"] and r["same_summary"]),
        ]
        for name, r in results.items()
    ]
    rows.append(
        [
            "all, end to end",
            str(per_s["local"]),
            str(per_s["ray"]),
            f"{out['end_to_end']['ray_over_local']:.2f}",
            str(out["same_output"]),
        ]
    )
    print_table(["benchmark", "local items/s", "ray items/s", "ray / local (speed)", "same output"], rows)
    print(
        f"medians of {args.rounds} round(s). start-up: local {startup['local']} s, ray {startup['ray']} s; "
        f"wall: local {wall['local']} s, ray {wall['ray']} s"
    )
    print(
        f"peak RSS MB: tp eval run local {peak['local_tp_eval_run_mb']}, ray {peak['ray_tp_eval_run_mb']}; "
        f"Ray eval workers {peak['ray_eval_workers_mb']}"
    )
    print(f"report: {report_path}")
    if not out["same_output"]:
        bad = {n: r["differing_records"] for n, r in results.items() if not (r["same_records"] and r["same_summary"])}
        print(f"the Ray run's records differ from the local run's (first differing records: {bad})", file=sys.stderr)
        return 1
    seen = [len(r["ray"]["peak_rss"]["eval_workers_mb"]) for r in rounds]
    if any(n != args.workers for n in seen):
        print(f"expected {args.workers} Ray eval workers in each round, saw {seen}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
