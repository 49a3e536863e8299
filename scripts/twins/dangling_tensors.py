#!/usr/bin/env python3
"""PyTorch twin of scenarios/dangling_tensors.c: references that keep memory alive, every variant, on a real GPU.

    python3 scripts/twins/dangling_tensors.py [--json OUT] [--budget BYTES] [--set name=value]... [VARIANT...]

Parameters (the scenario's --set names and full-scale defaults): width 4096, depth 4, batch 256, steps 240,
held_mib 1024, request_mib 4096; budget 4.5 GiB. The model is the canonical MLP of `oomlab parity`:
depth x [Linear(width, width), ReLU], then Linear(width, 10), built on the CPU and moved with .to("cuda").
  bug, fix-item, fix-no-grad, fix-detach   an evaluation loop with grad enabled (steps iterations): total =
                                 total + loss (the bug: OOM at step 216), total += loss.item(), the loop under
                                 torch.no_grad(), total = total + loss.detach()
  myth-keep-loss, myth-keep-output  a training loop (SGD(lr=1e-3), zero_grad(set_to_none=True)) that keeps
                                 history.append(loss) or history.append(out) after backward
  bug-held-reference, fix-del, myth-empty-cache, myth-gc-collect   seed 002: holding held_mib, request_mib fails;
                                 then del / torch.cuda.empty_cache() / gc.collect() (t.remedy, as the scenario's
                                 scn_remedy: the first request's OOM is a step of the story) and the request
                                 again, whose result is the outcome (fix-del: ok)
Every statement mirrors the scenario's C, and samples carry its labels (scripts/twins/twinlib.py has the format).
A sample is taken after an `except` block ends, never inside it: the exception's traceback would keep the failed
forward pass's locals alive.
"""
import gc
import sys

import twinlib

MiB = twinlib.MiB
CLASSES = 10
VARIANTS = {v: "" for v in ["bug", "fix-item", "fix-no-grad", "fix-detach", "myth-keep-loss", "myth-keep-output",
                            "bug-held-reference", "fix-del", "myth-empty-cache", "myth-gc-collect"]}
PARAMS = {"width": 4096, "depth": 4, "batch": 256, "steps": 240, "held_mib": 1024, "request_mib": 4096}
BUDGET = 4608 * MiB


def mlp(torch, width, depth):
    nn = torch.nn
    layers = []
    for _ in range(depth):
        layers += [nn.Linear(width, width), nn.ReLU()]
    return nn.Sequential(*layers, nn.Linear(width, CLASSES)).to("cuda")


def eval_loop(t, variant, p):
    torch = t.torch
    F = torch.nn.functional
    width, batch = p["width"], p["batch"]
    model = total = None
    fits = True
    try:
        model = mlp(torch, width, p["depth"])
        t.step("model")
        total = 0.0 if variant == "fix-item" else torch.zeros((), device="cuda")
    except torch.OutOfMemoryError as e:
        t.caught(e, "building the model")
        fits = False
    if not fits:
        t.step("the model does not fit")
        return
    x = y = out = loss = None
    for step in range(p["steps"]):
        oom = False
        try:
            x = torch.randn(batch, width, device="cuda")
            y = torch.randint(0, CLASSES, (batch,), device="cuda")
            if variant == "fix-no-grad":
                with torch.no_grad():
                    out = model(x)
                    loss = F.cross_entropy(out, y)
                    total = total + loss
            else:
                out = model(x)
                loss = F.cross_entropy(out, y)
                if variant == "fix-item":
                    total += loss.item()
                elif variant == "fix-detach":
                    total = total + loss.detach()
                else:
                    total = total + loss
        except torch.OutOfMemoryError as e:
            t.caught(e, "an evaluation step")
            oom = True
        if oom:
            t.step("OOM at step %d" % step)
            break
        t.step("step %d" % step)
    del x, y, out, loss, total
    t.step("loop's tensors released")
    del model
    t.step("everything released")


def train_loop(t, variant, p):
    torch = t.torch
    F = torch.nn.functional
    width, batch = p["width"], p["batch"]
    model = opt = None
    fits = True
    try:
        model = mlp(torch, width, p["depth"])
        opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    except torch.OutOfMemoryError as e:
        t.caught(e, "building the model")
        fits = False
    if not fits:
        t.step("the model does not fit")
        return
    t.step("model")
    history = []
    x = y = out = loss = None
    for step in range(p["steps"]):
        oom = False
        try:
            x = torch.randn(batch, width, device="cuda")
            y = torch.randint(0, CLASSES, (batch,), device="cuda")
            opt.zero_grad(set_to_none=True)
            out = model(x)
            loss = F.cross_entropy(out, y)
            t.step("step %d forward" % step)
            loss.backward()
            t.step("step %d backward" % step)
            opt.step()
            history.append(loss if variant == "myth-keep-loss" else out)
        except torch.OutOfMemoryError as e:
            t.caught(e, "a training step")
            oom = True
        if oom:
            t.step("OOM at step %d" % step)
            break
        t.step("step %d optimizer step" % step)
    del x, y, out, loss
    t.step("loop's tensors released")
    del history
    t.step("history released")
    del opt, model
    t.step("everything released")


def held_reference(t, variant, p):
    torch = t.torch
    held, request = p["held_mib"], p["request_mib"]

    def empty_mib(mib):
        return torch.empty(mib * MiB, dtype=torch.uint8, device="cuda")

    big = None
    try:
        big = empty_mib(held)
    except torch.OutOfMemoryError as e:
        t.caught(e, "the held tensor")
    if big is None:
        t.step("the %d MiB tensor does not fit" % held)
        return
    t.step("holding %d MiB" % held)
    first_ok = True
    try:
        req = empty_mib(request)
        t.step("holding the %d MiB request" % request)
        del req
    except torch.OutOfMemoryError as e:
        t.caught(e, "the request while holding")
        first_ok = False
    t.step("%d MiB request %s" % (request, "served, then freed" if first_ok else "failed"))
    if not first_ok and variant != "bug-held-reference":
        if variant == "fix-del":
            del big
            big = None
            t.remedy("del the %d MiB tensor" % held)
        elif variant == "myth-empty-cache":
            torch.cuda.empty_cache()
            t.remedy("torch.cuda.empty_cache()")
        else:
            gc.collect()
            t.remedy("gc.collect()")
        ok = True
        try:
            req = empty_mib(request)
            t.step("holding the %d MiB request again" % request)
            del req
        except torch.OutOfMemoryError as e:
            t.caught(e, "the request again")
            ok = False
        t.step("%d MiB request again: %s" % (request, "served, then freed" if ok else "failed"))
    big = None
    t.step("everything released")


def body(t, variant, p):
    if variant in ("bug", "fix-item", "fix-no-grad", "fix-detach"):
        eval_loop(t, variant, p)
    elif variant in ("myth-keep-loss", "myth-keep-output"):
        train_loop(t, variant, p)
    else:
        held_reference(t, variant, p)


if __name__ == "__main__":
    sys.exit(twinlib.main(__doc__, "dangling_tensors", VARIANTS, PARAMS, BUDGET, body))
