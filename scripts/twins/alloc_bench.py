"""alloc_bench - oomlab's caching allocator against PyTorch's, in one run on one GPU, alternating.

    python3 scripts/twins/alloc_bench.py --oomlab .gpubundle/oomlab-bench [--rounds 15] [--iters 200000]
                                         [--seed 1] [--out DIR] [--backend cuda]
    python3 scripts/twins/alloc_bench.py plot DIR/alloc_bench.tsv OUT.png

Each round runs `oomlab bench alloc --runs 1 --json` (a process of its own) and PyTorch's allocator (c10's
CUDACachingAllocator::raw_alloc / raw_delete, from scripts/twins/alloc_bench_torch.cpp, compiled here with g++
against the installed torch and called through ctypes), in turn: oomlab first in odd rounds, PyTorch first in
even ones, so that a drift of the machine falls on both. Both time the same patterns with the same pair counts: a
malloc+free pair of 1 KiB, 1 MiB, 20 MiB and 256 MiB with 1 and with 64 outstanding (after a warm-up round that
makes the segments), and the mixed workload, which oomlab generates from the seed and writes once
(`--workload-out`); PyTorch replays that file and hashes its lines, and the run stops unless the hash is the one
oomlab reported. Each side starts every pattern with an empty cache (oomlab: a new allocator; PyTorch:
torch.cuda.empty_cache()). cudaMalloc and cudaMallocAsync come from oomlab's run (bench_cuda.cu).

Printed: per pattern the median and p90 over the rounds of ns per pair on each side and the ratio of the medians
(PyTorch / oomlab). Written to --out (default $OUT, else alloc-bench-out): alloc_bench.txt (that table and the machine), alloc_bench.md
(the same as a Markdown table, for BENCHMARKS.md), alloc_bench.json (every round's figure), alloc_bench.tsv (for the
plot), workload.txt, oomlab_round_N.json (each oomlab run's own JSON). The commit is the one the oomlab binary
names (`oomlab --version`: the commit it was built from), never the checkout's the script runs in, which on a GPU
machine may be another.

`plot` draws ns per pair by pattern for oomlab, PyTorch and cudaMallocAsync (median, the bar up to p90), log
scale, with gnuplot (scripts/twins/alloc_bench.gp) from that TSV.

With --backend sim (no GPU, for trying the script): oomlab runs dry on sim and PyTorch's side is skipped, saying so.
"""
import argparse
import ctypes
import datetime
import json
import os
import platform
import re
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))

# (label, bytes, outstanding): the cells of `oomlab bench alloc`, in its order; bytes 0 is the mixed workload
CELLS = [("1KiB", 1 << 10, 1), ("1KiB", 1 << 10, 64), ("1MiB", 1 << 20, 1), ("1MiB", 1 << 20, 64),
         ("20MiB", 20 << 20, 1), ("20MiB", 20 << 20, 64), ("256MiB", 256 << 20, 1), ("256MiB", 256 << 20, 64),
         ("mixed", 0, 128)]


def cell_name(c):
    return f"{c[0]}/live:{c[2]}"


def median(v):
    s = sorted(v)
    return s[len(s) // 2] if s else None


def p90(v):
    s = sorted(v)
    if not s:
        return None
    rank = (9 * len(s) + 9) // 10  # nearest rank, as bench.c's bench_p90
    return s[rank - 1]


def build_torch_side(torch, folder):
    """Compile alloc_bench_torch.cpp into a shared library against this torch; the ctypes handle."""
    import torch.utils.cpp_extension as cpp
    os.makedirs(folder, exist_ok=True)
    src = os.path.join(HERE, "alloc_bench_torch.cpp")
    lib = os.path.join(folder, "liboomlab_alloc_bench_torch.so")
    try:
        incs = cpp.include_paths(device_type="cuda")
    except TypeError:  # torch before 2.6 named it cuda=True
        incs = cpp.include_paths(cuda=True)
    cuda_home = cpp.CUDA_HOME or "/usr/local/cuda"
    incs = list(incs) + [os.path.join(cuda_home, "include")]
    libdir = os.path.join(os.path.dirname(torch.__file__), "lib")
    abi = int(torch._C._GLIBCXX_USE_CXX11_ABI)
    cmd = [os.environ.get("CXX", "g++"), "-O2", "-std=c++17", "-shared", "-fPIC", f"-D_GLIBCXX_USE_CXX11_ABI={abi}",
           src, "-o", lib] + [f"-I{i}" for i in incs] + [f"-L{libdir}", "-lc10_cuda", "-lc10", f"-Wl,-rpath,{libdir}"]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"alloc_bench: compiling {src} failed:\n{r.stderr[-4000:]}")
    h = ctypes.CDLL(lib)
    h.oomlab_torch_hot.argtypes = [ctypes.c_size_t, ctypes.c_int, ctypes.c_long, ctypes.c_int,
                                   ctypes.POINTER(ctypes.c_double), ctypes.c_char_p, ctypes.c_size_t]
    h.oomlab_torch_mixed.argtypes = [ctypes.c_char_p, ctypes.c_long, ctypes.c_int, ctypes.POINTER(ctypes.c_double),
                                     ctypes.POINTER(ctypes.c_uint64), ctypes.c_char_p, ctypes.c_size_t]
    return h


