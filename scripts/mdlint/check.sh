#!/usr/bin/env bash
# check.sh - make mdlint: the project's Markdown through PyMarkdown (PYMARKDOWN: its binary), with .pymarkdown.json
# and the closed-fences rule beside this script; then proof that the linter still reports the faults it is here
# for, on tests/data/mdlint/broken.md: an unclosed fence (OOM001), a heading without blank lines (MD022), a fence
# without them (MD031).
set -u
here=$(dirname "$0")
lint() { "$PYMARKDOWN" --config .pymarkdown.json --add-plugin "$here/closed_fences.py" scan "$@"; }
lint "$@" || { echo "make mdlint: fix the Markdown above" >&2; exit 1; }
out=$(lint tests/data/mdlint/broken.md)
for rule in OOM001 MD022 MD031; do
    grep -q ": $rule: " <<<"$out" || { echo "make mdlint: the linter no longer reports $rule in tests/data/mdlint/broken.md" >&2; exit 1; }
done
echo "make mdlint: $# files clean; OOM001, MD022 and MD031 still reported on tests/data/mdlint/broken.md"
