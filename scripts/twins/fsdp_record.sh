#!/bin/bash
# The FSDP2 scripts of tests/data/predict/scripts recorded on the GPU machine with torchrun, each rank through
# scripts/twins/rank_record.py (its peaks and snapshot), for `oomlab predict --nproc N`'s parity (issue 30).
#
#     bash scripts/twins/fsdp_record.sh OUT
#
# One folder per case under OUT (rankK.json, rankK.pickle, torchrun.log) and OUT/cases.log. With fewer GPUs than
# ranks, the ranks share cuda:0 (OOMLAB_SHARE_DEVICE=1) and NCCL, which refuses two ranks on one device, is tried
# first and then replaced by gloo (OOMLAB_BACKEND=gloo): each rank's caching allocator is its own either way.
set -u
out=${1:?usage: fsdp_record.sh OUT}
here=$(cd "$(dirname "$0")" && pwd)
scripts=$here/../../tests/data/predict/scripts
mkdir -p "$out"
ngpu=$(python3 -c 'import torch; print(torch.cuda.device_count())')
case_run() { # NAME NPROC BACKEND SCRIPT ARGS...
    local name=$1 n=$2 backend=$3 script=$4
    shift 4
    local env=()
    if [ "$n" -gt "$ngpu" ]; then
        env+=(OOMLAB_SHARE_DEVICE=1)
    fi
    if [ "$backend" != nccl ]; then
        env+=(OOMLAB_BACKEND="$backend")
    fi
    mkdir -p "$out/$name"
    local t0=$SECONDS
    env "${env[@]}" timeout 180 torchrun --standalone --nproc_per_node "$n" "$here/rank_record.py" "$out/$name" \
        "$scripts/$script" "$@" > "$out/$name/torchrun.log" 2>&1
    local rc=$?
    echo "$name: nproc $n backend $backend ${env[*]} $script $* -> rc $rc in $((SECONDS - t0)) s" | tee -a "$out/cases.log"
    grep -h '^rank [0-9]*: {' "$out/$name/torchrun.log" | sed 's/^/    /' | tee -a "$out/cases.log"
    return $rc
}
case_run w1_mlp 1 nccl fsdp_mlp.py
case_run w1_llama 1 nccl fsdp_llama.py
case_run w1_llama_ckpt 1 nccl fsdp_llama.py --checkpoint
case_run w1_llama_bf16 1 nccl fsdp_llama.py --bf16
case_run w1_llama_bf16_ckpt 1 nccl fsdp_llama.py --bf16 --checkpoint
case_run w1_llama_offload 1 nccl fsdp_llama.py --offload
back=nccl
if [ "$ngpu" -lt 2 ]; then
    case_run w2_nccl_probe 2 nccl fsdp_llama.py --steps 1 || back=gloo
fi
case_run w2_mlp 2 $back fsdp_mlp.py
case_run w2_llama 2 $back fsdp_llama.py
case_run w2_llama_ckpt 2 $back fsdp_llama.py --checkpoint
case_run w2_llama_bf16 2 $back fsdp_llama.py --bf16
case_run w2_llama_keep 2 $back fsdp_llama.py --keep-gathered
case_run w2_llama_prefetch 2 $back fsdp_llama.py --prefetch 1
case_run w2_llama_offload 2 $back fsdp_llama.py --offload
case_run w2_llama_8b_2layer 2 $back fsdp_llama.py --size 8b --layers 2 --batch 1 --seq 1024
case_run w4_hsdp_bf16 4 $back fsdp_llama.py --replicate 2 --bf16