def torch_round(torch, h, workload, iters):
    """One round of PyTorch's side: {cell name: ns per pair}, and the workload's hash. Each pattern starts from an
    empty cache, as each of oomlab's starts from a new allocator, and the round leaves none behind."""
    torch.cuda.synchronize()
    out, err = (ctypes.c_double * 1)(), ctypes.create_string_buffer(512)
    figs, whash = {}, ctypes.c_uint64(0)
    for c in CELLS:
        torch.cuda.empty_cache()
        if c[1]:
            rc = h.oomlab_torch_hot(c[1], c[2], iters, 1, out, err, len(err))
        else:
            rc = h.oomlab_torch_mixed(workload.encode(), iters, 1, out, ctypes.byref(whash), err, len(err))
        if rc != 0:
            sys.exit(f"alloc_bench: PyTorch's side failed on {cell_name(c)}: {err.value.decode(errors='replace')}")
        figs[cell_name(c)] = out[0]
    torch.cuda.empty_cache()
    return figs, f"{whash.value:016x}"


def oomlab_env(binary):
    """The environment of oomlab's processes: a bundle's libraries (make gpu-bundle: BIN beside lib/) for it alone,
    never for this process, whose torch loads its own."""
    env = dict(os.environ)
    lib = os.path.join(os.path.dirname(os.path.abspath(binary)), "lib")
    if os.path.isdir(lib):
        env["LD_LIBRARY_PATH"] = lib + (os.pathsep + env["LD_LIBRARY_PATH"] if env.get("LD_LIBRARY_PATH") else "")
    return env


def oomlab_round(args, rnd, workload_out):
    """One `oomlab bench alloc --runs 1 --json` process: its JSON, and {name: ns} of every figure it gives."""
    cmd = [args.oomlab, "bench", "alloc", "--backend", args.backend, "--runs", "1", "--iters", str(args.iters),
           "--seed", str(args.seed), "--json"]
    if workload_out:
        cmd += ["--workload-out", workload_out]
    r = subprocess.run(cmd, capture_output=True, text=True, env=oomlab_env(args.oomlab))
    if r.returncode != 0:
        sys.exit(f"alloc_bench: {' '.join(cmd)} exited {r.returncode}: {r.stderr.strip()[:500]}")
    doc = json.loads(r.stdout)
    with open(os.path.join(args.out, f"oomlab_round_{rnd}.json"), "w") as f:
        f.write(r.stdout)
    figs = {}
    for b in doc["benchmarks"]:
        if b.get("error_occurred"):
            sys.exit(f"alloc_bench: oomlab's {b['name']} failed")
        figs[b["name"]] = b["real_time"]  # cachealloc/1KiB/live:1, cudaMalloc/..., cudaMallocAsync/...
    return doc, figs


