#!/usr/bin/env python3
"""PyTorch twin of scenarios/oversize_batch.c: MLP(width, depth) and SGD at a batch too large, and five fixes.

    python3 scripts/twins/oversize_batch.py [--json OUT] [--budget BYTES] [--set name=value]... [VARIANT...]
    python3 scripts/twins/oversize_batch.py --sweep batch=LO..HI [--json OUT] [--budget BYTES] [--set ...] [VARIANT...]

Parameters (the scenario's --set names and full-scale defaults): width 4096, depth 4, batch 8192, accum 4,
segments 2; budget 1088 MiB. The model is depth x [Linear(width, width), ReLU] then Linear(width, 10), trained
with SGD(lr=1e-3) on randn(batch, width) inputs and randint(0, 10) targets, two steps, the second timed. Variants:
bug (one step over the whole batch), fix-smaller-batch (batch // 2), fix-grad-accumulation (accum micro-batches
of batch // accum, (loss / accum).backward() each; the accumulated gradient is compared with the whole batch's,
computed after the last sample on the GPU without the budget), fix-bf16-autocast, fix-checkpointing
(checkpoint_sequential(model, segments, x, use_reentrant=False)), fix-half-model (model.half(), x.half()).
Samples carry the scenario's labels (scripts/twins/twinlib.py has the format); metrics: time_per_sample (s),
forward_keeps (bytes), grad_rel_error.

--sweep PARAM=LO..HI runs the chosen variants (default: all) at every power of two in LO..HI, each value and
variant in a fresh process, and writes {"scenario", "sweep": PARAM, "lo", "hi", "points": [one twinlib document
per value, in the normal mode's shape]}: PyTorch's samples (and so its peaks) per batch size, each point
checkable by tests/twin.c like a normal recording.
"""
import json
import os
import sys
import tempfile

import twinlib

VARIANTS = {
    "bug": "",
    "fix-smaller-batch": "",
    "fix-grad-accumulation": "",
    "fix-bf16-autocast": "",
    "fix-checkpointing": "",
    "fix-half-model": "",
}
PARAMS = {"width": 4096, "depth": 4, "batch": 8192, "accum": 4, "segments": 2}
BUDGET = 1088 << 20
CLASSES = 10
STEPS = 2


def mlp(torch, width, depth):
    nn = torch.nn
    layers = []
    for _ in range(depth):
        layers += [nn.Linear(width, width), nn.ReLU()]
    return nn.Sequential(*layers, nn.Linear(width, CLASSES))


