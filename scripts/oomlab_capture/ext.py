"""The recording Meta allocator (meta_alloc.cpp), compiled with torch.utils.cpp_extension on first use.

The build is kept under $OOMLAB_TORCH_EXTENSIONS, default <repo>/build/torch_extensions (the repository that holds
this package), in a folder named after a hash of meta_alloc.cpp and the torch version, so that two versions of
oomlab (or of torch) never share one: FOLDER/oomlab_meta_alloc.so once built, imported directly from then on. The
first build takes about 2 minutes on two cores; it needs a C++ compiler and ninja (pip install ninja).

A build never shares a folder with another. cpp_extension's own lock (FileBaton: a file made with O_EXCL and waited
on with no limit) outlived a capture killed while compiling, and every later capture waited for ever; and a
compiler orphaned by a kill writes on into its folder. So a build runs in a fresh folder of its own,
FOLDER/build-XXXXXX, under an flock on FOLDER/oomlab.lock (which the kernel drops when its holder dies), and the
finished library is published by a rename: a reader sees the whole file or none. The next builder removes the
build folders left by killed ones. Waiting for a live builder is limited to BUILD_WAIT_S and a build to
BUILD_LIMIT_S; either is one line naming the folder (BuildError).
"""
import errno
import fcntl
import hashlib
import importlib.machinery
import importlib.util
import os
import shutil
import signal
import sys
import tempfile
import threading
import time

_HERE = os.path.dirname(os.path.abspath(__file__))
_REPO = os.path.dirname(os.path.dirname(_HERE))
_SOURCE = os.path.join(_HERE, "meta_alloc.cpp")
NAME = "oomlab_meta_alloc"
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
    return os.path.join(build_dir(), f"{NAME}-{h.hexdigest()[:12]}")


def _import(path):
    """The extension module from a built library (torch is imported: its symbols resolve)."""
    loader = importlib.machinery.ExtensionFileLoader(NAME, path)
    spec = importlib.util.spec_from_file_location(NAME, path, loader=loader)
    mod = importlib.util.module_from_spec(spec)
    loader.exec_module(mod)
    return mod


def _lock(path):
    """An exclusive flock on path, waited for at most BUILD_WAIT_S (said once); the open descriptor."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    deadline, told = time.monotonic() + BUILD_WAIT_S, False
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return fd
        except OSError as e:
            if e.errno not in (errno.EWOULDBLOCK, errno.EACCES):
                os.close(fd)
                raise
        if time.monotonic() >= deadline:
            os.close(fd)
            raise BuildError(f"another capture has held {path} for more than {BUILD_WAIT_S} s (compiling the "
                             f"recording allocator there?); remove the folder if no oomlab is running")
        if not told:
            print(f"oomlab_capture: waiting for another capture that is compiling the recording allocator "
                  f"({path}, at most {BUILD_WAIT_S} s)", file=sys.stderr, flush=True)
            told = True
        time.sleep(0.2)


class _Overtime(Exception):
    pass


def _alarm(signum, frame):
    raise _Overtime()


def _build(where, quiet):
    """Compile into a fresh folder of where's, publish the library as where/NAME.so; the module."""
    import logging
    logging.getLogger("torch.utils.cpp_extension").setLevel(logging.ERROR)  # "No CUDA runtime is found"
    import torch.utils.cpp_extension as cpp
    for n in os.listdir(where):  # killed builders' folders: we hold the lock, so no live one is building
        if n.startswith("build-"):
            shutil.rmtree(os.path.join(where, n), ignore_errors=True)
    tmp = tempfile.mkdtemp(prefix="build-", dir=where)
    # said even under --quiet (predict --json): minutes of silence look like a hang
    print(f"oomlab_capture: compiling the recording allocator into {where} (once, about 2 minutes)",
          file=sys.stderr, flush=True)
    # torch's own bin/ (ninja is installed there by pip) must be on PATH for cpp_extension
    bindir = os.path.dirname(sys.executable)
    if bindir not in os.environ.get("PATH", "").split(os.pathsep):
        os.environ["PATH"] = bindir + os.pathsep + os.environ.get("PATH", "")
    t0 = time.time()
    # the time limit: SIGALRM raises here and subprocess.run kills ninja on the way out (oomlab predict ends the
    # rest of the capture's session); only the main thread gets signals
    main = threading.current_thread() is threading.main_thread()
    old = signal.signal(signal.SIGALRM, _alarm) if main else None
    if main:
        signal.alarm(BUILD_LIMIT_S)
    try:
        mod = cpp.load(NAME, [_SOURCE], build_directory=tmp, extra_cflags=["-O2"], verbose=False)
    except _Overtime:
        raise BuildError(f"compiling the recording allocator into {tmp} took more than {BUILD_LIMIT_S} s; "
                         f"stopped") from None
    finally:
        if main:
            signal.alarm(0)
            signal.signal(signal.SIGALRM, old)
    fd, part = tempfile.mkstemp(prefix=f".{NAME}.so.", dir=where)
    os.close(fd)
    shutil.copyfile(os.path.join(tmp, f"{NAME}.so"), part)
    os.chmod(part, 0o644)
    os.replace(part, os.path.join(where, f"{NAME}.so"))
    shutil.rmtree(tmp, ignore_errors=True)
    if not quiet:
        print(f"oomlab_capture: compiled in {time.time() - t0:.0f} s", file=sys.stderr, flush=True)
    return mod


def load(quiet=False):
    """The compiled extension, building it the first time. BuildError when a limit is passed."""
    global _module
    if _module is not None:
        return _module
    where = folder()
    lib = os.path.join(where, f"{NAME}.so")
    if os.path.isfile(lib):
        _module = _import(lib)
    else:
        os.makedirs(where, exist_ok=True)
        fd = _lock(os.path.join(where, "oomlab.lock"))
        try:  # built by the holder we waited for, or by us
            _module = _import(lib) if os.path.isfile(lib) else _build(where, quiet)
        finally:
            os.close(fd)
    _module.install()
    return _module
