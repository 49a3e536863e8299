#!/usr/bin/env python3
"""Record the proof of `oomlab predict` (issue 17): ordinary training scripts run in PyTorch on a GPU, their memory
history, peaks, minimum budgets and largest batch under a budget (run on a GPU with PyTorch).

    python3 scripts/twins/predict_record.py --out DIR [-j JOBS] [--only NAME[,NAME...]] [--skip-bisect]
                                            [--bisect-llama] [--sweep-budget NAME=MiB]... [--timeout S]
                                            [--deadline S] [--pack] [--fake] [--zoo] [--labelled]
                                            [--oomlab BIN] [--rebisect FROM] [--leave MiB]

--zoo: the zoo's cases (tests/data/predict/zoo/scripts, issue 27) instead of CASES; --labelled: each recorded a
second time with every allocation labelled by its aten op (oplabels.py), NAME.labelled.trace.json, a guide for
reading the plain recording; --oomlab BIN: `BIN advise` on each recording gives the bisection a guess G, and G - 1
and G are probed first (the search is unchanged when the guess is wrong); --rebisect FROM: only the minimum budgets
FROM/NAME.torch.json lacks, bisected against its committed trace; --leave MiB: device memory kept free for other
work beside.

On the H100: `--out $OUT/predict -j 8 --bisect-llama --pack` took 296 s (249 runs).

The scripts are tests/data/predict/scripts/*.py, run unmodified (runpy, as `python SCRIPT ARGS`) with the
arguments of CASES below, each run in a fresh process with cuBLAS's workspaces as PyTorch sets them (the variables
CUBLAS_WORKSPACE_CONFIG and CUBLASLT_WORKSPACE_SIZE are removed: these are ordinary programs). Per case NAME:
  1. the recording: PyTorch's defaults, no budget, torch.cuda.memory._record_memory_history(max_entries=MAX_ENTRIES)
     started before the script; DIR/NAME.trace.json is the _snapshot() dict through scripts/snapshot2json.py
     --strip-frames (advise_record.snapshot_to_trace);
  2. the minimum budget under the defaults and under expandable_segments:True, with advise's definition
     (harness/analysis/advise.h) and advise's own search (harness/analysis/advise.c, fill_row): B is a whole number of MiB
     applied as set_per_process_memory_fraction(B MiB / total) (advise_record.apply_budget); bisection between
     lo = (need - 1) // MiB, need the recorded trace's peak of live bytes with each request rounded to 512
     (advise.c find_need, ported in need_of), and hi = ceil(uncapped peak reserved of the setting / MiB) + 1,
     checked to run (doubled up to the device's memory if it does not), ends at B: no OOM at B, an OOM at
     B - 1 MiB. Each probe is a fresh process without history; a probe "runs" when the script completes and
     memory_stats()["num_ooms"] is 0 (advise_verify.py's test). The probes are those of advise's binary search in
     its order; where fewer searches are open than JOBS, the next levels of the search tree are probed ahead at
     once (speculation changes which probes run, never the answer);
  3. for the cases in SWEEPS: the largest --batch in 1..512 that runs under a budget (defaults), searched as
     `oomlab run --sweep` does (harness/run/sweep.h): every power of two, then bisection between the largest power
     of two that runs and the next one. The budget is picked on the GPU first, from the peak reserved bytes of two
     uncapped runs, so that the answer lands inside the range (SWEEPS says how); --sweep-budget fixes it instead.
Writes DIR/NAME.trace.json and DIR/NAME.torch.json (schema oomlab.predict-twin/1):
  {"schema", "name", "script" (repository path), "args", "gpu", "total_memory", "torch", "cuda",
   "alloc_conf" (of the recording: ""), "cublas_workspaces": "pytorch defaults", "peak_allocated", "peak_reserved",
   "need", "memory_stats" (the recording's), "outcome" ("ok"|"oom"|"error"), "output" (the script's last output),
   "seconds", "uncapped": {SETTING: {"peak_allocated", "peak_reserved", "ooms"}},
   "min_budget_mib": {"defaults": M, "expandable_segments:True": M2} (null: none found),
   "bisect": {SETTING: {"lo", "hi", "path": [MiB in advise's order], "monotonic", "probes": [PROBE...],
                        "completes" (where a capped run completed with OOMs caught inside it, as cuDNN's workspace
                        fallback does): {"criterion", "lo", "hi", "path", "min_budget_mib"}}},
   "min_budget_mib_completes": {SETTING: M} (those settings only: the smallest budget at which the script
   completes, found the same way),
   "sweep": {"param": "batch", "lo": 1, "hi": 512, "budget_mib", "alloc_conf", "args" (besides --batch),
             "calibration": null|{"batch": [1, c], "reserved_peak", "allocated_peak", "target"},
             "largest_batch", "monotonic", "series": [{"value", "runs"}], "path", "probes": [PROBE...]}}
  PROBE = {"budget_mib", "batch" (sweeps), "runs", "ooms", "outcome", "reserved_peak", "allocated_peak", "retries"
           (num_alloc_retries), "seconds"}
and DIR/summary.json (the table) and DIR/predict_record.log (every line printed: one per probe). --pack moves them
all into DIR.tar.xz at the end, leaving summary.json and the log beside it (a device machine returns 8 files).

-j JOBS probes run at once, and only as many as fit in the GPU's memory: each holds its budget plus PROBE_OVERHEAD
MiB (the CUDA context and libraries, outside PyTorch's allocator) against the device's memory less HEADROOM MiB.
--deadline: no run starts after that many seconds (default 510, under a 10-minute limit per command): the searches
it cuts short are reported as failures and everything finished is still written. --only runs some cases (sweeps
included); --skip-bisect records only (steps 2 and 3 skipped); llama1b is recorded
but not bisected unless --bisect-llama (its probes hold ~15 GB each). --fake runs the whole driver without a GPU
for testing: the recording runs each script on the CPU for one step (no history), and every probe answers from a
made-up threshold, which the bisections must find (checked; exit 1 otherwise).
Exit status: 0 when everything ran, 1 when a run failed (the others are still written), 2 on bad arguments.
"""
import argparse
import json
import math
import os
import runpy
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from concurrent.futures import ThreadPoolExecutor

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
SCRIPTS = os.path.join(ROOT, "tests", "data", "predict", "scripts")
sys.path.insert(0, HERE)
import advise_record  # noqa: E402

