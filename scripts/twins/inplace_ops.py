#!/usr/bin/env python3
"""PyTorch twin of scenarios/inplace_ops.c: out-of-place and in-place ops, every variant, on a real GPU.

    python3 scripts/twins/inplace_ops.py [--json OUT] [--budget BYTES] [--set name=value]... [VARIANT...]

Parameters (the scenario's --set names and full-scale defaults): width 4096, batch 8192, ops 10; budget 1 GiB.
  bug, fix-inplace       x = torch.randn(batch, width); under no_grad, ops alternating ops: x = x * 2, x = x + 1
                         (the bug) or x.mul_(2), x.add_(1) (the fix)
  myth-same-layout       x, y = two randn(batch, width); under no_grad, ops times x = x + y
  bug-inplace-on-saved, fix-clone   head = nn.Linear(width, 10); x = randn(batch, width, requires_grad=True);
                         s = torch.sigmoid(x); h = s.mul_(2) (or s.clone().mul_(2));
                         F.cross_entropy(head(h), y).backward(): the bug's RuntimeError text is recorded with
                         t.note (the scenario expects it word for word)
Every statement mirrors the scenario's C, and samples carry its labels (scripts/twins/twinlib.py has the format).
"""
import sys

import twinlib

MiB = twinlib.MiB
CLASSES = 10
VARIANTS = {v: "" for v in ["bug", "fix-inplace", "bug-inplace-on-saved", "fix-clone", "myth-same-layout"]}
PARAMS = {"width": 4096, "batch": 8192, "ops": 10}
BUDGET = 1 << 30


def chain(t, variant, p):
    torch = t.torch
    width, batch = p["width"], p["batch"]
    myth = variant == "myth-same-layout"
    x = y = None
    fits = True
    try:
        x = torch.randn(batch, width, device="cuda")
        if myth:
            y = torch.randn(batch, width, device="cuda")
    except torch.OutOfMemoryError as e:
        t.caught(e, "the input")
        fits = False
    if not fits:
        t.step("the input does not fit")
        return
    t.step("x and y" if myth else "input")
    done, oom = 0, False
    try:
        with torch.no_grad():
            for i in range(p["ops"]):
                if myth:
                    x = x + y
                elif variant == "fix-inplace":
                    if i % 2 == 0:
                        x.mul_(2)
                    else:
                        x.add_(1)
                else:
                    x = x * 2 if i % 2 == 0 else x + 1
                done += 1
                t.step("op %d" % (i + 1))
    except torch.OutOfMemoryError as e:
        t.caught(e, "an op of the chain")
        oom = True
    if oom:
        t.step("OOM at op %d" % (done + 1))
    del x, y
    t.step("released")


def saved_output(t, variant, p):
    torch = t.torch
    F = torch.nn.functional
    width, batch = p["width"], p["batch"]
    clone = variant == "fix-clone"
    head = x = y = s = h = loss = None
    stage, failed = "the input and head", False
    try:
        head = torch.nn.Linear(width, CLASSES).to("cuda")
        x = torch.randn(batch, width, device="cuda", requires_grad=True)
        y = torch.randint(0, CLASSES, (batch,), device="cuda")
        t.step("input and head")
        stage = "the forward pass"
        s = torch.sigmoid(x)
        t.step("sigmoid")
        h = s.clone().mul_(2) if clone else s.mul_(2)
        t.step("clone, then mul_(2)" if clone else "mul_(2) in place")
        loss = F.cross_entropy(head(h), y)
        t.step("forward")
    except torch.OutOfMemoryError as e:
        t.caught(e, stage)
        failed = True
    if failed:
        t.step("OOM before backward")
        del loss, h, s, x, y, head
        t.step("released")
        return
    text, oom = None, False
    try:
        loss.backward()
    except torch.OutOfMemoryError as e:
        t.caught(e, "the backward pass")
        oom = True
    except RuntimeError as e:  # the in-place error the bug demonstrates: its text, word for word
        text = str(e)
        t.note(text)
    t.step("backward raised" if text is not None else "backward: OOM" if oom else "backward")
    del loss, h, s, x, y, head
    t.step("released")


def body(t, variant, p):
    if variant in ("bug-inplace-on-saved", "fix-clone"):
        saved_output(t, variant, p)
    else:
        chain(t, variant, p)


if __name__ == "__main__":
    sys.exit(twinlib.main(__doc__, "inplace_ops", VARIANTS, PARAMS, BUDGET, body))
