#!/usr/bin/env python3
"""Set oomlab's memory beside PyTorch's: the tables of docs/parity.md.

    scripts/parity_table.py TORCH.json OOMLAB.jsonl [--nows TORCH_NO_WORKSPACE.json]
                            [--frag TORCH_FRAG.json OOMLAB_RUN.json [OOMLAB_RUN.json ...]]

TORCH.json        scripts/twins/mlp_parity.py --json (PyTorch on a GPU)
OOMLAB.jsonl      `oomlab parity` output (one JSON object per line)
--nows            the twin again with CUBLAS_WORKSPACE_CONFIG=:0:0 CUBLASLT_WORKSPACE_SIZE=0 (cuBLAS's workspaces off)
--frag            scripts/twins/fragmentation.py --json, then results files of `oomlab run fragmentation`
                  (one per backend)
Standard library only. Prints Markdown.
"""
import json
import sys


def load_lines(path):
    with open(path) as f:
        return {o["workload"]: o for o in (json.loads(l) for l in f if l.strip())}


def by_workload(path):
    with open(path) as f:
        return {o["workload"]: o for o in json.load(f)}


def pct(a, b):
    return f"{100.0 * (a - b) / b:+.3f}%" if b else ("0" if a == b else "n/a")


def mlp_table(torch, ours, nows):
    ws = torch["workspace"]
    mm_ws, lt_ws = ws["mm_workspace_bytes"], ws["addmm_extra_bytes"]
    first = next(iter(ours.values()))
    print(f"PyTorch {torch['eval_leak']['torch']} on {torch['eval_leak']['device']}; oomlab on "
          f"{first['backend']} ({first['device']}{', dry run' if first.get('dry_run') else ''}).")
    print(f"PyTorch's cuBLAS workspaces, measured by the twin: {mm_ws} bytes per cuBLAS handle and {lt_ws} bytes "
          f"for cuBLASLt. W1 = {mm_ws + lt_ws} (the forward's handle), W2 = {2 * mm_ws + lt_ws} (plus the autograd "
          f"engine's handle, once backward has run).\n")
    print("| workload | figure | PyTorch | PyTorch less workspaces | oomlab | difference |")
    print("|---|---|---:|---:|---:|---:|")
    rows = []
    for w, handles in [("eval_leak", 1), ("eval_item", 1), ("eval_nograd", 1), ("rnn_chain", 2)]:
        if w in torch and w in ours:
            t, o = torch[w], ours[w]
            rows.append((w, "bytes added per step", t["bytes_per_step"][-1], t["bytes_per_step"][-1],
                         o["bytes_per_step"][-1]))
            ws_b = handles * mm_ws + lt_ws
            rows.append((w, "allocated after the last step", t["allocated_per_step"][-1],
                         t["allocated_per_step"][-1] - ws_b, o["allocated_per_step"][-1]))
    for w in ["train_sgd", "train_adam"]:
        if w in torch and w in ours:
            t, o = torch[w], ours[w]
            ws_b = 2 * mm_ws + lt_ws
            rows.append((w, "allocated after a step (steady state)", t["steady_allocated"],
                         t["steady_allocated"] - ws_b, o["steady_allocated"]))
            rows.append((w, "peak allocated (max_memory_allocated)", t["peak_per_step"][-1],
                         t["peak_per_step"][-1] - ws_b, o["peak_per_step"][-1]))
    for w, fig, t, tw, o in rows:
        print(f"| {w} | {fig} | {t:,} | {tw:,} | {o:,} | {o - tw:+,} ({pct(o, tw)}) |")
    if nows:
        print("\nThe twin again with cuBLAS's workspaces off (CUBLAS_WORKSPACE_CONFIG=:0:0 CUBLASLT_WORKSPACE_SIZE=0):\n")
        print("| workload | figure | PyTorch, no workspaces | oomlab | difference |")
        print("|---|---|---:|---:|---:|")
        for w in ["train_sgd", "train_adam"]:
            if w in nows and w in ours:
                t, o = nows[w], ours[w]
                figs = [("allocated after a step", t["steady_allocated"], o["steady_allocated"]),
                        ("peak allocated", t["peak_per_step"][-1], o["peak_per_step"][-1])]
                figs += [(k, t["stats"][k], o["stats"][k]) for k in
                         ["reserved_bytes.all.peak", "reserved_bytes.all.current", "num_device_alloc",
                          "segment.all.current"]]
                for fig, a, b in figs:
                    print(f"| {w} | {fig} | {a:,} | {b:,} | {b - a:+,} |")


def frag_table(frag, runs):
    print("| variant | PyTorch | " + " | ".join(f"oomlab {r['backend']}" for r in runs) +
          " | reserved − allocated before the request (PyTorch / oomlab) | retries (PyTorch / oomlab) |")
    print("|---|---|" + "---|" * len(runs) + "---:|---|")
    for t in frag["variants"]:  # twinlib's recording: samples under the scenario's labels
        outs, unalloc, retries = [], None, None
        for r in runs:
            v = {x["name"]: x for x in r["variants"]}[t["variant"]]
            outs.append(v["outcome"] + (" ✓" if v["passed"] else " ✗"))
            s = {x["label"]: x for x in v["samples"]}["short-lived tensors freed"]
            unalloc = s["reserved"] - s["allocated"]
            retries = v["memory_stats"]["num_alloc_retries"]
        ts = {x["label"]: x for x in t["samples"]}["short-lived tensors freed"]
        tunalloc = ts["reserved_bytes.all.current"] - ts["allocated_bytes.all.current"]
        print(f"| {t['variant']} | {t['outcome']} | " + " | ".join(outs) +
              f" | {tunalloc:,} / {unalloc:,} | {t['samples'][-1]['num_alloc_retries']} / {retries} |")


def main(argv):
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    torch, ours = by_workload(argv[0]), load_lines(argv[1])
    nows, frag, runs = None, None, []
    i = 2
    while i < len(argv):
        if argv[i] == "--nows":
            nows = by_workload(argv[i + 1])
            i += 2
        elif argv[i] == "--frag":
            with open(argv[i + 1]) as f:
                frag = json.load(f)
            i += 2
            while i < len(argv) and not argv[i].startswith("--"):
                with open(argv[i]) as f:
                    runs.append(json.load(f))
                i += 1
        else:
            print(f"parity_table: unknown argument {argv[i]}", file=sys.stderr)
            return 2
    mlp_table(torch, ours, nows)
    if frag and runs:
        print()
        frag_table(frag, runs)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
