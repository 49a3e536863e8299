"""The PyTorch the capture models: its allocator and CUDA-path models are PyTorch 2.11's (docs/parity.md).

Another torch still runs (the capture uses only public dispatch APIs), but the allocations it predicts are the ones
2.11 makes: note() says so in one line, which the capture prints before the script runs and keeps in the trace.
"""
MODELLED = "2.11"


def note(version):
    """None for a torch of the modelled release (2.11.x, any local build such as +cu130), else the one line that
    says what a prediction under this torch means."""
    release = version.split("+")[0]
    if release == MODELLED or release.startswith(MODELLED + "."):
        return None
    return (f"torch {version} is not {MODELLED}: the allocator and the CUDA-path models are PyTorch {MODELLED}'s, "
            f"so this is the memory {MODELLED} would use; {release}'s kernels and allocator may allocate otherwise")
