#!/usr/bin/env bash
# compute-sanitizer memcheck and leak-check over the catalog on the cuda backend (issue 11, item 8). Run on the GPU
# machine from the repository root, with .gpubundle/ from `make gpu-bundle` carried (as scripts/gpu_check.sh,
# whose `sanitize-catalog` part runs this). Two passes of
#   compute-sanitizer --tool memcheck --leak-check full oomlab run --backend cuda --scale ci --no-fork
# (--no-fork: the variants run in the one process the sanitizer watches, not in children it would not follow)
#   1. caching off (OOMLAB_NO_CUDA_MEMORY_CACHING=1, as PYTORCH_NO_CUDA_MEMORY_CACHING=1 does for PyTorch): every
#      tensor is a cudaMalloc of its own, so memcheck sees each tensor's bounds and the leak check each tensor;
#   2. caching on (OOMLAB_NO_CUDA_MEMORY_CACHING=0): the allocator as oomlab runs it, segments and all.
# The leak check lists device allocations not freed when the CUDA context is destroyed; oomlab calls no
# cudaDeviceReset, so it relies on the context's teardown at process exit (the summary says so).
# CI scale: memcheck instruments every kernel and slows it many times over; the full-scale catalog would not fit
# the device tool's 10 minutes twice. With caching off memory_stats stay 0 (as in PyTorch), so the expectations that
# read them fail and `oomlab run` exits 1: that pass is judged by the sanitizer alone, not by oomlab's exit status.
# Arguments pick the passes (default both, in this order): uncached cached; one a call when both do not fit.
# Into $OUT (default gpu-out): sanitize.txt (the summary: each pass's ERROR SUMMARY and LEAK SUMMARY lines, oomlab's
# exit status and header) and sanitize.tar.gz (the full logs and result files).
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-gpu-out}
B=.gpubundle
export LD_LIBRARY_PATH="$PWD/$B/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
for mode in "$@"; do
  case $mode in uncached|cached) ;; *) echo "gpu_sanitize: unknown pass '$mode' (uncached, cached)" >&2; exit 2;; esac
done
limit=${SANITIZE_TIMEOUT:-270} # seconds a pass may take: two passes and the start fit in 10 minutes
logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT # also when the run fails or is interrupted
mkdir -p "$out"
summary="$out/sanitize.txt"
: >"$summary"
rc=0

for mode in ${*:-uncached cached}; do
  flag=1
  [ "$mode" = cached ] && flag=0
  echo "== compute-sanitizer memcheck --leak-check full: oomlab run --backend cuda --scale ci, caching $([ $flag = 1 ] && echo off || echo on)" |
    tee -a "$summary"
  start=$(date +%s)
  env -u PYTORCH_NO_CUDA_MEMORY_CACHING -u PYTORCH_NO_HIP_MEMORY_CACHING OOMLAB_NO_CUDA_MEMORY_CACHING=$flag \
    timeout "$limit" compute-sanitizer --tool memcheck --leak-check full --print-limit 50 \
    $B/oomlab run --backend cuda --scale ci --no-fork --out "$logs/runs-$mode" >"$logs/$mode.log" 2>&1
  st=$?
  echo "exit $st after $(( $(date +%s) - start )) s$([ $st = 124 ] && echo " (timed out at $limit s: no ERROR SUMMARY)")" |
    tee -a "$summary"
  grep -E '^(backend|cap|caching)' "$logs/$mode.log" | head -3 | tee -a "$summary"
  grep -E 'ERROR SUMMARY|LEAK SUMMARY|Leaked [0-9]+ bytes' "$logs/$mode.log" | head -20 | tee -a "$summary"
  # clean: oomlab ran the catalog (exit 0, or 1 for failed expectations; 2 is bad input or no GPU, 124 the timeout),
  # the sanitizer's summary is there and says 0 errors, and no leak was listed
  # ("LEAK SUMMARY: 0 bytes leaked in 0 allocations" is the clean answer)
  if [ $st -gt 1 ] || ! grep -qE 'ERROR SUMMARY: 0 errors' "$logs/$mode.log" ||
    grep -E 'LEAK SUMMARY|Leaked [0-9]+ bytes' "$logs/$mode.log" | grep -qvE 'LEAK SUMMARY: 0 bytes leaked in 0 allocations'; then
    echo "NOT CLEAN: see $mode.log in sanitize.tar.gz" | tee -a "$summary"
    rc=1
  fi
done

echo "note: oomlab calls no cudaDeviceReset; the leak check sees what the context's teardown at exit shows it" |
  tee -a "$summary"
tar -czf "$out/sanitize.tar.gz" -C "$logs" .
rm -rf "$logs"
echo "gpu_sanitize: exit $rc" | tee -a "$summary"
exit $rc
