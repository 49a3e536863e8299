"""python -m oomlab_capture: run a PyTorch script on the CPU with its CUDA work on meta; write its device trace.

    python -m oomlab_capture --gpu NAME --out TRACE.json [--out-upper UPPER.json] [--status STATUS.json] [--quiet]
                             [--timed-choices first|other] [--rank R --world-size N] -- SCRIPT [ARGS...]
    python -m oomlab_capture --list-gpus [--json]
    python -m oomlab_capture --build-extension

--build-extension compiles the recording allocator now (ext.py: about 1.5 to 2 minutes, once) and exits 0,
or 2 with the compiler's last line; a capture does it on first use otherwise (saying so on stderr).

--out-upper UPPER.json: where the capture met allocations the CPU cannot know (the trace's "range": cuDNN
convolutions not in a measured table), their bounds make a second trace, written here too; without a range,
nothing is written there.

--timed-choices first|other: how the choices the GPU makes by timing during torch.compile are taken (the trace's
"compile" "timed" counts them): first (the default) pad_mm unpadded and max-autotune's ATen kernels; other pad_mm
padded and the Triton templates, with their fusions (cuda_model/compiled.py, max_autotune.py). oomlab predict runs
the capture a second time with "other" where the first timed any choice, and gives the range over both.

--rank R --world-size N: the script is rank R of an N-process torch.distributed job (torchrun's variables set,
init_process_group on a fake process group: distributed.py); the trace's "distributed" says whether it initialised.

--status STATUS.json: how the capture ended, written last (Status below: returned, raised, sys.exit, os._exit,
stopped by SIGTERM, ...), so that oomlab predict names every ending in one line, whatever the exit status.

SCRIPT runs as __main__ (sys.argv = [SCRIPT, ARGS...], sys.path[0] its folder, the working directory unchanged).
Exit status: 0 the trace was written (atomically); 2 bad usage (one line on stderr); 3 the script raised (its
traceback, then "oomlab_capture: SCRIPT raised EXC: msg"), called sys.exit(N) with N not 0, or ran an op with no
meta kernel; 4 the script never allocated device memory; 128 + N stopped by signal N (SIGTERM: where the script
was, and its busiest placeholder); os._exit(N) in the script: N (at 0 the trace is written first).
"""
import json
import os
import re
import signal
import sys
import tempfile

STATUS_SCHEMA = "oomlab.capture.status/1"
USAGE = ("usage: python -m oomlab_capture --gpu NAME --out TRACE.json [--out-upper UPPER.json] "
         "[--status STATUS.json] [--quiet] [--timed-choices first|other] [--rank R --world-size N] -- "
         "SCRIPT [ARGS...]\n"
         "       python -m oomlab_capture --list-gpus [--json]\n"
         "       python -m oomlab_capture --build-extension")


def bad(msg):
    print(f"oomlab_capture: {msg}", file=sys.stderr)
    return 2


