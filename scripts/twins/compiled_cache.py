#!/usr/bin/env python3
"""Cold against warm Inductor caches: each compiled script run twice in fresh processes sharing one
TORCHINDUCTOR_CACHE_DIR (the first compiles and autotunes, the second loads the FX graph and autotuning caches),
printing memory_stats()'s peaks of each run as one JSON line (issue 29; run on a GPU with PyTorch).

    python3 scripts/twins/compiled_cache.py SCRIPT...
"""
import json
import os
import subprocess
import sys
import tempfile

CHILD = r"""
import json, runpy, sys, torch
sys.argv = [sys.argv[1]]
runpy.run_path(sys.argv[0], run_name="__main__")
s = torch.cuda.memory_stats()
print("RESULT " + json.dumps({k: s[k] for k in ("allocated_bytes.all.peak", "reserved_bytes.all.peak",
                                                "num_device_alloc", "num_ooms")}))
"""


def main(scripts):
    for script in scripts:
        cache = tempfile.mkdtemp(prefix="inductor-")
        env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=cache)
        runs = []
        for _ in range(2):
            p = subprocess.run([sys.executable, "-c", CHILD, script], env=env, capture_output=True, text=True,
                               timeout=300)
            line = [x for x in p.stdout.splitlines() if x.startswith("RESULT ")]
            runs.append(json.loads(line[-1][7:]) if line else {"error": (p.stderr or p.stdout)[-800:]})
        print(json.dumps({"script": os.path.basename(script), "cold": runs[0], "warm": runs[1]}), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