def machine(torch):
    m = {"date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
         "host_cpu": platform.processor() or platform.machine()}
    try:
        with open("/proc/cpuinfo") as f:
            names = [ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")]
        if names:
            m["host_cpu"] = f"{names[0]} ({len(names)} CPUs)"
    except OSError:
        pass
    if shutil.which("nvidia-smi"):
        r = subprocess.run(["nvidia-smi", "--query-gpu=name,memory.total,driver_version", "--format=csv,noheader"],
                           capture_output=True, text=True)
        m["gpu"] = r.stdout.strip().splitlines()[0] if r.returncode == 0 and r.stdout.strip() else "unknown"
    if torch is not None:
        m["torch"] = torch.__version__
        m["torch_cuda"] = torch.version.cuda
    m["pytorch_cuda_alloc_conf"] = os.environ.get("PYTORCH_CUDA_ALLOC_CONF", "")
    return m


def measure(args):
    os.makedirs(args.out, exist_ok=True)
    torch = h = None
    skipped = None
    if args.backend == "sim":
        skipped = "--backend sim: PyTorch's side skipped (it needs a GPU); these are not PyTorch's figures"
    else:
        import torch as _torch
        torch = _torch
        if not torch.cuda.is_available():
            sys.exit("alloc_bench: torch sees no CUDA device (use --backend sim to try the script without one)")
        torch.empty(1, device="cuda")  # initialise CUDA and the caching allocator
        h = build_torch_side(torch, os.path.join(REPO, "build", "torch_extensions", "oomlab_alloc_bench"))
    info = machine(torch)
    info["oomlab"] = subprocess.run([args.oomlab, "--version"], capture_output=True, text=True,
                                    env=oomlab_env(args.oomlab)).stdout.strip()
    # the commit the timed binary was built from, as it names it (a binary older than that stamp names none)
    built = re.search(r"; commit ([0-9a-f]+(?:-dirty)?|unknown)\)$", info["oomlab"])
    info["commit"] = built.group(1) if built else "unknown (the binary names none)"
    workload = os.path.join(args.out, "workload.txt")
    samples = {"oomlab": {}, "torch": {}, "cudaMalloc": {}, "cudaMallocAsync": {}}
    rounds, oomlab_hash = [], None
    for rnd in range(1, args.rounds + 1):
        order = ["oomlab", "torch"] if rnd % 2 == 1 else ["torch", "oomlab"]
        if rnd == 1:
            order = ["oomlab", "torch"]  # the first oomlab run writes the workload PyTorch replays
        rec = {"round": rnd, "order": order}
        for side in order:
            if side == "oomlab":
                doc, figs = oomlab_round(args, rnd, workload if rnd == 1 else None)
                oomlab_hash = doc["context"]["oomlab_workload_fnv1a"]
                for name, ns in figs.items():
                    what, rest = name.split("/", 1)
                    key = {"cachealloc": "oomlab"}.get(what, what)
                    samples[key].setdefault(rest, []).append(ns)
                rec["oomlab"] = figs
            elif h is not None:
                figs, whash = torch_round(torch, h, workload, args.iters)
                if whash != oomlab_hash:
                    sys.exit(f"alloc_bench: PyTorch replayed a workload hashing to {whash}, oomlab's is {oomlab_hash}")
                for name, ns in figs.items():
                    samples["torch"].setdefault(name, []).append(ns)
                rec["torch"] = figs
        rounds.append(rec)
        print(f"round {rnd}/{args.rounds} done", file=sys.stderr, flush=True)

    lines = [f"alloc_bench: {info['date']}; GPU {info.get('gpu', 'none')}; host {info['host_cpu']}",
             f"oomlab: {info['oomlab']}; torch {info.get('torch', '-')} "
             f"(CUDA {info.get('torch_cuda', '-')}), PYTORCH_CUDA_ALLOC_CONF='{info['pytorch_cuda_alloc_conf']}'",
             f"backend {args.backend}; {args.rounds} rounds alternating (oomlab first in odd rounds), {args.iters} "
             f"pairs per figure per round; mixed workload seed {args.seed}, fnv1a {oomlab_hash}",
             "ns per malloc+free pair over the rounds: median / p90; ratio = PyTorch median / oomlab median"]
    if skipped:
        lines.append(skipped)
    hdr = f"{'pattern':<16} {'oomlab':>15} {'PyTorch':>17} {'ratio':>7} {'cudaMallocAsync':>17} {'cudaMalloc':>19}"
    lines.append(hdr)
    tsv = ["# pattern\toomlab_median\toomlab_p90\ttorch_median\ttorch_p90\tasync_median\tasync_p90"]
    md = [f"{info['date']}, {info.get('gpu', 'no GPU')} (name, memory, driver), host {info['host_cpu']}; oomlab "
          f"commit {info['commit']} (`make bench`'s build), torch {info.get('torch', '-')}; {args.rounds} rounds, "
          f"{args.iters} pairs per figure per round; ns per malloc+free pair, median / p90 over the rounds.", "",
          "| pattern | oomlab | PyTorch `raw_alloc` | PyTorch / oomlab | cudaMallocAsync | cudaMalloc |",
          "|---|---:|---:|---:|---:|---:|"]
    if skipped:
        md.insert(1, skipped)

    def pair(v):
        return f"{median(v):8.1f} / {p90(v):8.1f}" if v else f"{'-':>8} / {'-':>8}"

    def num(x):
        return f"{x:.1f}" if x is not None else "NaN"

    for c in CELLS:
        n = cell_name(c)
        o, t = samples["oomlab"].get(n, []), samples["torch"].get(n, [])
        a, m = samples["cudaMallocAsync"].get(n, []), samples["cudaMalloc"].get(n, [])
        ratio = f"{median(t) / median(o):6.1f}x" if o and t else f"{'-':>7}"
        lines.append(f"{n:<16} {pair(o):>15} {pair(t):>17} {ratio:>7} {pair(a):>17} {pair(m):>19}")
        tsv.append("\t".join([n, num(median(o)), num(p90(o)), num(median(t)), num(p90(t)), num(median(a)),
                              num(p90(a))]))

        def cell(v):
            return f"{median(v):,.1f} / {p90(v):,.1f}" if v else "-"
        md.append(f"| {n} | {cell(o)} | {cell(t)} | {ratio.strip() if o and t else '-'} | {cell(a)} | {cell(m)} |")
    text = "\n".join(lines) + "\n"
    sys.stdout.write(text)
    with open(os.path.join(args.out, "alloc_bench.txt"), "w") as f:
        f.write(text)
    with open(os.path.join(args.out, "alloc_bench.md"), "w") as f:
        f.write("\n".join(md) + "\n")
    with open(os.path.join(args.out, "alloc_bench.tsv"), "w") as f:
        f.write("\n".join(tsv) + "\n")
    with open(os.path.join(args.out, "alloc_bench.json"), "w") as f:
        json.dump({"schema": "oomlab.alloc_bench/1", "machine": info, "backend": args.backend,
                   "rounds": args.rounds, "iters": args.iters, "seed": args.seed, "workload_fnv1a": oomlab_hash,
                   "skipped": skipped, "samples": samples, "per_round": rounds}, f, indent=1)
    return 0


def plot(tsv, png):
    gp = os.path.join(HERE, "alloc_bench.gp")
    if not shutil.which("gnuplot"):
        sys.exit("alloc_bench: gnuplot is not installed")
    # the paths go in as gnuplot's ARG1 and ARG2 (strings), never into the script's text
    r = subprocess.run(["gnuplot", "-c", gp, tsv, png], capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"alloc_bench: gnuplot failed: {r.stderr.strip()[:500]}")
    print(f"alloc_bench: drew {png}")
    return 0


def main(argv):
    if argv[:1] == ["plot"]:
        if len(argv) != 3:
            sys.exit("usage: alloc_bench.py plot TSV PNG")
        return plot(argv[1], argv[2])
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--oomlab", default=os.path.join(REPO, ".gpubundle", "oomlab-bench"),
                    help="the oomlab binary (make bench's build; default .gpubundle/oomlab-bench)")
    ap.add_argument("--backend", default="cuda", choices=["cuda", "sim"])
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--iters", type=int, default=200000, help="malloc+free pairs per figure per round")
    ap.add_argument("--seed", type=int, default=1, help="the mixed workload's seed")
    ap.add_argument("--out", default=os.environ.get("OUT", "alloc-bench-out"))
    args = ap.parse_args(argv)
    if args.rounds < 1 or args.iters < 1 or args.seed < 1:
        sys.exit("alloc_bench: --rounds, --iters and --seed must be at least 1")
    return measure(args)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
