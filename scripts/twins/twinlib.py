"""twinlib - what every scenario twin shares: a fresh process per variant, the budget as a memory fraction, samples
of memory_stats() under the scenario's own labels, caught OOMs, and one JSON file in the shape the parity tests
read (tests/twin.c).

A twin script defines its variants and a function `body(t, variant, params)` that runs one variant the way the
scenario (scenarios/NAME.c) does, calling t.step(label) where the scenario calls scn_step, t.caught(exc, what)
where it calls scn_caught, t.remedy(label) where it calls scn_remedy (the OOMs caught before it are steps of the
variant's story, and its outcome is what follows: fix-del's request before the del), t.metric(name, unit, value)
where it calls scn_metric, and t.note(text) for a text the recording must keep (an error message the scenario
expects, which scn_note shows). Then:

    if __name__ == "__main__":
        sys.exit(twinlib.main(__doc__, "NAME", VARIANTS, PARAMS, BUDGET, body))

VARIANTS maps a variant name to its PYTORCH_CUDA_ALLOC_CONF text ("" for none); PARAMS maps each parameter name
to its full-scale default (the names and defaults of the scenario's --set parameters, so `--set name=value`
means the same on both sides). Command line:

    python3 scripts/twins/NAME.py [--json OUT] [--budget BYTES] [--set name=value]... [--history DIR] [VARIANT...]

Each variant runs in its own process, with cuBLAS's workspaces off by default (CUBLAS_WORKSPACE_CONFIG=:0:0,
CUBLASLT_WORKSPACE_SIZE=0: oomlab's GEMM needs none, docs/parity.md), or with them on given --workspaces. The
output is one JSON object: {"scenario", "torch", "device", "total_memory", "budget", "allowed", "params",
"cublas_workspaces": "off"|"on", "variants": [{"variant", "alloc_conf", "outcome": "ok"|"oom"|"error" (oom: an OOM
caught after the remedy, or anywhere without one), "story_ooms": the OOMs caught before t.remedy (0 without one),
"oom": null|{"step", "what", "message", "kind"} (the first OOM caught, the story's where there is one), "error", "samples": [{"label", KEYS...}], "metrics": [{"name", "unit",
"value", "sample"}], "notes": [text], "devices": [{"index", "name", "samples"}] (t.devices: the other devices of a
variant on several devices, as the results JSON's "devices"; [] for one)}]}. --history DIR also records every
allocation with torch.cuda.memory._record_memory_history (Python stacks) and writes each variant's (each rank's)
snapshot to DIR/VARIANT.rankK.pickle, for pytorch.org/memory_viz or `oomlab replay`.

A distributed twin passes nproc=N to main: each variant then runs as `torchrun --standalone --nproc_per_node N`,
every rank a process with its own GPU (torch.cuda.set_device(LOCAL_RANK)), its own memory fraction and its own
memory_stats(); body(t, variant, params) runs on every rank, with t.rank, t.world and t.device set and the process
group initialised (dist.init_process_group("nccl", device_id=...)), and t.nccl_probe() measuring NCCL's buffers. Rank
0's samples are the variant's, rank k's its "devices" entry k, as oomlab's per-rank results are.
"""
import json
import os
import subprocess
import sys

MiB = 1 << 20
GiB = 1 << 30

# The counters a scenario's sample holds (harness/run/runner.h, scn_sample), by memory_stats() name.
KEYS = ["allocated_bytes.all.current", "reserved_bytes.all.current", "active_bytes.all.current",
        "inactive_split_bytes.all.current", "allocated_bytes.all.peak", "reserved_bytes.all.peak",
        "segment.all.current", "num_device_alloc", "num_device_free", "num_alloc_retries", "num_ooms"]


