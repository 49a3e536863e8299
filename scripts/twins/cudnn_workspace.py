"""cuDNN convolution workspaces of PyTorch 2.11's heuristics path, asked of cuDNN with or without a GPU.

Follows aten/src/ATen/native/cudnn/Conv_v8.cpp (PyTorch 2.11, cudnn_frontend v0 API, benchmark=False):
build_opgraph (one convolution op; x, y, w tensor descriptors with uids 'x', 'y', 'w', the tensors' sizes and
strides, byte alignment of the data pointers; the convolution descriptor's compute type is float for float, half
and bfloat16), get_configs_from_heuristics (CUDNN_HEUR_MODE_INSTANT, every config, filterEngineConfigs dropping
DOWN_CONVERT_INPUTS, TENSOR_CORE too for float32 when allow_tf32 is off, NONDETERMINISTIC when deterministic),
try_configs (the first config whose plan finalizes; then the fallback list the same way) and run_conv_plan (a
workspace of the plan's getWorkspaceSize() from the caching allocator, freed when the call returns).

Two ways to ask cuDNN (the ctypes backend API of the libcudnn that torch loads, or --lib):
  deviceless: a device-property descriptor deserialized from JSON (cuDNN >= 9.8, CUDNN_ATTR_DEVICEPROP_JSON_...),
              set on the heuristics and the plan; no GPU, no libcuda.
  device:     a cuDNN handle on a real GPU, as PyTorch does.

On a GPU machine (the lead's run; writes under OUT):
  python3 scripts/twins/cudnn_workspace.py gpu --out "$OUT/cudnn"
writes devprop_<name>.json (the serialized device properties of every visible GPU: commit these), the cuDNN
version torch loaded, and resnet18_<name>.json: each convolution of tests/data/predict/scripts/resnet18.py
(batch 32, 224x224, float32) with the workspace cuDNN picks through the handle, through the deserialized
device properties, and the one PyTorch itself allocates (each call run alone under _record_memory_history), and under "configs" every configuration either way lists (the handle's also with
its plan finalized deviceless: whether the lists or the plans' sizes differ).

Here (no GPU): python3 scripts/twins/cudnn_workspace.py convs --devprop FILE.json [--lib DIR] [--sm-target N]
"""
import argparse
import ctypes
import json
import os
import sys

# cudnn_graph.h (cuDNN 9.19) enum values.
T_TENSOR, T_CONV, T_ENGINE, T_ENGINECFG, T_HEUR, T_PLAN = 17, 1, 2, 3, 4, 5
T_OP = {"fwd": 10, "bwd_filter": 11, "bwd_data": 12}
T_GRAPH, T_DEVPROP = 15, 38
A_CONV = dict(comp=100, mode=101, dil=102, stride=103, post=104, pre=105, dims=106)
A_HEUR = dict(mode=200, graph=201, results=202, sm_target=203, devprop=204)
A_CFG_ENGINE = 300
A_PLAN = dict(handle=400, cfg=401, ws=402, devprop=407)
A_GRAPH = dict(handle=800, ops=801)
A_TENSOR = dict(align=900, dtype=901, dims=902, strides=903, uid=906)
A_ENGINE = dict(index=1301, notes=1303)
A_DEVPROP = dict(device_id=2700, handle=2701, json=2702)
# per op: (alpha, beta, conv desc, w, x, y) attribute names; x/y are dx/dy, w is dw for backward filter
A_OP = {"fwd": (700, 701, 702, 703, 704, 705), "bwd_data": (706, 707, 708, 709, 710, 711),
        "bwd_filter": (712, 713, 714, 715, 716, 717)}
TY = dict(handle=0, dtype=1, int64=3, float=4, convmode=7, heurmode=8, desc=15, note=11, int32=23, char=24)
DATA_FLOAT, DATA_HALF, DATA_BF16 = 0, 2, 9
CROSS_CORRELATION = 1
HEUR_INSTANT, HEUR_FALLBACK = 0, 2
NOTE_TENSOR_CORE, NOTE_DOWN_CONVERT, NOTE_NONDETERMINISTIC = 0, 1, 4


