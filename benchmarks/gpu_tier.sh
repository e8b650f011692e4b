#!/usr/bin/env bash
# The GPU tier in one time-boxed run, for a machine with CUDA, CuPy and torch (no install: the
# checkout is put on PYTHONPATH). Writes at most 8 files to $OUT (default ./gpu-out):
#   env.txt        nvidia-smi, versions, `gpucg targets`
#   pytest-gpu.txt pytest -m gpu: tests/gpu and every backend test's cuda parameter
#   bench.txt      every `gpucg bench` on the cuda target beside its peers (torch, CuPy, NumPy)
#   sanitizer.txt  compute-sanitizer memcheck, racecheck and synccheck over benchmarks/sanitize.py
#   profile.txt    benchmarks/host_profile.py: a call's host time beside its kernels', cProfile
#   tune.txt, tune-records.jsonl  `gpucg tune` of the float16 tensor-core GEMM (TUNES: the cases)
# Usage: bash benchmarks/gpu_tier.sh [tests|sanitize|bench|profile|tune ...] (default: the first three, in that
# order, all done within T_ALL seconds; T_TESTS, T_SAN and T_BENCH bound each step or command)
set -u
O=${OUT:-gpu-out}
mkdir -p "$O"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 GPUCG_CACHE_DIR=/tmp/gpucg-cache GPUCG_RECORDS=off
PY=${PYTHON:-python3}
STEPS=${*:-tests sanitize bench}
T_TESTS=${T_TESTS:-240} T_BENCH=${T_BENCH:-60} T_SAN=${T_SAN:-40} T_TUNE=${T_TUNE:-60}
DEADLINE=$((SECONDS + ${T_ALL:-540}))   # every step ends by then, whatever its own limit
left() { local l=$((DEADLINE - SECONDS)); echo $(( l < $1 ? (l > 1 ? l : 1) : $1 )); }

{
  date -u; nvidia-smi; $PY -c "import sys, numpy, cupy, torch; print(sys.version); \
print('numpy', numpy.__version__, 'cupy', cupy.__version__, 'torch', torch.__version__, \
'cuda', cupy.cuda.runtime.runtimeGetVersion(), 'driver', cupy.cuda.runtime.driverGetVersion())"
  $PY -m gpucg.cli targets
} > "$O/env.txt" 2>&1

CC=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1)
for step in $STEPS; do
  case $step in
    tests)
      timeout "$(left "$T_TESTS")" $PY -m pytest -m gpu -v -rfE --tb=short -n 16 -p no:cacheprovider \
        --timeout 120 --no-nvrtc-pass -o addopts="" tests > "$O/pytest-gpu.txt" 2>&1
      echo "pytest exit $?" >> "$O/pytest-gpu.txt" ;;
    bench)
      for b in ${BENCHES:-reduce softmax scan topk sort dense conv2d attention}; do
        echo "=== gpucg bench $b $(date -u +%T)"
        targets=cuda  # on a 9.0 device the wgmma kernels too: cuda -arch=sm_90a
        [ "$CC" = 9.0 ] && targets="cuda,cuda -arch=sm_90a"
        extra=(--targets "$targets"); [ "$b" = scan ] && extra=()
        timeout "$(left "$T_BENCH")" $PY -m gpucg.cli bench "$b" "${extra[@]}" --no-traffic ${BENCH_ARGS:-}
        echo "=== exit $?"
      done > "$O/bench.txt" 2>&1 ;;
    profile)
      timeout "$(left 60)" $PY benchmarks/host_profile.py > "$O/profile.txt" 2>&1 ;;
    tune)
      while IFS= read -r case; do
        [ -z "$case" ] && continue
        echo "=== gpucg tune $case $(date -u +%T)"
        timeout "$(left "$T_TUNE")" $PY -m gpucg.cli tune $case --target cuda --workers 1 \
          --budget "$((T_TUNE - 10))s" --records "$O/tune-records.jsonl" --quiet
        echo "=== exit $?"
      done <<< "${TUNES:-dense --input 4096,4096:float16 --input 4096,4096:float16
dense --input 1024,768:float16 --input 3072,768:float16}" > "$O/tune.txt" 2>&1 ;;
    sanitize)
      for tool in ${SAN_TOOLS:-memcheck racecheck synccheck}; do
        echo "=== compute-sanitizer --tool $tool $(date -u +%T)"
        timeout "$(left "$T_SAN")" compute-sanitizer --tool "$tool" --print-limit 20 \
          $PY benchmarks/sanitize.py
        echo "=== exit $?"
      done > "$O/sanitizer.txt" 2>&1 ;;
  esac
done