def body(t, variant, p):
    torch = t.torch
    F = torch.nn.functional
    from torch.utils.checkpoint import checkpoint_sequential

    width, depth, batch, accum, segments = p["width"], p["depth"], p["batch"], p["accum"], p["segments"]
    micro = batch // 2 if variant == "fix-smaller-batch" else batch // accum if variant == "fix-grad-accumulation" \
        else batch
    micro = max(micro, 1)
    nmicro = accum if variant == "fix-grad-accumulation" else 1
    if variant == "fix-checkpointing" and segments > 2 * depth + 1:
        return  # checkpoint_sequential would raise ValueError (range() arg 3 must not be zero): nothing runs
    alloc = torch.cuda.memory_allocated

    model = opt = x = y = loss = out = None
    try:
        model = mlp(torch, width, depth).to("cuda")
        fits = True
    except torch.OutOfMemoryError as e:
        t.caught(e, "the model")
        fits = False
    if fits:
        t.step("model")
    if fits and variant == "fix-half-model":
        try:
            model.half()
        except torch.OutOfMemoryError as e:
            t.caught(e, "model.half()")
            fits = False
        if fits:
            t.step("model.half()")
    reference = variant == "fix-grad-accumulation" and fits
    xs, ys, w0, gacc = [], [], [], []
    if fits:
        params = list(model.parameters())
        opt = torch.optim.SGD(params, lr=1e-3)
    fwd_bytes = 0
    t0 = t1 = 0.0
    steps_done = 0
    for step in range(1, STEPS + 1):
        if not fits:
            break
        if step == STEPS:
            t0 = t.clock()
        phase = None
        oom = False
        try:
            opt.zero_grad(set_to_none=True)
            for i in range(1, nmicro + 1):
                name = "step %d.%d" % (step, i) if nmicro > 1 else "step %d" % step
                phase = name + ": the batch"
                x = torch.randn(micro, width, device="cuda")
                y = torch.randint(0, CLASSES, (micro,), device="cuda")
                if variant == "fix-half-model":
                    x = x.half()
                if reference and step == 1:
                    xs.append(x.cpu())
                    ys.append(y.cpu())
                phase = name + ": forward"
                before = alloc()
                if variant == "fix-bf16-autocast":
                    with torch.autocast("cuda", dtype=torch.bfloat16):
                        out = model(x)
                        loss = F.cross_entropy(out, y)
                elif variant == "fix-checkpointing":
                    out = checkpoint_sequential(model, segments, x, use_reentrant=False)
                    loss = F.cross_entropy(out, y)
                elif variant == "fix-grad-accumulation":
                    out = model(x)
                    loss = F.cross_entropy(out, y) / accum
                else:
                    out = model(x)
                    loss = F.cross_entropy(out, y)
                del out
                out = None
                if step == 1 and i == 1:
                    fwd_bytes = alloc() - before
                t.step(name + ": forward")
                phase = name + ": backward"
                loss.backward()
                t.step(name + ": backward")
            if reference and step == 1:  # the accumulated gradient and the weights it belongs to, before the step
                gacc = [q.grad.detach().cpu() for q in params]
                w0 = [q.detach().cpu() for q in params]
            phase = "step %d: optimizer step" % step
            opt.step()
            t.step("step %d: optimizer step" % step)
        except torch.OutOfMemoryError as e:
            t.caught(e, phase)
            oom = True
        if oom:
            out = None  # the except block is over: what the failed statement held is gone
            t.step(phase + ": OOM")
            break
        if step == STEPS:
            t1 = t.clock()
        steps_done += 1
    x = y = loss = out = None
    opt = None
    model = None
    params = None
    t.step("everything released")

    if steps_done == STEPS:
        t.metric("time_per_sample", "s", (t1 - t0) / (micro * nmicro))
    if fwd_bytes > 0:
        t.metric("forward_keeps", "bytes", fwd_bytes)
    if reference and steps_done == STEPS:
        # the whole batch's gradient from the same weights and samples, on the GPU without the budget (every
        # sample is taken; the allocator's later counters are not recorded)
        torch.cuda.set_per_process_memory_fraction(1.0)
        ref = mlp(torch, width, depth).to("cuda")
        with torch.no_grad():
            for q, w in zip(ref.parameters(), w0):
                q.copy_(w)
        xf = torch.cat(xs).to("cuda")
        yf = torch.cat(ys).to("cuda")
        F.cross_entropy(ref(xf), yf).backward()
        diff = norm = 0.0
        for q, g in zip(ref.parameters(), gacc):
            gr = q.grad.detach().cpu().double()
            diff += float(((g.double() - gr) ** 2).sum())
            norm += float((gr ** 2).sum())
        t.metric("grad_rel_error", "1", (diff / norm) ** 0.5 if norm > 0 else diff ** 0.5)


def powers(lo, hi):
    p = 1
    while p < lo:
        p *= 2
    out = []
    while p <= hi:
        out.append(p)
        p *= 2
    return out


def sweep_main(argv):
    """--sweep PARAM=LO..HI: one twinlib run per power of two, collected in one document."""
    i = argv.index("--sweep")
    spec = argv[i + 1]
    rest = argv[:i] + argv[i + 2:]
    try:
        param, rng = spec.split("=", 1)
        lo, hi = (int(v) for v in rng.split("..", 1))
        if param not in PARAMS:
            raise ValueError("no parameter '%s' (parameters: %s)" % (param, " ".join(PARAMS)))
        values = powers(lo, hi)
        if not values:
            raise ValueError("no power of two in %d..%d" % (lo, hi))
    except ValueError as e:
        print("oversize_batch: --sweep %s: %s\n%s" % (spec, e, __doc__), file=sys.stderr)
        return 2
    out = None
    if "--json" in rest:
        j = rest.index("--json")
        out = rest[j + 1]
        rest = rest[:j] + rest[j + 2:]
    points = []
    for v in values:
        fd, path = tempfile.mkstemp(suffix=".json")
        os.close(fd)
        try:
            rc = twinlib.main(__doc__, "oversize_batch", VARIANTS, PARAMS, BUDGET, body,
                              rest + ["--set", "%s=%d" % (param, v), "--json", path])
            if rc != 0:
                return rc
            with open(path) as f:
                points.append(json.load(f))
        finally:
            os.unlink(path)
        print("%s=%d done" % (param, v), file=sys.stderr)
    doc = {"scenario": "oversize_batch", "sweep": param, "lo": lo, "hi": hi, "points": points}
    text = json.dumps(doc, indent=1)
    if out:
        with open(out, "w") as f:
            f.write(text + "\n")
    else:
        print(text)
    return 0


if __name__ == "__main__":
    if "--sweep" in sys.argv[1:] and "--child" not in sys.argv[1:]:
        sys.exit(sweep_main(sys.argv[1:]))
    sys.exit(twinlib.main(__doc__, "oversize_batch", VARIANTS, PARAMS, BUDGET, body))