class Twin:
    """One variant's run: the samples, the OOMs and the metrics it records."""

    def __init__(self, torch, budget):
        self.torch = torch
        self.samples, self.metrics, self.notes = [], [], []
        self.devices = []  # a variant on several devices: [{"index", "name", "samples"}] for devices 1..
        self.oom = None
        self.rank, self.world, self.device = 0, 1, 0
        self.ooms = 0  # OOMs caught
        self.story_ooms = 0  # of them, caught before remedy(): steps of the story, not the outcome
        torch.cuda.init()
        self.total = torch.cuda.get_device_properties(0).total_memory
        torch.cuda.set_per_process_memory_fraction(budget / self.total)
        self.allowed = int(budget / self.total * self.total)

    def step(self, label):
        st = self.torch.cuda.memory_stats()
        s = {"label": label}
        s.update({k: int(st.get(k, 0)) for k in KEYS})
        self.samples.append(s)

    def caught(self, exc, what, kind="device"):
        """`except torch.OutOfMemoryError as exc`: the first one is the variant's OOM. kind "pinned host" for a
        pinning failure (scn_caught_pinned)."""
        self.ooms += 1
        if self.oom is None:
            self.oom = {"step": len(self.samples), "what": what, "message": str(exc), "kind": kind}

    def remedy(self, label):
        """scn_remedy: a sample under label, and every OOM caught so far becomes a step of the story: the outcome
        is "oom" only if one is caught after this."""
        self.step(label)
        self.story_ooms = self.ooms

    def metric(self, name, unit, value):
        self.metrics.append({"name": name, "unit": unit, "value": float(value), "sample": len(self.samples) - 1})

    def note(self, text):
        """A text the recording keeps (scn_note): an exception's message the scenario expects, say."""
        self.notes.append(str(text))

    def nccl_probe(self):
        """NCCL's buffers on this rank, outside the caching allocator: cudaMemGetInfo's free before
        init_process_group less free now, less what the caching allocator reserved meanwhile. Call it after the
        first collectives; kept as a note ("nccl_buffers_bytes N")."""
        free_now = self.torch.cuda.mem_get_info()[0]
        grown = self.free_before_nccl - free_now - self.torch.cuda.memory_reserved()
        self.notes.append("nccl_buffers_bytes %d" % grown)
        return grown

    def clock(self):
        """torch.cuda.synchronize(), then a monotonic clock (scn_clock)."""
        import time
        self.torch.cuda.synchronize()
        return time.perf_counter()


def _child(name, variant, alloc_conf, params, budget, body):
    import torch
    torch.manual_seed(0)
    rank = int(os.environ.get("RANK", "0"))
    world = int(os.environ.get("WORLD_SIZE", "1"))
    local = int(os.environ.get("LOCAL_RANK", "0"))
    if world > 1:
        torch.cuda.set_device(local)  # before the Twin: the fraction and memory_stats() are this GPU's
    t = Twin(torch, budget)
    t.rank, t.world, t.device = rank, world, local
    history = os.environ.get("OOMLAB_TWIN_HISTORY")  # main's --history DIR
    if history:
        torch.cuda.memory._record_memory_history(max_entries=2000000, stacks="python")
    if world > 1:
        import torch.distributed as dist
        free0 = torch.cuda.mem_get_info()[0]
        dist.init_process_group("nccl", device_id=torch.device("cuda", local))
        t.free_before_nccl = free0
    res = {"variant": variant, "alloc_conf": alloc_conf, "outcome": "ok", "error": None}
    try:
        body(t, variant, params)
    except Exception as e:  # an error the scenario did not expect: the variant is an error, as in oomlab
        res["outcome"], res["error"] = "error", "%s: %s" % (type(e).__name__, e)
    if history:
        torch.cuda.memory._dump_snapshot(os.path.join(history, "%s.rank%d.pickle" % (variant, rank)))
        torch.cuda.memory._record_memory_history(enabled=None)
    if world > 1:
        import torch.distributed as dist
        dist.destroy_process_group()
    if res["outcome"] == "ok" and t.ooms > t.story_ooms:
        res["outcome"] = "oom"
    res.update({"story_ooms": t.story_ooms, "oom": t.oom, "samples": t.samples, "metrics": t.metrics, "notes": t.notes, "devices": t.devices,
                "total_memory": t.total, "allowed": t.allowed,
                "torch": torch.__version__, "device": torch.cuda.get_device_name(0)})
    return res


def _run_ranks(cmd, nproc, base_env):
    """A variant as torchrun runs it: every rank writes its result into a folder; rank 0's is the variant's, the
    others' samples are its "devices"."""
    import tempfile
    with tempfile.TemporaryDirectory() as d:
        env = dict(base_env)
        env["OOMLAB_TWIN_RANK_DIR"] = d
        full = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(nproc)] + cmd[1:]
        p = subprocess.run(full, env=env, capture_output=True, text=True)
        ranks = []
        for k in range(nproc):
            path = os.path.join(d, "rank%d.json" % k)
            if not os.path.exists(path):
                return None, p.stderr
            with open(path) as f:
                ranks.append(json.load(f))
        res = ranks[0]
        res["devices"] = [{"index": k, "name": "cuda:%d (rank %d)" % (k, k), "samples": r["samples"],
                           "notes": r["notes"], "oom": r["oom"], "outcome": r["outcome"]}
                          for k, r in enumerate(ranks) if k > 0]
        return res, p.stderr