class Cudnn:
    def __init__(self, libdir=None):
        name = "libcudnn.so.9"
        if libdir is None:
            try:
                import nvidia.cudnn  # noqa: F401  the wheel torch depends on
                libdir = os.path.join(list(nvidia.cudnn.__path__)[0], "lib")
            except ImportError:
                libdir = None
        self.lib = ctypes.CDLL(os.path.join(libdir, name) if libdir else name, mode=ctypes.RTLD_GLOBAL)
        self.lib.cudnnGetErrorString.restype = ctypes.c_char_p
        self.lib.cudnnGetVersion.restype = ctypes.c_size_t
        self.version = int(self.lib.cudnnGetVersion())
        self.sm_target = 0

    def check(self, status, what):
        if status:
            msg = ctypes.create_string_buffer(1024)
            self.lib.cudnnGetLastErrorString(msg, ctypes.c_size_t(1024))
            raise RuntimeError(f"{what}: {self.lib.cudnnGetErrorString(status).decode()} ({msg.value.decode()})")

    def create(self, dtype):
        d = ctypes.c_void_p()
        self.check(self.lib.cudnnBackendCreateDescriptor(dtype, ctypes.byref(d)), f"create {dtype}")
        return d

    def set(self, d, attr, ty, values, ctype):
        arr = (ctype * len(values))(*values)
        self.check(self.lib.cudnnBackendSetAttribute(d, attr, TY[ty], ctypes.c_int64(len(values)), arr),
                   f"set {attr}")

    def set_desc(self, d, attr, descs):
        arr = (ctypes.c_void_p * len(descs))(*[x.value for x in descs])
        self.check(self.lib.cudnnBackendSetAttribute(d, attr, TY["desc"], ctypes.c_int64(len(descs)), arr),
                   f"set {attr}")

    def finalize(self, d, what):
        self.check(self.lib.cudnnBackendFinalize(d), f"finalize {what}")

    def get_int64(self, d, attr):
        v, n = ctypes.c_int64(), ctypes.c_int64()
        self.check(self.lib.cudnnBackendGetAttribute(d, attr, TY["int64"], ctypes.c_int64(1), ctypes.byref(n),
                                                     ctypes.byref(v)), f"get {attr}")
        return v.value

    def devprop_from_json(self, text):
        d = self.create(T_DEVPROP)
        raw = text.encode()
        self.check(self.lib.cudnnBackendSetAttribute(d, A_DEVPROP["json"], TY["char"], ctypes.c_int64(len(raw)),
                                                     ctypes.c_char_p(raw)), "set devprop json")
        self.finalize(d, "devprop")
        return d

    def devprop_json(self, d):
        buf, n = ctypes.create_string_buffer(1 << 16), ctypes.c_int64()
        self.check(self.lib.cudnnBackendGetAttribute(d, A_DEVPROP["json"], TY["char"], ctypes.c_int64(1 << 16),
                                                     ctypes.byref(n), buf), "get devprop json")
        return buf.raw[:n.value].decode().rstrip("\0")

    def devprop_of_device(self, index):
        d = self.create(T_DEVPROP)
        self.set(d, A_DEVPROP["device_id"], "int32", [index], ctypes.c_int32)
        self.finalize(d, "devprop of device")
        return d

    def handle(self):
        h = ctypes.c_void_p()
        self.check(self.lib.cudnnCreate(ctypes.byref(h)), "cudnnCreate")
        return h

    def tensor(self, uid, sizes, strides, align, dtype):
        t = self.create(T_TENSOR)
        self.set(t, A_TENSOR["dtype"], "dtype", [dtype], ctypes.c_int)
        self.set(t, A_TENSOR["dims"], "int64", sizes, ctypes.c_int64)
        self.set(t, A_TENSOR["strides"], "int64", strides, ctypes.c_int64)
        self.set(t, A_TENSOR["uid"], "int64", [uid], ctypes.c_int64)
        self.set(t, A_TENSOR["align"], "int64", [align], ctypes.c_int64)
        self.finalize(t, "tensor")
        return t

    def workspace(self, conv, devprop=None, handle=None, allow_tf32=True, deterministic=False):
        """The workspace PyTorch's heuristics path allocates for conv (a dict, see resnet18_convs), and the plan's
        engine; None when no config finalizes."""
        for cfg, notes, mode in self.candidates(conv, devprop, handle):
            if NOTE_DOWN_CONVERT in notes or (deterministic and NOTE_NONDETERMINISTIC in notes):
                continue
            if conv["dtype"] == DATA_FLOAT and not allow_tf32 and NOTE_TENSOR_CORE in notes:
                continue
            ws = self.plan_workspace(cfg, devprop, handle)
            if ws is not None:
                return ws, self.engine_index(cfg)
        return None

    def listing(self, conv, devprop=None, handle=None, also_devprop=None):
        """Every config the heuristics return, in order: [mode, engine, numerical notes, plan workspace or None
        where the plan does not finalize]; with also_devprop, the same config's plan finalized deviceless too."""
        rows = []
        for cfg, notes, mode in self.candidates(conv, devprop, handle):
            row = [mode, self.engine_index(cfg), sorted(notes), self.plan_workspace(cfg, devprop, handle)]
            if also_devprop is not None:
                row.append(self.plan_workspace(cfg, also_devprop, None))
            rows.append(row)
        return rows

    def plan_workspace(self, cfg, devprop, handle):
        plan = self.create(T_PLAN)
        self.set_desc(plan, A_PLAN["cfg"], [cfg])
        if devprop is not None:
            self.set_desc(plan, A_PLAN["devprop"], [devprop])
        else:
            self.set(plan, A_PLAN["handle"], "handle", [handle.value], ctypes.c_void_p)
        if self.lib.cudnnBackendFinalize(plan):
            return None
        return self.get_int64(plan, A_PLAN["ws"])

    def candidates(self, conv, devprop, handle):
        """(config, numerical notes, heuristic mode) of the INSTANT list, then of the FALLBACK list."""
        dtype = conv["dtype"]
        x = self.tensor(ord("x"), conv["x"], contiguous(conv["x"]), conv["align"], dtype)
        y = self.tensor(ord("y"), conv["y"], contiguous(conv["y"]), conv["align"], dtype)
        w = self.tensor(ord("w"), conv["w"], contiguous(conv["w"]), conv["align"], dtype)
        cd = self.create(T_CONV)
        nd = len(conv["stride"])
        comp = DATA_FLOAT if dtype in (DATA_HALF, DATA_BF16) else dtype  # getConvDescriptor
        self.set(cd, A_CONV["comp"], "dtype", [comp], ctypes.c_int)
        self.set(cd, A_CONV["mode"], "convmode", [CROSS_CORRELATION], ctypes.c_int)
        self.set(cd, A_CONV["dims"], "int64", [nd], ctypes.c_int64)
        self.set(cd, A_CONV["dil"], "int64", conv["dilation"], ctypes.c_int64)
        self.set(cd, A_CONV["stride"], "int64", conv["stride"], ctypes.c_int64)
        self.set(cd, A_CONV["pre"], "int64", conv["padding"], ctypes.c_int64)
        self.set(cd, A_CONV["post"], "int64", conv["padding"], ctypes.c_int64)
        self.finalize(cd, "conv desc")
        a_alpha, a_beta, a_cd, a_w, a_x, a_y = A_OP[conv["op"]]
        op = self.create(T_OP[conv["op"]])
        self.set_desc(op, a_x, [x])
        self.set_desc(op, a_y, [y])
        self.set_desc(op, a_w, [w])
        self.set_desc(op, a_cd, [cd])
        self.set(op, a_alpha, "float", [1.0], ctypes.c_float)
        self.set(op, a_beta, "float", [0.0], ctypes.c_float)
        self.finalize(op, "op")
        graph = self.create(T_GRAPH)
        self.set_desc(graph, A_GRAPH["ops"], [op])
        if handle is not None:
            self.set(graph, A_GRAPH["handle"], "handle", [handle.value], ctypes.c_void_p)
        self.finalize(graph, "op graph")
        for mode in (HEUR_INSTANT, HEUR_FALLBACK):
            for cfg in self.configs(graph, mode, devprop):
                yield cfg, self.notes(cfg), mode

    def configs(self, graph, mode, devprop):
        h = self.create(T_HEUR)
        self.set_desc(h, A_HEUR["graph"], [graph])
        self.set(h, A_HEUR["mode"], "heurmode", [mode], ctypes.c_int)
        if self.sm_target:  # CUDNN_ATTR_ENGINEHEUR_SM_COUNT_TARGET (convs --sm-target): PyTorch does not set it
            self.set(h, A_HEUR["sm_target"], "int32", [self.sm_target], ctypes.c_int32)
        if devprop is not None:
            self.set_desc(h, A_HEUR["devprop"], [devprop])
        if self.lib.cudnnBackendFinalize(h):
            return []
        n = ctypes.c_int64()
        self.check(self.lib.cudnnBackendGetAttribute(h, A_HEUR["results"], TY["desc"], ctypes.c_int64(0),
                                                     ctypes.byref(n), None), "heuristics count")
        cfgs = [self.create(T_ENGINECFG) for _ in range(n.value)]
        arr = (ctypes.c_void_p * max(1, n.value))(*[c.value for c in cfgs])
        got = ctypes.c_int64()
        self.check(self.lib.cudnnBackendGetAttribute(h, A_HEUR["results"], TY["desc"], n, ctypes.byref(got), arr),
                   "heuristics results")
        return cfgs[:got.value]

    def engine_of(self, cfg):
        e = self.create(T_ENGINE)
        n = ctypes.c_int64()
        arr = (ctypes.c_void_p * 1)(e.value)
        self.check(self.lib.cudnnBackendGetAttribute(cfg, A_CFG_ENGINE, TY["desc"], ctypes.c_int64(1),
                                                     ctypes.byref(n), arr), "config's engine")
        return e

    def notes(self, cfg):
        e = self.engine_of(cfg)
        arr, n = (ctypes.c_int * 16)(), ctypes.c_int64()
        self.check(self.lib.cudnnBackendGetAttribute(e, A_ENGINE["notes"], TY["note"], ctypes.c_int64(16),
                                                     ctypes.byref(n), arr), "engine notes")
        return set(arr[:n.value])

    def engine_index(self, cfg):
        return self.get_int64(self.engine_of(cfg), A_ENGINE["index"])


