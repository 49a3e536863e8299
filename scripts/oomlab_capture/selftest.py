"""The capture's self-test (no pytest, no GPU): the CLI contract and the H100 parity of the recorded workloads.

    PYTHONPATH=scripts python -m oomlab_capture.selftest

Checks (each prints ok/FAIL; exit 1 on any failure):
- exit statuses: 0 and a trace with the oomlab.capture/1 metadata; 2 for an unknown GPU and a missing script;
  3 with the script's traceback and the last line; 4 for a script that never touches CUDA;
- placeholders (.item(), .tolist()) listed; set_per_process_memory_fraction kept as "budget"; no CUDA context;
- the reduction staging model gives tests/test_reduce_config.c's bytes (the C transcription's expectations);
- the alloc/free sequences of scripts/twins/record_traces.py's transformer and transformer_s2 equal to their
  H100 recordings event for event, train_mlp up to its teardown, and the peak of live rounded bytes of
  train_mlp, transformer, transformer_s2, tfm4 and gpt equal to the recordings'.
"""
import json
import os
import subprocess
import sys
import tempfile

from . import validate

FAILS = []


def check(name, cond, detail=""):
    print(f"{'ok  ' if cond else 'FAIL'} {name}{'' if cond else ': ' + detail}")
    if not cond:
        FAILS.append(name)


SCRIPT = """
import torch
m = torch.nn.Linear(64, 64).cuda()
torch.cuda.set_per_process_memory_fraction(0.5)
x = torch.randn(32, 64, device="cuda")
loss = m(x).sum()
loss.backward()
print(loss.item(), x[0, :2].tolist(), torch.cuda.memory_allocated() > 0, torch.cuda.is_available())
"""


def cli(tmp, body, *extra):
    path = os.path.join(tmp, "s.py")
    with open(path, "w") as f:
        f.write(body)
    out = os.path.join(tmp, "t.json")
    if os.path.exists(out):
        os.unlink(out)
    env = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    p = subprocess.run([sys.executable, "-m", "oomlab_capture", *extra, "--out", out, "--quiet", "--", path],
                       capture_output=True, text=True, env=env)
    return p, out, path


def main():
    with tempfile.TemporaryDirectory() as tmp:
        p, out, _ = cli(tmp, SCRIPT)
        check("exit 0 and a trace", p.returncode == 0 and os.path.exists(out), p.stderr[-300:])
        if p.returncode == 0:
            with open(out) as f:
                d = json.load(f)
            meta = d["oomlab_capture"]
            check("schema", meta["schema"] == "oomlab.capture/1" and d["segments"] == [])
            check("placeholders listed", {x["what"] for x in meta["placeholders"]} == {"aten::item", "Tensor.tolist"},
                  str(meta["placeholders"]))
            check("budget kept", d.get("budget") == int(0.5 * 85_017_493_504), str(d.get("budget")))
            ev = d["device_traces"][0]
            check("events well formed", all(set(e) >= {"action", "addr", "size", "stream", "time_us", "frames",
                                                       "user_metadata"} for e in ev) and len(ev) > 0)
            check("cuBLAS workspaces", [e["size"] for e in ev if e["size"] == 33554432].count(33554432) == 2)
        p, out, _ = cli(tmp, SCRIPT, "--gpu", "X100")
        check("exit 2 unknown GPU", p.returncode == 2 and "unknown GPU 'X100'" in p.stderr, p.stderr)
        env = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        q = subprocess.run([sys.executable, "-m", "oomlab_capture", "--out", os.path.join(tmp, "t.json"), "--",
                            os.path.join(tmp, "missing.py")], capture_output=True, text=True, env=env)
        check("exit 2 missing script", q.returncode == 2 and q.stderr.count("\n") == 1, q.stderr)
        p, out, path = cli(tmp, "import torch\nx = torch.ones(3, device='cuda')\nraise KeyError('k')\n")
        last = p.stderr.strip().splitlines()[-1] if p.stderr.strip() else ""
        check("exit 3 with traceback", p.returncode == 3 and "Traceback" in p.stderr
              and last == f"oomlab_capture: {path} raised KeyError: 'k'" and not os.path.exists(out), p.stderr)
        p, out, _ = cli(tmp, "print(1)\n")
        check("exit 4 without CUDA", p.returncode == 4 and "never allocated" in p.stderr, p.stderr)
    from . import gpus
    from .cuda_model.reduction import config
    h100, a = gpus.lookup("H100-80GB"), 0x7f0000000000
    cases = [((4096, 4096, False, 4, 4, 4, a // 4), (134217728, 128)), ((4096, 4096, False, 4, 2, 8, a // 2),
             (134217728, 128)), ((4096, 2048, False, 4, 4, 4, a // 4), (67108864, 128)),
             ((4096, 512, False, 4, 4, 4, a // 4), (0, 0)), ((4096, 4096, False, 4, 4, 4, (a + 8) // 4),
             (17825792, 256)), ((1, 4096 * 4096, True, 4, 4, 4), (2112, 4)), ((1, 512 * 255, True, 4, 4, 4),
             (0, 0)), ((1, 512 * 256, True, 4, 4, 4), (64, 4))]
    got = [config(h100, *c) for c, _ in cases]
    check("reduction staging = reduce_config.c", got == [e for _, e in cases], str(got))
    for name in ("train_mlp", "transformer", "transformer_s2", "tfm4", "gpt"):
        with tempfile.TemporaryDirectory() as tmp:
            r = validate.run(name, tmp)
        if name in ("transformer", "transformer_s2"):
            check(f"{name}: events equal", r["equal"], f"first difference at {r['first_diff']}")
        if name == "train_mlp":
            check(f"{name}: events equal up to the teardown", r["first_diff"] is None or r["first_diff"] >= 255,
                  f"first difference at {r['first_diff']}")
        check(f"{name}: peak", r["peak_pred"] == r["peak_rec"], f"{r['peak_pred']} vs {r['peak_rec']}")
    import torch
    check("no CUDA context", not torch.cuda.is_initialized())
    print(f"{'all passed' if not FAILS else str(len(FAILS)) + ' failed'}")
    return 1 if FAILS else 0


if __name__ == "__main__":
    sys.exit(main())
