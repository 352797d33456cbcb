"""One-shot check that the real training and evaluation code runs on a device (scripts/gpu_check.sh runs it).

Steps (each recorded in the JSON summary; a failing step does not stop the later ones that do not need it):
  1. build the tiny demo model + data (training_platform.demo.prepare_demo, what `tp demo prepare` calls)
  2. SFT through training_platform.training.runner.train (what `tp train` calls), trl engine
  3. GRPO (trl engine) from the SFT model, a few steps (--grpo-steps 0: skipped)
  4. `tp eval run` (python -m training_platform.cli) on the demo's gsm8k-style data, transformers backend, in the
     demo model's own prompt format (`--set gsm8k.prompt_template='{prompt}'`)
  5. LoRA SFT (configs/examples/sft_lora_tiny.yaml: final/ merged, final_adapter/), --lora-steps (0: skipped)
  6. write the summary JSON (and print it)

Usage: python scripts/gpu_check.py --device cuda --work /tmp/gpucheck --out $OUT
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import traceback
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


class _Skipped(Exception):
    pass


def _read_jsonl(path: Path) -> list[dict]:
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _cuda_info() -> dict:
    import torch

    info = {"torch": torch.__version__, "torch_cuda": torch.version.cuda, "cuda_available": torch.cuda.is_available()}
    if torch.cuda.is_available():
        info.update(
            device_name=torch.cuda.get_device_name(0),
            capability=list(torch.cuda.get_device_capability(0)),
            bf16_supported=torch.cuda.is_bf16_supported(),
            total_mem_gib=round(torch.cuda.get_device_properties(0).total_memory / 2**30, 1),
        )
    return info


def _reset_peak() -> None:
    import torch

    if torch.cuda.is_available():
        torch.cuda.reset_peak_memory_stats()


def _peak_mib() -> float | None:
    import torch

    if not torch.cuda.is_available():
        return None
    return round(torch.cuda.max_memory_allocated() / 2**20, 1)


def _run_summary(run_dir: Path) -> dict:
    """What the run recorded: run.json (status, device, dtype), losses from metrics.jsonl, checkpoints, final."""
    out: dict = {"run_dir": str(run_dir)}
    info_path = run_dir / "run.json"
    if info_path.is_file():
        info = json.loads(info_path.read_text())
        out["run_json"] = {
            k: info.get(k)
            for k in ("status", "device", "dtype", "step", "error", "launcher", "engine", "algorithm", "summary")
        }
    env_path = run_dir / "env.json"
    if env_path.is_file():
        env = json.loads(env_path.read_text())
        out["env"] = {k: env.get(k) for k in ("packages", "cuda_available", "gpus", "python")}
    rows = _read_jsonl(run_dir / "metrics.jsonl")
    out["metric_rows"] = len(rows)
    losses = [(r.get("step"), r["loss"]) for r in rows if isinstance(r.get("loss"), (int, float))]
    if losses:
        out["loss_first"] = {"step": losses[0][0], "loss": losses[0][1]}
        out["loss_last"] = {"step": losses[-1][0], "loss": losses[-1][1]}
        out["loss_fell"] = losses[-1][1] < losses[0][1]
    evals = [r for r in rows if any(k.startswith("eval_") for k in r)]
    if evals:
        out["eval_last"] = {k: v for k, v in evals[-1].items() if k.startswith("eval_") or k == "step"}
    loss_rows = [r for r in rows if "loss" in r]
    if loss_rows:
        keep = ("step", "loss", "reward", "reward_std", "grad_norm", "sec_per_step", "tokens_per_sec", "mem_used_mb")
        out["last_row"] = {k: v for k, v in loss_rows[-1].items() if k in keep or k.startswith("rewards/")}
        for key in ("train_steps_per_second", "train_samples_per_second", "train_runtime"):
            vals = [r[key] for r in rows if key in r]
            if vals:
                out[key] = vals[-1]
    ckpt = run_dir / "checkpoints"
    out["checkpoints"] = sorted(p.name for p in ckpt.iterdir()) if ckpt.is_dir() else []
    final = run_dir / "final"
    out["final_files"] = sorted(p.name for p in final.iterdir()) if final.is_dir() else []
    return out


def _train(config_file: str, sets: list[str], output: Path) -> tuple[dict, Path]:
    from training_platform.training.config import load_yaml
    from training_platform.training.runner import TrainingFailed, train

    raw = load_yaml(str(REPO / config_file))
    _reset_peak()
    t0 = time.monotonic()
    err = None
    try:
        result = train(raw, overrides=sets, output=output)
        status = result.status
    except TrainingFailed as exc:
        status, err = "failed", str(exc)
        traceback.print_exc()
    wall = round(time.monotonic() - t0, 1)
    summary = {"status": status, "error": err, "wall_s": wall, "sets": sets, "peak_gpu_mib": _peak_mib()}
    summary.update(_run_summary(output))
    err_file = output / "error.json"
    if err_file.is_file():
        summary["error_json"] = json.loads(err_file.read_text())
    return summary, output


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--dtype", default="bf16")
    ap.add_argument("--work", default="/tmp/gpucheck")
    ap.add_argument("--out", default=os.environ.get("OUT", "/tmp/gpucheck_out"))
    ap.add_argument("--sft-steps", type=int, default=300)
    ap.add_argument("--grpo-steps", type=int, default=8)
    ap.add_argument("--eval-limit", type=int, default=64)
    ap.add_argument("--lora-steps", type=int, default=0)
    args = ap.parse_args()

    work, out = Path(args.work), Path(args.out)
    work.mkdir(parents=True, exist_ok=True)
    out.mkdir(parents=True, exist_ok=True)
    os.environ["TP_DATA_DIR"] = str(work / "data")
    summary: dict = {"argv": sys.argv, "steps": {}}
    steps = summary["steps"]

    def save() -> None:
        (out / "summary.json").write_text(json.dumps(summary, indent=2, default=str) + "\n")

    try:
        summary["cuda"] = _cuda_info()
    except Exception as exc:  # noqa: BLE001
        summary["cuda"] = {"error": repr(exc)}
    save()

    # 1. the demo model and data
    t0 = time.monotonic()
    try:
        from training_platform.demo import prepare_demo

        paths = prepare_demo(work / "data")
        from training_platform.demo.tiny_model import count_parameters

        steps["demo"] = {
            "ok": True,
            "wall_s": round(time.monotonic() - t0, 1),
            "paths": {k: str(v) for k, v in paths.items()},
        }
        try:
            from transformers import AutoModelForCausalLM

            steps["demo"]["parameters"] = count_parameters(AutoModelForCausalLM.from_pretrained(paths["model"]))
        except Exception as exc:  # noqa: BLE001
            steps["demo"]["parameters"] = repr(exc)
    except Exception:  # noqa: BLE001
        steps["demo"] = {"ok": False, "traceback": traceback.format_exc()}
        traceback.print_exc()
        save()
        return 1
    save()
    print("== demo:", json.dumps(steps["demo"]), flush=True)

    dev = [f"resources.device={args.device}", f"model.dtype={args.dtype}"]
    # 2. SFT
    sft_dir = work / "runs" / "sft"
    try:
        sft, _ = _train(
            "configs/examples/sft_tiny.yaml",
            [
                *dev,
                f"training.max_steps={args.sft_steps}",
                "training.logging_steps=10",
                f"training.save_steps={max(args.sft_steps // 2, 1)}",
                f"training.eval_steps={max(args.sft_steps // 2, 1)}",
            ],
            sft_dir,
        )
    except Exception:  # noqa: BLE001
        sft = {"status": "crashed", "traceback": traceback.format_exc()}
        traceback.print_exc()
    sft["ok"] = sft.get("status") == "succeeded"
    steps["sft"] = sft
    save()
    print("== sft:", json.dumps({k: v for k, v in sft.items() if k != "error_json"}, default=str), flush=True)

    sft_final = sft_dir / "final"
    model_for_next = sft_final if sft_final.is_dir() else Path(paths["model"])

    # 3. GRPO (trl)
    try:
        if args.grpo_steps <= 0:
            raise _Skipped
        grpo, _ = _train(
            "configs/examples/grpo_tiny.yaml",
            [
                *dev,
                f"model.path={model_for_next}",
                f"training.max_steps={args.grpo_steps}",
                "training.logging_steps=1",
                f"training.save_steps={args.grpo_steps}",
            ],
            work / "runs" / "grpo",
        )
    except _Skipped:
        grpo = {"status": "skipped"}
    except Exception:  # noqa: BLE001
        grpo = {"status": "crashed", "traceback": traceback.format_exc()}
        traceback.print_exc()
    grpo["ok"] = grpo.get("status") in ("succeeded", "skipped")
    grpo["model_from"] = str(model_for_next)
    steps["grpo"] = grpo
    save()
    print("== grpo:", json.dumps({k: v for k, v in grpo.items() if k != "error_json"}, default=str), flush=True)

    # 4. tp eval run (the CLI, in a child process), transformers backend
    eval_out = work / "evals" / "sft"
    cmd = [
        sys.executable,
        "-m",
        "training_platform.cli",
        "eval",
        "run",
        "--model",
        str(model_for_next),
        "--benchmarks",
        "gsm8k",
        "--data",
        f"gsm8k={Path(paths['data']) / 'gsm8k_eval.jsonl'}",
        "--limit",
        str(args.eval_limit),
        "--device",
        args.device,
        "--dtype",
        {"bf16": "bfloat16", "fp32": "float32", "fp16": "float16"}.get(args.dtype, args.dtype),
        "--batch-size",
        "32",
        "--max-new-tokens",
        "8",
        # the demo model's own prompt format ("3+5="), as README's demo evaluation: the score moves with training
        "--set",
        "gsm8k.prompt_template='{prompt}'",
        "--output",
        str(eval_out),
        "--no-progress",
    ]
    t0 = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=240)
    ev: dict = {
        "cmd": " ".join(cmd),
        "rc": proc.returncode,
        "wall_s": round(time.monotonic() - t0, 1),
        "stdout_tail": proc.stdout[-3000:],
        "stderr_tail": proc.stderr[-4000:],
    }
    sj = eval_out / "summary.json"
    if sj.is_file():
        s = json.loads(sj.read_text())
        ev["metrics"] = {b: {m: v.get("value") for m, v in d["metrics"].items()} for b, d in s["benchmarks"].items()}
        ev["model_info"] = {k: v for k, v in s.items() if k not in ("benchmarks",)}
    ev["ok"] = proc.returncode == 0
    steps["eval"] = ev
    print("== eval stdout:\n" + proc.stdout[-3000:] + "\n== eval stderr:\n" + proc.stderr[-4000:], flush=True)

    save()

    # 5. LoRA SFT (peft): adapters on the attention projections of the demo model
    if args.lora_steps > 0:
        lora_dir = work / "runs" / "sft_lora"
        try:
            lora, _ = _train(
                "configs/examples/sft_lora_tiny.yaml",
                [
                    *dev,
                    f"training.max_steps={args.lora_steps}",
                    "training.logging_steps=5",
                    f"training.save_steps={args.lora_steps}",
                ],
                lora_dir,
            )
            adapter = lora_dir / "final_adapter"
            lora["final_adapter_files"] = sorted(p.name for p in adapter.iterdir()) if adapter.is_dir() else []
            cfg_file = adapter / "adapter_config.json"
            if cfg_file.is_file():
                a = json.loads(cfg_file.read_text())
                lora["adapter_config"] = {k: a.get(k) for k in ("peft_type", "r", "lora_alpha", "target_modules")}
            rows = _read_jsonl(lora_dir / "metrics.jsonl")
            lora["losses"] = [(r.get("step"), round(r["loss"], 4)) for r in rows if isinstance(r.get("loss"), float)]
        except Exception:  # noqa: BLE001
            lora = {"status": "crashed", "traceback": traceback.format_exc()}
            traceback.print_exc()
        lora["ok"] = lora.get("status") == "succeeded" and bool(lora.get("final_adapter_files"))
        steps["sft_lora"] = lora
        save()
        print("== sft_lora:", json.dumps({k: v for k, v in lora.items() if k != "error_json"}, default=str), flush=True)

    summary["top_level_modules"] = sorted({m.split(".")[0] for m in sys.modules if not m.startswith("_")})
    summary["ok"] = {name: bool(s.get("ok")) for name, s in steps.items()}
    save()
    print("== summary ok:", json.dumps(summary["ok"]), flush=True)
    return 0 if steps["sft"]["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
