#!/usr/bin/env bash
# make baseline: regenerate the committed baselines, results/baselines/BACKEND/SCENARIO.json. Runs the catalog
# (BACKEND's default scale: ci on sim, full on cuda) into a temporary folder, then `oomlab baseline`, which shows
# what changes (oomlab compare's table) before it writes each file atomically. A run in which an expectation fails
# writes nothing.  usage: scripts/baseline.sh OOMLAB BACKEND
set -euo pipefail
bin=$1 backend=$2
# The run goes to ${TMPDIR:-/tmp}/oomlab-baseline.PID.XXXXXX, removed on any exit (INT and TERM too); one that a
# SIGKILL left behind is recognised by its name and removed by the next run once its PID is gone (said so).
tmproot=${TMPDIR:-/tmp}
for old in "$tmproot"/oomlab-baseline.*.*; do
  [ -d "$old" ] && [ ! -L "$old" ] || continue
  pid=${old#"$tmproot"/oomlab-baseline.}
  pid=${pid%%.*}
  case $pid in '' | *[!0-9]*) continue ;; esac
  if ! kill -0 "$pid" 2>/dev/null && [ -O "$old" ]; then
    rm -rf "$old" && echo "make baseline: removed $old, left by a run that was killed"
  fi
done
tmp=$(mktemp -d "$tmproot/oomlab-baseline.$$.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
trap 'exit 130' INT
trap 'exit 143' TERM HUP
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
