#!/usr/bin/env bash
# The layers of harness/ (CONTRIBUTING.md, "Layout"): includes point down only.
#   cli -> run -> runtime -> alloc -> device -> core;  kernels/ -> core;  runtime -> kernels
# scenarios/ sit on run. Prints each include that points up (or sideways into a layer it must not use) and
# exits 1 if there is one.
set -u
cd "$(dirname "$0")/.."
declare -A rank=([core]=0 [device]=1 [kernels]=1 [alloc]=2 [runtime]=3 [run]=4 [scenarios]=4 [cli]=5)
bad=0
while IFS=: read -r file line inc; do
  case $file in harness/*) from=${file#harness/}; from=${from%%/*};; kernels/*) from=kernels;; scenarios/*) from=scenarios;; *) continue;; esac
  to=${inc#\"}; to=${to%%/*}
  case $inc in \"*/*) ;; *) to=kernels;; esac            # bare names are kernels/ headers (-Ikernels)
  [ "$from" = kernels ] && [ "$to" = kernels ] && continue
  ok=1
  if [ "$to" = kernels ]; then [ "${rank[$from]}" -ge 3 ] || [ "$from" = kernels ] || ok=0
  elif [ "$from" = kernels ]; then [ "$to" = core ] || ok=0
  elif [ "$from" = device ] || [ "$from" = alloc ]; then [ "${rank[$to]}" -le "${rank[$from]}" ] && [ "$to" != kernels ] || ok=0
  else [ "${rank[$to]}" -le "${rank[$from]}" ] || ok=0; fi
  if [ $ok = 0 ]; then echo "check_layers: $file:$line includes $inc ($from may not depend on $to)"; bad=1; fi
done < <(grep -n -o -E '#include "[^"]+"' harness/*/* kernels/* scenarios/* | sed -E 's/#include //')
[ $bad = 0 ] && echo "check_layers: every include points down"
exit $bad
