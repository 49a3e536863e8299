#!/usr/bin/env bash
# make baseline: regenerate the committed baselines, results/baselines/BACKEND/SCENARIO.json. Runs the catalog
# (BACKEND's default scale: ci on sim, full on cuda) into a temporary folder, then `oomlab baseline`, which shows
# what changes (oomlab compare's table) before it writes each file atomically. A run in which an expectation fails
# writes nothing.  usage: scripts/baseline.sh OOMLAB BACKEND
set -euo pipefail
bin=$1 backend=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
rc=0
"$bin" run --backend "$backend" --out "$tmp" >"$tmp/run.txt" || rc=$?
if [ "$rc" -ne 0 ]; then
  cat "$tmp/run.txt"
  echo "make baseline: the catalog run failed (exit $rc): no baseline written" >&2
  exit "$rc"
fi
run=$(ls -d "$tmp"/*/)
run=${run%/}
"$bin" baseline "$run" "results/baselines/${run##*-}"
