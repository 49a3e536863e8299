"""python -m oomlab_capture: run a PyTorch script on the CPU with its CUDA work on meta; write its device trace.

    python -m oomlab_capture --gpu NAME --out TRACE.json [--out-upper UPPER.json] [--quiet] [--rank R --world-size N]
                             -- SCRIPT [ARGS...]
    python -m oomlab_capture --list-gpus [--json]
    python -m oomlab_capture --build-extension

--build-extension compiles the recording allocator now (ext.py: about 1.5 to 2 minutes, once) and exits 0,
or 2 with the compiler's last line; a capture does it on first use otherwise (saying so on stderr).

--out-upper UPPER.json: where the capture met allocations the CPU cannot know (the trace's "range": cuDNN
convolutions not in a measured table), their bounds make a second trace, written here too; without a range,
nothing is written there.

--rank R --world-size N: the script is rank R of an N-process torch.distributed job (torchrun's variables set,
init_process_group on a fake process group: distributed.py); the trace's "distributed" says whether it initialised.

SCRIPT runs as __main__ (sys.argv = [SCRIPT, ARGS...], sys.path[0] its folder, the working directory unchanged).
Exit status: 0 the trace was written (atomically); 2 bad usage (one line on stderr); 3 the script raised (its
traceback, then "oomlab_capture: SCRIPT raised EXC: msg"); 4 the script never allocated device memory.
"""
import json
import os
import sys

USAGE = ("usage: python -m oomlab_capture --gpu NAME --out TRACE.json [--out-upper UPPER.json] [--quiet] "
         "[--rank R --world-size N] -- SCRIPT [ARGS...]\n"
         "       python -m oomlab_capture --list-gpus [--json]\n"
         "       python -m oomlab_capture --build-extension")


def bad(msg):
    print(f"oomlab_capture: {msg}", file=sys.stderr)
    return 2


def parse(argv):
    opts = {"rank": None, "world-size": None, "gpu": None, "out": None, "out-upper": None, "quiet": False,
            "list": False, "json": False,
            "script": None, "args": []}
    i = 0
    while i < len(argv):
        a = argv[i]
        if a == "--":
            rest = argv[i + 1:]
            if not rest:
                raise ValueError("no SCRIPT after --")
            opts["script"], opts["args"] = rest[0], rest[1:]
            return opts
        if a in ("--gpu", "--out", "--out-upper", "--rank", "--world-size"):
            if i + 1 >= len(argv):
                raise ValueError(f"{a} needs a value")
            opts[a[2:]] = argv[i + 1]
            i += 2
            continue
        if a.startswith("--gpu=") or a.startswith("--out="):
            k, v = a[2:].split("=", 1)
            opts[k] = v
        elif a == "--quiet":
            opts["quiet"] = True
        elif a == "--list-gpus":
            opts["list"] = True
        elif a == "--build-extension":
            opts["build"] = True
        elif a == "--json":
            opts["json"] = True
        elif a in ("-h", "--help"):
            opts["help"] = True
        elif not a.startswith("-") and opts["script"] is None and not opts["list"]:
            opts["script"], opts["args"] = a, argv[i + 1:]
            return opts
        else:
            raise ValueError(f"unknown option '{a[:60]}'")
        i += 1
    return opts


def print_script_traceback(exc, script):
    """The exception as Python prints it, from the script's first frame on (the capture's frames left out)."""
    import traceback
    tb = exc.__traceback__
    target = os.path.abspath(script)
    t = tb
    while t is not None and os.path.abspath(t.tb_frame.f_code.co_filename) != target:
        t = t.tb_next
    traceback.print_exception(type(exc), exc, t if t is not None else tb, file=sys.stderr)


def main(argv):
    try:
        o = parse(argv)
    except ValueError as e:
        return bad(f"{e} (python -m oomlab_capture --help)")
    if o.get("help"):
        print(__doc__.strip())
        print(USAGE)
        return 0
    from . import gpus
    if o.get("build"):
        from . import ext
        try:
            ext.load(quiet=o["quiet"])
        except Exception as e:  # cpp_extension raises RuntimeError/OSError/subprocess errors with the log
            lines = [ln for ln in str(e).strip().splitlines() if ln.strip()]
            return bad(f"cannot build the recording allocator: {lines[-1] if lines else type(e).__name__}")
        return 0
    if o["list"]:
        if o["json"]:
            print(json.dumps([dict(g, name=n) for n, g in gpus.GPUS.items()], indent=1))
        else:
            print(gpus.table_text())
        return 0
    gpu = gpus.lookup(o["gpu"] or gpus.DEFAULT)
    if gpu is None:
        return bad(f"unknown GPU '{o['gpu'][:60]}' (known: {gpus.known()})")
    if o["script"] is None:
        return bad("no SCRIPT given (python -m oomlab_capture --help)")
    if o["out"] is None:
        return bad("--out TRACE.json is required")
    dist = None
    if o["rank"] is not None or o["world-size"] is not None:
        r, n = o["rank"] or "", o["world-size"] or ""
        if not (r.isdigit() and n.isdigit() and 0 <= int(r) < int(n) <= 4096):
            return bad(f"--rank '{r[:20]}' --world-size '{n[:20]}': need both, 0 <= rank < world size <= 4096")
        dist = (int(r), int(n))
    script = o["script"]
    if not os.path.isfile(script):
        return bad(f"cannot run '{script[:60]}': no such file")
    folder = os.path.dirname(os.path.abspath(o["out"]))
    if not os.path.isdir(folder):
        return bad(f"cannot write '{o['out'][:60]}': the folder {folder[:60]} does not exist")

    import runpy

    from .recorder import Capture
    cap = Capture(gpu, quiet=o["quiet"], dist=dist)
    if cap.torch_note:
        print(f"oomlab_capture: {cap.torch_note}", file=sys.stderr)
    sys.argv = [script] + o["args"]
    sys.path[0] = os.path.dirname(os.path.abspath(script))
    failure = None
    try:
        with cap:
            runpy.run_path(script, run_name="__main__")
    except SystemExit as e:
        if e.code not in (None, 0):
            failure = e
    except BaseException as e:  # the script's own exception, KeyboardInterrupt included
        failure = e
    if failure is not None:
        if not isinstance(failure, SystemExit):
            print_script_traceback(failure, script)
        msg = str(failure)
        print(f"oomlab_capture: {script} raised {type(failure).__name__}: {msg}".rstrip(": ").splitlines()[0]
              if "\n" in msg else f"oomlab_capture: {script} raised {type(failure).__name__}: {msg}",
              file=sys.stderr)
        return 3
    if cap.n_allocs() == 0:
        print(f"oomlab_capture: {script} never allocated device memory (no CUDA tensor was made)",
              file=sys.stderr)
        return 4
    try:
        cap.write(o["out"])
        if o["out-upper"] and cap.ranges:
            cap.write(o["out-upper"], upper=True)
    except OSError as e:
        return bad(f"cannot write '{o['out'][:60]}': {e.strerror}")
    if not o["quiet"]:
        meta = cap.trace()["oomlab_capture"]
        print(f"oomlab_capture: {len(cap.events)} events, {meta['ops']} ops, {meta['steps']} optimizer steps "
              f"in {meta['seconds']:.1f} s -> {o['out']}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
