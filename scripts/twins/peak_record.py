"""PyTorch's peaks for one unmodified training script on the GPU: python3 peak_record.py SCRIPT [ARGS...]

Runs SCRIPT as __main__ in this process (runpy, sys.argv = [SCRIPT, ARGS...]) with PyTorch's defaults, then prints
one JSON object: the script and its arguments, the device, torch's and CUDA's versions, the wall seconds, and
torch.cuda.memory_stats()'s peaks (allocated_bytes.all.peak, reserved_bytes.all.peak) with the allocation and
segment counts. The script's own output goes to stderr. Used for predictions checked by their peaks alone
(docs/measurements/*-host-built: tests/data/predict/scripts/llama_host_built.py).
"""
import contextlib
import json
import runpy
import sys
import time

import torch


def main(argv):
    if not argv:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    script = argv[0]
    sys.argv = list(argv)
    t0 = time.time()
    with contextlib.redirect_stdout(sys.stderr):
        runpy.run_path(script, run_name="__main__")
    torch.cuda.synchronize()
    s = torch.cuda.memory_stats()
    keys = ("allocated_bytes.all.peak", "reserved_bytes.all.peak", "allocation.all.allocated",
            "segment.all.allocated", "num_alloc_retries", "num_ooms")
    print(json.dumps({"schema": "oomlab.peak-twin/1", "script": script, "args": argv[1:],
                      "device": torch.cuda.get_device_name(0),
                      "total_memory": torch.cuda.get_device_properties(0).total_memory,
                      "torch": torch.__version__, "cuda": torch.version.cuda,
                      "seconds": round(time.time() - t0, 1),
                      "peak_allocated": s["allocated_bytes.all.peak"], "peak_reserved": s["reserved_bytes.all.peak"],
                      "memory_stats": {k: s.get(k) for k in keys}}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