MiB = 1 << 20
MAX_ENTRIES = 2_000_000  # the history's ring buffer: far above any case's event count, so nothing is dropped
PROBE_OVERHEAD = 1536    # MiB a process holds outside its budget (context, cuBLAS/cuDNN code): H100, CUDA 13
HEADROOM = 3072          # MiB of the device kept free
SETTINGS = {"defaults": "", "expandable_segments:True": "expandable_segments:True"}

# name -> script and arguments; "reserve": MiB the uncapped run may reserve (for scheduling only); "bisect": whether
# the minimum budgets are bisected
CASES = {
    "mlp_sgd": {"script": "mlp_sgd.py", "args": [], "reserve": 1024},
    "mlp_adam": {"script": "mlp_adam.py", "args": [], "reserve": 1024},
    "gru_tbptt": {"script": "gru_tbptt.py", "args": [], "reserve": 1024},
    "transformer_encoder": {"script": "transformer_encoder.py", "args": [], "reserve": 4096},
    "gpt": {"script": "gpt.py", "args": [], "reserve": 4096},
    "resnet18": {"script": "resnet18.py", "args": [], "reserve": 6144},
    "autocast_bf16": {"script": "autocast_bf16.py", "args": [], "reserve": 2048},
    "grad_accum": {"script": "grad_accum.py", "args": [], "reserve": 1024},
    "inference_nograd": {"script": "inference_nograd.py", "args": [], "reserve": 1024},
    "finetune_frozen": {"script": "finetune_frozen.py", "args": [], "reserve": 2048},
    "amp_fp16": {"script": "amp_fp16.py", "args": [], "reserve": 1024},
    "lstm_lm": {"script": "lstm_lm.py", "args": [], "reserve": 2048},
    "vit": {"script": "vit.py", "args": [], "reserve": 4096},
    "checkpointed": {"script": "checkpointed.py", "args": [], "reserve": 2048},
    "llama1b": {"script": "llama.py", "args": ["--size", "1b", "--batch", "1", "--seq", "512"], "reserve": 20480,
                "bisect": False},
}
# name -> the sweep of --batch over 1..512 (defaults) with the other arguments "args". Its budget is picked on the
# GPU so that the answer lands near batch "target": from two uncapped runs, at batch 1 and at batch "calibrate",
# budget = floor(R(1) + (R(c) - R(1)) * target / c) MiB, R the peak reserved bytes (or --sweep-budget NAME=MiB).
# "hold": MiB the calibration at c may reserve (scheduling only).
SWEEPS = {
    "mlp_sgd": {"args": [], "calibrate": 512, "target": 256, "hold": 1024},
    "transformer_encoder": {"args": ["--lengths", "128,64,96"], "calibrate": 64, "target": 160, "hold": 4096},
    "gpt": {"args": ["--block-size", "128"], "calibrate": 64, "target": 128, "hold": 6144},
}
# The zoo (tests/data/predict/zoo/scripts: training scripts around transformers, timm and torchvision models, issue
# 27): --zoo records these instead of CASES. "reserve": MiB for scheduling (the capture's prediction plus a margin)
ZOO_SCRIPTS = os.path.join(ROOT, "tests", "data", "predict", "zoo", "scripts")
ZOO = {n: {"script": n + ".py", "args": [], "reserve": r, "dir": ZOO_SCRIPTS} for n, r in {
    "hf_llama_bf16": 10240, "hf_qwen2_autocast": 12288, "hf_mistral_ckpt": 8192, "hf_gemma_eager": 6144,
    "hf_phi_fp16": 8192, "hf_gpt2": 14336, "hf_gpt2_eager": 12288, "hf_gptneox_trainer": 10240,
    "hf_llama_accelerate": 6144, "hf_llama_padded": 6144, "hf_bert_cls": 10240, "hf_roberta_mlm": 20480,
    "hf_deberta_v2": 9216, "hf_distilbert_loader": 8192, "hf_t5_adafactor": 16384, "hf_bart_fp16": 10240,
    "timm_vit_b16": 6144, "timm_swin_t": 6144, "hf_clip_vision": 6144, "hf_vit_cls": 8192, "tv_vit_b16": 8192,
    "tv_resnet50_bf16": 6144, "timm_resnet50_cl": 6144, "timm_convnext_t": 6144, "tv_efficientnet_b0": 9216,
    "timm_regnety_cl": 6144, "tv_mobilenet_lightning": 4096}.items()}
# Compiled training (tests/data/predict/compiled/scripts, issue 29): --compiled records these. Every run compiles
# cold (a fresh TORCHINDUCTOR_CACHE_DIR: no FX graph or autotuning results from an earlier run), and a recording
# keeps the wrappers Inductor generated (NAME.output_code.tar.xz) beside its trace.
COMPILED_SCRIPTS = os.path.join(ROOT, "tests", "data", "predict", "compiled", "scripts")
COMPILED = {n: {"script": n + ".py", "args": [], "reserve": r, "dir": COMPILED_SCRIPTS} for n, r in {
    "cmp_mlp": 8192, "cmp_transformer": 12288, "cmp_hf_gpt2": 12288, "cmp_hf_bert": 8192,
    "cmp_hf_llama_bf16": 8192, "cmp_timm_vit_s": 8192, "cmp_tv_resnet18": 8192, "cmp_timm_convnext": 8192,
    "cmp_hf_qwen2_autocast": 12288, "cmp_mlp_cudagraphs": 8192, "cmp_mlp_autotune": 8192, "cmp_hf_t5": 8192,
    "cmp_tv_mobilenet_v3": 8192, "cmp_hf_mistral_bf16": 8192, "cmp_timm_efficientnet_b0": 8192,
    "cmp_transformer_cudagraphs": 12288, "cmp_tv_resnet18_cudagraphs": 8192, "cmp_hf_gpt2_cudagraphs": 12288,
    "cmp_hf_llama_bf16_autotune": 8192, "cmp_transformer_autotune": 12288,
    # predicted blind before they were recorded (docs/measurements/cpu-2026-12-04-compiled-blind)
    "cmp_hf_gptneox_autocast": 8192, "cmp_hf_qwen3_bf16": 8192, "cmp_timm_resnet26d": 8192}.items()}
