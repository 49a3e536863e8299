"""The capture's process runs with fakecuda.c interposed (LD_PRELOAD), so that torch.compile's CUDA path walks on
the CPU (compiled.py). Built with the C compiler on first use (well under a second) beside the recording
allocator's build (ext.build_dir()), in a folder named after a hash of its source, published by rename.

preload(argv) is called by __main__ before torch is imported: when the library is not yet preloaded it builds it,
then re-executes the same command with LD_PRELOAD set (the process id, its session and its descriptors unchanged).
OOMLAB_CAPTURE_NO_FAKECUDA=1 runs without it (torch.compile then runs eagerly, said in the report).
"""
import hashlib
import os
import subprocess
import sys
import tempfile

_HERE = os.path.dirname(os.path.abspath(__file__))
_SOURCE = os.path.join(_HERE, "fakecuda.c")
MARK = "OOMLAB_CAPTURE_FAKECUDA"


def library():
    from . import ext
    with open(_SOURCE, "rb") as f:
        h = hashlib.sha256(f.read()).hexdigest()[:12]
    return os.path.join(ext.build_dir(), f"oomlab_fakecuda-{h}", "libfakecuda.so")


def _build(path):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".build-", suffix=".so")
    os.close(fd)
    try:
        cc = os.environ.get("CC") or "cc"
        inc = os.path.join(os.environ.get("CUDA_HOME") or "/usr/local/cuda", "include")
        subprocess.run([cc, "-shared", "-fPIC", "-O2", "-I" + inc, "-Wl,-soname,libcuda.so.1", "-o", tmp, _SOURCE],
                       check=True,
                       capture_output=True, text=True, timeout=120)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def active():
    return os.environ.get(MARK) == "1"


def preload(argv, gpu):
    """Re-execute under LD_PRELOAD (never returns) unless already done or switched off; on a build failure, say it
    and go on without (compile then runs eagerly). gpu: the GPU table's entry the library answers as."""
    if os.environ.get(MARK) is not None or os.environ.get("OOMLAB_CAPTURE_NO_FAKECUDA") == "1":
        return
    path = library()
    try:
        if not os.path.exists(path):
            _build(path)
    except (OSError, subprocess.SubprocessError) as e:
        err = getattr(e, "stderr", "") or str(e)
        print(f"oomlab_capture: cannot build {os.path.basename(_SOURCE)} ({err.strip().splitlines()[-1:]}): "
              "torch.compile runs eagerly", file=sys.stderr)
        os.environ[MARK] = "0"
        return
    from . import gpus
    major, minor = gpus.capability(gpu)
    env = dict(os.environ)
    env[MARK] = "1"
    env["OOMLAB_FAKECUDA_GPU"] = ";".join(str(x) for x in (
        "NVIDIA " + gpu["name"], gpu["total_memory"], major, minor, gpu["sm_count"], gpu["max_threads_per_sm"],
        gpu.get("l2_bytes", 0), gpus.smem_per_block_optin(gpu)))
    env["LD_PRELOAD"] = path + (":" + env["LD_PRELOAD"] if env.get("LD_PRELOAD") else "")
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, [sys.executable, "-m", "oomlab_capture"] + list(argv), env)
