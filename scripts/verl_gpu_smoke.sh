#!/usr/bin/env bash
# GRPO under engine: verl on one GPU node with vLLM, through the platform's runner (the one its workers use):
# verl's driver on a local Ray, rollouts on vLLM, our reward functions, metrics.jsonl, checkpoints, final/, verify.
#
# NOT RUN BY CI, AND NEVER RUN YET: it needs an NVIDIA GPU, and the machines this repository is developed and tested on
# have none (preflight refuses verl.rollout=vllm there). What was checked without a GPU: docs/engines.md, "GPU stack".
#
#   scripts/verl_gpu_smoke.sh [MODEL [STEPS]]
#     MODEL   a local HF model directory or hub id of a small chat model (e.g. Qwen/Qwen2.5-0.5B-Instruct);
#             default: the demo model of `tp demo prepare` (grpo_tiny's model.path)
#     STEPS   training steps (default 4; a checkpoint at the last one)
#
# It first installs the GPU stack from constraints-gpu.txt (verl[vllm]==0.9.1: torch 2.11.0 + CUDA, vllm 0.24.0,
# transformers 5.9.0; as `make setup-gpu`) into a fresh venv, GPU_VENV (default var/verl-gpu-smoke/venv, removed and
# rebuilt every run; REUSE_VENV=1 keeps one that exists). Downloads several GB the first time.
# Exit codes: 0 ok, 1 a check failed, 2 the machine cannot run it (no GPU, CUDA torch or vLLM unusable, bad arguments).
set -euo pipefail

MODEL=${1:-}
STEPS=${2:-4}
if [[ ! "$STEPS" =~ ^[1-9][0-9]*$ ]]; then
  echo "usage: $0 [MODEL [STEPS]]" >&2
  exit 2
fi
cd "$(dirname "$0")/.."
command -v nvidia-smi >/dev/null && nvidia-smi -L || { echo "no NVIDIA GPU visible (nvidia-smi)" >&2; exit 2; }

# --- the GPU stack, from constraints-gpu.txt, in a fresh venv -------------------------------------------------------
VENV=${GPU_VENV:-var/verl-gpu-smoke/venv}
if [[ "${REUSE_VENV:-0}" != 1 || ! -x "$VENV/bin/python" ]]; then
  rm -rf "$VENV"
  mkdir -p "$(dirname "$VENV")"
  "${PY_BASE:-python3}" -m venv "$VENV"
  PIP_CONSTRAINT="$PWD/constraints-gpu.txt" "$VENV/bin/pip" install -q -e '.[dev,tracking,verl]' 'verl[vllm]==0.9.1'
fi
PY=$VENV/bin/python
TP=$VENV/bin/tp
"$PY" - <<'PY' || exit 2
import sys
import torch, transformers, verl, vllm
print(f"torch {torch.__version__} (CUDA {torch.version.cuda}), vllm {vllm.__version__}, "
      f"transformers {transformers.__version__}, verl {verl.__version__}")
if not torch.cuda.is_available():
    sys.exit("torch sees no CUDA device")
print(f"{torch.cuda.device_count()} x {torch.cuda.get_device_name(0)}")
PY

# --- GRPO through tp train -------------------------------------------------------------------------------------------
export TP_DATA_DIR=${TP_DATA_DIR:-$PWD/var/verl-gpu-smoke}
"$TP" demo prepare >/dev/null            # the addition prompts (demo/data/rl.jsonl) and the demo model
RUN="$TP_DATA_DIR/runs/verl-grpo-smoke-$(date +%Y%m%d-%H%M%S)"
MODEL_SET=()
[[ -n "$MODEL" ]] && MODEL_SET=(--set "model.path=$MODEL")

"$TP" train configs/examples/grpo_tiny.yaml --dry-run --set engine=verl --set verl.rollout=vllm \
  --set resources.device=cuda "${MODEL_SET[@]}" >/dev/null
"$TP" train configs/examples/grpo_tiny.yaml --output "$RUN" \
  --set engine=verl --set verl.rollout=vllm --set resources.device=cuda "${MODEL_SET[@]}" --set model.dtype=bf16 \
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
