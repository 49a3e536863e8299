#!/usr/bin/env python3
"""PyTorch twin of scenarios/unzeroed_grads.c: training the canonical MLP without optimizer.zero_grad(), beside
zero_grad() and zero_grad(set_to_none=False), on a real GPU.

    python3 scripts/twins/unzeroed_grads.py [--json OUT] [--budget BYTES] [--set name=value]... [VARIANT...]

Parameters (the scenario's --set names and full-scale defaults): width 4096, depth 4, batch 256, steps 20; budget
640 MiB. MLP(width, depth) is depth x [Linear(width, width), ReLU] then Linear(width, 10), trained with
SGD(lr=1e-3) on randn(batch, width) inputs and randint(0, 10, (batch,)) targets. Samples carry the scenario's
labels (scripts/twins/twinlib.py has the format): after forward, after backward and after the optimizer step, every
step. The metric grad_norm (after backward, every step) is the total 2-norm of every parameter's .grad, computed
on the host from a copy (.cpu() allocates no device memory). Its values differ from oomlab's, whose random
streams are not torch's: compare how it grows (about sqrt(steps) without zero_grad(), flat with it), not values.
"""
import math
import sys

import twinlib

VARIANTS = {
    "bug": "",
    "fix-zero-grad": "",
    "fix-zero-grad-in-place": "",
    "myth-memory-grows": "",
}
PARAMS = {"width": 4096, "depth": 4, "batch": 256, "steps": 20}
BUDGET = 640 * twinlib.MiB
CLASSES = 10


def grad_norm(params):
    """The total 2-norm of every .grad, summed in double on the host."""
    total = 0.0
    for p in params:
        if p.grad is not None:
            total += float(p.grad.detach().cpu().double().pow(2).sum())
    return math.sqrt(total)


def body(t, variant, p):
    torch = t.torch
    nn, F = torch.nn, torch.nn.functional
    width, depth, batch, steps = p["width"], p["depth"], p["batch"], p["steps"]

    model = opt = None
    try:
        layers = []
        for _ in range(depth):
            layers += [nn.Linear(width, width), nn.ReLU()]
        model = nn.Sequential(*layers, nn.Linear(width, CLASSES)).to("cuda")
        opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    except torch.OutOfMemoryError as e:
        t.caught(e, "building the model")
        model = opt = None
    t.step("model and optimizer" if model is not None else "OOM building the model")

    x = y = loss = None
    failed = None
    for k in range(1, steps + 1 if model is not None else 1):
        phase = "step %d: the batch" % k
        try:
            x = torch.randn(batch, width, device="cuda")
            y = torch.randint(0, CLASSES, (batch,), device="cuda")
            if variant == "fix-zero-grad":
                opt.zero_grad()  # set_to_none=True, PyTorch 2.x's default
            elif variant == "fix-zero-grad-in-place":
                opt.zero_grad(set_to_none=False)
            phase = "step %d: forward" % k
            loss = F.cross_entropy(model(x), y)
            t.step(phase)
            phase = "step %d: backward" % k
            loss.backward()
            t.step(phase)
            t.metric("grad_norm", "1", grad_norm(model.parameters()))
            phase = "step %d: optimizer step" % k
            opt.step()
            t.step(phase)
        except torch.OutOfMemoryError as e:
            t.caught(e, phase)
            failed = phase
        if failed:  # sampled after the except block, once the traceback's frames are gone
            t.step("%s: OOM" % failed)
            break
    del loss, y, x, opt, model, layers  # layers holds the modules too: every parameter and .grad
    t.step("everything released")


if __name__ == "__main__":
    sys.exit(twinlib.main(__doc__, "unzeroed_grads", VARIANTS, PARAMS, BUDGET, body))
