#!/usr/bin/env python3
"""What PyTorch's CUDA path allocates, measured op by op, for the models of `oomlab predict` (run on a GPU).

    python3 scripts/twins/predict_probes.py sdpa --out FILE.json
    python3 scripts/twins/predict_probes.py convs --out FILE.json [--models A,B] [--batches 8,16] [--modes M,N]
                                            [-j JOBS] [--deadline S]
    python3 scripts/twins/predict_probes.py convs-script --scripts A.py[,B.py...] --out FILE.json
    python3 scripts/twins/predict_probes.py embedding --out FILE.json

Each case runs under torch.cuda.memory._record_memory_history with every aten op labelled (oplabels.py), and
keeps each op's allocations and frees as PyTorch's allocator saw them: [action, size, temp] with action "a"
(alloc) or "f" (free_requested), temp true for an allocation freed within its own op.

sdpa: F.scaled_dot_product_attention forward and backward over a grid of dtypes, head layouts (grouped-query
  included, with enable_gqa), masks (none, causal, bool and float, broadcast, a float bias that requires grad),
  dropout and query/key layouts, with torch._fused_sdp_choice's answer (SDPBackend) for each; every op's events.
convs: a model family's convolutions as PyTorch runs them on this GPU: each model of MODELS (torchvision and timm,
  at 224 x 224) built on the GPU in each mode (float32, or under autocast bfloat16 / float16; NCHW or channels_last
  "-cl"), one forward and backward per batch size; per convolution call (cuda_model/op_keys.py's key) the events
  inside aten::convolution / convolution_backward: outputs, and the workspaces cuDNN's plan takes and frees.
  A key seen twice with other events is listed under "conflicts".
convs-script: the same for training scripts (--scripts A.py,B.py), each run once as its user runs it, its compiled
  graphs' wrappers under the op labeller (torch.compile's extern convolutions: channels-last, their bias apart).
embedding: aten::embedding_dense_backward over index counts around its 3072-index switch, int32 and int64
  indices, vocabularies, dims, dtypes, padding_idx and scale_grad_by_freq: each call's allocations.
"""
import argparse
import json
import os
import sys
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, ".."))

MAX_ENTRIES = 2_000_000
DEV = "cuda"  # --dry-cpu: "cpu", with no history (a test of this script's own code where there is no GPU)

# torchvision (tv:) and timm (timm:) models whose convolutions the table measures
MODELS = [
    "tv:resnet18", "tv:resnet34", "tv:resnet50", "tv:resnet101", "tv:resnext50_32x4d", "tv:wide_resnet50_2",
    "tv:efficientnet_b0", "tv:efficientnet_b1", "tv:mobilenet_v2", "tv:mobilenet_v3_large",
    "tv:mobilenet_v3_small", "tv:convnext_tiny", "tv:regnet_y_1_6gf", "tv:densenet121", "tv:vgg16", "tv:vit_b_16",
    "timm:resnet50", "timm:convnext_tiny", "timm:convnext_small", "timm:efficientnet_b0", "timm:regnety_016",
    "timm:mobilenetv3_large_100", "timm:vit_base_patch16_224", "timm:vit_small_patch16_224",
    "timm:swin_tiny_patch4_window7_224", "timm:deit_small_patch16_224", "clip:32",
]
MODES = ["fp32", "bf16", "fp16", "fp32-cl", "bf16-cl", "fp16-cl"]
BATCHES = [8, 16, 32, 64, 128, 256]


def write_json(path, obj):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(obj, f, separators=(",", ":"))
    os.replace(tmp, path)


_DRY = []  # --dry-cpu: the labels set since history(torch, True)
_BASE = [0]  # events of the device trace before the last history(torch, True)


def events_by_op(torch):
    """The snapshot's events since history(torch, True) grouped by op label: [(label, [[action, size, temp],
    ...]), ...] in order."""
    if DEV == "cpu":
        out = [(m, [["a", 512, False]]) for m in _DRY if m]
        _DRY.clear()
        return out
    snap = torch.cuda.memory._snapshot()
    ev = [e for e in snap["device_traces"][0][_BASE[0]:] if e["action"] in ("alloc", "free_requested")]
    out, cur, label = [], None, None
    for e in ev:
        m = e.get("user_metadata", "") or ""
        if cur is None or m != label:
            cur = []
            label = m
            out.append((m, cur))
        cur.append([e["action"][0], int(e["size"]), int(e["addr"])])
    for _, evs in out:
        freed = {a for act, _, a in evs if act == "f"}
        for e in evs:
            e[2] = e[0] == "a" and e[2] in freed
    return out