def main(doc, name, variants, params, budget, body, argv=None, nproc=1):
    argv = list(sys.argv[1:] if argv is None else argv)
    out, chosen, workspaces, history = None, [], False, None
    params = dict(params)
    i = 0
    try:
        while i < len(argv):
            a = argv[i]
            if a == "--json":
                out = argv[i + 1]; i += 2
            elif a == "--budget":
                budget = int(argv[i + 1]); i += 2
            elif a == "--set":
                k, v = argv[i + 1].split("=", 1)
                if k not in params:
                    raise ValueError("no parameter '%s' (parameters: %s)" % (k, " ".join(params)))
                params[k] = int(v); i += 2
            elif a == "--workspaces":
                workspaces = True; i += 1
            elif a == "--history":
                history = os.path.abspath(argv[i + 1]); i += 2
                if not os.path.isdir(history):
                    raise ValueError("--history: '%s' is not a directory" % argv[i - 1])
            elif a == "--child":
                variant = argv[i + 1]
                conf = variants[variant]
                res = _child(name, variant, conf, json.loads(argv[i + 2]), budget, body)
                rank_dir = os.environ.get("OOMLAB_TWIN_RANK_DIR")
                if rank_dir:  # one rank of a torchrun
                    with open(os.path.join(rank_dir, "rank%s.json" % os.environ.get("RANK", "0")), "w") as f:
                        json.dump(res, f)
                else:
                    print(json.dumps(res))
                return 0
            elif a.startswith("-"):
                raise ValueError("unknown option '%s'" % a)
            else:
                if a not in variants:
                    raise ValueError("no variant '%s' (variants: %s)" % (a, " ".join(variants)))
                chosen.append(a); i += 1
    except (IndexError, ValueError) as e:
        print("%s: %s\n%s" % (name, e, doc), file=sys.stderr)
        return 2
    results = []
    for v in chosen or list(variants):
        env = dict(os.environ)
        env["PYTORCH_CUDA_ALLOC_CONF"] = variants[v]
        env.pop("PYTORCH_ALLOC_CONF", None)
        env.pop("OOMLAB_TWIN_HISTORY", None)
        if history:
            env["OOMLAB_TWIN_HISTORY"] = history
        if not workspaces:
            env["CUBLAS_WORKSPACE_CONFIG"] = ":0:0"
            env["CUBLASLT_WORKSPACE_SIZE"] = "0"
        cmd = [sys.executable, sys.argv[0], "--budget", str(budget), "--child", v, json.dumps(params)]
        if nproc > 1:
            res, err = _run_ranks(cmd, nproc, env)
            if res is None:
                results.append({"variant": v, "alloc_conf": variants[v], "outcome": "error",
                                "error": "twin crashed: %s" % err.strip()[-2000:], "oom": None, "samples": [],
                                "metrics": [], "notes": []})
            else:
                results.append(res)
            r = results[-1]
            print("%-28s %-5s %s" % (v, r["outcome"], (r["oom"] or {}).get("what", r.get("error") or "")),
                  file=sys.stderr)
            continue
        p = subprocess.run(cmd, env=env, capture_output=True, text=True)
        if p.returncode != 0 or not p.stdout.strip():
            results.append({"variant": v, "alloc_conf": variants[v], "outcome": "error",
                            "error": "twin crashed: %s" % p.stderr.strip()[-2000:], "oom": None, "samples": [],
                            "metrics": [], "notes": []})
        else:
            results.append(json.loads(p.stdout.strip().splitlines()[-1]))
        r = results[-1]
        print("%-28s %-5s %s" % (v, r["outcome"], (r["oom"] or {}).get("what", r.get("error") or "")),
              file=sys.stderr)
    first = next((r for r in results if "torch" in r), {})
    doc_out = {"scenario": name, "torch": first.get("torch"), "device": first.get("device"),
               "total_memory": first.get("total_memory"), "budget": budget, "allowed": first.get("allowed"),
               "params": params, "cublas_workspaces": "on" if workspaces else "off", "variants": results}
    text = json.dumps(doc_out, indent=1)
    if out:
        with open(out, "w") as f:
            f.write(text + "\n")
    else:
        print(text)
    return 0
