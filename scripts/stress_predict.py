#!/usr/bin/env python3
"""stress_predict.py - oomlab predict stopped at random moments, then run normally: nothing hangs, nothing is left.

    python3 scripts/stress_predict.py [--oomlab build/oomlab] [--kills 50] [--runs 50] [--seed 28] [--rebuild 5]

Each of the --kills runs starts `oomlab predict` on a small training script with the real capture and, after a
random delay (0 to 1.5 times a normal run's time), sends one of: SIGTERM, SIGINT or SIGHUP to oomlab, SIGKILL to
the capture's Python, SIGKILL to oomlab itself. --rebuild of them first remove the capture's compiled extension,
so that the kill may land in its build (ninja and the compiler running). Then --runs normal predicts must each
succeed. Every predict has its own TMPDIR under one scratch folder; after each, the script waits up to 10 s for
what that predict started to go (a SIGKILL to oomlab leaves the capture to the kernel's PR_SET_PDEATHSIG), then
counts what is left: processes of the capture (a command line with oomlab_capture, ninja or cc1plus run from this
checkout) and files in the TMPDIR, where a killed oomlab's folder is allowed until the next predict removes it.
Prints one line per run and the totals; exit 0 when no run hung, failed or left anything.

Stdlib only; run from the repository root after `make build/oomlab` (the venv is installed on first use).
"""
import argparse
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time

SCRIPT = """import torch
model = torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10)).cuda()
opt = torch.optim.AdamW(model.parameters())
for step in range(3):
    loss = model(torch.randn(64, 256, device="cuda")).sum()
    loss.backward()
    opt.step()
    opt.zero_grad()
"""
ACTIONS = ("SIGTERM", "SIGINT", "SIGHUP", "KILL-capture", "KILL-oomlab")


def capture_pids(repo):
    """Processes that belong to a capture run from this checkout, as (pid, command line)."""
    out = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
            with open(f"/proc/{d}/stat") as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state == "Z":
            continue
        if "oomlab_capture" in cmd or (("cc1plus" in cmd or "ninja" in cmd) and "meta_alloc" in cmd) or \
                ("oomlab predict" in cmd and repo in cmd):
            out.append((int(d), cmd))
    return out


def wait_gone(repo, seconds):
    t0 = time.time()
    while time.time() - t0 < seconds:
        left = capture_pids(repo)
        if not left:
            return []
        time.sleep(0.1)
    return capture_pids(repo)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--oomlab", default="build/oomlab")
    ap.add_argument("--kills", type=int, default=50)
    ap.add_argument("--runs", type=int, default=50)
    ap.add_argument("--seed", type=int, default=28)
    ap.add_argument("--rebuild", type=int, default=5)
    o = ap.parse_args()
    repo = os.getcwd()
    oomlab = os.path.abspath(o.oomlab)
    rng = random.Random(o.seed)
    scratch = tempfile.mkdtemp(prefix="stress_predict.")
    script = os.path.join(scratch, "train.py")
    with open(script, "w") as f:
        f.write(SCRIPT)
    tmp = os.path.join(scratch, "tmp")
    os.mkdir(tmp)
    env = dict(os.environ, TMPDIR=tmp)
    for k in ("OOMLAB_ALLOC_CONF", "PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF"):
        env.pop(k, None)

    def predict():
        return subprocess.Popen([oomlab, "predict", script], env=env, stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE, start_new_session=True)

    # a normal run's time, the extension built (the first run may build it)
    for _ in range(2):
        t0 = time.time()
        p = predict()
        p.communicate(timeout=900)
        normal = time.time() - t0
    print(f"a normal predict: {normal:.1f} s (exit {p.returncode})", flush=True)
    ext_root = os.path.join(repo, "build", "torch_extensions")
    rebuild_at = set(rng.sample(range(o.kills), min(o.rebuild, o.kills)))
    totals = {"hung": 0, "left_processes": 0, "left_files": 0, "failed": 0}
    for i in range(o.kills + o.runs):
        killed = i < o.kills
        action = rng.choice(ACTIONS) if killed else None
        delay = rng.uniform(0, 1.5 * normal) if killed else 0
        if killed and i in rebuild_at:
            for d in os.listdir(ext_root) if os.path.isdir(ext_root) else []:
                if d.startswith("oomlab_meta_alloc"):
                    shutil.rmtree(os.path.join(ext_root, d), ignore_errors=True)
            delay = rng.uniform(3, 20)  # inside the build
        t0 = time.time()
        p = predict()
        if killed:
            time.sleep(delay)
            if p.poll() is None:
                if action == "KILL-capture":
                    for q, cmd in capture_pids(repo):
                        if "-m oomlab_capture" in cmd:
                            os.kill(q, signal.SIGKILL)
                elif action == "KILL-oomlab":
                    p.kill()
                else:
                    p.send_signal(getattr(signal, action))
        try:
            _, err = p.communicate(timeout=600)
        except subprocess.TimeoutExpired:
            totals["hung"] += 1
            p.kill()
            _, err = p.communicate()
        rc = p.returncode
        left = wait_gone(repo, 10)
        files = [n for n in os.listdir(tmp)]
        # a folder left by a SIGKILLed oomlab is allowed: the next predict removes it (and says so)
        if action == "KILL-oomlab" and p.returncode == -9:
            files = []
        ok = (not killed and rc == 0) or killed
        totals["left_processes"] += len(left)
        totals["left_files"] += len(files)
        totals["failed"] += 0 if ok else 1
        last = err.decode(errors="replace").strip().splitlines()[-1:] if err else []
        print(f"{i:3d} {'kill' if killed else 'run '} {action or '-':12s} after {delay:5.1f} s: exit {rc}, "
              f"{time.time() - t0:5.1f} s, {len(left)} processes and {len(files)} files left"
              f"{'; ' + last[0][:110] if last else ''}", flush=True)
        for q, _ in left:
            try:
                os.kill(q, signal.SIGKILL)
            except OSError:
                pass
    print(f"totals: {o.kills} killed, {o.runs} normal: {totals['hung']} hung, {totals['failed']} normal runs "
          f"failed, {totals['left_processes']} processes and {totals['left_files']} files left")
    shutil.rmtree(scratch, ignore_errors=True)
    return 0 if not any(totals.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