def contiguous(sizes):
    strides, acc = [], 1
    for s in reversed(sizes):
        strides.append(acc)
        acc *= s
    return list(reversed(strides))


def resnet18_convs(batch=32, image=224):
    """tests/data/predict/scripts/resnet18.py's convolutions, (name, C, H, K, kernel, padding, stride), in forward
    order (BasicBlock: conv1, conv2, downsample)."""
    convs, h, cin = [("conv1", 3, image, 64, 7, 3, 2)], image // 4, 64
    for planes, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
        for b in range(2):
            s = stride if b == 0 else 1
            ho = (h + 2 - 3) // s + 1
            convs.append((f"layer{planes}.{b}.conv1", cin, h, planes, 3, 1, s))
            convs.append((f"layer{planes}.{b}.conv2", planes, ho, planes, 3, 1, 1))
            if s != 1 or cin != planes:
                convs.append((f"layer{planes}.{b}.downsample", cin, h, planes, 1, 0, s))
            cin, h = planes, ho
    calls = []
    for name, c, h, k, r, p, s in convs:
        ho = (h + 2 * p - r) // s + 1
        calls.append(dict(name=name, x=[batch, c, h, h], w=[k, c, r, r], y=[batch, k, ho, ho]))
    # backward in autograd's order, the reverse of forward (the H100 recording shows a block's downsample before
    # its conv2): grad_input (bwd_data, not for the first conv, whose input needs no grad), then
    # grad_weight (bwd_filter): aten/src/ATen/native/cudnn/ConvShared.cpp cudnn_convolution_backward
    order = []
    for i, call in enumerate(calls):
        order.append(dict(call, op="fwd", stride=[convs[i][6]] * 2, padding=[convs[i][5]] * 2))
    back = range(len(calls) - 1, -1, -1)  # forward is conv1, conv2, downsample: reversed, the downsample first
    for j in back:
        for op in ("bwd_data", "bwd_filter"):
            if op == "bwd_data" and j == 0:
                continue
            order.append(dict(calls[j], op=op, stride=[convs[j][6]] * 2, padding=[convs[j][5]] * 2))
    for o in order:
        o.update(dtype=DATA_FLOAT, dilation=[1, 1], align=16)
    return order


