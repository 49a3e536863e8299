#!/usr/bin/env python3
"""One rank of a torchrun job of a user's script, recorded on the GPU: the twin of `oomlab predict --nproc N`.

    torchrun --standalone --nproc_per_node N scripts/twins/rank_record.py OUT SCRIPT [ARGS...]

Each rank records its caching allocator's history (torch.cuda.memory._record_memory_history, Python stacks) from
before the script's first CUDA allocation, runs SCRIPT as __main__ with ARGS, and writes OUT/rankK.json (its peaks
from torch.cuda.memory_stats, the OOM's message if one ended it, the device, the backend) and OUT/rankK.pickle (the
allocator's snapshot, for scripts/snapshot2json.py). Nothing else of the script is changed, except on request:
- OOMLAB_SHARE_DEVICE=1: every rank on cuda:0 (LOCAL_RANK reads 0), for a machine with one GPU. Each rank is its
  own process with its own caching allocator, so its counters are what it would count on a GPU of its own.
- OOMLAB_BACKEND=NAME: init_process_group's backend taken as NAME (NCCL refuses two ranks on one device).
"""
import json
import os
import runpy
import sys
import traceback


def main(argv):
    if len(argv) < 2:
        print("usage: rank_record.py OUT SCRIPT [ARGS...]", file=sys.stderr)
        return 2
    out, script = argv[0], argv[1]
    rank = int(os.environ.get("RANK", "0"))
    if os.environ.get("OOMLAB_SHARE_DEVICE") == "1":
        os.environ["LOCAL_RANK"] = "0"
    import torch
    import torch.distributed as dist
    backend = os.environ.get("OOMLAB_BACKEND")
    if backend:
        real_init = dist.init_process_group

        def init(*a, **kw):
            kw.pop("backend", None)
            return real_init(backend, *a[1:], **kw)
        dist.init_process_group = init
    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    free, total = torch.cuda.mem_get_info()  # the device's use with this process's context, before the script
    torch.cuda.memory._record_memory_history(max_entries=2000000, stacks="python")
    os.makedirs(out, exist_ok=True)
    result = {"schema": "oomlab.rank-record/1", "rank": rank, "world": int(os.environ.get("WORLD_SIZE", "1")),
              "script": os.path.basename(script), "args": argv[2:], "device": torch.cuda.get_device_name(),
              "backend": backend or "as the script asks", "oom": None, "error": None}
    sys.argv = [script] + argv[2:]
    sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
    try:
        runpy.run_path(script, run_name="__main__")
    except torch.OutOfMemoryError as e:
        result["oom"] = str(e).splitlines()[0]
    except SystemExit as e:
        if e.code not in (None, 0):
            result["error"] = "exit %s" % e.code
    except Exception:
        result["error"] = traceback.format_exc().splitlines()[-1]
    s = torch.cuda.memory_stats()
    free_end, _ = torch.cuda.mem_get_info()
    # what the device holds beyond the context and the caching allocator at the end: NCCL's buffers and the
    # libraries' own (every process's, when the ranks share one device)
    result["device_used_start"], result["device_used_end"] = total - free, total - free_end
    for k, v in (("peak_allocated", "allocated_bytes.all.peak"), ("peak_reserved", "reserved_bytes.all.peak"),
                 ("allocated", "allocated_bytes.all.current"), ("reserved", "reserved_bytes.all.current"),
                 ("num_alloc_retries", "num_alloc_retries"), ("num_ooms", "num_ooms"),
                 ("allocations", "allocation.all.allocated")):
        result[k] = s.get(v, 0)
    torch.cuda.memory._dump_snapshot(os.path.join(out, "rank%d.pickle" % rank))
    tmp = os.path.join(out, ".rank%d.json.tmp" % rank)
    with open(tmp, "w") as f:
        json.dump(result, f, indent=1)
    os.replace(tmp, os.path.join(out, "rank%d.json" % rank))
    print("rank %d: %s" % (rank, json.dumps({k: result[k] for k in ("peak_allocated", "peak_reserved", "oom",
                                                                     "error")})), file=sys.stderr)
    return 0 if not result["error"] else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
