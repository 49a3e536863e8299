#!/usr/bin/env bash
# make nightly: run the catalog, compare it with the committed baseline, append it to the history, print the steps
# in the history, export it for CI dashboards, and draw the trend plots.
#   usage: scripts/nightly.sh OOMLAB BACKEND    (BACKEND: auto, sim or cuda; auto is cuda when a GPU is visible)
#   the run:      results/runs/STAMP-BACKEND/ (oomlab run)
#   compared to:  results/baselines/BACKEND/ (oomlab compare; a regression makes the exit status 1)
#   history:      $HISTORY, default results/history.csv (oomlab history --append: one row per run, scenario,
#                 variant and metric), then every step in it (oomlab history)
#   exports:      results/nightly/junit.xml, gbench.json, smaller_is_better.json (oomlab export)
#   trend plots:  results/nightly/trends/ (oomlab plot --trend), when this oomlab has that command
# Exit status: the run's when it is 2 (bad input), else 1 when the run or the comparison fails, else 0.
set -uo pipefail
bin=$1 backend=$2
history=${HISTORY:-results/history.csv}
out=results/nightly
mkdir -p "$out"
rc_run=0
"$bin" run --backend "$backend" --out results/runs >"$out/run.txt" || rc_run=$?
cat "$out/run.txt"
run=$(sed -n 's/^results: //p' "$out/run.txt" | tail -n 1)
if [ "$rc_run" -eq 2 ] || [ -z "$run" ] || [ ! -d "$run" ]; then
  echo "make nightly: the catalog run wrote no results (exit $rc_run)" >&2
  exit 2
fi
b=${run##*-}
commit=$(git describe --always --dirty 2>/dev/null || echo unknown)
echo "nightly: commit $commit, backend $b, run $run"
rc_cmp=0
if [ -d "results/baselines/$b" ]; then
  "$bin" compare "results/baselines/$b" "$run" || rc_cmp=$?
else
  echo "nightly: no baseline for $b (results/baselines/$b): make baseline BACKEND=$b writes one; not compared"
fi
"$bin" history "$history" --append "$run" --commit "$commit" || exit 2
"$bin" export "$run" --junit "$out/junit.xml" --gbench "$out/gbench.json" --smaller-is-better "$out/smaller_is_better.json" || exit 2
if "$bin" help plot 2>/dev/null | grep -q -- '--trend'; then
  "$bin" plot --trend "$history" -o "$out/trends" || rc_cmp=1
else
  echo "nightly: trend plots skipped: this oomlab has no 'plot --trend' command"
fi
[ "$rc_cmp" -eq 2 ] && exit 2
[ "$rc_run" -ne 0 ] || [ "$rc_cmp" -ne 0 ] && exit 1
exit 0
