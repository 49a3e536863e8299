"""The prediction's cost (issue 31): `oomlab predict --json` of training scripts written the ordinary way, each
timed whole, with the capture's own figures (its seconds, the ops' share of them, the median op) and the peak
host memory of the prediction (its capture included: os.wait4's maximum resident set over the process tree).

    python3 scripts/bench_predict.py [--oomlab build/oomlab] [--gpu H200] [NAME ...]

NAME: llama8b, llama70b (tests/data/predict/scripts/llama_host_built.py: built on the host, moved to CUDA) or a
zoo script (tests/data/predict/zoo/scripts/NAME.py with its recorded arguments); all of them when none is given.
Needs build/venv with the zoo's libraries (scripts/predict_venv.sh --zoo).
"""
import json
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ZOO = os.path.join(ROOT, "tests/data/predict/zoo")
LLAMA = os.path.join(ROOT, "tests/data/predict/scripts/llama_host_built.py")


def cases():
    out = {"llama8b": [LLAMA, "--size", "8b"], "llama70b": [LLAMA, "--size", "70b"]}
    for f in sorted(os.listdir(ZOO)):
        if f.endswith(".torch.json"):
            name = f[:-len(".torch.json")]
            with open(os.path.join(ZOO, f)) as fh:
                out[name] = [os.path.join(ZOO, "scripts", name + ".py")] + json.load(fh)["args"]
    return out


def run(oomlab, gpu, argv):
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        t0 = time.monotonic()
        p = subprocess.Popen([oomlab, "predict", "--json", "--gpu", gpu] + argv, stdout=out, stderr=err)
        _, status, usage = os.wait4(p.pid, 0)
        wall = time.monotonic() - t0
        p.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        if p.returncode != 0:
            raise SystemExit(f"bench_predict: {' '.join(argv)}: exit {p.returncode}: "
                             f"{err.read().decode(errors='replace').strip().splitlines()[-1:]}")
        return wall, usage.ru_maxrss * 1024, json.loads(out.read())


def main(argv):
    oomlab, gpu, names = os.path.join(ROOT, "build/oomlab"), "H200", []
    i = 0
    while i < len(argv):
        if argv[i] in ("--oomlab", "--gpu") and i + 1 < len(argv):
            if argv[i] == "--oomlab":
                oomlab = argv[i + 1]
            else:
                gpu = argv[i + 1]
            i += 2
            continue
        names.append(argv[i])
        i += 1
    known = cases()
    for n in names:
        if n not in known:
            print(f"bench_predict: unknown NAME '{n[:40]}' (known: {', '.join(known)})", file=sys.stderr)
            return 2
    print(f"{'script':22s} {'wall s':>7s} {'capture s':>9s} {'ops s':>6s} {'ops':>6s} {'median op':>9s} "
          f"{'host peak':>10s} {'peak allocated':>15s}")
    for n in names or known:
        wall, rss, o = run(oomlab, gpu, known[n])
        c = o["capture"]
        print(f"{n:22s} {wall:7.1f} {c['seconds']:9.1f} {c.get('op_seconds') or 0:6.1f} {c['ops']:6.0f} "
              f"{c.get('op_median_us') or 0:7.0f} us {rss / 2**30:6.2f} GiB {o['peak_allocated']:15.0f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