def run_convs(cudnn, devprop=None, handle=None):
    out, cache = [], {}
    for conv in resnet18_convs():
        key = (conv["op"], tuple(conv["x"]), tuple(conv["w"]), tuple(conv["stride"]), tuple(conv["padding"]))
        if key not in cache:
            cache[key] = cudnn.workspace(conv, devprop=devprop, handle=handle)
        ws = cache[key]
        out.append(dict(name=conv["name"], op=conv["op"], x=conv["x"], w=conv["w"],
                        workspace=ws[0] if ws else None, engine=ws[1] if ws else None))
    return out


def cmd_convs(args):
    cudnn = Cudnn(args.lib)
    cudnn.sm_target = args.sm_target
    with open(args.devprop) as f:
        dp = cudnn.devprop_from_json(f.read())
    json.dump(dict(cudnn_version=cudnn.version, devprop=args.devprop, convs=run_convs(cudnn, devprop=dp)),
              sys.stdout, indent=1)
    print()


def torch_workspaces(torch, device):
    """What PyTorch itself allocates for each distinct call (benchmark off, its defaults): the call run alone under
    _record_memory_history; the allocations after the first (the output) are the workspace, 0 when none."""
    out = {}
    aten = torch.ops.aten
    for conv in resnet18_convs():
        key = f'{conv["op"]} x={conv["x"]} w={conv["w"]} stride={conv["stride"]}'
        if key in out:
            continue
        ho = conv["y"]
        x = torch.randn(conv["x"], device=device)
        w = torch.randn(conv["w"], device=device)
        gy = torch.randn(ho, device=device)
        args = (conv["stride"], conv["padding"], conv["dilation"], False, [0, 0], 1)
        torch.cuda.synchronize()
        torch.cuda.memory._record_memory_history(max_entries=1000)
        if conv["op"] == "fwd":
            aten.convolution(x, w, None, *args)
        else:
            mask = [conv["op"] == "bwd_data", conv["op"] == "bwd_filter", False]
            aten.convolution_backward(gy, x, w, None, *args, mask)
        torch.cuda.synchronize()
        trace = torch.cuda.memory._snapshot()["device_traces"][torch.cuda.current_device()]
        torch.cuda.memory._record_memory_history(enabled=None)
        allocs = [e["size"] for e in trace if e["action"] == "alloc"]
        out[key] = sum(allocs[1:]) if len(allocs) > 1 else 0
        if len(allocs) > 2:
            out[key] = allocs[1:]  # more than one: said as they are
    return out


