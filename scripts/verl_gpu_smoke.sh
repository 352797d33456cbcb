#!/usr/bin/env bash
# GRPO under engine: verl on one GPU node with vLLM, through the platform's runner (the one its workers use):
# verl's driver on a local Ray, rollouts on vLLM, our reward functions, metrics.jsonl, checkpoints, final/, verify.
# For whoever has a GPU; these CI machines have none (preflight refuses verl RL there).
#
#   scripts/verl_gpu_smoke.sh MODEL [STEPS]
#     MODEL   a local HF model directory or hub id of a small chat model (e.g. Qwen/Qwen2.5-0.5B-Instruct)
#     STEPS   training steps (default 4; a checkpoint at the last one)
#
# Needs: an NVIDIA GPU, the platform installed in a GPU environment, and verl's vLLM extra:
#   pip install 'verl[vllm]==0.9.1'   (vllm 0.24.0 with torch 2.11.0 + CUDA: not the CPU torch CI pins)
# Exit codes: 0 ok, 1 a check failed, 2 the machine cannot run it (no GPU, no vLLM, bad arguments).
set -euo pipefail

MODEL=${1:-}
STEPS=${2:-4}
if [[ -z "$MODEL" || ! "$STEPS" =~ ^[1-9][0-9]*$ ]]; then
  echo "usage: $0 MODEL [STEPS]" >&2
  exit 2
fi
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
TP=${TP:-.venv/bin/tp}
command -v nvidia-smi >/dev/null && nvidia-smi -L || { echo "no NVIDIA GPU visible (nvidia-smi)" >&2; exit 2; }
"$PY" -c "import vllm" 2>/dev/null || { echo "vLLM is not installed in $PY's environment" >&2; exit 2; }

export TP_DATA_DIR=${TP_DATA_DIR:-$PWD/var/verl-gpu-smoke}
"$TP" demo prepare >/dev/null            # the addition prompts (demo/data/rl.jsonl) with reference answers
RUN="$TP_DATA_DIR/runs/verl-grpo-smoke-$(date +%Y%m%d-%H%M%S)"

"$TP" train configs/examples/grpo_tiny.yaml --dry-run --set engine=verl --set "model.path=$MODEL" >/dev/null
"$TP" train configs/examples/grpo_tiny.yaml --output "$RUN" \
  --set engine=verl --set "model.path=$MODEL" --set resources.device=cuda --set model.dtype=bf16 \
  --set data.max_length=256 --set algorithm.max_completion_length=64 \
  --set "training.max_steps=$STEPS" --set "training.save_steps=$STEPS" --set training.logging_steps=1
"$TP" verify "$RUN"

"$PY" - "$RUN" "$STEPS" <<'PY'
import json, sys
from pathlib import Path
run, steps = Path(sys.argv[1]), int(sys.argv[2])
rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
logged = [r["step"] for r in rows if "loss" in r]
problems = []
if logged != list(range(1, steps + 1)):
    problems.append(f"metric steps {logged}, expected 1..{steps} once each")
if not all("reward" in r for r in rows if "loss" in r):
    problems.append("a metric row without reward")
if not (run / "checkpoints" / f"step_{steps:06d}" / f"global_step_{steps}" / "actor").is_dir():
    problems.append(f"no checkpoints/step_{steps:06d}/global_step_{steps}/actor")
info = json.loads((run / "run.json").read_text())
if info.get("status") != "succeeded" or info.get("final_dtype") != "bfloat16":
    problems.append(f"run.json: status {info.get('status')}, final_dtype {info.get('final_dtype')}")
from transformers import AutoModelForCausalLM
AutoModelForCausalLM.from_pretrained(run / "final")
print(f"verl GRPO smoke: {steps} steps, reward {[round(r.get('reward', float('nan')), 3) for r in rows]}")
if problems:
    print("FAILED:\n  " + "\n  ".join(problems), file=sys.stderr)
    sys.exit(1)
print(f"ok: {run}")
PY
