#!/usr/bin/env bash
# The GPU check (CONTRIBUTING.md, "Running on a GPU"): run on the GPU machine from the repository root, with
# .gpubundle/ from `make gpu-bundle` carried. It runs
#   1. the whole Criterion suite on the cuda backend (one job at a time), then compute-sanitizer over the kernel
#      suites;
#   2. oomlab run --backend cuda (the whole catalog at full scale), and oomlab parity --backend cuda;
#   3. the PyTorch twins (every scenario's scripts/twins/NAME.py into twins/NAME.torch.json, MLP parity, and
#      MLP parity with cuBLAS's workspaces off, and the allocator's fidelity measurements);
#   4. oomlab bench alloc (cuda and sim), oomlab bench gemm and oomlab bench step.
#   sanitize-catalog (only when named): scripts/gpu_sanitize.sh, compute-sanitizer memcheck --leak-check full over
#      the ci-scale catalog on cuda with caching off, then on (its logs under sanitize/ in the tarball).
# Everything lands in $OUT/gpu_check.tar.gz (one file: the device tool returns few), with a summary on stdout.
#
# Arguments pick the parts (default: all, in this order): suite sanitizer catalog twins bench. A command on the
# device tool runs 10 minutes at most: split the parts over two calls when the whole does not fit.
set -uo pipefail
cd "$(dirname "$0")/.."
parts=${*:-suite sanitizer catalog twins bench}
want() { case " $parts " in *" $1 "*) return 0;; esac; return 1; }
out=${OUT:-gpu-out}
logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT # also when the run fails or is interrupted
B=.gpubundle
export LD_LIBRARY_PATH="$PWD/$B/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export PYTHONUNBUFFERED=1
rc=0
step() { echo "== $*"; }

nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$logs/gpu.txt"
python3 -c 'import torch; print("torch", torch.__version__)' | tee -a "$logs/gpu.txt"

if want suite; then
step "the suite on cuda"
OOMLAB_TEST_BACKEND=cuda OOMLAB_BIN=$B/oomlab timeout 420 $B/oomlab_tests --color=never --jobs 1 \
  >"$logs/test_cuda.log" 2>&1 || rc=1
tail -n 1 "$logs/test_cuda.log"
grep -E '^\[(FAIL|----)\]' "$logs/test_cuda.log" | head -30

fi
if want sanitizer; then
step "compute-sanitizer memcheck: kernel suites on cuda (but the test that trips nll's device assert on purpose)"
OOMLAB_TEST_BACKEND=cuda timeout 150 compute-sanitizer --tool memcheck --print-limit 20 \
  $B/oomlab_tests --color=never --jobs 1 --filter '@(kernels|gemm)/!(assert_*)' >"$logs/sanitizer.log" 2>&1 || rc=1
grep -E 'ERROR SUMMARY|Synthesis' "$logs/sanitizer.log" | tail -2

fi
if want catalog; then
step "oomlab run (the whole catalog, full scale) --backend cuda"
$B/oomlab run --backend cuda --out "$logs/runs" >"$logs/run_cuda.txt" 2>&1 || rc=1
grep -v '^$' "$logs/run_cuda.txt" | head -60

step "oomlab parity --backend cuda"
$B/oomlab parity --backend cuda >"$logs/parity_cuda.jsonl" 2>"$logs/parity_cuda.err" || rc=1
cut -c1-220 "$logs/parity_cuda.jsonl"

fi
if want sanitize-catalog; then
step "compute-sanitizer memcheck --leak-check full: the ci-scale catalog on cuda, caching off then on"
OUT="$logs/sanitize" bash scripts/gpu_sanitize.sh >/dev/null 2>&1 || rc=1
cat "$logs/sanitize/sanitize.txt"

fi
if want twins; then
step "PyTorch twins: every scenario that has one (scripts/twins/NAME.py), then MLP parity"
mkdir -p "$logs/twins"
ngpu=$(nvidia-smi -L 2>/dev/null | wc -l)
for name in $($B/oomlab list | awk '{print $1}'); do
  [ -f "scripts/twins/$name.py" ] || continue
  if grep -q "nproc=" "scripts/twins/$name.py" && [ "$ngpu" -lt 2 ]; then
    echo "$name: a distributed twin (torchrun, a GPU per rank): skipped on $ngpu GPU; scripts/gpu_nccl.sh records it"
    continue
  fi
  timeout 300 python3 "scripts/twins/$name.py" --json "$logs/twins/$name.torch.json" >"$logs/twins/$name.txt" 2>&1 || rc=1
  echo "$name:"; cat "$logs/twins/$name.txt"
done
python3 scripts/twins/mlp_parity.py --json "$logs/mlp_parity.torch.json" >"$logs/twin_mlp.txt" 2>&1 || rc=1
CUBLAS_WORKSPACE_CONFIG=:0:0 CUBLASLT_WORKSPACE_SIZE=0 python3 scripts/twins/mlp_parity.py \
  --json "$logs/mlp_parity_noworkspace.torch.json" train_sgd train_adam workspace >"$logs/twin_mlp_nows.txt" 2>&1 || rc=1
python3 scripts/twins/fidelity.py --json "$logs/fidelity.torch.json" >"$logs/twin_fidelity.txt" 2>&1 || rc=1
cut -c1-200 "$logs/twin_mlp_nows.txt"

fi
if want bench; then
step "bench alloc (sim, cuda, sim again: the same allocator code on the same host)"
$B/oomlab-bench bench alloc --backend sim >"$logs/bench_alloc_sim.txt" || rc=1
$B/oomlab-bench bench alloc --backend cuda | tee "$logs/bench_alloc_cuda.txt" || rc=1
$B/oomlab-bench bench alloc --backend cuda --json >"$logs/bench_alloc_cuda.json" || rc=1
$B/oomlab-bench bench alloc --backend sim >>"$logs/bench_alloc_sim.txt" || rc=1
cat "$logs/bench_alloc_sim.txt"

step "bench gemm"
$B/oomlab-bench bench gemm --backend cuda | tee "$logs/bench_gemm_cuda.txt" || rc=1
$B/oomlab-bench bench gemm --backend cuda --json >"$logs/bench_gemm_cuda.json" || rc=1
step "bench step (CI-scale MLP: the CPU references on sim, the kernels on cuda)"
$B/oomlab-bench bench step --backend sim | tee "$logs/bench_step_sim.txt" || rc=1
$B/oomlab-bench bench step --backend cuda | tee "$logs/bench_step_cuda.txt" || rc=1
$B/oomlab-bench bench step --backend cuda --width 4096 --batch 256 | tee "$logs/bench_step_cuda_4096.txt" || rc=1
lscpu >"$logs/cpu.txt" 2>&1
fi

mkdir -p "$out"
tar -czf "$out/gpu_check.tar.gz" -C "$logs" .
rm -rf "$logs"
echo "gpu_check: exit $rc"
exit $rc