def parse(argv):
    opts = {"rank": None, "world-size": None, "gpu": None, "out": None, "out-upper": None, "status": None,
            "timed-choices": "first", "quiet": False,
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
        if a in ("--gpu", "--out", "--out-upper", "--status", "--rank", "--world-size", "--timed-choices"):
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


class Status:
    """The capture's last word to oomlab predict (--status PATH), written once, atomically, after everything else:
    {"schema", "ended", "code", "line", "os_exit"}, its line also printed on stderr. ended: returned (the trace is
    written; os_exit true when the script ended with os._exit(0)), raised, exit (sys.exit(N), N not 0), os_exit
    (os._exit(N), N not 0), no_device, unsupported (an op with no meta kernel), stopped (SIGTERM), build (the
    extension), usage. Without the file oomlab knows the process ended some other way (a signal, a crash)."""

    def __init__(self, path):
        self.path, self.done = path, False

    def end(self, ended, code, line, os_exit=False):
        line = "".join(" " if ord(ch) < 32 or ord(ch) == 127 else ch for ch in line)  # a newline in a name: one line
        if line:
            print(line, file=sys.stderr, flush=True)
        if self.path and not self.done:
            self.done = True
            doc = {"schema": STATUS_SCHEMA, "ended": ended, "code": code, "line": line, "os_exit": os_exit}
            folder = os.path.dirname(os.path.abspath(self.path))
            try:
                fd, tmp = tempfile.mkstemp(dir=folder, prefix=".oomlab_capture.status.")
                with os.fdopen(fd, "w") as f:
                    json.dump(doc, f)
                os.replace(tmp, self.path)
            except OSError:
                pass  # oomlab then says the capture ended without a word
        return code


def outside_capture(exc):
    """The one line for an op the capture cannot run (no meta kernel: NotImplementedError naming aten::OP and
    Meta), with the script's line; None for any other exception."""
    if not isinstance(exc, NotImplementedError) or "Meta" not in str(exc):
        return None
    m = re.search(r"aten::[A-Za-z0-9_]+(?:\.[A-Za-z0-9_]+)?", str(exc))
    if not m:
        return None
    import traceback

    from . import frames
    where = ""
    for fs in reversed(traceback.extract_tb(exc.__traceback__)):
        if not fs.filename.startswith(frames.SKIP):
            where = f" at {fs.filename}:{fs.lineno}"
            break
    return (f"{m.group(0)}{where} has no meta kernel, and its inputs' values are not known on the CPU: the "
            f"capture cannot run it, so the script is outside what oomlab predict models (not modelled: "
            f"{m.group(0)})")


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
            print(json.dumps([dict(g, name=n, aliases=sorted(a for a, t in gpus.ALIASES.items() if t == n))
                              for n, g in gpus.GPUS.items()], indent=1))
        else:
            print(gpus.table_text())
        return 0
    status = Status(o["status"])

    def bad(msg):  # from here on the line is oomlab's status too
        return status.end("usage", 2, f"oomlab_capture: {msg}")

    gpu = gpus.lookup(o["gpu"] or gpus.DEFAULT)
    if gpu is None:
        return bad(f"unknown GPU '{o['gpu'][:60]}' (known: {gpus.known()})")
    if o["script"] is None:
        return bad("no SCRIPT given (python -m oomlab_capture --help)")
    if o["out"] is None:
        return bad("--out TRACE.json is required")
    if o["timed-choices"] not in ("first", "other"):
        return bad(f"--timed-choices '{o['timed-choices'][:20]}': first or other")
    from . import fakecuda
    fakecuda.preload(argv, gpu)  # before torch is imported: re-executes this command with the library interposed
    try:
        import torch  # the capture's first need, said in one line when missing
    except ImportError as e:
        return bad(f"{sys.executable} cannot import torch ({e}): the capture needs torch 2.11 (oomlab predict "
                   f"installs build/venv when --python is not given)")
    from .cuda_model import cublas
    line = cublas.check_env()
    if line:
        return bad(line)
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

    from . import ext, frames
    from .recorder import Capture
    try:
        cap = Capture(gpu, quiet=o["quiet"], dist=dist, choices=o["timed-choices"])
    except ext.BuildError as e:
        return status.end("build", 2, f"oomlab_capture: {e}")
    if cap.torch_note:
        print(f"oomlab_capture: {cap.torch_note}", file=sys.stderr)
    sys.argv = [script] + o["args"]
    sys.path[0] = os.path.dirname(os.path.abspath(script))
    me = os.getpid()

    def finish(os_exit=False):
        """After the script: the trace written, or why not; the exit status."""
        if cap.n_allocs() == 0:
            return status.end("no_device", 4, f"oomlab_capture: {script} never allocated device memory (no CUDA "
                                              f"tensor was made)")
        try:
            cap.write(o["out"])
            if o["out-upper"] and cap.ranges:
                cap.write(o["out-upper"], upper=True)
        except OSError as e:
            return status.end("usage", 2, f"oomlab_capture: cannot write '{o['out'][:60]}': {e.strerror}")
        if not o["quiet"]:
            meta = cap.trace()["oomlab_capture"]
            print(f"oomlab_capture: {len(cap.events)} events, {meta['ops']} ops, {meta['steps']} optimizer steps "
                  f"in {meta['seconds']:.1f} s -> {o['out']}", file=sys.stderr)
        return status.end("returned", 0, "", os_exit=os_exit)

    # os._exit(N) in the script ends the process at once: said in the status, and at 0 the trace is written
    # first (the script's work is done). Only in this process: a forked child (a DataLoader worker) exits as it
    # would, and writes nothing.
    real_exit = os._exit

    def script_os_exit(code=0):
        if os.getpid() == me:
            try:
                code = int(code)
            except (TypeError, ValueError):
                code = 1
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            if code == 0:
                cap.__exit__(None, None, None)
                code = finish(os_exit=True)
            else:
                status.end("os_exit", code, f"oomlab_capture: {script} called os._exit({code}): no trace")
        real_exit(code)

    # SIGTERM (oomlab predict's --timeout, or oomlab itself stopped): where the script was, and the placeholder
    # it leaned on most (a loop on a guessed value is the usual endless capture), then exit at once
    def on_term(signum, frame):
        if os.getpid() != me:
            real_exit(128 + signum)
        where = frames.user_frames(1, frame)
        at = f" at {where[0]['filename']}:{where[0]['line']}" if where else ""
        busy = cap.busiest_placeholder()
        lean = (f"; {busy[0]} at {busy[1]} was answered with a placeholder {busy[2]:,} times"
                if busy and busy[2] > 1 else "")
        status.end("stopped", 128 + signum, f"oomlab_capture: {script} stopped{at}{lean}")
        real_exit(128 + signum)

    failure = None
    os._exit = script_os_exit
    old_term = signal.signal(signal.SIGTERM, on_term)
    try:
        with cap:
            runpy.run_path(script, run_name="__main__")
    except SystemExit as e:
        if e.code not in (None, 0):
            failure = e
    except BaseException as e:  # the script's own exception, KeyboardInterrupt included
        failure = e
    finally:
        os._exit = real_exit
        signal.signal(signal.SIGTERM, old_term)
    if os.getpid() != me:  # a forked child that returned through here (os.fork without exec): no trace
        return 0
    if failure is not None and isinstance(failure, torch.OutOfMemoryError) and cap.oversized:
        # a request above any GPU (meta_alloc.cpp): the GPU run raises this OutOfMemoryError there too, so the
        # trace up to it, ending in the oom event, is the prediction
        import traceback
        fs = [f for f in traceback.extract_tb(failure.__traceback__) if not f.filename.startswith(frames.SKIP)]
        at = f" at {fs[-1].filename}:{fs[-1].lineno}" if fs else ""
        print(f"oomlab_capture: {script} asks for {cap.oversized:,} bytes at once{at}, more than any GPU has: "
              f"PyTorch raises torch.OutOfMemoryError there, and so did the capture; predicted up to that request",
              file=sys.stderr)
        failure = None
    if failure is not None:
        if isinstance(failure, SystemExit):
            return status.end("exit", 3, f"oomlab_capture: {script} called sys.exit({failure.code!r}): no trace")
        line = outside_capture(failure)
        if line:  # one line: the traceback would only show torch's dispatch
            return status.end("unsupported", 3, f"oomlab_capture: {line}")
        print_script_traceback(failure, script)
        msg = str(failure).strip().splitlines()
        return status.end("raised", 3, f"oomlab_capture: {script} raised {type(failure).__name__}"
                                       + (f": {msg[0]}" if msg else ""))
    return finish()

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
