#!/usr/bin/env bash
# Does the GPU stack resolve? Runs pip's resolver (`pip install --dry-run`, nothing is installed) on what
# `make setup-gpu` installs: the project's `.[dev,tracking,verl]` plus `verl[vllm]==0.9.1` under constraints-gpu.txt,
# for the interpreter PY (default python3; the target is Python 3.11 on Linux x86_64). Works on a CPU machine: it reads
# package metadata only (a recent pip in a throwaway venv fetches PEP 658 metadata, not the multi-GB CUDA wheels).
# The project is resolved from a copy of pyproject.toml (nothing is written into the checkout).
#
#   scripts/check_gpu_stack.sh [--with-tests]
#     --with-tests   also check that our code runs on the GPU stack's Python packages as far as a CPU machine can:
#                    a venv (kept in $GPU_CHECK_VENV, default /tmp/tp-gpu-stack-venv, ~2.5 GB) with our CPU torch
#                    2.13.0 and every other pin of constraints-gpu.txt but the CUDA-only ones (transformers 5.9.0,
#                    numpy 2.3.5, fastapi 0.136.3, ...), then the training unit tests there (`pytest -m unit
#                    tests/training`, ~30 s; building the venv the first time ~3.5 min).
#
# Prints the resolved versions of the key packages; the full resolution goes to $REPORT (default
# /tmp/tp-gpu-stack-report.json). Exit codes: 0 resolved (and tests passed), 1 resolution failed or a pinned package
# resolved to another version (or a test failed), 2 bad arguments or interpreter.
set -euo pipefail

WITH_TESTS=0
for arg in "$@"; do
  case "$arg" in
    --with-tests) WITH_TESTS=1 ;;
    -h | --help) sed -n '2,17p' "$0"; exit 0 ;;
    *) echo "unknown argument: $arg" >&2; exit 2 ;;
  esac
done

cd "$(dirname "$0")/.."
ROOT=$PWD
PY=${PY:-python3}
REPORT=${REPORT:-/tmp/tp-gpu-stack-report.json}
PYVER=$("$PY" -c 'import platform; print(platform.python_version())')
"$PY" -c 'import sys; sys.exit(0 if (3, 10) <= sys.version_info[:2] <= (3, 12) else 1)' ||
  { echo "$PY is Python $PYVER; verl 0.9.1 needs 3.10-3.12" >&2; exit 2; }

WORK=$(mktemp -d /tmp/tp-gpu-resolve.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
"$PY" -m venv "$WORK/venv"
PIP=("$WORK/venv/bin/python" -m pip)
# a pip that reads PEP 658 metadata: no wheel downloads for resolution
"${PIP[@]}" install -q 'pip>=25,<27' >"$WORK/pip.log" 2>&1 || { cat "$WORK/pip.log" >&2; exit 1; }
mkdir -p "$WORK/project/training_platform"
cp pyproject.toml README.md "$WORK/project/"
touch "$WORK/project/training_platform/__init__.py"

echo "resolving .[dev,tracking,verl] + verl[vllm]==0.9.1 under constraints-gpu.txt"
echo "  interpreter: $PYVER $("$PY" -c 'import platform, sys; print(sys.platform, platform.machine())')," \
  "pip $("${PIP[@]}" --version | cut -d' ' -f2), $(date -u +%Y-%m-%dT%H:%MZ)"
# PIP_CONSTRAINT replaces any machine-wide constraint file (as on a GPU node, only ours applies).
if ! PIP_CONSTRAINT="$ROOT/constraints-gpu.txt" "${PIP[@]}" install --dry-run --ignore-installed --quiet \
  --report "$REPORT" "$WORK/project[dev,tracking,verl]" 'verl[vllm]==0.9.1' >"$WORK/pip.log" 2>&1; then
  grep -v '^WARNING: Location' "$WORK/pip.log" | tail -n 40 >&2
  echo "FAILED: the GPU stack does not resolve" >&2
  exit 1
fi

"$PY" - "$REPORT" "$ROOT/constraints-gpu.txt" <<'PY'
import json, re, sys

report = json.load(open(sys.argv[1]))
got = {re.sub(r"[-_.]+", "-", i["metadata"]["name"]).lower(): i["metadata"]["version"] for i in report["install"]}
key = ["torch", "torchvision", "torchaudio", "vllm", "transformers", "verl", "trl", "peft", "accelerate", "datasets",
       "tokenizers", "huggingface-hub", "safetensors", "ray", "tensordict", "torchdata", "numpy", "fastapi",
       "packaging", "triton", "flashinfer-python", "nvidia-nccl-cu13", "wandb"]
print(f"resolved {len(got)} packages:")
for name in key:
    print(f"  {name:<18} {got.get(name, '(not installed)')}")
wrong = []
for line in open(sys.argv[2]):
    m = re.match(r"\s*([A-Za-z0-9_.-]+)\s*==\s*([^\s#;]+)", line)
    if m:
        name = re.sub(r"[-_.]+", "-", m[1]).lower()
        if got.get(name) != m[2]:
            wrong.append(f"{name}: pinned {m[2]}, resolved {got.get(name)}")
if wrong:
    print("FAILED: " + "; ".join(wrong), file=sys.stderr)
    sys.exit(1)
print("ok: every pin of constraints-gpu.txt resolved as pinned")
PY

[[ $WITH_TESTS == 1 ]] || exit 0

# --- our code on the GPU stack's Python packages, with the CPU torch -----------------------------------------------
# torch 2.11.0 itself is the CUDA build (not installable here); everything else that constraints-gpu.txt sets to a
# version other than the CPU stack's is taken from it.
VENV=${GPU_CHECK_VENV:-/tmp/tp-gpu-stack-venv}
"$PY" - "$ROOT/constraints.txt" "$ROOT/constraints-gpu.txt" "$WORK/constraints-mixed.txt" <<'PY'
import re, sys
def pins(path):
    out = {}
    for line in open(path):
        m = re.match(r"\s*([A-Za-z0-9_.-]+)\s*([=<>!~][^#]*)", line)
        if m:
            out[re.sub(r"[-_.]+", "-", m[1]).lower()] = m[2].strip()
    return out
cpu, gpu = pins(sys.argv[1]), pins(sys.argv[2])
cuda_only = {"torch", "torchvision", "torchaudio", "vllm", "verl"}  # verl: installed with --no-deps below
mixed = {**cpu, **{k: v for k, v in gpu.items() if k not in cuda_only}}
mixed["torch"] = cpu["torch"]
open(sys.argv[3], "w").write("".join(f"{k}{v}\n" for k, v in sorted(mixed.items())))
PY
echo "test venv $VENV with:"; sed 's/^/  /' "$WORK/constraints-mixed.txt"
test -x "$VENV/bin/python" || "$PY" -m venv "$VENV"
export PIP_CONSTRAINT="$WORK/constraints-mixed.txt"
"$VENV/bin/pip" install -q "$(grep -E '^torch[=<>!~]' "$WORK/constraints-mixed.txt")"  # first, from the CPU stack
"$VENV/bin/pip" install -q -e '.[dev,tracking,verl]'
"$VENV/bin/pip" install -q --no-deps verl==0.9.1
"$VENV/bin/python" -c 'import torch, transformers, numpy, fastapi, trl, verl
print("  torch", torch.__version__, "transformers", transformers.__version__, "numpy", numpy.__version__,
      "fastapi", fastapi.__version__, "trl", trl.__version__, "verl", verl.__version__)'
HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 "$VENV/bin/pytest" -q -p no:cacheprovider -m unit tests/training
