#!/usr/bin/env bash
# The distributed scenarios on a machine with two GPUs (issue 21): run from the repository root with .gpubundle/
# (`make gpu-bundle`) carried, PyTorch 2.11 and torchrun on the machine. It
#   1. records the PyTorch twins with torchrun --nproc_per_node 2 (scripts/twins/data_parallel.py) into
#      $OUT/twins/NAME.torch.json: every rank's memory_stats() at every sample, and each rank's NCCL buffers as
#      measured (the note nccl_buffers_bytes);
#   2. runs oomlab's cuda backend on the two GPUs (oomlab run NAME --backend cuda: one rank per GPU, NCCL loaded from
#      PyTorch's wheel, site-packages/nvidia/nccl/lib) into $OUT/cuda/, and sim at full scale (--dry-run) into
#      $OUT/sim/; --jobs 1 on cuda, since NCCL's buffers are measured with cudaMemGetInfo, which sees the whole
#      GPU (a variant beside it would count);
#   3. compares them per rank: cuda against sim (scripts/cuda_vs_sim.py: every counter of every sample of every
#      device) into $OUT/cuda_vs_sim.txt, and the twin against sim (scripts/twins/compare_ranks.py) into
#      $OUT/twin_vs_sim.txt.
# NVLink multicast (NVLS) stays off for NCCL (NCCL_NVLS_ENABLE=0), in the twin and in oomlab alike.
# Usage: bash scripts/gpu_nccl.sh [SCENARIO...]   (default: data_parallel; sharded_training is the other one)
set -uo pipefail
cd "$(dirname "$0")/.."
scenarios=${*:-data_parallel}
out=${OUT:-gpu-out}
mkdir -p "$out/twins" "$out/cuda" "$out/sim"
B=.gpubundle
# the folder of PyTorch's libnccl.so.2 (its wheel's nvidia-nccl package: site-packages/nvidia/nccl/lib, or nvidia/cu13/lib)
nccl_lib=$(python3 - <<'PY' 2>/dev/null
import glob, os, torch
site = os.path.dirname(os.path.dirname(torch.__file__))
hits = sorted(glob.glob(os.path.join(site, "nvidia", "**", "libnccl.so.2"), recursive=True))
print(os.path.dirname(hits[0]) if hits else "")
PY
)
export LD_LIBRARY_PATH="$PWD/$B/lib${nccl_lib:+:$nccl_lib}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1
rc=0
nvidia-smi --query-gpu=index,name,memory.total,driver_version --format=csv,noheader | tee "$out/gpu.txt"
python3 -c 'import torch; print("torch", torch.__version__, "nccl", torch.cuda.nccl.version())' | tee -a "$out/gpu.txt"
echo "libnccl from: ${nccl_lib:-the library path}" | tee -a "$out/gpu.txt"
for s in $scenarios; do
  echo "== $s: the twin (torchrun --nproc_per_node 2)"
  timeout 240 python3 "scripts/twins/$s.py" --json "$out/twins/$s.torch.json" 2>"$out/twins/$s.log" || rc=1
  tail -n 8 "$out/twins/$s.log"
  echo "== $s: oomlab on cuda (two GPUs) and on sim"
  timeout 300 "$B/oomlab" run "$s" --backend cuda --jobs 1 --out "$out/cuda" >"$out/cuda/$s.txt" 2>&1 || rc=1
  tail -n 3 "$out/cuda/$s.txt"
  "$B/oomlab" run "$s" --backend sim --dry-run --out "$out/sim" >"$out/sim/$s.txt" 2>&1 || rc=1
  grep -h -E "NCCL|collectives" "$out/cuda/$s.txt" | sort -u | head -4
  grep -h -o '"nccl_buffers_bytes [0-9-]*"' "$out/twins/$s.torch.json" | sort | uniq -c
done
# --out DIR writes under DIR/STAMP-BACKEND/: the latest of each
simdir=$(ls -d "$out"/sim/*-sim 2>/dev/null | tail -n 1)
cudadir=$(ls -d "$out"/cuda/*-cuda 2>/dev/null | tail -n 1)
python3 scripts/cuda_vs_sim.py "${simdir:-$out/sim}" "${cudadir:-$out/cuda}" | tee "$out/cuda_vs_sim.txt" | tail -n 8 || rc=1
for s in $scenarios; do
  python3 scripts/twins/compare_ranks.py "$out/twins/$s.torch.json" "${simdir:-$out/sim}/$s.json" | tee "$out/twin_vs_sim_$s.txt" \
    | tail -n 8 || rc=1
done
tar -czf "$out/gpu_nccl.tar.gz" -C "$out" twins cuda sim gpu.txt cuda_vs_sim.txt $(cd "$out" && ls twin_vs_sim_*.txt) \
  2>/dev/null
exit $rc
