"""The recording Meta allocator (meta_alloc.cpp), compiled with torch.utils.cpp_extension on first use.

The build is cached under $OOMLAB_TORCH_EXTENSIONS, default <repo>/build/torch_extensions (the repository that
holds this package); a rebuild happens only when meta_alloc.cpp changes (cpp_extension hashes its sources). The
first build takes about 2 minutes on two cores; it needs a C++ compiler and ninja (pip install ninja).
"""
import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
_REPO = os.path.dirname(os.path.dirname(_HERE))
_module = None


def build_dir():
    return os.environ.get("OOMLAB_TORCH_EXTENSIONS") or os.path.join(_REPO, "build", "torch_extensions")


def load(quiet=False):
    """The compiled extension, building it the first time (saying so on stderr unless quiet)."""
    global _module
    if _module is not None:
        return _module
    import logging
    import time
    logging.getLogger("torch.utils.cpp_extension").setLevel(logging.ERROR)  # "No CUDA runtime is found"
    import torch.utils.cpp_extension as cpp
    folder = os.path.join(build_dir(), "oomlab_meta_alloc")
    os.makedirs(folder, exist_ok=True)
    fresh = not any(n.endswith(".so") for n in os.listdir(folder))
    if fresh and not quiet:
        print(f"oomlab_capture: compiling the recording allocator into {folder} (once, about 2 minutes)",
              file=sys.stderr, flush=True)
    # torch's own bin/ (ninja is installed there by pip) must be on PATH for cpp_extension
    bindir = os.path.dirname(sys.executable)
    if bindir not in os.environ.get("PATH", "").split(os.pathsep):
        os.environ["PATH"] = bindir + os.pathsep + os.environ.get("PATH", "")
    t0 = time.time()
    _module = cpp.load("oomlab_meta_alloc", [os.path.join(_HERE, "meta_alloc.cpp")], build_directory=folder,
                       extra_cflags=["-O2"], verbose=False)
    if fresh and not quiet:
        print(f"oomlab_capture: compiled in {time.time() - t0:.0f} s", file=sys.stderr, flush=True)
    _module.install()
    return _module
