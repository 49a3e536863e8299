#!/usr/bin/env bash
# gallery.sh - draw the README's gallery (docs/img/gallery/*.png) from the catalog at full scale, dry run on sim,
# and oversize_batch's batch sweep: the figures are byte-identical reruns of the same data, so the committed
# images are exactly what this draws.
#   scripts/gallery.sh OOMLAB [OUT]          draw into OUT (default docs/img/gallery), replacing its images
#   scripts/gallery.sh --check OOMLAB [DIR]  draw into a scratch folder, compare with DIR (default
#                                            docs/img/gallery): exit 1 naming each image that differs
set -euo pipefail
check=0
if [ "${1:-}" = "--check" ]; then check=1; shift; fi
bin=${1:?usage: gallery.sh [--check] OOMLAB [DIR]}
case "$bin" in /*) ;; *) bin="$PWD/$bin" ;; esac
dest=${2:-docs/img/gallery}
# and the README's two other figures: advise's in "Is my OOM fragmentation?" (docs/img/advise-addr_transformer.png)
# and fragmentation's timeline at ci scale (docs/img/fragmentation-sim.png)
# one gallery image per failure mode: the figure that shows it best
images="dangling_tensors.png retained_graph.png unzeroed_grads.png oversize_batch.sweep.png inplace_ops.png
fragmentation-segments.png inference_oom-peaks.png model_too_large.png pinned_memory.png data_parallel.png"
work=$(mktemp -d "${TMPDIR:-/tmp}/oomlab_gallery.XXXXXX")
trap 'rm -rf "$work"' EXIT
(
    cd "$work"
    env -u OOMLAB_ALLOC_CONF -u PYTORCH_CUDA_ALLOC_CONF -u PYTORCH_ALLOC_CONF \
        "$bin" run --dry-run --plot >run.log 2>&1 || { cat run.log >&2; exit 2; }
    env -u OOMLAB_ALLOC_CONF -u PYTORCH_CUDA_ALLOC_CONF -u PYTORCH_ALLOC_CONF \
        "$bin" run oversize_batch --sweep batch=64..16384 --dry-run --plot >sweep.log 2>&1 || { cat sweep.log >&2; exit 2; }
)
mkdir -p "$work/out"
env -u OOMLAB_ALLOC_CONF -u PYTORCH_CUDA_ALLOC_CONF -u PYTORCH_ALLOC_CONF \
    "$bin" advise tests/data/addr_transformer.trace.json --plot "$work/out/advise-addr_transformer.png" >/dev/null
# the README's first figure: `oomlab run fragmentation --plot` as the README runs it (sim, ci scale)
(
    cd "$work" && mkdir ci && cd ci
    env -u OOMLAB_ALLOC_CONF -u PYTORCH_CUDA_ALLOC_CONF -u PYTORCH_ALLOC_CONF \
        "$bin" run fragmentation --plot >run.log 2>&1 || { cat run.log >&2; exit 2; }
)
cp "$(find "$work/ci/results" -name fragmentation.png -type f | head -n 1)" "$work/out/fragmentation-sim.png"
advise_dest="$dest/../advise-addr_transformer.png" frag_dest="$dest/../fragmentation-sim.png"
for img in $images; do
    found=$(find "$work/results" -name "$img" -type f | head -n 1)
    [ -n "$found" ] || { echo "gallery.sh: the runs drew no $img" >&2; exit 2; }
    cp "$found" "$work/out/$img"
done
if [ $check = 1 ]; then
    bad=0
    for img in $images; do
        cmp -s "$work/out/$img" "$dest/$img" || { echo "gallery.sh: $dest/$img differs from what make gallery draws" >&2; bad=1; }
    done
    cmp -s "$work/out/advise-addr_transformer.png" "$advise_dest" || { echo "gallery.sh: $advise_dest differs from what make gallery draws" >&2; bad=1; }
    cmp -s "$work/out/fragmentation-sim.png" "$frag_dest" || { echo "gallery.sh: $frag_dest differs from what make gallery draws" >&2; bad=1; }
    [ $bad = 0 ] && echo "gallery: the 12 images equal what make gallery draws"
    exit $bad
fi
mkdir -p "$dest"
for img in $images; do cp "$work/out/$img" "$dest/$img"; done
cp "$work/out/advise-addr_transformer.png" "$advise_dest"
cp "$work/out/fragmentation-sim.png" "$frag_dest"
echo "gallery: 10 images in $dest, and $advise_dest and $frag_dest"
