#!/usr/bin/env bash
# Device check for a session with one GPU: measures what `docs/sources.md`
# ("Measured by codesign commands") quotes, writing JSON (and logs) to $OUT.
#
#   OUT=/some/dir bash benchmarks/device_check.sh
#
# Runs from the repository root with PYTHONPATH=. (no install). Needs python3
# with jax (CUDA build), equinox, optax, flax, chex, matplotlib; no network.
# Every step is bounded with `timeout`; a failed step is recorded in
# $OUT/status.txt and the script goes on. Total under 8 minutes on an H100/H200.
set -u
OUT=${OUT:-out/device_check}
mkdir -p "$OUT"
export PYTHONPATH=.${PYTHONPATH:+:$PYTHONPATH}
export CODESIGN_CACHE=""  # no compilation cache: first-run numbers, nothing written outside $OUT
PY=${PYTHON:-python3}
STATUS="$OUT/status.txt"
: > "$STATUS"

step() {  # step NAME SECONDS COMMAND... : stdout -> $OUT/NAME.json, stderr -> $OUT/NAME.log
  local name=$1 limit=$2
  shift 2
  local start=$SECONDS
  timeout "$limit" "$@" > "$OUT/$name.json" 2> "$OUT/$name.log"
  local rc=$?
  echo "$name rc=$rc seconds=$((SECONDS - start))" | tee -a "$STATUS"
}

$PY -m codesign --version > "$OUT/version.txt" 2>&1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv > "$OUT/nvidia-smi.csv" 2>&1
cat "$OUT/version.txt"

# Kernels first (BF16 against FP8 GEMMs, attention, HBM, sustained clocks and
# power): benchmarks/device_kernels.py through JAX, then through PyTorch where
# the machine has it (each in its own process: each takes the GPU's memory).
# KERNEL_ARGS="--shrink 32 --sustain-s 1" dry-runs them on a CPU.
step kernels_jax 200 $PY benchmarks/device_kernels.py --backend jax ${KERNEL_ARGS:-}
if $PY -c "import torch" 2>/dev/null; then
  step kernels_torch 150 $PY benchmarks/device_kernels.py --backend torch ${KERNEL_ARGS:-}
fi

# The preset the constants are relative to: the device's own where one matches
# (H100 -> dgx-h100, H200 -> dgx-h200), else dgx-h100.
KIND=$($PY -c "import jax; print(jax.devices()[0].device_kind)" 2>/dev/null)
PRESET=$($PY -c "from codesign.execute.compute import preset_for_device as p; print(p('$KIND') or 'dgx-h100')" 2>/dev/null || echo dgx-h100)
echo "device: $KIND; preset: $PRESET" | tee -a "$STATUS"

# FULL=1 adds the fp32 calibration, benchmarks/search.py and a one-GPU bench
DTYPES="bf16 fp8"
[ "${FULL:-0}" = 1 ] && DTYPES="bf16 fp8 fp32"
for dtype in $DTYPES; do
  step "calibrate_compute_$dtype" 100 $PY -m codesign calibrate compute --dtype "$dtype" \
    --system "$PRESET" --json --no-progress --out "$OUT/compute_$dtype.toml"
done
if [ "${FULL:-0}" = 1 ]; then
  step estimate 60 $PY benchmarks/estimate.py
  step search 60 $PY benchmarks/search.py
  # bench on the one GPU: a one-rank mesh, so the collectives are copies: the floor
  # of a collective's time on this device (launch + local copy), not a fabric
  step bench_one_gpu 40 $PY -m codesign bench --op all_reduce --algorithm all \
    --sizes 4KiB:64MiB --iters 10 --warmup 3 --json --no-progress
fi
echo "done: $OUT" | tee -a "$STATUS"
