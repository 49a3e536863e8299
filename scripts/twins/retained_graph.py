#!/usr/bin/env python3
"""PyTorch twin of scenarios/retained_graph.c: a recurrent hidden state carried without detach(), with
loss.backward(retain_graph=True) every step, and its fix and myths, on a real GPU.

    python3 scripts/twins/retained_graph.py [--json OUT] [--budget BYTES] [--set name=value]... [VARIANT...]

Parameters (the scenario's --set names and full-scale defaults): hidden 1024, batch 64, steps 40, cell 0 (0 = gru,
1 = rnn); budget 193 MiB.
  bug                          h = cell(x, h); loss = h.pow(2).mean(); loss.backward(retain_graph=True), every step
  fix-detach                   the same, then h = h.detach() after each backward
  myth-retain-graph-leaks      MLP(2 x hidden, 3) (the canonical MLP) at batch 8 x batch, a fresh graph each step,
                               loss = m(x).pow(2).mean(); loss.backward(retain_graph=True)
  myth-retain-graph-with-sgd   the bug's chain with SGD(lr=0.01) stepping after every backward: the in-place error
                               (its text is kept in the variant's "notes")
Samples carry the scenario's labels; each backward's time is the metric backward_s (scripts/twins/twinlib.py has
the format).
"""
import sys
import time

import twinlib

MiB = twinlib.MiB
VARIANTS = {
    "bug": "",
    "fix-detach": "",
    "myth-retain-graph-leaks": "",
    "myth-retain-graph-with-sgd": "",
}
PARAMS = {"hidden": 1024, "batch": 64, "steps": 40, "cell": 0}
BUDGET = 193 * MiB


def settle():
    """After an exception out of backward, the autograd engine's device thread may still be dropping the failed
    graph task (the inputs it buffered, the tasks left in its ready queue) when Python sees the exception; oomlab
    frees them before backward returns. Give the thread a moment before the sample."""
    time.sleep(0.05)


def timed_backward(t, loss, step):
    t0 = t.clock()
    loss.backward(retain_graph=True)
    t1 = t.clock()
    t.step("step %d backward" % step)
    t.metric("backward_s", "s", t1 - t0)


def chain(t, variant, p):
    torch = t.torch
    hidden, batch, steps = p["hidden"], p["batch"], p["steps"]
    Cell = torch.nn.GRUCell if p["cell"] == 0 else torch.nn.RNNCell
    cell = None
    try:
        cell = Cell(hidden, hidden, device="cuda")
    except torch.OutOfMemoryError as e:
        t.caught(e, "creating the cell")
    if cell is None:  # sampled once the exception (and the half-built module its traceback holds) is gone
        t.step("OOM creating the cell")
        return
    opt = torch.optim.SGD(cell.parameters(), lr=0.01) if variant == "myth-retain-graph-with-sgd" else None
    t.step("model")
    x = h = loss = None
    for step in range(steps):
        phase = "forward"
        failed = None
        try:
            if opt is not None:
                opt.zero_grad()
            x = torch.randn(batch, hidden, device="cuda")
            h = cell(x, h)
            loss = h.pow(2).mean()
            t.step("step %d forward" % step)
            phase = "backward"
            timed_backward(t, loss, step)
            if opt is not None:
                phase = "optimizer step"
                opt.step()
                t.step("step %d optimizer step" % step)
            if variant == "fix-detach":
                h = h.detach()
        except torch.OutOfMemoryError as e:
            t.caught(e, "step %d %s" % (step, phase))
            failed = "OOM at step %d (%s)" % (step, phase)
        except RuntimeError as e:
            if opt is None:
                raise
            t.note(str(e))  # the scenario expects PyTorch's in-place error here
            failed = "in-place error at step %d" % step
        if failed:
            settle()
            t.step(failed)
            break
    x = h = loss = None
    opt = cell = None
    t.step("released")


def mlp(t, p):
    torch = t.torch
    nn = torch.nn
    width, rows, steps = 2 * p["hidden"], 8 * p["batch"], p["steps"]
    m = None
    try:
        layers = []
        for _ in range(3):
            layers += [nn.Linear(width, width), nn.ReLU()]
        m = nn.Sequential(*layers, nn.Linear(width, 10)).to("cuda")
    except torch.OutOfMemoryError as e:
        t.caught(e, "creating the MLP")
    if m is None:
        t.step("OOM creating the MLP")
        return
    t.step("model")
    x = loss = None
    for step in range(steps):
        phase = "forward"
        failed = None
        try:
            x = torch.randn(rows, width, device="cuda")
            loss = m(x).pow(2).mean()
            t.step("step %d forward" % step)
            phase = "backward"
            timed_backward(t, loss, step)
        except torch.OutOfMemoryError as e:
            t.caught(e, "step %d %s" % (step, phase))
            failed = "OOM at step %d (%s)" % (step, phase)
        if failed:
            settle()
            t.step(failed)
            break
    loss = None  # del loss: the graph backward(retain_graph=True) kept
    t.step("the last loss released")
    x = m = layers = None  # layers holds the modules too
    t.step("released")


def body(t, variant, p):
    if variant == "myth-retain-graph-leaks":
        mlp(t, p)
    else:
        chain(t, variant, p)


if __name__ == "__main__":
    sys.exit(twinlib.main(__doc__, "retained_graph", VARIANTS, PARAMS, BUDGET, body))
