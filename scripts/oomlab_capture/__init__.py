"""oomlab_capture: a PyTorch program's GPU allocations predicted on the CPU, as a memory-snapshot trace.

    with oomlab_capture.capture("trace.json", gpu="H100-80GB"):
        train_step()

runs the block with every CUDA tensor on the meta device (no GPU, no CUDA context, no weights in memory) and
writes the sequence of device allocations and frees the CUDA path would make, in torch.cuda.memory._snapshot()
form, for `oomlab replay` / `oomlab advise` / `oomlab predict`. From a shell:

    PYTHONPATH=scripts python -m oomlab_capture --gpu H100-80GB --out trace.json -- script.py [args...]
"""
import contextlib

from . import gpus

__all__ = ["capture", "gpus"]


@contextlib.contextmanager
def capture(path=None, gpu=gpus.DEFAULT, quiet=False):
    """Capture the block; write the trace to `path` (atomically) when it ends without an exception.

    Yields the Capture: its .trace() is the snapshot dict, .events the device trace. gpu: a name from
    gpus.GPUS (ValueError if unknown)."""
    from .recorder import Capture
    g = gpus.lookup(gpu)
    if g is None:
        raise ValueError(f"unknown GPU '{gpu}' (known: {gpus.known()})")
    cap = Capture(g, quiet=quiet)
    with cap:
        yield cap
    if path is not None:
        cap.write(path)