def history(torch, on):
    if DEV == "cpu":
        _DRY.clear()
        return
    if on:
        torch.cuda.memory._record_memory_history(enabled="all", context=None, stacks="python",
                                                 max_entries=MAX_ENTRIES)
        _BASE[0] = len(torch.cuda.memory._snapshot()["device_traces"][0])
    else:
        torch.cuda.memory._record_memory_history(enabled=None)


# ---- sdpa ----

def sdpa_cases():
    for dt in ("bfloat16", "float16", "float32"):
        for hq, hk, d in ((16, 16, 64), (16, 4, 64), (14, 2, 64), (8, 1, 256), (12, 12, 64), (32, 8, 64),
                          (16, 16, 128), (16, 16, 80), (8, 8, 32)):
            for mask in ("none", "causal", "bool_causal", "bool_pad", "float_pad", "float_full", "bias_grad"):
                for drop in (0.0, 0.1):
                    for layout in ("bhld", "blhd"):
                        for L in ((128, 1000) if (hq, hk, d) in ((16, 4, 64), (12, 12, 64)) and layout == "blhd"
                                  else (128,)):
                            yield dict(dtype=dt, hq=hq, hk=hk, d=d, mask=mask, dropout=drop, layout=layout, L=L,
                                       gqa=hq != hk)


