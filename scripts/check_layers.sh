#!/usr/bin/env bash
# The layers of harness/ (CONTRIBUTING.md, "Layout"): includes point down only.
#   cli -> bench -> analysis -> figures -> results -> run -> training -> runtime -> trace -> alloc -> device -> core;
#   kernels/ -> core;  runtime (and above) -> kernels.
# scenarios/ sit on run. Each folder may include its own rank and below; device, alloc and trace never kernels/. Prints each include that points up (or sideways into a layer it must not use) and
# exits 1 if there is one.
set -u
cd "$(dirname "$0")/.."
declare -A rank=([core]=0 [device]=1 [kernels]=1 [alloc]=2 [trace]=3 [runtime]=4 [training]=5 [run]=6 [scenarios]=6 [results]=7
                 [figures]=8 [analysis]=9 [bench]=10 [cli]=11)
bad=0
while IFS=: read -r file line inc; do
  case $file in harness/*) from=${file#harness/}; from=${from%%/*};; kernels/*) from=kernels;; scenarios/*) from=scenarios;; *) continue;; esac
  to=${inc#\"}; to=${to%%/*}
  case $inc in \"*/*) ;; *) to=kernels;; esac            # bare names are kernels/ headers (-Ikernels)
  [ "$from" = kernels ] && [ "$to" = kernels ] && continue
  ok=1
  if [ "$to" = kernels ]; then [ "${rank[$from]}" -ge "${rank[runtime]}" ] || [ "$from" = kernels ] || ok=0
  elif [ "$from" = kernels ]; then [ "$to" = core ] || ok=0
  elif [ "$from" = device ] || [ "$from" = alloc ] || [ "$from" = trace ]; then [ "${rank[$to]}" -le "${rank[$from]}" ] && [ "$to" != kernels ] || ok=0
  else [ "${rank[$to]}" -le "${rank[$from]}" ] || ok=0; fi
  if [ $ok = 0 ]; then echo "check_layers: $file:$line includes $inc ($from may not depend on $to)"; bad=1; fi
done < <(grep -n -o -E '#include "[^"]+"' harness/*/* kernels/* scenarios/* | sed -E 's/#include //')
[ $bad = 0 ] && echo "check_layers: every include points down"
exit $bad
