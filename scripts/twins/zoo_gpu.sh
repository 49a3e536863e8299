#!/usr/bin/env bash
# zoo_gpu.sh - the GPU side of `oomlab predict`'s zoo (issue 27) in one device call: every zoo script recorded
# (its memory history plain and with each aten op labelled, the minimum budgets bisected with advise's guess),
# and, beside it, the per-op probes: SDPA's choice and allocations, the cuDNN convolution table.
#
#   bash scripts/twins/zoo_gpu.sh [PART...]     PART: zoo rebisect sdpa convs ops embedding (default: zoo sdpa convs)
#
# rebisect: no recording; the minimum budgets tests/data/predict/zoo/NAME.torch.json lacks, bisected against the
# committed recordings (predict_record.py --rebisect). CONV_MODELS, CONV_BATCHES, CONV_JOBS choose the convs part's
# grid (predict_probes.py's MODELS and BATCHES by default).
#
# Logs and results go to $OUT (default ./zoo_out), packed into at most 8 files. Carry .gpubundle (a no-CUDA build
# of oomlab: make BUILD=build/nocuda NVCC= build/nocuda/oomlab, stripped, with its libcjson) for advise's guesses,
# and .whl with timm and lightning wheels where the machine lacks them. ZOO_ONLY=a,b limits the zoo's cases;
# ZOO_DEADLINE (default 330) and CONV_DEADLINE (default 420) are the seconds after which no new run starts.
set -u
cd "$(dirname "$0")/../.."
OUT="${OUT:-$PWD/zoo_out}"
mkdir -p "$OUT"
parts="${*:-zoo sdpa convs}"
export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
log="$OUT/zoo_gpu.log"
t0=$SECONDS
say() { echo "zoo_gpu: [$((SECONDS - t0)) s] $*" | tee -a "$log"; }

say "$(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1 | head -1)"
if ! python3 -c 'import timm, lightning' 2>/dev/null; then
  say "installing the carried wheels into /tmp/site"
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl \
    >>"$log" 2>&1 && export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
python3 - <<'EOF' 2>&1 | tee -a "$log"
import importlib
for m in ("torch", "transformers", "timm", "torchvision", "accelerate", "lightning"):
    try:
        print("zoo_gpu: %s %s" % (m, importlib.import_module(m).__version__))
    except Exception as e:
        print("zoo_gpu: %s MISSING (%s)" % (m, e))
import torch
print("zoo_gpu: cudnn", torch.backends.cudnn.version(), "gpu", torch.cuda.get_device_name(0))
EOF

pids=()
case " $parts " in *" sdpa "*)
  (python3 scripts/twins/predict_probes.py sdpa --out "$OUT/sdpa.json" >"$OUT/sdpa.log" 2>&1
   say "sdpa exit $?") & pids+=($!) ;;
esac
case " $parts " in *" embedding "*)
  (python3 scripts/twins/predict_probes.py embedding --out "$OUT/embedding.json" >"$OUT/embedding.log" 2>&1
   say "embedding exit $?") & pids+=($!) ;;
esac
case " $parts " in *" ops "*)
  (python3 scripts/twins/predict_probes.py ops --out "$OUT/ops.json" >"$OUT/ops.log" 2>&1
   say "ops exit $?") & pids+=($!) ;;
esac
case " $parts " in *" convs "*)
  models=()
  [ -n "${CONV_MODELS:-}" ] && models=(--models "$CONV_MODELS")
  (python3 scripts/twins/predict_probes.py convs --out "$OUT/convs.json" -j "${CONV_JOBS:-3}" "${models[@]}" \
     --batches "${CONV_BATCHES:-8,16,32,64}" --deadline "${CONV_DEADLINE:-420}" >"$OUT/convs.log" 2>&1
   say "convs exit $?") & pids+=($!) ;;
esac
case " $parts " in *" zoo "*)
  only=()
  [ -n "${ZOO_ONLY:-}" ] && only=(--only "$ZOO_ONLY")
  fake=(); [ -n "${ZOO_FAKE:-}" ] && fake=(--fake)
  timeout -s INT "${ZOO_LIMIT:-470}" python3 scripts/twins/predict_record.py --zoo "${fake[@]}" --labelled --oomlab .gpubundle/oomlab.sh --out "$OUT/zoo" \
    -j "${ZOO_JOBS:-10}" --leave "${ZOO_LEAVE:-40000}" --timeout 150 --deadline "${ZOO_DEADLINE:-330}" "${only[@]}" \
    >"$OUT/zoo.log" 2>&1
  say "zoo exit $?" ;;
esac
case " $parts " in *" rebisect "*)
  only=()
  [ -n "${ZOO_ONLY:-}" ] && only=(--only "$ZOO_ONLY")
  fake=(); [ -n "${ZOO_FAKE:-}" ] && fake=(--fake)
  timeout -s INT "${ZOO_LIMIT:-470}" python3 scripts/twins/predict_record.py --zoo "${fake[@]}" \
    --rebisect tests/data/predict/zoo --oomlab .gpubundle/oomlab.sh --out "$OUT/rebisect" -j "${ZOO_JOBS:-10}" \
    --leave "${ZOO_LEAVE:-40000}" --timeout 150 --deadline "${ZOO_DEADLINE:-330}" "${only[@]}" \
    >"$OUT/rebisect.log" 2>&1
  say "rebisect exit $?" ;;
esac
for p in "${pids[@]}"; do wait "$p"; done
say "packing"
(cd "$OUT" && tar cJf zoo_gpu.tar.xz --exclude=zoo_gpu.tar.xz --exclude='*.log' -- * 2>>"$log")
ls -la "$OUT" "$OUT/zoo" 2>&1 | tee -a "$log" >/dev/null
# what comes back: the archive and the logs (a device call returns 8 files)
cp "$OUT/zoo/predict_record.log" "$OUT/predict_record.log" 2>/dev/null || true
cp "$OUT/rebisect/predict_record.log" "$OUT/rebisect_record.log" 2>/dev/null || true
find "$OUT" -mindepth 1 -maxdepth 1 ! -name zoo_gpu.tar.xz ! -name '*.log' -exec rm -rf {} +
say "done"