def cmd_gpu(args):
    import torch
    os.makedirs(args.out, exist_ok=True)
    torch.cuda.init()
    cudnn = Cudnn(args.lib)
    info = dict(torch=torch.__version__, torch_cudnn=torch.backends.cudnn.version(), cudnn_version=cudnn.version,
                devices=[])
    for i in range(torch.cuda.device_count()):
        torch.cuda.set_device(i)
        torch.zeros(1, device=f"cuda:{i}")  # the device's primary context, as PyTorch has it
        name = torch.cuda.get_device_name(i).replace(" ", "_")
        dp = cudnn.devprop_of_device(i)
        text = cudnn.devprop_json(dp)
        with open(os.path.join(args.out, f"devprop_{name}.json"), "w") as f:
            f.write(text + "\n")
        handle = cudnn.handle()
        with_handle = run_convs(cudnn, handle=handle)
        deviceless = run_convs(cudnn, devprop=cudnn.devprop_from_json(text))
        measured = torch_workspaces(torch, f"cuda:{i}")
        rows = [dict(a, workspace_deviceless=b["workspace"], engine_deviceless=b["engine"],
                     workspace_torch=measured[f'{a["op"]} x={a["x"]} w={a["w"]} stride={c["stride"]}'])
                for a, b, c in zip(with_handle, deviceless, resnet18_convs())]
        detail, dp2 = {}, cudnn.devprop_from_json(text)
        for conv in resnet18_convs():  # every heuristic config of each distinct call, both ways
            key = f'{conv["op"]} x={conv["x"]} w={conv["w"]} stride={conv["stride"]}'
            if key not in detail:
                detail[key] = dict(handle=cudnn.listing(conv, handle=handle, also_devprop=dp2),
                                   deviceless=cudnn.listing(conv, devprop=dp2))
        same = sum(r["workspace"] == r["workspace_deviceless"] for r in rows)
        same_torch = sum((r["workspace"] or 0) == r["workspace_torch"] for r in rows)
        same_dl_torch = sum((r["workspace_deviceless"] or 0) == r["workspace_torch"] for r in rows)
        with open(os.path.join(args.out, f"resnet18_{name}.json"), "w") as f:
            json.dump(dict(info, device=name, devprop=json.loads(text), convs=rows, configs=detail), f, indent=1)
        info["devices"].append(dict(name=name, calls=len(rows), deviceless_equal_handle=same,
                                    handle_equal_torch=same_torch, deviceless_equal_torch=same_dl_torch))
        print(f"{name}: of {len(rows)} convolution calls, the workspace through the handle is PyTorch's own for "
              f"{same_torch}, the deviceless one for {same_dl_torch}; deviceless equals handle for {same}")
    with open(os.path.join(args.out, "summary.json"), "w") as f:
        json.dump(info, f, indent=1)
    print(json.dumps(info))


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("convs", help="resnet18's workspaces from a serialized device-property JSON (no GPU)")
    c.add_argument("--devprop", required=True)
    c.add_argument("--lib", help="folder of libcudnn.so.9 (default: the nvidia-cudnn wheel's)")
    c.add_argument("--sm-target", type=int, default=0,
                   help="an experiment: the heuristics' SM count target (PyTorch sets none)")
    g = sub.add_parser("gpu", help="on a GPU: serialize each device's properties, compare handle and deviceless")
    g.add_argument("--out", required=True)
    g.add_argument("--lib")
    args = p.parse_args()
    {"convs": cmd_convs, "gpu": cmd_gpu}[args.cmd](args)


if __name__ == "__main__":
    main()
