#!/usr/bin/env python3
"""PyTorch twin of scenarios/inference_oom.c: inference with grad mode left on, beside torch.no_grad(), a
half-precision model, micro-batches, and gradient checkpointing (seed 001's advice), on a real GPU.

    python3 scripts/twins/inference_oom.py [--json OUT] [--budget BYTES] [--set name=value]... [VARIANT...]

Parameters (the scenario's --set names and full-scale defaults): width 4096, depth 6, batch 8192, chunk 1024;
budget 1216 MiB. MLP(width, depth) is depth x [Linear(width, width), ReLU] then Linear(width, 10), in eval mode,
on a randn(batch, width) input. Every forward is sampled after it, after `out = out.detach()` (what the output's
graph kept is freed) and after `del out`; the metric time_per_sample is its synchronised time over the batch's rows.
The checkpointed forward is checkpoint_sequential over the hidden blocks (each an nn.Sequential(Linear, ReLU)) in
min(2, depth) segments, use_reentrant=False, then the classifier: the segmentation the scenario's MLP uses.
scripts/twins/twinlib.py has the output format.
"""
import sys

import twinlib

VARIANTS = {
    "bug": "",
    "fix-no-grad": "",
    "fix-half": "",
    "fix-chunked": "",
    "myth-checkpoint-no-grad": "",
    "myth-checkpoint-grad": "",
}
PARAMS = {"width": 4096, "depth": 6, "batch": 8192, "chunk": 1024}
BUDGET = 1216 * twinlib.MiB
CLASSES = 10
SEGMENTS = 2


def forward(t, run, x, what):
    """out = run(x), sampled; then out = out.detach() and del out, sampled. False on an OOM."""
    torch = t.torch
    failed = False
    try:
        t0 = t.clock()
        out = run(x)
        t1 = t.clock()
    except torch.OutOfMemoryError as e:
        t.caught(e, what)
        failed = True
    if failed:  # sampled after the except block, once the traceback's frames are gone
        t.step("%s: OOM" % what)
        return False
    t.step(what)
    t.metric("time_per_sample", "s", (t1 - t0) / x.shape[0])
    out = out.detach()
    t.step("%s: out.detach()" % what)
    del out
    t.step("%s: del out" % what)
    return True


def forward_chunked(t, model, x, chunk):
    """for i in range(0, batch, chunk): outs.append(model(x[i:i + chunk])); out = torch.cat(outs)"""
    torch = t.torch
    batch = x.shape[0]
    n = (batch + chunk - 1) // chunk
    outs = []
    ok = True
    t0 = t.clock()
    with torch.no_grad():
        for i in range(n):
            rows = min(chunk, batch - i * chunk)
            try:
                outs.append(model(x[i * chunk:i * chunk + rows]))
            except torch.OutOfMemoryError as e:
                t.caught(e, "a chunk's forward")
                ok = False
            if not ok:
                break
            if i == 0:
                t.step("first chunk of %d rows" % rows)
    if not ok:
        made = len(outs)
        del outs
        t.step("chunk %d of %d: OOM" % (made + 1, n))
        return
    t.step("all %d chunks" % n)
    out = None
    try:
        with torch.no_grad():
            out = torch.cat(outs)
    except torch.OutOfMemoryError as e:
        t.caught(e, "torch.cat")
        ok = False
    t1 = t.clock()
    if ok:
        t.step("torch.cat(outs)")
        t.metric("time_per_sample", "s", (t1 - t0) / batch)
    del outs
    t.step("del outs" if ok else "torch.cat: OOM")
    del out
    if ok:
        t.step("del out")


def body(t, variant, p):
    torch = t.torch
    nn = torch.nn
    from torch.utils.checkpoint import checkpoint_sequential
    width, depth, batch, chunk = p["width"], p["depth"], p["batch"], p["chunk"]

    model = x = None
    built = True
    try:
        layers = []
        for _ in range(depth):
            layers += [nn.Linear(width, width), nn.ReLU()]
        model = nn.Sequential(*layers, nn.Linear(width, CLASSES)).to("cuda").eval()
        x = torch.randn(batch, width, device="cuda")
    except torch.OutOfMemoryError as e:
        t.caught(e, "the model and the input")
        built = False
        model = x = None
    t.step("model and input" if built else "OOM: the model and the input")

    if built:
        blocks = [nn.Sequential(model[2 * i], model[2 * i + 1]) for i in range(depth)]

        def checkpointed(inp):
            h = checkpoint_sequential(blocks, min(SEGMENTS, depth), inp, use_reentrant=False)
            return model[2 * depth](h)

        if variant == "bug":
            forward(t, model, x, "forward with grad enabled")
        elif variant == "fix-no-grad":
            with torch.no_grad():
                forward(t, model, x, "forward under no_grad")
        elif variant == "fix-half":
            converted = halved = False
            try:
                model.half()
                converted = True
            except torch.OutOfMemoryError as e:
                t.caught(e, "model.half()")
            t.step("model.half()" if converted else "model.half(): OOM")
            if converted:
                torch.cuda.reset_peak_memory_stats()
                try:
                    xh = x.half()
                    halved = True
                except torch.OutOfMemoryError as e:
                    t.caught(e, "x.half()")
                if halved:
                    x = xh
                    del xh
                t.step("x.half()" if halved else "x.half(): OOM")
            if halved:
                with torch.no_grad():
                    forward(t, model, x, "half forward under no_grad")
        elif variant == "fix-chunked":
            forward_chunked(t, model, x, chunk)
        else:
            grad = variant == "myth-checkpoint-grad"
            with torch.no_grad():
                forward(t, model, x, "plain forward under no_grad")
            torch.cuda.reset_peak_memory_stats()
            with torch.set_grad_enabled(grad):
                forward(t, checkpointed, x,
                        "checkpoint_sequential with grad" if grad else "checkpoint_sequential under no_grad")
        del blocks, checkpointed
    del x, model, layers  # layers holds the modules too
    t.step("everything released")


if __name__ == "__main__":
    sys.exit(twinlib.main(__doc__, "inference_oom", VARIANTS, PARAMS, BUDGET, body))
