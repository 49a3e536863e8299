#!/usr/bin/env bash
# predict_venv.sh - the Python that `oomlab predict` runs the capture (scripts/oomlab_capture) in: build/venv,
# from the package registry only. torch 2.11.0 is installed without its declared dependencies (the CUDA wheels,
# cuDNN, NCCL: several GB that a capture on the CPU never loads), then exactly the packages its import
# needs on a machine with no GPU, at the versions checked to import it (pure Python, plus the three NVIDIA
# libraries `import torch` loads even when no CUDA code runs; nvidia-cuda-cccl is what the nvshmem wheel pulls in),
# and triton, which torch.compile's Inductor needs to generate a GPU's kernels (never compiled here: the capture's
# cuda_model/compiled.py).
#
#   scripts/predict_venv.sh [--zoo] [VENV]      (default: build/venv beside this script's checkout)
#
# --zoo also installs the model libraries the zoo's scripts use (tests/data/predict/zoo), at the GPU machine's
# versions, with their pure-Python dependencies and without torch's CUDA wheels: transformers 5.17.0, timm 1.0.29,
# torchvision 0.26.0, accelerate 1.15.0 and lightning 2.6.6 (make test; oomlab predict itself installs only torch).
#
# Idempotent and fast when the venv is there: it stops at once when VENV/bin/python imports torch 2.11.0 and
# the stamp VENV/.oomlab-predict (written last) matches this script's package list. Installs take turns on an
# flock on VENV.lock. A failed install leaves no stamp, so the
# next run tries again. Used by `make test` (the prediction tests need it) and by `oomlab predict` on first use.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
zoo=0
if [ "${1:-}" = "--zoo" ]; then
    zoo=1
    shift
fi
venv="${1:-$here/build/venv}"
python="${PYTHON:-python3}"

TORCH="torch==2.11.0"
DEPS=(
    filelock==4.3.1 typing-extensions==4.16.0 sympy==1.14.0 mpmath==1.3.0 networkx==3.6.1 jinja2==3.1.6
    markupsafe==3.0.4 fsspec==2026.9.0 numpy==2.4.6
    nvidia-cufile==1.20.0.107 nvidia-cusparselt-cu13==0.10.0 nvidia-nvshmem-cu13==3.8.0
    nvidia-cuda-cccl==13.3.5.0.6
    ninja==1.13.0
    triton==3.6.0
)
stamp_text="$TORCH ${DEPS[*]}"
# the zoo's libraries and what they import (each pinned; torchvision's and lightning's torch is the one above)
ZOO=(
    transformers==5.17.0 timm==1.0.29 torchvision==0.26.0 accelerate==1.15.0 lightning==2.6.6
    huggingface_hub==1.33.0 tokenizers==0.23.3 safetensors==0.8.0 regex==2026.11.19 PyYAML==6.0.4 packaging==26.4
    tqdm==4.70.1 hf-xet==1.8.0 httpx==0.28.1 httpcore==1.0.9 h11==0.16.0 anyio==4.16.0 idna==3.20
    certifi==2026.10.19.post1 typer==0.29.2 click==8.5.1 rich==15.0.0 markdown-it-py==4.3.0 mdurl==0.1.2
    Pygments==2.21.0 shellingham==1.5.4 annotated-doc==0.0.7 pillow==13.0.0 psutil==7.2.2
    lightning-utilities==0.15.3 pytorch-lightning==2.6.6 torchmetrics==1.9.0 pydantic==2.14.4 pydantic_core==2.50.5
    annotated-types==0.8.0 typing-inspection==0.4.5 aiohttp==3.14.5 aiohappyeyeballs==2.7.1 aiosignal==1.4.0
    attrs==26.1.0 frozenlist==1.8.0 multidict==7.2.1 propcache==0.5.4 yarl==1.25.1
)
zoo_text="${ZOO[*]}"

install_zoo() {
    if [ -f "$venv/.oomlab-zoo" ] && [ "$(cat "$venv/.oomlab-zoo")" = "$zoo_text" ]; then
        return 0
    fi
    local start=$(date +%s)
    echo "predict_venv: installing the zoo's libraries (${#ZOO[@]} packages) into $venv" >&2
    rm -f "$venv/.oomlab-zoo"
    "$venv/bin/python" -m pip install --quiet --no-deps "${ZOO[@]}"
    "$venv/bin/python" -c 'import transformers, timm, torchvision, accelerate, lightning' || {
        echo "predict_venv: $venv/bin/python does not import the zoo's libraries" >&2
        exit 1
    }
    printf '%s' "$zoo_text" > "$venv/.oomlab-zoo.tmp" && mv "$venv/.oomlab-zoo.tmp" "$venv/.oomlab-zoo"
    echo "predict_venv: the zoo's libraries ready in $(( $(date +%s) - start )) s" >&2
}

ready() { [ -x "$venv/bin/python" ] && [ -f "$venv/.oomlab-predict" ] && [ "$(cat "$venv/.oomlab-predict")" = "$stamp_text" ]; }
zoo_ready() { [ -f "$venv/.oomlab-zoo" ] && [ "$(cat "$venv/.oomlab-zoo")" = "$zoo_text" ]; }
if ready && { [ "$zoo" = 0 ] || zoo_ready; }; then
    exit 0
fi

# One installer at a time: two first uses at once (two predicts, the suite's tests in parallel) take turns on an
# flock beside the venv (dropped by the kernel if the holder dies); the second then finds the stamp and is done.
mkdir -p "$(dirname "$venv")"
exec 9>"$venv.lock"
if ! flock -w 1800 9; then
    echo "predict_venv: another install has held $venv.lock for 30 minutes; remove $venv if none is running" >&2
    exit 1
fi
if ! ready; then
    start=$(date +%s)
    echo "predict_venv: installing $TORCH and ${#DEPS[@]} packages into $venv (about 2 GB, a few minutes)" >&2
    rm -f "$venv/.oomlab-predict"
    [ -x "$venv/bin/python" ] || "$python" -m venv "$venv"
    "$venv/bin/python" -m pip install --quiet --no-deps "$TORCH" "${DEPS[@]}"
    "$venv/bin/python" -c 'import torch, sys; sys.exit(0 if torch.__version__.startswith("2.11.0") else 1)' || {
        echo "predict_venv: $venv/bin/python does not import $TORCH" >&2
        exit 1
    }
    printf '%s' "$stamp_text" > "$venv/.oomlab-predict.tmp" && mv "$venv/.oomlab-predict.tmp" "$venv/.oomlab-predict"
    echo "predict_venv: ready in $(( $(date +%s) - start )) s" >&2
fi
[ "$zoo" = 1 ] && install_zoo
exit 0
