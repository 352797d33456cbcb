#!/usr/bin/env bash
# One device run of the real training and evaluation code on a CUDA GPU (scripts/gpu_check.py does the work):
# the tiny demo model, SFT (trl, bf16), a short GRPO (trl), `tp eval run` (transformers backend).
# Python packages the GPU image lacks (or has in another version) come as wheels in .whl/ and are installed
# into /tmp/site, ahead of the image's own packages on PYTHONPATH. Logs and summary.json go to $OUT.
#   usage (on the GPU machine, repo root): bash scripts/gpu_check.sh [extra gpu_check.py args]
# MEMORY_BENCH="--steps 10 --jobs 2" (bench/memory.py's args): also runs `bench/memory.py --device cuda` alongside
# (its own processes, so its CUDA peak counters are its own), report in $OUT/memory_cuda.json, log memory_bench.log.
set -x
OUT=${OUT:-/tmp/gpu_check_out}
mkdir -p "$OUT"
exec > >(tee -a "$OUT/log.txt") 2>&1
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
export TQDM_MININTERVAL=5
date -u
nvidia-smi || true
if [ -z "$SKIP_WHEELS" ] && ls .whl/*.whl >/dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
        || { echo "WHEEL INSTALL FAILED"; exit 3; }
    export PYTHONPATH=/tmp/site:$PWD
else
    export PYTHONPATH=$PWD
fi
python3 - <<'EOF'
import importlib.metadata as m, sys
print("python", sys.version)
for p in ("torch", "transformers", "tokenizers", "trl", "peft", "datasets", "accelerate", "huggingface-hub",
          "pydantic", "pyarrow", "fsspec", "pandas", "numpy", "safetensors", "typer", "rich", "packaging"):
    try:
        print(f"{p:16s} {m.version(p)}")
    except m.PackageNotFoundError:
        print(f"{p:16s} MISSING")
import torch
print("cuda", torch.cuda.is_available(), torch.version.cuda, torch.cuda.get_device_name(0) if torch.cuda.is_available() else "-")
EOF
if [ -n "$MEMORY_BENCH" ]; then
    # the CUDA context's size, alone on the GPU: NVML's used memory before and after one process creates it
    python3 - <<'EOF'
import pynvml, torch
pynvml.nvmlInit(); h = pynvml.nvmlDeviceGetHandleByIndex(0)
before = pynvml.nvmlDeviceGetMemoryInfo(h).used
torch.zeros(1, device="cuda"); torch.cuda.synchronize()
after = pynvml.nvmlDeviceGetMemoryInfo(h).used
print(f"cuda context probe: nvml used before {before / 2**20:.0f} MiB, after {after / 2**20:.0f} MiB, "
      f"torch reserved {torch.cuda.memory_reserved() / 2**20:.0f} MiB -> context "
      f"{(after - before - torch.cuda.memory_reserved()) / 2**20:.0f} MiB")
EOF
    # shellcheck disable=SC2086
    timeout "${MEMORY_BENCH_TIMEOUT:-280}" python3 bench/memory.py --device cuda --output "$OUT/memory_cuda.json" \
        $MEMORY_BENCH >"$OUT/memory_bench.log" 2>&1 &
    mem_pid=$!
fi
timeout "${GPU_CHECK_TIMEOUT:-300}" python3 scripts/gpu_check.py --work /tmp/gpucheck --out "$OUT" "$@"
rc=$?
echo "gpu_check.py rc=$rc"
if [ -n "$MEMORY_BENCH" ]; then
    wait "$mem_pid"
    mem_rc=$?
    echo "bench/memory.py rc=$mem_rc"
    tail -n 30 "$OUT/memory_bench.log"
    [ "$rc" -eq 0 ] && rc=$mem_rc
fi
nvidia-smi --query-gpu=name,memory.used,memory.total,utilization.gpu --format=csv || true
# the run directories' own logs and error files, for the record (at most 8 files come back in all)
tar czf "$OUT/runs.tgz" --exclude='*.safetensors' --exclude='*.pt' --exclude='*.bin' --exclude='*.pth' \
    -C /tmp/gpucheck runs evals 2>/dev/null || true
ls -la "$OUT"
exit $rc
