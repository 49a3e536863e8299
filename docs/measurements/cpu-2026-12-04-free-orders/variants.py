"""The late frees of a predicted trace replayed in sampled orders (the experiment behind predict_free_orders).

    python3 variants.py LOWER.json UPPER.json N OUT.json: a line per order (mode, peak allocated, peak reserved).
"""
import json, random, subprocess, sys
L = json.load(open(sys.argv[1])); U = json.load(open(sys.argv[2])); N = int(sys.argv[3]); out = sys.argv[4]
le = L['device_traces'][0]; ue = U['device_traces'][0]
lower_allocs = set(e['addr'] for e in le if e['action'] == 'alloc')
def counts(ev):
    k = 0; c = {}
    for e in ev:
        if e['action'] == 'alloc' and e['addr'] in lower_allocs: k += 1
        elif e['action'] == 'free_requested' and e['addr'] in lower_allocs: c[e['addr']] = k
    return c
cl, cu = counts(le), counts(ue)
held = {a: (cl[a], cu.get(a, 10**9)) for a in cl if cu.get(a, 10**9) != cl[a]}
print('held', len(held), 'later in upper', sum(1 for a,(x,y) in held.items() if y > x), file=sys.stderr)
def variant(rng, mode):
    pick = {}
    for a, (x, y) in held.items():
        y = min(y, len(lower_allocs))
        pick[a] = x if mode == 'lo' else y if mode == 'hi' else rng.randint(x, y)
    byk = {}
    for a, k in pick.items(): byk.setdefault(k, []).append(a)
    frees = {}
    for e in le:
        if e['action'] != 'alloc' and e['addr'] in held: frees.setdefault(e['addr'], []).append(e)
    ev = []; k = 0
    for e in le:
        if e['addr'] in held and e['action'] != 'alloc': continue
        if e['action'] == 'alloc':
            for a in byk.get(k, []): ev.extend(frees[a])
            k += 1
        ev.append(e)
    for kk in sorted(byk):
        if kk >= k:
            for a in byk[kk]: ev.extend(frees[a])
    return ev
rng = random.Random(1)
res = []
for i in range(N + 2):
    mode = 'lo' if i == 0 else 'hi' if i == 1 else 'rand'
    doc = dict(L); doc['device_traces'] = [variant(rng, mode)]
    json.dump(doc, open(out, 'w'))
    r = subprocess.run(['build/oomlab', 'replay', out], capture_output=True, text=True).stdout
    pa = [l.split()[-1] for l in r.splitlines() if 'allocated_bytes.all.peak' in l]
    pr = [l.split()[-1] for l in r.splitlines() if 'reserved_bytes.all.peak' in l]
    res.append((mode, int(pa[0]), int(pr[0])))
    print(mode, pa[0], pr[0], flush=True)
rs = [r for _, _, r in res]
print('reserved min', min(rs), 'max', max(rs))