def sdpa_inputs(torch, c, dev):
    """The case's q, k, v (views of [B, L, H, D] leaves for layout blhd), mask, is_causal, enable_gqa kwargs and
    the output's gradient, on dev."""
    dt = getattr(torch, c["dtype"])
    B, L = 2, c["L"]
    ts = []
    for h in (c["hq"], c["hk"], c["hk"]):
        if c["layout"] == "bhld":
            ts.append(torch.randn(B, h, L, c["d"], device=dev, dtype=dt, requires_grad=True))
        else:
            ts.append(torch.randn(B, L, h, c["d"], device=dev, dtype=dt, requires_grad=True).transpose(1, 2))
    mask, causal = None, False
    m = c["mask"]
    if m == "causal":
        causal = True
    elif m == "bool_causal":
        mask = torch.ones(L, L, dtype=torch.bool, device=dev).tril()[None, None].expand(B, 1, L, L)
    elif m == "bool_pad":
        mask = torch.ones(B, 1, 1, L, dtype=torch.bool, device=dev)
        mask[1, ..., L // 2:] = False
    elif m == "float_pad":
        mask = torch.zeros(B, 1, 1, L, dtype=dt, device=dev)
        mask[1, ..., L // 2:] = torch.finfo(dt).min
    elif m == "float_full":
        mask = torch.zeros(B, 1, L, L, dtype=dt, device=dev)
    elif m == "bias_grad":
        mask = torch.zeros(1, c["hq"], L, L, dtype=dt, device=dev, requires_grad=True)
    kw = {"enable_gqa": True} if c["gqa"] else {}
    g = torch.randn(B, c["hq"], L, c["d"], device=dev, dtype=dt)
    return ts, mask, causal, kw, g


def sdpa_run(F, c, ts, mask, causal, kw, g):
    y = F.scaled_dot_product_attention(*ts, attn_mask=mask, dropout_p=c["dropout"], is_causal=causal, **kw)
    y.backward(g)


def sdpa_case(torch, c):
    import torch.nn.functional as F
    from oplabels import OpLabels
    ts, mask, causal, kw, g = sdpa_inputs(torch, c, DEV)
    out = {"case": c}
    try:
        out["choice"] = int(torch._fused_sdp_choice(*ts, mask, c["dropout"], causal, **kw))
    except Exception as e:  # noqa: BLE001 - recorded
        out["choice"] = "error: %s" % str(e)[:200]
    torch.cuda.synchronize()
    history(torch, True)
    try:
        with OpLabels():
            sdpa_run(F, c, ts, mask, causal, kw, g)
        torch.cuda.synchronize()
        out["ops"] = [[lab, evs] for lab, evs in events_by_op(torch)]
    except Exception as e:  # noqa: BLE001 - recorded
        out["error"] = "%s: %s" % (type(e).__name__, str(e)[:300])
    history(torch, False)
    return out


def cmd_sdpa(opts):
    import torch
    torch.cuda.init()
    res = {"torch": torch.__version__, "cudnn": torch.backends.cudnn.version(),
           "gpu": torch.cuda.get_device_name(0), "backends": {int(v): k for k, v in torch.nn.attention.SDPBackend.__members__.items()},
           "cases": []}
    t0 = time.time()
    for c in sdpa_cases():
        res["cases"].append(sdpa_case(torch, c))
    res["seconds"] = round(time.time() - t0, 1)
    write_json(opts.out, res)
    print("sdpa: %d cases in %.1f s -> %s" % (len(res["cases"]), res["seconds"], opts.out), flush=True)


# ---- convs ----

def build(torch, name, device):
    kind, _, n = name.partition(":")
    if kind == "tv":
        import torchvision
        return torchvision.models.get_model(n, num_classes=1000).to(device)
    if kind == "timm":
        import timm
        return timm.create_model(n, num_classes=1000).to(device)
    if kind == "clip":
        from transformers import CLIPVisionConfig, CLIPVisionModel
        return CLIPVisionModel(CLIPVisionConfig(patch_size=int(n), image_size=224)).to(device)
    raise ValueError(name)


def conv_model(torch, name, modes, batches, deadline, t0):
    """One model in every mode and batch: {"key": events} entries, conflicts, runs."""
    from oplabels import OpLabels
    from oomlab_capture.cuda_model import op_keys
    entries, conflicts, runs = {}, [], []

    def label_key(func, args, kwargs):
        return op_keys.key(func, args)

    for mode in modes:
        dtname, _, cl = mode.partition("-")
        try:
            model = build(torch, name, DEV)
        except Exception as e:  # noqa: BLE001
            runs.append({"model": name, "mode": mode, "error": "build: %s" % str(e)[:200]})
            break
        if cl:
            model = model.to(memory_format=torch.channels_last)
        model.train()
        for b in batches:
            if deadline and time.time() - t0 > deadline:
                runs.append({"model": name, "mode": mode, "batch": b, "error": "past the deadline"})
                continue
            r = {"model": name, "mode": mode, "batch": b}
            try:
                x = torch.randn(b, 3, 224, 224, device=DEV)
                if cl:
                    x = x.contiguous(memory_format=torch.channels_last)
                torch.cuda.synchronize()
                history(torch, True)
                with OpLabels(key=label_key):
                    with torch.autocast(DEV, dtype=getattr(torch, {"fp32": "float32", "bf16": "bfloat16",
                                                                        "fp16": "float16"}[dtname]),
                                        enabled=dtname != "fp32"):
                        y = model(pixel_values=x) if name.startswith("clip") else model(x)
                        y = y.pooler_output if hasattr(y, "pooler_output") else y
                        loss = y.float().square().mean()
                    loss.backward()
                torch.cuda.synchronize()
                ops = events_by_op(torch)
                history(torch, False)
                model.zero_grad(set_to_none=True)
                del x, y, loss
                r["convs"] = add_entries(ops, entries, conflicts, {"model": name, "mode": mode, "batch": b})
            except Exception as e:  # noqa: BLE001 - an OOM at a large batch included
                history(torch, False)
                r["error"] = "%s: %s" % (type(e).__name__, str(e)[:200])
            runs.append(r)
            torch.cuda.empty_cache()
        del model
        torch.cuda.empty_cache()
    return entries, conflicts, runs


def add_entries(ops, entries, conflicts, where):
    """events_by_op's labelled ops into the table's entries ({"key": {"events", "seen", ...where}}); a key seen
    again with other events goes to conflicts. The number of labelled ops."""
    n = 0
    for lab, evs in ops:
        if " | " not in lab:
            continue
        k = lab.split(" | ", 1)[1]
        e = [[a, s, t] for a, s, t in evs]
        op = lab.split(" | ", 1)[0].split(" ", 1)[-1]
        n += 1
        if k in entries:
            if entries[k]["events"] != e and len(conflicts) < 200:
                conflicts.append(dict(where, key=k, events=e, first=entries[k]["events"]))
            entries[k]["seen"] += 1
        else:
            entries[k] = dict(where, events=e, seen=1, op=op)
    return n


def cmd_convs_script_child(opts):
    """One training script run as its user runs it, with the ops of its compiled graphs labelled: the wrapper
    Inductor generated runs under OpLabels (output_code.py CompiledFxGraph.__call__, forward's and backward's),
    so each extern convolution is keyed as the capture keys it; Dynamo's tracing and Inductor's compile run
    unlabelled, as without the mode."""
    import runpy

    import torch
    from torch._inductor import output_code

    from oplabels import OpLabels
    from oomlab_capture.cuda_model import op_keys
    call = output_code.CompiledFxGraph.__call__

    def labelled(self, inputs):
        with OpLabels(key=lambda func, args, kwargs: op_keys.key(func, args)):
            return call(self, inputs)
    output_code.CompiledFxGraph.__call__ = labelled
    torch.cuda.init()
    t0 = time.time()
    history(torch, True)
    script = opts.scripts
    sys.argv = [script]
    runpy.run_path(script, run_name="__main__")
    torch.cuda.synchronize()
    ops = events_by_op(torch)
    history(torch, False)
    entries, conflicts = {}, []
    n = add_entries(ops, entries, conflicts, {"script": os.path.basename(script)})
    write_json(opts.out, {"torch": torch.__version__, "cudnn": torch.backends.cudnn.version(),
                          "gpu": torch.cuda.get_device_name(0), "entries": entries, "conflicts": conflicts,
                          "runs": [{"script": os.path.basename(script), "convs": n}],
                          "seconds": round(time.time() - t0, 1)})
    print("convs-script: %s: %d labelled calls, %d keys, %.1f s" % (script, n, len(entries), time.time() - t0),
          flush=True)


def cmd_convs_script(opts):
    """Each script of --scripts (comma-separated) in a child process of its own, one after another (each
    compiles with a fresh Inductor cache, as predict_record.py --compiled runs it); their tables merged."""
    import subprocess
    import tempfile
    entries, conflicts, runs = {}, [], []
    meta = None
    for script in opts.scripts.split(","):
        with tempfile.TemporaryDirectory() as tmp:
            out = os.path.join(tmp, "convs.json")
            env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=os.path.join(tmp, "inductor"))
            rc = subprocess.run([sys.executable, os.path.abspath(__file__), "convs-script-child", "--out", out,
                                 "--scripts", script] + (["--dry-cpu"] if DEV == "cpu" else []), env=env, cwd=os.path.dirname(os.path.abspath(script))).returncode
            if rc != 0 or not os.path.exists(out):
                runs.append({"script": os.path.basename(script), "error": "exit %d" % rc})
                continue
            d = load(out)
        meta = d
        for k, v in d["entries"].items():
            if k in entries:
                entries[k]["seen"] += v["seen"]
                if entries[k]["events"] != v["events"]:
                    conflicts.append({"key": k, "events": v["events"], "first": entries[k]["events"],
                                      "script": v["script"]})
            else:
                entries[k] = v
        conflicts += d["conflicts"]
        runs += d["runs"]
    if meta is None:
        print("convs-script: no script ran")
        return 1
    write_json(opts.out, {"torch": meta["torch"], "cudnn": meta["cudnn"], "gpu": meta["gpu"], "entries": entries,
                          "conflicts": conflicts, "runs": runs})
    print("convs-script: %d keys, %d conflicts, %d runs -> %s" % (len(entries), len(conflicts), len(runs), opts.out))
    return 0


def cmd_convs_child(opts):
    import torch
    torch.cuda.init()
    t0 = time.time()
    entries, conflicts, runs = {}, [], []
    for name in opts.models.split(","):
        e, c, r = conv_model(torch, name, opts.modes.split(","), [int(b) for b in opts.batches.split(",")],
                             opts.deadline, opts.t0 or t0)
        for k, v in e.items():
            if k in entries:
                entries[k]["seen"] += v["seen"]
                if entries[k]["events"] != v["events"]:
                    conflicts.append({"key": k, "events": v["events"], "first": entries[k]["events"],
                                      "model": name})
            else:
                entries[k] = v
        conflicts += c
        runs += r
        print("convs: %s: %d runs, %d keys so far, %.1f s" % (name, len(r), len(entries), time.time() - t0),
              flush=True)
    write_json(opts.out, {"torch": torch.__version__, "cudnn": torch.backends.cudnn.version(),
                          "gpu": torch.cuda.get_device_name(0), "entries": entries, "conflicts": conflicts,
                          "runs": runs, "seconds": round(time.time() - t0, 1)})


def cmd_convs(opts):
    """Split MODELS over JOBS child processes on the one GPU; merge their tables."""
    import subprocess
    models = opts.models.split(",")
    jobs = max(1, min(opts.jobs, len(models)))
    parts = [models[i::jobs] for i in range(jobs)]
    procs = []
    t0 = time.time()
    for i, part in enumerate(parts):
        out = "%s.part%d" % (opts.out, i)
        cmd = [sys.executable, os.path.abspath(__file__), "convs-child", "--out", out, "--models", ",".join(part),
               "--modes", opts.modes, "--batches", opts.batches, "--deadline", str(opts.deadline),
               "--t0", str(t0)] + (["--dry-cpu"] if DEV == "cpu" else [])
        procs.append((out, subprocess.Popen(cmd)))
    merged = {"entries": {}, "conflicts": [], "runs": [], "parts": []}
    for out, p in procs:
        p.wait()
        try:
            with open(out) as f:
                d = json.load(f)
        except (OSError, ValueError) as e:
            merged["parts"].append({"file": out, "error": str(e)[:200], "exit": p.returncode})
            continue
        os.unlink(out)
        for k in ("torch", "cudnn", "gpu"):
            merged[k] = d[k]
        merged["parts"].append({"file": out, "seconds": d["seconds"], "exit": p.returncode})
        for k, v in d["entries"].items():
            if k in merged["entries"]:
                merged["entries"][k]["seen"] += v["seen"]
                if merged["entries"][k]["events"] != v["events"]:
                    merged["conflicts"].append({"key": k, "events": v["events"],
                                                "first": merged["entries"][k]["events"], "model": v["model"]})
            else:
                merged["entries"][k] = v
        merged["conflicts"] += d["conflicts"]
        merged["runs"] += d["runs"]
    merged["seconds"] = round(time.time() - t0, 1)
    write_json(opts.out, merged)
    print("convs: %d keys, %d conflicts, %d runs (%d failed) in %.1f s -> %s" %
          (len(merged["entries"]), len(merged["conflicts"]), len(merged["runs"]),
           sum(1 for r in merged["runs"] if "error" in r), merged["seconds"], opts.out), flush=True)


# ---- ops: nonzero, index_put with accumulate ----

def cmd_ops(opts):
    """aten::nonzero over sizes, dims and dtypes; aten::_index_put_impl_(accumulate=True) (advanced indexing's
    backward) over self shapes, index counts and value shapes: each call's allocations."""
    import torch
    torch.cuda.init()
    res = {"torch": torch.__version__, "gpu": torch.cuda.get_device_name(0), "nonzero": [], "index_put": []}
    g = torch.Generator(device=DEV).manual_seed(0)
    for n in (1, 16, 100, 1000, 4096, 10000, 65536, 100000, 1 << 20, 4 << 20):
        for shape in ((n,), (n // 4 or 1, 4) if n >= 4 else (n,)):
            for dt in ("bool", "int64", "float32"):
                for frac in (0.0, 0.5, 1.0):
                    x = (torch.rand(shape, device=DEV, generator=g) < frac).to(getattr(torch, dt))
                    torch.cuda.synchronize()
                    history(torch, True)
                    try:
                        out = torch.nonzero(x)
                        torch.cuda.synchronize()
                        ev = [e for _, evs in events_by_op(torch) for e in evs]
                        res["nonzero"].append({"shape": list(shape), "dtype": dt, "nnz": int(out.size(0)),
                                               "events": ev})
                    except Exception as e:  # noqa: BLE001 - recorded
                        res["nonzero"].append({"shape": list(shape), "dtype": dt, "error": str(e)[:200]})
                    history(torch, False)
    for rows, cols in ((169, 24), (1000, 64), (50000, 128), (32000, 1)):
        for nidx in (100, 2401, 3000, 10000, 100000):
            for idt in ("int64", "int32"):
                self_ = torch.zeros(rows, cols, device=DEV)
                idx = torch.randint(0, rows, (nidx,), device=DEV, generator=g, dtype=getattr(torch, idt))
                val = torch.randn(nidx, cols, device=DEV, generator=g)
                torch.cuda.synchronize()
                history(torch, True)
                try:
                    torch.ops.aten._index_put_impl_(self_, [idx], val, True, False)
                    torch.cuda.synchronize()
                    ev = [e for _, evs in events_by_op(torch) for e in evs]
                    res["index_put"].append({"self": [rows, cols], "nidx": nidx, "index": idt, "values": [nidx, cols],
                                             "events": ev})
                except Exception as e:  # noqa: BLE001 - recorded
                    res["index_put"].append({"self": [rows, cols], "nidx": nidx, "error": str(e)[:200]})
                history(torch, False)
    write_json(opts.out, res)
    print("ops: %d nonzero, %d index_put cases -> %s" % (len(res["nonzero"]), len(res["index_put"]), opts.out),
          flush=True)


# ---- embedding ----

def cmd_embedding(opts):
    import torch
    torch.cuda.init()
    res = []

    def run(n, v=16000, d=512, it=torch.int64, dt=torch.float32, pad=-1, sf=False):
        g = torch.randn(n, d, device=DEV, dtype=dt)
        i = torch.randint(0, v, (n,), device=DEV, dtype=it)
        torch.cuda.synchronize()
        history(torch, True)
        torch.ops.aten.embedding_dense_backward(g, i, v, pad, sf)
        torch.cuda.synchronize()
        ops = events_by_op(torch)
        history(torch, False)
        res.append({"n": n, "vocab": v, "dim": d, "indices": str(it)[6:], "dtype": str(dt)[6:], "padding_idx": pad,
                    "scale_grad_by_freq": sf, "events": [e for _, evs in ops for e in evs]})

    for n in (1024, 3072, 3073, 4096, 4608, 4609, 6144, 8192, 9216, 9217, 16384, 20000, 50000, 100000, 300000):
        run(n)
    for n in (3073, 4096, 4864, 4865, 6144, 6528, 6529, 13056, 13057, 16384, 100000):
        run(n, it=torch.int32)
    run(8192, v=1000)
    run(20000, v=1 << 20)
    run(8192, pad=0)
    run(8192, dt=torch.bfloat16)
    run(8192, d=300)
    for n in (1024, 2304, 2305, 8192, 100000):
        run(n, sf=True)
    write_json(opts.out, {"torch": torch.__version__, "gpu": torch.cuda.get_device_name(0), "cases": res})
    print("embedding: %d cases -> %s" % (len(res), opts.out), flush=True)


# ---- the capture against the recordings (no GPU) ----

def capture_events(fn, gpu="H200"):
    """fn(torch) run under oomlab's capture (meta, no GPU) between two markers; its (action, size) events."""
    import torch
    from oomlab_capture.recorder import Capture
    from oomlab_capture import gpus
    marker = 987654321
    with Capture(gpus.lookup(gpu), quiet=True) as cap:
        # the GPU run had made its cuBLAS and cuBLASLt workspaces (one per handle: forward and backward) before
        warm = torch.nn.Linear(8, 8, device="cuda")
        warm(torch.ones(8, 8, device="cuda", requires_grad=True)).sum().backward()
        del warm
        prep = fn(torch)
        a = cap.ext.fake_alloc(marker)
        cap.ext.fake_free(a, marker)
        fn2 = prep
        fn2()
        a = cap.ext.fake_alloc(marker)
        cap.ext.fake_free(a, marker)
    ev = [("a" if e["action"] == "alloc" else "f", e["size"]) for e in cap.events
          if e["action"] in ("alloc", "free_requested")]
    marks = [i for i, e in enumerate(ev) if e == ("a", marker)]
    return ev[marks[0] + 2:marks[1]]


def load(path):
    import lzma
    opener = lzma.open if path.endswith(".xz") else open
    with opener(path, "rt") as f:
        return json.load(f)


def cmd_check_sdpa(opts):
    """Every recorded SDPA case run under the capture: the backend _fused_sdp_choice took (read from the op the
    recording shows) and every allocation and free, in order, must be the recording's."""
    import torch.nn.functional as F
    from oomlab_capture.cuda_model import attention
    attention.RUN_UNDER_MODE = True  # the probes ran under oplabels.OpLabels, a Python dispatch mode
    d = load(opts.input)
    names = {int(k): v for k, v in d["backends"].items()}
    bad, n, verbose = [], 0, {}
    for c in d["cases"]:
        case = c["case"]
        if "ops" not in c or (opts.only and not all(str(case.get(k)) == v for k, v in opts.only)):
            continue
        n += 1
        want = [(a, s) for _, evs in c["ops"] for a, s, _ in evs]
        # the cuBLAS workspaces the GPU run made at its first matmul of each thread (the capture's are made before
        # the case, by its warm-up): kept for the process, never freed
        want = [e for e in want if e != ("a", 33554432) or ("f", e[1]) in want]

        def prep(torch, case=case):
            ts, mask, causal, kw, g = sdpa_inputs(torch, case, "cuda")
            return lambda: sdpa_run(F, case, ts, mask, causal, kw, g)
        try:
            got = capture_events(prep)
            verbose[id(c)] = got
        except Exception as e:  # noqa: BLE001 - reported as a failure
            bad.append((case, names.get(c["choice"]), "capture raised %s: %s" % (type(e).__name__, str(e)[:200])))
            continue
        if got != want:
            i = next((i for i, (x, y) in enumerate(zip(got, want)) if x != y), min(len(got), len(want)))
            bad.append((case, names.get(c["choice"]), "event %d: recorded %s, captured %s (%d vs %d events)" %
                        (i, want[i:i + 3], got[i:i + 3], len(want), len(got))))
    for case, be, why in bad[:opts.show]:
        print("sdpa: %s (%s): %s" % (" ".join("%s=%s" % kv for kv in case.items()), be, why))
        if opts.verbose:
            c = next(c for c in d["cases"] if c["case"] == case)
            print("  recorded:", [(lab.split(" ", 1)[-1][:40], [(a, s) for a, s, _ in evs]) for lab, evs in c["ops"]])
            print("  captured:", verbose.get(id(c)))
    print("sdpa: %d of %d cases the recording's, event for event" % (n - len(bad), n))
    return 1 if bad else 0


def conv_bounds(entries, slope=4.0):
    """Per kind of call (convolution forward and backward, batch norm forward and backward), two hulls of the
    largest workspace W of every call over its tensors' bytes T (input and weight forward, gradient and input
    backward; batch norm: input, and input and gradient): W <= ratio * T and W <= slope * T + offset, the smallest
    ratio and offset (whole MiB) that hold for every call of the table."""
    import math
    import re
    from oomlab_capture.cuda_model.cudnn_conv import _temps
    sizes = {"float32": 4, "float16": 2, "bfloat16": 2, "float64": 8}
    out = {}
    for k, ev in entries.items():
        kind = k.split()[0]
        ts = {n: (dt, [int(x) for x in sh.split(",") if x.strip()])
              for n, dt, sh, _ in re.findall(r"(\w+)=(\w+)\[([\d, ]*)\]/\[([\d, ]*)\]", k)}
        nb = {n: math.prod(sh) * sizes[dt] for n, (dt, sh) in ts.items()}
        t = {"fwd": lambda: nb["x"] + nb["w"], "bwd": lambda: nb["gy"] + nb["x"], "bnf": lambda: nb["x"],
             "bnb": lambda: nb["x"] + nb["gy"]}[kind]()
        flags = _temps(ev)
        w = max([size for (a, size), f in zip(ev, flags) if a == "a" and f] or [0])
        b = out.setdefault(kind, {"ratio": 0.0, "slope": slope, "offset": 0})
        if t:
            b["ratio"] = max(b["ratio"], w / t)
        b["offset"] = max(b["offset"], w - slope * t)
    for b in out.values():
        b["ratio"] = math.ceil(b["ratio"] * 100) / 100
        b["offset"] = int(math.ceil(b["offset"] / (1 << 20))) << 20
    return out


def cmd_table_convs(opts):
    """The capture's table (cuda_model/cudnn_conv.py) from a convs recording: per key its events as
    [action, size] ("a" alloc, "f" free), written as xz JSON. Keys seen twice have the same events (the
    recording lists any that differ under "conflicts"; only the temp flags, which the table does not keep,
    may)."""
    import lzma
    entries, meta = {}, None
    for path in opts.input.split(","):
        d = load(path)
        bad = [c for c in d["conflicts"] if [e[:2] for e in c["events"]] != [e[:2] for e in c["first"]]]
        for k, v in d["entries"].items():
            ev = [e[:2] for e in v["events"]]
            if k in entries and entries[k] != ev:
                bad.append({"key": k})
            entries[k] = ev
        if bad:
            print("table-convs: %d keys recorded with different events, e.g. %s" % (len(bad), bad[0]["key"]))
            return 1
        if meta and (meta["gpu"], meta["torch"], meta["cudnn"]) != (d["gpu"], d["torch"], d["cudnn"]):
            print("table-convs: %s is of another GPU, torch or cuDNN" % path)
            return 1
        meta = d
    table = {"schema": "oomlab.cudnn-conv-table/1", "gpu": meta["gpu"], "torch": meta["torch"],
             "cudnn": meta["cudnn"], "source": "scripts/twins/predict_probes.py convs", "entries": dict(
                 sorted(entries.items()))}
    table["bound"] = conv_bounds(table["entries"])
    tmp = opts.out + ".tmp"
    with lzma.open(tmp, "wt", preset=9) as f:
        json.dump(table, f, separators=(",", ":"))
    os.replace(tmp, opts.out)
    print("table-convs: %d keys -> %s (%d bytes)" % (len(table["entries"]), opts.out, os.path.getsize(opts.out)))
    return 0


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("what", choices=["sdpa", "convs", "convs-child", "convs-script", "convs-script-child", "embedding",
                                     "ops", "check-sdpa", "table-convs"])
    ap.add_argument("--scripts", help="convs-script: training scripts (comma-separated), each run as its user runs it")
    ap.add_argument("--out")
    ap.add_argument("--in", dest="input", help="check-*, table-convs: the recording (predict_probes.py's output, .xz "
                    "too; table-convs: several, comma-separated, merged)")
    ap.add_argument("--only", action="append", default=[], type=lambda s: tuple(s.split("=", 1)),
                    help="check-*: cases with KEY=VALUE only (repeatable)")
    ap.add_argument("--show", type=int, default=20, help="check-*: failures printed (default 20)")
    ap.add_argument("-v", "--verbose", action="store_true", help="check-*: both event lists of each failure")
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--modes", default=",".join(MODES))
    ap.add_argument("--batches", default=",".join(map(str, BATCHES)))
    ap.add_argument("-j", "--jobs", type=int, default=4)
    ap.add_argument("--deadline", type=float, default=0, help="seconds after which no new run starts (0: none)")
    ap.add_argument("--t0", type=float, default=0)
    ap.add_argument("--dry-cpu", action="store_true", help="run on the CPU without history (tests this script)")
    opts = ap.parse_args(argv)
    if opts.dry_cpu:
        global DEV
        DEV = "cpu"
        import torch
        torch.cuda.init = lambda: None
        torch.cuda.get_device_name = lambda i=0: "cpu"
        torch.cuda.synchronize = lambda: None
        torch.cuda.empty_cache = lambda: None
        torch.cuda.memory._set_memory_metadata = _DRY.append
    if opts.what in ("check-sdpa", "table-convs"):
        return {"check-sdpa": cmd_check_sdpa, "table-convs": cmd_table_convs}[opts.what](opts)
    try:
        rc = {"sdpa": cmd_sdpa, "convs": cmd_convs, "convs-child": cmd_convs_child, "convs-script": cmd_convs_script,
              "convs-script-child": cmd_convs_script_child, "embedding": cmd_embedding,
              "ops": cmd_ops}[opts.what](opts)
        if rc:
            return rc
    except Exception:  # noqa: BLE001 - the log says what failed
        traceback.print_exc()
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