SWEEP_LO, SWEEP_HI = 1, 512
FAKE_CAUGHT = 30  # --fake: MiB below its minimum budget in which resnet18 still completes, its OOMs caught
FAKE_TOTAL = 85017493504  # --fake's device: torch's total_memory of an H100 80GB HBM3 (81,079.5 MiB)


def keep_output_code(cache, dest):
    """The wrappers and kernels Inductor wrote under a run's cache folder (its .py files), packed into dest."""
    import tarfile
    with tarfile.open(dest, "w:xz") as tar:
        for d, _, files in os.walk(cache):
            for f in sorted(files):
                if f.endswith(".py"):
                    full = os.path.join(d, f)
                    tar.add(full, arcname=os.path.relpath(full, cache))


# ---- the child: one run of one script, in this process ----

def child(spec):
    """Run spec["script"] with spec["args"] under spec["budget"] bytes (0: none), history recorded into
    spec["record_to"] + ".trace.json" when given; write the result dict to spec["result"]."""
    t0 = time.perf_counter()
    if spec.get("fake"):
        res = fake_child(spec)
    else:
        res = real_child(spec)
    res["seconds"] = round(time.perf_counter() - t0, 3)
    write_json(spec["result"], res)


def run_script(path, args):
    """The script as `python path args` would run it; ("ok"|"oom"|"error", message)."""
    import torch
    saved = sys.argv
    sys.argv = [path] + list(args)
    try:
        runpy.run_path(path, run_name="__main__")
        return "ok", None
    except torch.OutOfMemoryError as e:
        return "oom", str(e)
    except SystemExit as e:
        if e.code in (0, None):
            return "ok", None
        return "error", "exit status %r" % (e.code,)
    except BaseException:  # the script's own failure: kept with its traceback
        return "error", traceback.format_exc()[-4000:]
    finally:
        sys.argv = saved


def real_child(spec):
    import torch
    torch.cuda.init()
    total = torch.cuda.get_device_properties(0).total_memory
    record_to = spec.get("record_to")
    if record_to:
        torch.cuda.memory._record_memory_history(enabled="all", context=None, stacks="python",
                                                 max_entries=MAX_ENTRIES)
    allowed = advise_record.apply_budget(torch, spec["budget"])
    if spec.get("labelled"):
        import oplabels
        with oplabels.OpLabels():
            outcome, message = run_script(spec["script"], spec["args"])
    else:
        outcome, message = run_script(spec["script"], spec["args"])
    torch.cuda.synchronize()
    st = dict(torch.cuda.memory_stats())
    res = {"outcome": outcome, "message": message, "total_memory": total, "allowed": allowed,
           "ooms": int(st.get("num_ooms", 0)), "reserved_peak": int(st.get("reserved_bytes.all.peak", 0)),
           "allocated_peak": int(st.get("allocated_bytes.all.peak", 0)),
           "retries": int(st.get("num_alloc_retries", 0)), "torch": torch.__version__,
           "cuda": torch.version.cuda, "gpu": torch.cuda.get_device_name(0),
           "alloc_conf": os.environ.get("PYTORCH_CUDA_ALLOC_CONF", "")}
    try:
        res["host_memory_stats"] = {k: int(v) for k, v in torch.cuda.host_memory_stats().items()}
    except Exception as e:  # noqa: BLE001 - recorded, not fatal
        res["host_memory_stats"] = {"error": str(e)[:200]}
    if record_to:
        torch.cuda.memory._dump_snapshot(record_to + ".pickle")
        torch.cuda.memory._record_memory_history(enabled=None)
        advise_record.snapshot_to_trace(record_to + ".pickle", record_to + ".trace.json", spec["budget"])
        res["memory_stats"] = st
    return res


def fake_threshold(script, args, alloc_conf):
    """--fake: the made-up minimum budget (MiB) of a script, its arguments and a setting; deterministic."""
    base = 200 + sum(map(ord, os.path.basename(script))) % 300
    batch = int(args[args.index("--batch") + 1]) if "--batch" in args else 64
    return base + 3 * batch - (17 if "expandable" in alloc_conf else 0)


def fake_child(spec):
    """--fake: the recording runs the script on the CPU for one step; a probe answers from fake_threshold."""
    need = fake_threshold(spec["script"], spec["args"], os.environ.get("PYTORCH_CUDA_ALLOC_CONF", ""))
    res = {"outcome": "ok", "message": None, "total_memory": FAKE_TOTAL, "allowed": None, "ooms": 0,
           "reserved_peak": (need + 37) * MiB + 12345, "allocated_peak": (need - 45) * MiB + 512,
           "torch": None, "cuda": None, "gpu": "fake", "alloc_conf": os.environ.get("PYTORCH_CUDA_ALLOC_CONF", "")}
    if spec["budget"]:
        res["allowed"] = spec["budget"]
        if spec["budget"] < need * MiB:
            res.update(outcome="oom", ooms=1, message="fake OOM")
            if "resnet" in spec["script"] and spec["budget"] >= (need - FAKE_CAUGHT) * MiB:
                res.update(outcome="ok", message=None)  # as cuDNN does: the OOM caught, another algorithm taken
    if spec.get("record_to"):
        args = [a for a in spec["args"]] + ["--device", "cpu", "--steps", "1"]
        res["outcome"], res["message"] = run_script(spec["script"], args)
        res["memory_stats"] = {"allocated_bytes.all.peak": res["allocated_peak"],
                               "reserved_bytes.all.peak": res["reserved_peak"]}
        # a trace whose need is the fake allocated peak: one alloc of that size, freed
        size = res["allocated_peak"]
        write_json(spec["record_to"] + ".trace.json", {"segments": [], "device_traces": [[
            {"action": "alloc", "addr": 1 << 30, "size": size, "stream": 0},
            {"action": "free_requested", "addr": 1 << 30, "size": size, "stream": 0},
            {"action": "free_completed", "addr": 1 << 30, "size": size, "stream": 0}]]})
    return res


# ---- the parent ----

