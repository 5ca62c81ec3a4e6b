#!/usr/bin/env bash
# One device call: carried wheels, environment record, parallel prebuild, GPU tests, benchmark.
# Usage on the GPU machine, from the repository root: bash bench/gpu_run.sh [tests|bench|all]
set -uo pipefail
what=${1:-all}
OUT=${OUT:-/tmp/kp-out}
mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 KERNELPILOT_CACHE=/tmp/kp-cache
{ nvidia-smi; python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, torch.cuda.get_device_name())"; nvcc --version | tail -2; } > "$OUT/env.txt" 2>&1
cat "$OUT/env.txt"
if [[ $what == tests || $what == all ]]; then
  python3 bench/prebuild_gpu.py > "$OUT/prebuild.log" 2>&1; echo "prebuild exit $?"
  python3 -m pytest -q -m gpu -p no:cacheprovider tests -rA 2>&1 | tee "$OUT/gpu_tests.log" | tail -60
fi
if [[ $what == bench || $what == all ]]; then
  python3 bench/bench_offline.py --device cuda --out "$OUT/bench_offline.json" 2> "$OUT/bench_offline.err" | tee "$OUT/bench_offline.md"
  python3 bench/bench_verify_overhead.py --device cuda 2>&1 | tee "$OUT/verify_overhead.md"
fi
