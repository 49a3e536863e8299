#!/usr/bin/env bash
# Run on the GPU machine (see CONTRIBUTING.md): the test suite on the cuda backend, the allocator benchmark,
# and the suite on sim for comparison. Logs go to $OUT (or ./gpu-out). Expects build/ and .devlibs/ from
# `make gpu-bundle`.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-gpu-out}
mkdir -p "$out"
export LD_LIBRARY_PATH="$PWD/.devlibs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$out/gpu.txt"
rc=0
echo "== make test BACKEND=cuda (the suite, one job at a time)"
OOMLAB_TEST_BACKEND=cuda OOMLAB_BIN=build/oomlab build/oomlab_tests --color=never --jobs 1 \
  >"$out/test_cuda.log" 2>&1 || rc=1
tail -n 1 "$out/test_cuda.log"
grep -E '^\[(FAIL|----)\]' "$out/test_cuda.log" | head -40
echo "== the same suite on sim"
OOMLAB_TEST_BACKEND=sim OOMLAB_BIN=build/oomlab build/oomlab_tests --color=never >"$out/test_sim.log" 2>&1 || rc=1
tail -n 1 "$out/test_sim.log"
echo "== oomlab bench alloc (cuda, OOM_DEBUG=0)"
build/bench/oomlab bench alloc --backend cuda | tee "$out/bench_cuda.txt" || rc=1
build/bench/oomlab bench alloc --backend cuda --json >"$out/bench_cuda.json" || rc=1
echo "== oomlab bench alloc (sim, same host)"
build/bench/oomlab bench alloc --backend sim | tee "$out/bench_sim.txt" || rc=1
exit $rc
