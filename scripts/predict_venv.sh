#!/usr/bin/env bash
# predict_venv.sh - the Python that `oomlab predict` runs the capture (scripts/oomlab_capture) in: build/venv,
# from the package registry only. torch 2.11.0 is installed without its declared dependencies (the CUDA wheels,
# triton, cuDNN, NCCL: several GB that a capture on the CPU never loads), then exactly the packages its import
# needs on a machine with no GPU, at the versions checked to import it (pure Python, plus the three NVIDIA
# libraries `import torch` loads even when no CUDA code runs; nvidia-cuda-cccl is what the nvshmem wheel pulls in).
#
#   scripts/predict_venv.sh [VENV]      (default: build/venv beside this script's checkout)
#
# Idempotent and fast when the venv is there: it stops at once when VENV/bin/python imports torch 2.11.0 and
# the stamp VENV/.oomlab-predict matches this script's package list. A failed install leaves no stamp, so the
# next run tries again. Used by `make test` (the prediction tests need it) and by `oomlab predict` on first use.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="${1:-$here/build/venv}"
python="${PYTHON:-python3}"

TORCH="torch==2.11.0"
DEPS=(
    filelock==4.3.1 typing-extensions==4.16.0 sympy==1.14.0 mpmath==1.3.0 networkx==3.6.1 jinja2==3.1.6
    markupsafe==3.0.4 fsspec==2026.9.0 numpy==2.4.6
    nvidia-cufile==1.20.0.107 nvidia-cusparselt-cu13==0.10.0 nvidia-nvshmem-cu13==3.8.0
    nvidia-cuda-cccl==13.3.5.0.6
    ninja==1.13.0
)
stamp_text="$TORCH ${DEPS[*]}"

if [ -x "$venv/bin/python" ] && [ -f "$venv/.oomlab-predict" ] && [ "$(cat "$venv/.oomlab-predict")" = "$stamp_text" ]; then
    exit 0
fi

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
