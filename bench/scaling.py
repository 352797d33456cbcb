"""Does a second process help? The same SFT job on world size 1 (one process, global batch 2B) and world size 2
(torchrun, B per rank, gloo on CPU), alternated in fresh `tp train` processes, reported side by side as ratios.

Measured per run: samples/s inside the training loop (max_steps x global batch / `summary.train_runtime`, the
Trainer's own clock), the wall and CPU seconds of the whole `tp train` process (torchrun start-up, each rank's
imports, validation and dataset reading included), and the time from starting `tp train` to its first logged step
(the first metrics.jsonl row's `ts`). Both sides compute the same global batch per step (the losses are checked
equal to 1e-4 relative: tests/training/test_distributed.py), so samples/s compares like with like.

Then through the platform: `tp up` (embedded default, TP_RAY_ADDRESS at the same cluster), each setup's job POSTed
to /api/v1/jobs, timed until the API reports its first step (queue, worker pickup, the `tp train` child,
validation, the launcher, the model load and one step), then cancelled before the next.

On a 2-core CPU machine two ranks share the cores one process already uses (torch's intra-op threads): the
speed-up cannot approach 2x and the gradient all-reduce (gloo, over loopback) is extra work. On GPUs each rank has
its own device and the all-reduce overlaps the backward pass (DDP buckets), which is where near-linear scaling comes
from. World size 2 on Ray runs on a 2-node local cluster made by the bench (`ray.cluster_utils.Cluster`, 1 CPU per
node, loopback only): both "nodes" share this machine, so it measures Ray's overhead, not a second machine.

    .venv/bin/python bench/scaling.py                  # 3 rounds x 60 steps -> bench/results/scaling.json
    .venv/bin/python bench/scaling.py --rounds 5 --steps 100 --per-rank-batch 16 --platform-rounds 3
    .venv/bin/python bench/scaling.py --smoke          # 1 round x 2 steps, local and torchrun (no Ray, no `tp up`)
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(1, str(Path(__file__).resolve().parents[1] / "tests" / "e2e"))  # `tp up` as the e2e tests run it

from _common import (  # noqa: E402 - the bench dir is not a package
    CONFIGS,
    RESULTS_DIR,
    SMOKE_HELP,
    bench_env,
    fmt,
    fresh_dir,
    machine_info,
    median,
    prepare_demo,
    print_table,
    read_jsonl,
    read_run_info,
    run_measured,
    smoke_report,
    tail,
    tp_command,
    write_json,
)
from _e2e import running_tp_up, wait  # noqa: E402

SETUPS = {  # name -> (processes, batch per process as a multiple of the per-rank batch, extra overrides)
    "world 1 (local)": (1, 2, []),
    "world 2 (torchrun)": (2, 1, []),
    "world 2 (ray, 2 nodes)": (2, 1, ["--set", "resources.num_nodes=2", "--set", "resources.num_devices=1"]),
}
SETUP_KEYS = dict(zip(("local", "torchrun", "ray"), SETUPS, strict=True))  # --setups local,torchrun,ray
LOOPBACK = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}  # keep Ray on 127.0.0.1 (see tests/training/test_ray.py)


def one_run(name: str, base: Path, env: dict[str, str], steps: int, per_rank: int, index: int) -> dict[str, Any]:
    processes, multiple, extra = SETUPS[name]
    run_dir = base / f"run-{index}-{processes}"
    cmd = [
        *tp_command(),
        "train",
        str(CONFIGS / "sft_tiny.yaml"),
        "--output",
        str(run_dir),
        "--set",
        f"training.max_steps={steps}",
        "--set",
        f"training.save_steps={steps}",
        "--set",
        "training.logging_steps=10",
        "--set",
        "training.eval_steps=null",
        "--set",
        "data.eval_file=null",
        "--set",
        "model.dtype=fp32",
        "--set",
        "resources.device=cpu",
        "--set",
        f"resources.num_devices={processes}",
        "--set",
        f"training.per_device_batch_size={per_rank * multiple}",
        *extra,
    ]
    started = time.time()
    measured = run_measured(cmd, env, base / f"run-{index}-{processes}.log")
    if measured["exit_code"] != 0:
        raise SystemExit(f"{name}: tp train failed:\n{tail(base / f'run-{index}-{processes}.log', 30)}")
    info = read_run_info(run_dir)
    rows = read_jsonl(run_dir / "metrics.jsonl")
    runtime = info["summary"]["train_runtime"]
    samples = steps * per_rank * 2
    result = {
        "setup": name,
        "world_size": info.get("world_size"),
        "launcher": info.get("launcher"),
        "train_runtime_s": runtime,
        "samples_per_s": round(samples / runtime, 2),
        "first_step_after_s": round(rows[0]["ts"] - started, 2) if rows else None,
        "train_loss": info["summary"].get("train_loss"),
        **measured,
    }
    shutil.rmtree(run_dir, ignore_errors=True)
    return result


def _job_config(name: str, per_rank: int) -> dict[str, Any]:
    processes, multiple, extra = SETUPS[name]
    config = yaml.safe_load((CONFIGS / "sft_tiny.yaml").read_text())
    config["training"].update(
        max_steps=100000, save_steps=100000, logging_steps=1, per_device_batch_size=per_rank * multiple
    )
    config["training"].pop("eval_steps", None)
    config["data"].pop("eval_file", None)
    config["model"]["dtype"] = "fp32"
    config["resources"] = {"device": "cpu", "num_devices": processes}
    if "resources.num_nodes=2" in extra:
        config["resources"].update(num_nodes=2, num_devices=1)
    return config


def post_to_first_step(
    base: Path, address: str, rounds: int, per_rank: int, setups: list[str] | None = None
) -> list[dict[str, Any]]:
    """Seconds from POST /jobs to the API showing step 1, per setup (default: all), through `tp up`."""
    runs = []
    setups = setups or list(SETUPS)
    with running_tp_up(fresh_dir(base / "platform"), TP_RAY_ADDRESS=address, **LOOPBACK) as (client, _):
        for i in range(rounds):
            for name in setups if i % 2 == 0 else reversed(setups):
                started = time.monotonic()
                response = client.post("/jobs", json={"name": f"scaling {name}", "config": _job_config(name, per_rank)})
                if response.status_code != 201:
                    raise SystemExit(f"{name}: POST /jobs answered {response.status_code}: {response.text}")
                job_id = response.json()["id"]

                def job(job_id: int = job_id) -> dict[str, Any]:
                    return client.get(f"/jobs/{job_id}").json()

                first = wait(
                    lambda: (j := job())["current_step"] >= 1 or j["status"] in ("failed", "cancelled"),
                    600,
                    f"{name}: the first step",
                    interval=0.1,
                )
                seconds = time.monotonic() - started
                if job()["status"] in ("failed", "cancelled"):
                    raise SystemExit(f"{name}: the job ended before its first step: {job().get('error')}")
                client.post(f"/jobs/{job_id}/cancel")
                wait(lambda: job()["status"] in ("cancelled", "failed", "succeeded"), 180, f"{name}: the cancel")
                print(f"[platform round {i + 1}] {name:22s} POST -> first step {seconds:5.1f} s", flush=True)
                runs.append({"setup": name, "post_to_first_step_s": round(seconds, 2), "ok": bool(first)})
    return runs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3, help="alternated rounds (each runs every setup once)")
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--per-rank-batch", type=int, default=16, help="B: world 2 runs B per rank, world 1 runs 2B")
    parser.add_argument(
        "--platform-rounds", type=int, default=None, help="rounds of POST -> first step (0: skip; default 2, smoke 1)"
    )
    parser.add_argument(
        "--setups",
        default=None,
        help=f"comma-separated, of {', '.join(SETUP_KEYS)} (default: all; smoke: local,torchrun)",
    )
    parser.add_argument("--output", type=Path, default=None, help="default: bench/results/scaling.json")
    parser.add_argument(
        "--smoke",
        action="store_true",
        help=SMOKE_HELP + ": 1 round x 2 steps (per-rank batch 2) of world 1 and torchrun world 2, no platform part "
        "(Ray's 2-node cluster and `tp up` cost a minute each: `--setups ... --platform-rounds 1` adds them)",
    )
    args = parser.parse_args(argv)
    if args.smoke:
        args.rounds, args.steps, args.per_rank_batch = 1, 2, 2
        args.platform_rounds = 0 if args.platform_rounds is None else args.platform_rounds
        args.setups = args.setups or "local,torchrun"
        args.output = smoke_report("scaling", args.output)
    elif args.output is None:
        args.output = RESULTS_DIR / "scaling.json"
    if args.platform_rounds is None:
        args.platform_rounds = 2
    keys = (args.setups or ",".join(SETUP_KEYS)).split(",")
    if unknown := [k for k in keys if k not in SETUP_KEYS]:
        parser.error(f"--setups: unknown {unknown}; choose from {list(SETUP_KEYS)}")
    setups = [SETUP_KEYS[k] for k in keys]

    base = Path(tempfile.mkdtemp(prefix="tp_scaling_"))
    os.environ.update(LOOPBACK)
    from ray.cluster_utils import Cluster

    cluster = None
    try:
        if "ray" in keys or args.platform_rounds:  # the platform part names the cluster (TP_RAY_ADDRESS)
            node = {"num_cpus": 1, "object_store_memory": 80 * 2**20, "node_ip_address": "127.0.0.1"}
            cluster = Cluster(initialize_head=True, head_node_args={**node, "include_dashboard": False})
            cluster.add_node(**node)
            cluster.wait_for_nodes()
        ray_env = {"TP_RAY_ADDRESS": cluster.address} if cluster else {}
        data_dir = base / "data"
        prepare_demo(data_dir, base)
        env = bench_env(data_dir, **ray_env, **LOOPBACK)
        print(f"scaling: {args.rounds} rounds x {args.steps} steps, global batch {2 * args.per_rank_batch}", flush=True)
        runs = []
        for i in range(args.rounds):
            for name in setups if i % 2 == 0 else reversed(setups):
                r = one_run(name, base, env, args.steps, args.per_rank_batch, i)
                print(
                    f"[round {i + 1}] {name:19s} {r['samples_per_s']:8.1f} samples/s, first step after "
                    f"{r['first_step_after_s']} s, wall {r['wall_seconds']} s, cpu {r['cpu_seconds']} s, "
                    f"load {r['load_avg_1m_before']}",
                    flush=True,
                )
                runs.append(r)
        platform_runs = (
            post_to_first_step(base, cluster.address, args.platform_rounds, args.per_rank_batch, setups)
            if cluster and args.platform_rounds
            else []
        )
    finally:
        if cluster:
            cluster.shutdown()
        shutil.rmtree(base, ignore_errors=True)

    summary = {}
    for name in setups:
        mine = [r for r in runs if r["setup"] == name]
        summary[name] = {
            k: median([r[k] for r in mine])
            for k in ("samples_per_s", "first_step_after_s", "wall_seconds", "cpu_seconds")
        }
        summary[name]["post_to_first_step_s"] = median(
            [r["post_to_first_step_s"] for r in platform_runs if r["setup"] == name]
        )
    base_name = setups[0]
    rows = [
        [
            name,
            fmt(s["samples_per_s"], ".1f"),
            fmt(s["samples_per_s"] / summary[base_name]["samples_per_s"], ".3f"),
            fmt(s["first_step_after_s"], ".1f"),
            fmt(s["post_to_first_step_s"], ".1f"),
            fmt(s["wall_seconds"], ".1f"),
            fmt(s["cpu_seconds"], ".1f"),
        ]
        for name, s in summary.items()
    ]
    print()
    print_table(
        [
            "setup",
            "samples/s (median)",
            "vs world 1",
            "first step after s (tp train)",
            "POST -> first step s",
            "wall s",
            "cpu s",
        ],
        rows,
    )
    write_json(
        args.output,
        {
            "bench": "scaling",
            "machine": machine_info(),
            "rounds": args.rounds,
            "steps": args.steps,
            "per_rank_batch": args.per_rank_batch,
            "runs": runs,
            "platform_runs": platform_runs,
            "median": summary,
        },
    )
    print(f"\nwrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