def write_json(path, obj):
    """Whole or not at all: a temporary file beside path, then rename."""
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".predict_record.")
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(obj, f, indent=1)
            f.write("\n")
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def need_of(trace):
    """advise.c find_need on device 0 of a trace: the peak of live bytes, each request rounded to 512 (an oom
    entry's rounded size on top), an alloc ending at the next free_requested of its address."""
    ev = (trace.get("device_traces") or [[]])[0]
    r512 = lambda n: 0 if n == 0 else (n + 511) // 512 * 512  # noqa: E731
    freed_at = {}
    life = sorted(((e["addr"], i) for i, e in enumerate(ev) if e["action"] in ("alloc", "free_requested")))
    for (a1, i1), (a2, i2) in zip(life, life[1:]):
        if a1 == a2 and ev[i1]["action"] == "alloc" and ev[i2]["action"] == "free_requested":
            freed_at[i1] = i2
    ends = [0] * (len(ev) + 1)
    live = peak = 0
    for i, e in enumerate(ev):
        live -= ends[i]
        if e["action"] == "alloc":
            live += r512(e["size"])
            if i in freed_at:
                ends[freed_at[i]] += r512(e["size"])
        now = live + (r512(e["size"]) if e["action"] == "oom" else 0)
        peak = max(peak, now)
    return peak


class Gpu:
    """The probes in flight: at most jobs at once, and their budgets plus PROBE_OVERHEAD within the device's
    memory less HEADROOM."""

    def __init__(self, jobs, total_mib, leave=0):
        self.leave = HEADROOM + leave  # MiB of the device kept free (--leave: for other work beside)
        self.jobs, self.cap = jobs, total_mib - self.leave
        self.running, self.held = 0, 0
        self.cv = threading.Condition()
        self.open_searches = 0  # searches not finished (how far ahead each may look)

    def set_total(self, total_mib):
        with self.cv:
            self.cap = total_mib - self.leave
            self.cv.notify_all()

    def acquire(self, mib):
        mib = min(mib + PROBE_OVERHEAD, self.cap)
        with self.cv:
            while self.running >= self.jobs or (self.running and self.held + mib > self.cap):
                self.cv.wait()
            self.running += 1
            self.held += mib
        return mib

    def release(self, mib):
        with self.cv:
            self.running -= 1
            self.held -= mib
            self.cv.notify_all()

    def lookahead(self):
        """Levels of a binary search to probe at once: 1 while the searches open fill the jobs."""
        with self.cv:
            n = max(self.open_searches, 1)
        return max(1, int(math.log2(self.jobs / n + 1)))

    def open(self, delta):
        with self.cv:
            self.open_searches += delta


