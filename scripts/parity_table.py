#!/usr/bin/env python3
"""Set oomlab's memory beside PyTorch's: the tables of docs/parity.md.

    scripts/parity_table.py TORCH.json OOMLAB.jsonl [--nows TORCH_NO_WORKSPACE.json] [--frag TORCH_FRAG.json OOMLAB_RUN.json]

TORCH.json        scripts/twins/mlp_parity.py --json (PyTorch on a GPU)
OOMLAB.jsonl      `oomlab parity` output (one JSON object per line)
--nows            the twin again with CUBLAS_WORKSPACE_CONFIG=:0:0 CUBLASLT_WORKSPACE_SIZE=0 (cuBLAS's workspaces off)
--frag            scripts/twins/fragmentation.py --json, and the results JSON of `oomlab run fragmentation`
Standard library only. Prints Markdown.
"""
import json
import sys

MiB = 1 << 20


def load_lines(path):
    with open(path) as f:
        return {o["workload"]: o for o in (json.loads(l) for l in f if l.strip())}


def by_workload(path):
    with open(path) as f:
        return {o["workload"]: o for o in json.load(f)}


def pct(a, b):
    return f"{100.0 * (a - b) / b:+.3f}%" if b else "n/a"


def main(argv):
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    torch, ours = by_workload(argv[0]), load_lines(argv[1])
    nows = frag = frag_run = None
    i = 2
    while i < len(argv):
        if argv[i] == "--nows":
            nows = by_workload(argv[i + 1]); i += 2
        elif argv[i] == "--frag":
            with open(argv[i + 1]) as f:
                frag = json.load(f)
            with open(argv[i + 2]) as f:
                frag_run = json.load(f)
            i += 3
        else:
            print(f"parity_table: unknown argument {argv[i]}", file=sys.stderr)
            return 2
    ws = torch["workspace"]
    mm_ws, lt_ws = ws["mm_workspace_bytes"], ws["addmm_extra_bytes"]
    dev = torch["eval_leak"]["device"]
    first = next(iter(ours.values()))
    print(f"PyTorch {torch['eval_leak']['torch']} on {dev}; oomlab on {first['backend']} ({first['device']}"
          f"{', dry run' if first.get('dry_run') else ''}).\n")
    print(f"PyTorch's cuBLAS workspaces, measured: {mm_ws} bytes per cuBLAS handle (one for the forward's thread, one "
          f"more for the autograd engine's thread once backward has run) and {lt_ws} bytes for cuBLASLt (addmm with "
          f"a bias).\n")
    print("| workload | figure | PyTorch | oomlab | difference | explained by |")
    print("|---|---|---:|---:|---:|---|")
    for w in ["eval_leak", "eval_item", "eval_nograd", "rnn_chain"]:
        if w not in ours or w not in torch:
            continue
        t, o = torch[w], ours[w]
        print(f"| {w} | bytes added per step | {t['bytes_per_step'][-1]} | {o['bytes_per_step'][-1]} | "
              f"{pct(o['bytes_per_step'][-1], t['bytes_per_step'][-1]) if t['bytes_per_step'][-1] else o['bytes_per_step'][-1] - t['bytes_per_step'][-1]} | |")
        handles = 2 if w == "rnn_chain" else 1
        d = t["allocated_per_step"][-1] - o["allocated_per_step"][-1]
        print(f"| {w} | allocated after the last step | {t['allocated_per_step'][-1]} | {o['allocated_per_step'][-1]} | "
              f"{-d} ({pct(o['allocated_per_step'][-1], t['allocated_per_step'][-1])}) | "
              f"cuBLAS workspaces {handles} x {mm_ws} + {lt_ws} = {handles * mm_ws + lt_ws} |")
    for w in ["train_sgd", "train_adam"]:
        if w not in ours or w not in torch:
            continue
        t, o = torch[w], ours[w]
        d = t["steady_allocated"] - o["steady_allocated"]
        print(f"| {w} | allocated after a step (steady) | {t['steady_allocated']} | {o['steady_allocated']} | "
              f"{-d} ({pct(o['steady_allocated'], t['steady_allocated'])}) | cuBLAS workspaces 2 x {mm_ws} + {lt_ws} = "
              f"{2 * mm_ws + lt_ws} |")
        if nows and w in nows:
            n = nows[w]["steady_allocated"]
            print(f"| {w} | the same, cuBLAS workspaces off | {n} | {o['steady_allocated']} | "
                  f"{o['steady_allocated'] - n} ({pct(o['steady_allocated'], n)}) | |")
        tp, op = t["peak_per_step"][-1], o["peak_per_step"][-1]
        why = f"cuBLAS workspaces {2 * mm_ws + lt_ws}"
        if w == "train_adam":
            why += " + foreach Adam's sqrt(exp_avg_sq) temporaries inside step() (oomlab's update is fused)"
        print(f"| {w} | peak allocated (max_memory_allocated) | {tp} | {op} | {op - tp} ({pct(op, tp)}) | {why} |")
    if frag:
        print("\n| variant | PyTorch outcome | oomlab outcome | PyTorch reserved - allocated before the request | "
              "oomlab | retries (PyTorch / oomlab) |")
        print("|---|---|---|---:|---:|---|")
        runs = {v["name"]: v for v in frag_run["variants"]}
        for t in frag:
            v = runs[t["variant"]]
            samples = {s["label"]: s for s in v["samples"]}
            freed = samples.get("short-lived tensors freed", {})
            unalloc = freed.get("reserved", 0) - freed.get("allocated", 0)
            print(f"| {t['variant']} | {t['outcome']} | {v['outcome']} | {t['reserved_unallocated_before_request']} | "
                  f"{unalloc} | {t['stats']['num_alloc_retries']} / {v['memory_stats']['num_alloc_retries']} |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
