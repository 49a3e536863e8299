"""The recording Meta allocator (meta_alloc.cpp), compiled with torch.utils.cpp_extension on first use.

The build is cached under $OOMLAB_TORCH_EXTENSIONS, default <repo>/build/torch_extensions (the repository that
holds this package), in a folder named after a hash of meta_alloc.cpp and the torch version, so that two versions
of oomlab (or of torch) never share one. The first build takes about 2 minutes on two cores; it needs a C++
compiler and ninja (pip install ninja).

Locking. cpp_extension's own lock (FileBaton: a file `lock` made with O_EXCL, waited on with no limit) is taken on
every load, build or not, and outlives a holder killed by SIGKILL or SIGTERM: every later capture then waits for
ever. So every load here first takes an flock on `oomlab.lock` in the folder, which the kernel drops when its
holder dies; under it no other capture of this folder is inside cpp_extension, so a `lock` file found then is a
dead holder's, removed (and said). Waiting for a live holder is limited to BUILD_WAIT_S, and the build itself to
BUILD_LIMIT_S; either limit is one line naming the folder (BuildError).
"""
import errno
import fcntl
import hashlib
import os
import signal
import sys
import threading
import time

_HERE = os.path.dirname(os.path.abspath(__file__))
_REPO = os.path.dirname(os.path.dirname(_HERE))
_SOURCE = os.path.join(_HERE, "meta_alloc.cpp")
_module = None

BUILD_WAIT_S = 600   # another capture building the same extension: it takes about 2 minutes
BUILD_LIMIT_S = 900  # our own build (ninja and the compiler): far above the 2 minutes it takes


class BuildError(Exception):
    """The extension could not be had: one line, naming the folder."""


def build_dir():
    return os.environ.get("OOMLAB_TORCH_EXTENSIONS") or os.path.join(_REPO, "build", "torch_extensions")


def folder():
    """<build_dir>/oomlab_meta_alloc-<12 hex digits of sha256(meta_alloc.cpp, torch's version)>."""
    import torch
    h = hashlib.sha256()
    with open(_SOURCE, "rb") as f:
        h.update(f.read())
    h.update(torch.__version__.encode())
    return os.path.join(build_dir(), "oomlab_meta_alloc-" + h.hexdigest()[:12])


def _lock(path, say):
    """An exclusive flock on path, waited for at most BUILD_WAIT_S; the open descriptor (the lock lives with it)."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    deadline, told = time.monotonic() + BUILD_WAIT_S, False
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            break
        except OSError as e:
            if e.errno not in (errno.EWOULDBLOCK, errno.EACCES):
                os.close(fd)
                raise
        if time.monotonic() >= deadline:
            os.close(fd)
            raise BuildError(f"another capture has held {path} for more than {BUILD_WAIT_S} s (compiling the "
                             f"recording allocator there?); remove the folder if no oomlab is running")
        if not told:
            say(f"oomlab_capture: waiting for another capture that is compiling the recording allocator "
                f"({path}, at most {BUILD_WAIT_S} s)")
            told = True
        time.sleep(0.2)
    os.ftruncate(fd, 0)
    os.write(fd, f"{os.getpid()}\n".encode())
    return fd


class _Overtime(Exception):
    pass


def _alarm(signum, frame):
    raise _Overtime()


def load(quiet=False):
    """The compiled extension, building it the first time (saying so on stderr unless quiet). BuildError when a
    limit is passed."""
    global _module
    if _module is not None:
        return _module
    import logging
    logging.getLogger("torch.utils.cpp_extension").setLevel(logging.ERROR)  # "No CUDA runtime is found"
    import torch.utils.cpp_extension as cpp

    def say(msg):
        if not quiet:
            print(msg, file=sys.stderr, flush=True)

    where = folder()
    os.makedirs(where, exist_ok=True)
    fd = _lock(os.path.join(where, "oomlab.lock"), say)
    try:
        baton = os.path.join(where, "lock")
        if os.path.exists(baton):  # a dead holder's: every live one holds our flock first
            os.unlink(baton)
            say(f"oomlab_capture: removed {baton}, left by a capture that was killed while compiling")
        fresh = not any(n.endswith(".so") for n in os.listdir(where))
        if fresh:
            say(f"oomlab_capture: compiling the recording allocator into {where} (once, about 2 minutes)")
        # torch's own bin/ (ninja is installed there by pip) must be on PATH for cpp_extension
        bindir = os.path.dirname(sys.executable)
        if bindir not in os.environ.get("PATH", "").split(os.pathsep):
            os.environ["PATH"] = bindir + os.pathsep + os.environ.get("PATH", "")
        t0 = time.time()
        # the build's time limit: SIGALRM raises here, and subprocess.run kills ninja on the way out (oomlab
        # predict ends the rest of the process group); only in the main thread, where signals are delivered
        main = threading.current_thread() is threading.main_thread()
        old = signal.signal(signal.SIGALRM, _alarm) if main else None
        if main:
            signal.alarm(BUILD_LIMIT_S)
        try:
            _module = cpp.load("oomlab_meta_alloc", [_SOURCE], build_directory=where, extra_cflags=["-O2"],
                               verbose=False)
        except _Overtime:
            raise BuildError(f"compiling the recording allocator into {where} took more than {BUILD_LIMIT_S} s; "
                             f"stopped") from None
        finally:
            if main:
                signal.alarm(0)
                signal.signal(signal.SIGALRM, old)
        if fresh:
            say(f"oomlab_capture: compiled in {time.time() - t0:.0f} s")
    finally:
        os.close(fd)
    _module.install()
    return _module