class Recorder:
    def __init__(self, opts):
        self.opts = opts
        self.gpu = Gpu(opts.jobs, FAKE_TOTAL // MiB, opts.leave)
        self.lock = threading.Lock()
        self.log_f = open(os.path.join(opts.out, "predict_record.log"), "a")
        self.work = tempfile.mkdtemp(prefix="predict_record_")
        self.failures = []
        self.nprobes = 0
        self.probe_seconds = 0.0
        self.t0 = time.perf_counter()

    def log(self, text):
        line = "predict_record: [%6.1f s] %s" % (time.perf_counter() - self.t0, text)
        with self.lock:
            print(line, flush=True)
            self.log_f.write(line + "\n")
            self.log_f.flush()

    def fail(self, text):
        with self.lock:
            self.failures.append(text)
        self.log("FAILED " + text)

    def run(self, script, args, alloc_conf, budget_mib, hold_mib, record_to=None, folder=SCRIPTS, labelled=False):
        """One fresh process; its result dict, or None when it failed to produce one or the deadline passed."""
        hold = self.gpu.acquire(hold_mib)
        try:
            if self.opts.deadline and time.perf_counter() - self.t0 > self.opts.deadline:
                self.fail("%s %s (%r, %s MiB): not run, past the --deadline of %d s" %
                          (script, args, alloc_conf, budget_mib, self.opts.deadline))
                return None
            fd, result = tempfile.mkstemp(dir=self.work, suffix=".json")
            os.close(fd)
            spec = {"script": os.path.join(folder, script), "args": list(args), "budget": budget_mib * MiB,
                    "record_to": record_to, "result": result, "fake": self.opts.fake, "labelled": labelled}
            env = advise_record.alloc_conf_env(alloc_conf)
            env.pop("CUBLAS_WORKSPACE_CONFIG", None)  # ordinary programs: cuBLAS's workspaces as PyTorch sets them
            env.pop("CUBLASLT_WORKSPACE_SIZE", None)
            env.setdefault("OMP_NUM_THREADS", "2")  # host threads only: JOBS processes share the host's cores
            cache = None
            if self.opts.compiled:
                cache = tempfile.mkdtemp(dir=self.work, prefix="inductor-")
                env["TORCHINDUCTOR_CACHE_DIR"] = cache
            cmd = [sys.executable, os.path.abspath(__file__), "--child", json.dumps(spec)]
            t0 = time.perf_counter()
            try:
                p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=self.opts.timeout)
            except subprocess.TimeoutExpired:
                self.fail("%s %s (%r, %s MiB): no result in %d s" % (script, args, alloc_conf, budget_mib,
                                                                     self.opts.timeout))
                return None
            dt = time.perf_counter() - t0
            if cache is not None:
                if record_to:
                    keep_output_code(cache, record_to + ".output_code.tar.xz")
                shutil.rmtree(cache, ignore_errors=True)
            try:
                with open(result) as f:
                    res = json.load(f)
            except (OSError, ValueError):
                self.fail("%s %s (%r, %s MiB): exit %d, no result: %s" % (script, args, alloc_conf, budget_mib,
                                                                        p.returncode, p.stderr.strip()[-3000:]))
                return None
            finally:
                os.unlink(result)
            res["wall"] = round(dt, 3)
            res["output"] = (p.stdout + p.stderr)[-1500:]
            with self.lock:
                self.nprobes += 1
                self.probe_seconds += dt
            return res
        finally:
            self.gpu.release(hold)

    def probe(self, case, args, conf_name, mib, what):
        """A capped run: a PROBE dict ("runs": None when the script failed for another reason than memory)."""
        res = self.run(case["script"], args, SETTINGS[conf_name], mib, mib, folder=case.get("dir", SCRIPTS))
        if res is None:
            return {"budget_mib": mib, "runs": None, "outcome": "error"}
        runs = res["outcome"] == "ok" and res["ooms"] == 0
        if res["outcome"] == "error":
            self.fail("%s at %d MiB (%s): %s" % (what, mib, conf_name, res["message"]))
            runs = None
        self.log("%-44s %-26s %6d MiB: %-4s (reserved peak %d, OOMs %d, %s) %.1f s" %
                 (what, conf_name, mib, {True: "runs", False: "OOMs", None: "ERR"}[runs], res["reserved_peak"],
                  res["ooms"], res["outcome"], res["wall"]))
        return {"budget_mib": mib, "runs": runs, "ooms": res["ooms"], "outcome": res["outcome"],
                "reserved_peak": res["reserved_peak"], "allocated_peak": res["allocated_peak"],
                "retries": res.get("retries"), "seconds": res["wall"]}

    def search(self, lo, hi, probe):
        """advise.c's bisection from (lo fails, hi runs): the first B with probe(B) true and probe(B - 1) false
        on its path. probe(mib) -> True/False/None (None: give up). Levels ahead are probed at once while jobs
        are idle. Returns (B or None, path)."""
        known, path = {}, []

        def tree(a, b, depth):
            if depth == 0 or b - a <= 1:
                return []
            m = a + (b - a) // 2
            return [m] + tree(a, m, depth - 1) + tree(m, b, depth - 1)

        while hi - lo > 1:
            want = [m for m in tree(lo, hi, self.gpu.lookahead()) if m not in known]
            with ThreadPoolExecutor(max(1, len(want))) as pool:
                for m, r in zip(want, pool.map(probe, want)):
                    known[m] = r
            while hi - lo > 1:
                m = lo + (hi - lo) // 2
                if m not in known:
                    break
                path.append(m)
                if known[m] is None:
                    return None, path
                if known[m]:
                    hi = m
                else:
                    lo = m
        return hi, path

    def min_budget(self, name, case, conf_name, need, peak_reserved, total_mib, guess=None):
        """advise.c fill_row's search for one setting; its record. Where a capped run completed although an OOM
        was raised inside it (cuDNN catches the OOM of a workspace and takes another algorithm), the smallest
        budget at which the script completes is searched too ("completes").

        guess (MiB, or None): `oomlab advise` on the recording's own trace (--oomlab). G - 1 and G are probed
        first, at once; B = G when G runs and G - 1 runs out ("guided": the answer where PyTorch's
        runs change from OOM to running, as the whole bisection would find it when the runs are monotonic, which
        "monotonic" checks over every probe made); otherwise those probes narrow lo and hi and the bisection
        below runs as without a guess."""
        probes, cache = [], {}

        def get(mib):
            if mib not in cache:
                cache[mib] = self.probe(case, case["args"], conf_name, mib, name)
                probes.append(cache[mib])
            return cache[mib]

        def probe(mib):
            return get(mib)["runs"]

        lo = (need - 1) // MiB
        hi = -(-peak_reserved // MiB) + 1
        if hi <= lo:
            hi = lo + 1
        out = {"lo": lo, "hi": hi, "path": [], "probes": probes}
        known_hi = False
        if guess is not None and guess > 2:
            cands = [guess - 1, guess]
            with ThreadPoolExecutor(len(cands)) as pool:
                r = dict(zip(cands, pool.map(probe, cands)))
            out["guess"] = guess
            if any(v is None for v in r.values()):
                return None, out
            if r[guess] and not r[guess - 1]:
                out["path"] = cands
                out["guided"] = True
                b = guess
                out["monotonic"] = all(p["runs"] == (p["budget_mib"] >= b) for p in probes
                                       if p["runs"] is not None)
                self.log("%-44s %-26s minimum budget %d MiB (OOM at %d MiB), guided by advise, %d probes" %
                         (name, conf_name, b, b - 1, len(probes)))
                probes.sort(key=lambda p: p["budget_mib"])
                return b, out
            ran = [m for m in cands if r[m]]
            if ran:
                hi, known_hi = min(ran), True
            lo = max([lo] + [m for m in cands if not r[m] and m < hi])
            out["guided"] = False
        found = known_hi
        while not found and hi < total_mib:
            out["path"].append(hi)
            r = probe(hi)
            if r is None:
                return None, out
            if r:
                found = True
                break
            lo, hi = hi, min(hi * 2, total_mib)
        if not found:
            return None, out
        b, path = self.search(lo, hi, probe)
        out["path"] += path
        if b is not None:
            out["monotonic"] = all(p["runs"] == (p["budget_mib"] >= b) for p in probes if p["runs"] is not None)
            self.log("%-44s %-26s minimum budget %d MiB (OOM at %d MiB), %d probes" %
                     (name, conf_name, b, b - 1, len(probes)))
        if b is not None and any(p["outcome"] == "ok" and p["ooms"] > 0 for p in probes):
            def completes(mib):
                p = get(mib)
                return None if p["outcome"] == "error" else p["outcome"] == "ok"

            # below the need a run may still complete (the OOMs it catches shrink what it asks for): go down to
            # a budget at which it does not, then bisect as advise does
            lo2, hi2, cpath = lo, b, []
            while lo2 > 0:
                cpath.append(lo2)
                r = completes(lo2)
                if r is None:
                    break
                if not r:
                    break
                lo2, hi2 = lo2 // 2, lo2
            c = {"criterion": "the script completes (caught OOMs allowed)", "lo": lo2, "hi": hi2}
            if lo2 > 0 and completes(lo2) is False:  # (budget 0 would mean no cap)
                b2, path2 = self.search(lo2, hi2, completes)
                c.update(min_budget_mib=b2, path=cpath + path2)
                self.log("%-44s %-26s completes from %s MiB (caught OOMs below %d MiB)" % (name, conf_name, b2, b))
            else:
                c.update(min_budget_mib=None, path=cpath)
            out["completes"] = c
        probes.sort(key=lambda p: p["budget_mib"])
        return b, out

    def sweep(self, name, case, sw):
        """The largest --batch in [SWEEP_LO, SWEEP_HI] that runs under a budget (defaults): sw["budget_mib"], else
        calibrated (SWEEPS)."""
        probes = []
        budget = sw.get("budget_mib")
        calibration = None
        if budget is None:
            c = sw["calibrate"]
            with ThreadPoolExecutor(2) as pool:
                r1, rc = pool.map(lambda n: self.run(case["script"], list(sw["args"]) + ["--batch", str(n)], "", 0,
                                                     sw["hold"]), (1, c))
            if r1 is None or rc is None or r1["outcome"] != "ok" or rc["outcome"] != "ok":
                self.fail("%s: the sweep's calibration runs failed" % name)
                return None
            budget = int((r1["reserved_peak"] + (rc["reserved_peak"] - r1["reserved_peak"]) * sw["target"] / c)
                         // MiB)
            calibration = {"batch": [1, c], "reserved_peak": [r1["reserved_peak"], rc["reserved_peak"]],
                           "allocated_peak": [r1["allocated_peak"], rc["allocated_peak"]], "target": sw["target"]}
            self.log("%-44s sweep budget %d MiB (peak reserved %d at batch 1, %d at batch %d; aiming at %d)" %
                     (name, budget, r1["reserved_peak"], rc["reserved_peak"], c, sw["target"]))

        def probe(batch):
            p = self.probe(case, list(sw["args"]) + ["--batch", str(batch)], "defaults", budget,
                           "%s --batch %d" % (name, batch))
            p["batch"] = batch
            probes.append(p)
            return p["runs"]

        powers = []
        v = SWEEP_LO
        while v <= SWEEP_HI:
            powers.append(v)
            v *= 2
        with ThreadPoolExecutor(len(powers)) as pool:
            series = dict(zip(powers, pool.map(probe, powers)))
        out = {"param": "batch", "lo": SWEEP_LO, "hi": SWEEP_HI, "budget_mib": budget, "alloc_conf": "",
               "args": sw["args"], "calibration": calibration,
               "series": [{"value": v, "runs": series[v]} for v in powers],
               "largest_batch": None, "probes": probes}
        if any(r is None for r in series.values()):
            return out
        fit = [v for v in powers if series[v]]
        out["monotonic"] = all(series[v] == (v <= max(fit)) for v in powers) if fit else True
        if not fit:
            self.log("%-44s nothing in %d..%d runs under %d MiB" % (name, SWEEP_LO, SWEEP_HI, budget))
            return out
        lo = max(fit)
        above = [v for v in powers if v > lo]
        if not above:  # every power of two fits up to HI
            hi = SWEEP_HI + 1 if lo < SWEEP_HI else None
        else:
            hi = above[0]
        largest = lo
        if hi is not None:
            # search() finds the first passing value from a failing lo; here the last running one from a running lo
            b, path = self.search(lo, hi, lambda n: None if (r := probe(n)) is None else not r)
            out["path"] = path
            if b is None:
                return out
            largest = b - 1
        probes.sort(key=lambda p: p["batch"])
        out["largest_batch"] = largest
        self.log("%-44s largest batch under %d MiB: %d (%d probes)" % (name, budget, largest, len(probes)))
        return out

    def labelled(self, name, case, base, folder):
        """A second recording with every aten op labelled (oplabels.py) into base.labelled.trace.json, and whether
        its allocations and frees (action and size, in order) are the plain recording's, so that its labels name
        the plain recording's events."""
        r = self.run(case["script"], case["args"], "", 0, case["reserve"], record_to=base + ".labelled",
                     folder=folder, labelled=True)
        if r is None:
            return {"error": "no result"}
        try:
            seqs = []
            for path in (base + ".trace.json", base + ".labelled.trace.json"):
                with open(path) as f:
                    ev = json.load(f)["device_traces"][0]
                seqs.append([(e["action"], e["size"]) for e in ev if e["action"] in ("alloc", "free_completed")])
        except (OSError, ValueError, KeyError, IndexError) as e:
            return {"error": str(e)[:200]}
        same = seqs[0] == seqs[1]
        first = next((i for i, (a, b) in enumerate(zip(*seqs)) if a != b), min(map(len, seqs)))
        self.log("%-44s labelled recording: %s (%d and %d events, first difference at %s)" %
                 (name, "the same events" if same else "OTHER EVENTS", len(seqs[0]), len(seqs[1]),
                  "-" if same else first))
        return {"same": same, "events": len(seqs[0]), "labelled_events": len(seqs[1]),
                "first_difference": None if same else first, "outcome": r["outcome"]}

    def guesses(self, name, base):
        """`oomlab advise --json` on the recording: its minimum budget per setting of SETTINGS (MiB), {} when it
        fails (the bisection then runs unguided)."""
        try:
            p = subprocess.run([self.opts.oomlab, "advise", "--json", base + ".trace.json"], capture_output=True,
                               text=True, timeout=300)
            rows = {r["alloc_conf"]: r["min_budget_mib"] for r in json.loads(p.stdout)["settings"]}
        except (OSError, ValueError, KeyError, subprocess.TimeoutExpired) as e:
            self.log("%-44s advise on the recording failed (%s): unguided" % (name, str(e)[:100]))
            return {}
        g = {s: rows.get(conf) for s, conf in SETTINGS.items() if isinstance(rows.get(conf), int)}
        self.log("%-44s advise on the recording: %s" % (name, g))
        return g

    def rebisect(self, name):
        """--rebisect FROM: the minimum budgets FROM/NAME.torch.json lacks (null), bisected now against its committed
        recording (FROM/NAME.trace.json or .trace.json.xz: the need and advise's guess), the rest of the document
        kept; written to OUT/NAME.torch.json."""
        import lzma
        case = self.opts.cases[name]
        src = os.path.join(self.opts.rebisect, name)
        with open(src + ".torch.json") as f:
            doc = json.load(f)
        todo = [s for s in SETTINGS if (doc.get("min_budget_mib") or {}).get(s) is None]
        if not todo:
            self.gpu.open(-len(SETTINGS))
            return doc
        self.gpu.open(-(len(SETTINGS) - len(todo)))
        trace = os.path.join(self.work, name + ".trace.json")
        opener = lzma.open if os.path.exists(src + ".trace.json.xz") else open
        with opener(src + ".trace.json.xz" if opener is lzma.open else src + ".trace.json", "rt") as f, \
                open(trace, "w") as g:
            g.write(f.read())
        with open(trace) as f:
            need = need_of(json.load(f))
        guesses = self.guesses(name, trace[:-len(".trace.json")]) if self.opts.oomlab else {}
        total_mib = doc["total_memory"] // MiB
        self.gpu.set_total(total_mib)
        folder = case.get("dir", SCRIPTS)

        def one(s):
            try:
                peak = doc["peak_reserved"]
                unc = {"peak_allocated": doc["peak_allocated"], "peak_reserved": peak,
                       "ooms": doc["memory_stats"].get("num_ooms", 0)}
                if SETTINGS[s]:
                    r = self.run(case["script"], case["args"], SETTINGS[s], 0, case["reserve"], folder=folder)
                    if r is None:
                        return s, None
                    peak = r["reserved_peak"]
                    unc = {"peak_allocated": r["allocated_peak"], "peak_reserved": peak, "ooms": r["ooms"]}
                b, out = self.min_budget(name, case, s, need, peak, total_mib, guess=guesses.get(s))
                out["uncapped"] = unc
                return s, (b, out)
            finally:
                self.gpu.open(-1)

        with ThreadPoolExecutor(len(todo)) as pool:
            results = list(pool.map(one, todo))
        for s, r in results:
            doc.setdefault("uncapped", {})
            doc.setdefault("bisect", {})
            if r is None:
                continue
            b, out = r
            doc["uncapped"][s] = out.pop("uncapped")
            doc.setdefault("min_budget_mib", {})[s] = b
            doc["bisect"][s] = out
            if "completes" in out:
                doc.setdefault("min_budget_mib_completes", {})[s] = out["completes"]["min_budget_mib"]
            if b is None:
                self.fail("%s (%s): no minimum budget found" % (name, s))
        doc["rebisected"] = todo
        write_json(os.path.join(self.opts.out, name + ".torch.json"), doc)
        return doc

    def planned(self, name):
        """The searches of a case after its recording: ("bisect", SETTING) and ("sweep", NAME)."""
        if self.opts.skip_bisect:
            return []
        jobs = []
        if self.opts.cases[name].get("bisect", True) or self.opts.bisect_llama:
            jobs += [("bisect", s) for s in SETTINGS]
        if name in SWEEPS and self.opts.cases is CASES:
            jobs.append(("sweep", name))
        return jobs

    def case(self, name):
        """Record, bisect and sweep one case (its searches counted open in Gpu from the start); its document."""
        case = self.opts.cases[name]
        opts = self.opts
        base = os.path.join(opts.out, name)
        folder = case.get("dir", SCRIPTS)
        jobs = self.planned(name)
        self.log("%-44s recording (%s %s)" % (name, case["script"], " ".join(case["args"])))
        res = self.run(case["script"], case["args"], "", 0, case["reserve"], record_to=base, folder=folder)
        if res is None:
            self.gpu.open(-len(jobs))
            return None
        if res["outcome"] != "ok":
            self.fail("%s: the recording ended with %s: %s" % (name, res["outcome"], res["message"]))
        total_mib = res["total_memory"] // MiB
        self.gpu.set_total(total_mib)
        with open(base + ".trace.json") as f:
            need = need_of(json.load(f))
        doc = {"schema": "oomlab.predict-twin/1", "name": name,
               "script": os.path.relpath(os.path.join(folder, case["script"]), ROOT), "args": case["args"],
               "gpu": res["gpu"], "total_memory": res["total_memory"], "torch": res["torch"], "cuda": res["cuda"],
               "alloc_conf": "", "cublas_workspaces": "pytorch defaults",
               "peak_allocated": res["memory_stats"]["allocated_bytes.all.peak"],
               "peak_reserved": res["memory_stats"]["reserved_bytes.all.peak"], "need": need,
               "outcome": res["outcome"], "output": res["output"], "seconds": res["wall"],
               "memory_stats": res["memory_stats"], "host_memory_stats": res.get("host_memory_stats"),
               "fake": bool(opts.fake)}
        self.log("%-44s recorded: peak allocated %d, reserved %d, need %d (%s) %.1f s" %
                 (name, doc["peak_allocated"], doc["peak_reserved"], need, res["outcome"], res["wall"]))
        write_json(base + ".torch.json", doc)
        if opts.labelled and res["outcome"] == "ok":
            doc["labelled"] = self.labelled(name, case, base, folder)
            write_json(base + ".torch.json", doc)
        guesses = self.guesses(name, base) if opts.oomlab and res["outcome"] == "ok" else {}
        if not jobs or res["outcome"] != "ok":
            self.gpu.open(-len(jobs))
            return doc

        def job(j):
            try:
                return job1(j)
            finally:
                self.gpu.open(-1)

        def job1(j):
            kind, s = j
            if kind == "sweep":
                return self.sweep(name, case, self.opts.sweeps[name])
            peak = doc["peak_reserved"]
            unc = {"peak_allocated": doc["peak_allocated"], "peak_reserved": peak,
                   "ooms": res["memory_stats"].get("num_ooms", 0)}
            if SETTINGS[s]:
                r = self.run(case["script"], case["args"], SETTINGS[s], 0, case["reserve"], folder=folder)
                if r is None:
                    return None
                peak = r["reserved_peak"]
                unc = {"peak_allocated": r["allocated_peak"], "peak_reserved": peak, "ooms": r["ooms"]}
                self.log("%-44s %-26s uncapped: peak allocated %d, reserved %d" %
                         (name, s, r["allocated_peak"], peak))
            b, out = self.min_budget(name, case, s, need, peak, total_mib, guess=guesses.get(s))
            out["uncapped"] = unc
            return b, out

        with ThreadPoolExecutor(len(jobs)) as pool:
            results = list(pool.map(job, jobs))
        doc["uncapped"], doc["min_budget_mib"], doc["bisect"] = {}, {}, {}
        for (kind, s), r in zip(jobs, results):
            if kind == "sweep":
                doc["sweep"] = r
            elif r is None:
                doc["min_budget_mib"][s] = None
            else:
                b, out = r
                doc["uncapped"][s] = out.pop("uncapped")
                doc.setdefault("min_budget_mib", {})[s] = b
                doc["bisect"][s] = out
                if "completes" in out:
                    doc.setdefault("min_budget_mib_completes", {})[s] = out["completes"]["min_budget_mib"]
                if b is None:
                    self.fail("%s (%s): no minimum budget found" % (name, s))
                elif opts.fake:
                    want = fake_threshold(case["script"], case["args"], SETTINGS[s])
                    if b != want:
                        self.fail("%s (%s): --fake found %d MiB, the made-up threshold is %d" % (name, s, b, want))
                    c = (doc.get("min_budget_mib_completes") or {}).get(s)
                    if ("resnet" in case["script"]) != (c is not None) or c is not None and c != want - FAKE_CAUGHT:
                        self.fail("%s (%s): --fake found completion at %s MiB, the made-up one is %s" %
                                  (name, s, c, want - FAKE_CAUGHT if "resnet" in case["script"] else None))
        if opts.fake and doc.get("sweep"):
            fits = [n for n in range(SWEEP_LO, SWEEP_HI + 1)
                    if fake_threshold(case["script"], ["--batch", str(n)], "") <= doc["sweep"]["budget_mib"]]
            want = max(fits) if fits else None
            if doc["sweep"]["largest_batch"] != want:
                self.fail("%s: --fake sweep found %s, the made-up answer is %s" %
                          (name, doc["sweep"]["largest_batch"], want))
        write_json(base + ".torch.json", doc)
        return doc


def main(argv):
    if len(argv) == 2 and argv[0] == "--child":
        child(json.loads(argv[1]))
        return 0
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="folder for the outputs (created)")
    ap.add_argument("-j", "--jobs", type=int, default=8, help="processes at once (default 8)")
    ap.add_argument("--only", action="append", default=[], help="cases to run (comma-separated; repeatable)")
    ap.add_argument("--skip-bisect", action="store_true", help="record only: no minimum budgets, no sweeps")
    ap.add_argument("--bisect-llama", action="store_true", help="bisect llama1b's minimum budgets too")
    ap.add_argument("--sweep-budget", action="append", default=[], metavar="NAME=MiB",
                    help="a fixed budget for a sweep (default: calibrated on the GPU; sweeps: %s)" %
                    " ".join(SWEEPS))
    ap.add_argument("--timeout", type=int, default=300, help="seconds one run may take (default 300)")
    ap.add_argument("--deadline", type=int, default=510,
                    help="seconds after which no run starts, so that what finished is written (default 510; "
                    "0: none)")
    ap.add_argument("--fake", action="store_true", help="no GPU: test the driver with made-up probes")
    ap.add_argument("--leave", type=int, default=0, metavar="MiB",
                    help="device memory to leave to other work running beside (default 0)")
    ap.add_argument("--rebisect", metavar="FROM",
                    help="record nothing: bisect the minimum budgets that FROM/NAME.torch.json lacks, from its "
                    "recording there")
    ap.add_argument("--zoo", action="store_true", help="the zoo's cases (ZOO: tests/data/predict/zoo/scripts)")
    ap.add_argument("--compiled", action="store_true",
                    help="the compiled cases (COMPILED: tests/data/predict/compiled/scripts), each run compiling cold")
    ap.add_argument("--labelled", action="store_true",
                    help="also record each case with every aten op labelled (NAME.labelled.trace.json)")
    ap.add_argument("--oomlab", help="an oomlab binary: its advise on each recording guides the bisections")
    ap.add_argument("--pack", action="store_true",
                    help="at the end, move the traces and NAME.torch.json files into DIR.tar.xz (a device machine "
                    "returns at most 8 files)")
    opts = ap.parse_args(argv)
    opts.cases = COMPILED if opts.compiled else ZOO if opts.zoo else CASES
    names = [n for o in opts.only for n in o.split(",") if n] or list(opts.cases)
    bad = [n for n in names if n not in opts.cases]
    if bad:
        ap.error("no case %s (cases: %s)" % (", ".join(bad), " ".join(opts.cases)))
    if opts.jobs < 1:
        ap.error("-j must be at least 1")
    opts.sweeps = {k: dict(v) for k, v in SWEEPS.items()}
    for s in opts.sweep_budget:
        k, _, v = s.partition("=")
        if k not in SWEEPS or not v.isdigit() or int(v) < 1:
            ap.error("--sweep-budget %r: NAME=MiB with NAME one of %s" % (s, " ".join(SWEEPS)))
        opts.sweeps[k]["budget_mib"] = int(v)
    os.makedirs(opts.out, exist_ok=True)
    rec = Recorder(opts)
    rec.log("%d cases, -j %d%s%s" % (len(names), opts.jobs, ", recording only" if opts.skip_bisect else "",
                                     ", fake" if opts.fake else ""))
    rec.gpu.open(sum(len(rec.planned(n)) for n in names))
    with ThreadPoolExecutor(len(names)) as pool:
        docs = dict(zip(names, pool.map(rec.rebisect if opts.rebisect else rec.case, names)))
    summary = {"schema": "oomlab.predict-twin-summary/1", "seconds": round(time.perf_counter() - rec.t0, 1),
               "probes": rec.nprobes, "probe_seconds": round(rec.probe_seconds, 1), "jobs": opts.jobs,
               "failures": rec.failures, "cases": {}}
    for n, d in docs.items():
        if d is None:
            summary["cases"][n] = None
            continue
        summary["cases"][n] = {"peak_allocated": d["peak_allocated"], "peak_reserved": d["peak_reserved"],
                               "need": d["need"], "min_budget_mib": d.get("min_budget_mib"),
                               "min_budget_mib_completes": d.get("min_budget_mib_completes"),
                               "largest_batch": (d.get("sweep") or {}).get("largest_batch"),
                               "sweep_budget_mib": (d.get("sweep") or {}).get("budget_mib")}
    write_json(os.path.join(opts.out, "summary.json"), summary)
    for n, c in summary["cases"].items():
        rec.log("%-20s %s" % (n, json.dumps(c)))
    rec.log("done in %.1f s: %d runs, %.1f s of run time (%.2f s each), %d failures" %
            (summary["seconds"], rec.nprobes, rec.probe_seconds, rec.probe_seconds / max(rec.nprobes, 1),
             len(rec.failures)))
    if opts.pack:
        pack(opts.out, rec)
    return 1 if rec.failures else 0


def pack(out, rec):
    """DIR's files into DIR.tar.xz (folder DIR inside), written whole; then all but summary.json and the log are
    removed from DIR."""
    import tarfile
    folder = os.path.abspath(out)
    names = sorted(n for n in os.listdir(folder) if os.path.isfile(os.path.join(folder, n)) and not n.startswith("."))
    tmp = folder + ".tar.xz.tmp"
    with tarfile.open(tmp, "w:xz") as tar:
        for n in names:
            tar.add(os.path.join(folder, n), arcname=os.path.join(os.path.basename(folder), n))
    os.replace(tmp, folder + ".tar.xz")
    for n in names:
        if n not in ("summary.json", "predict_record.log"):
            os.unlink(os.path.join(folder, n))
    rec.log("packed %d files into %s (%d bytes)" % (len(names), folder + ".tar.xz", os.path.getsize(folder + ".tar.xz")))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
