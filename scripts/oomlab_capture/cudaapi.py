"""torch.cuda.* as the program sees it under the capture: a GPU of the chosen kind, no CUDA context.

Queries answer from the GPU table (gpus.py) and from the capture's own counters: memory_allocated and
max_memory_allocated are the bytes the recorded trace holds (the caching allocator's allocated_bytes count
rounded blocks: the replay gives those); memory_reserved answers the same figure (reserved needs the
allocator model, which runs after the capture). set_per_process_memory_fraction is recorded as the trace's
"budget" (bytes, as scripts/snapshot2json.py --budget writes it) for the replay to apply, empty_cache as an
"empty_cache" entry the replay carries out. synchronize, manual_seed and friends do nothing on meta.
Tensor.pin_memory returns the tensor (host bytes are not device bytes) and counts its bytes as pinned host memory
(the trace's "pinned"); torch.accelerator answers as torch.cuda does, so a DataLoader's pin thread never touches
CUDA.
Streams and events (torch.cuda.Stream, Event, stream(), current_stream(), set_stream) are the capture's own: a
stream is a number in the trace (0 the default, 1 cudagraphs.py's, then FIRST_STREAM on in the order the program
makes them), and what is allocated while one is current is allocated on it (Capture.set_context), so the replay
keeps each stream's blocks apart as PyTorch's allocator does (cachealloc.h, cachealloc_set_stream). Waits, records
and synchronizations order nothing on meta: they do nothing.
UntypedStorage.resize_ of a device storage allocates and frees as CUDA's does (meta_alloc.cpp resize_storage): on
meta it would only change the byte count.
"""
import contextlib
import types

import torch

from . import gpus


def _props(gpu):
    major, minor = gpus.capability(gpu)
    return types.SimpleNamespace(name="NVIDIA " + gpu["name"], total_memory=gpu["total_memory"],
                                 multi_processor_count=gpu["sm_count"], major=major, minor=minor,
                                 max_threads_per_multi_processor=gpu["max_threads_per_sm"], warp_size=32,
                                 regs_per_multiprocessor=65536, max_threads_per_block=1024,
                                 is_integrated=False, is_multi_gpu_board=False)


FIRST_STREAM = 2  # the program's own streams: 0 is the default stream, 1 the cudagraph trees' (cudagraphs.py)


def _stream_classes(cap):
    """torch.cuda.Stream and torch.cuda.Event without a driver (the module doc); the current stream is the
    capture's context (its stream number), the default stream an object of number 0."""
    made = [FIRST_STREAM]

    class Stream:
        def __new__(cls, device=None, priority=0, stream_id=None, **kwargs):
            self = object.__new__(cls)
            if stream_id is None:
                stream_id = made[0]
                made[0] += 1
            self.stream_id, self.priority = stream_id, priority
            self.device, self.device_index, self.device_type = torch.device("cuda", 0), 0, 1
            return self

        def __init__(self, *args, **kwargs):
            pass

        def wait_event(self, event):
            pass

        def wait_stream(self, stream):
            pass

        def record_event(self, event=None):
            event = Event() if event is None else event
            event.record(self)
            return event

        def query(self):
            return True

        def synchronize(self):
            pass

        @property
        def cuda_stream(self):
            return self.stream_id

        def __eq__(self, other):
            return isinstance(other, Stream) and other.stream_id == self.stream_id

        def __hash__(self):
            return hash(("oomlab_stream", self.stream_id))

        def __repr__(self):
            return f"<torch.cuda.Stream device=cuda:0 cuda_stream={self.stream_id} (oomlab capture)>"

    class Event:
        def __init__(self, enable_timing=False, blocking=False, interprocess=False, **kwargs):
            self.recorded = False

        def record(self, stream=None):
            self.recorded = True
            return self

        def wait(self, stream=None):
            pass

        def query(self):
            return True

        def synchronize(self):
            pass

        def elapsed_time(self, end_event):
            return 0.0

    default = Stream(stream_id=0)
    by_id = {0: default}

    def current_stream(device=None):
        n = cap.ctx[0]
        return by_id.get(n) or Stream(stream_id=n)

    def set_stream(stream):
        if stream is not None:
            by_id[stream.stream_id] = stream
            cap.set_context(stream.stream_id, cap.ctx[1])

    @contextlib.contextmanager
    def stream_ctx(stream):
        if stream is None:
            yield
            return
        by_id[stream.stream_id] = stream
        was = cap.set_context(stream.stream_id, cap.ctx[1])
        try:
            yield
        finally:
            cap.set_context(*was)

    return {"Stream": Stream, "Event": Event, "current_stream": current_stream,
            "default_stream": lambda device=None: default, "set_stream": set_stream, "stream": stream_ctx}


@contextlib.contextmanager
def patched(cap):
    gpu = cap.gpu
    cuda = torch.cuda
    saved = {}

    def fraction(f, device=None):
        if not isinstance(f, float):
            raise TypeError("Invalid type for fraction argument, must be `float`")
        if f < 0 or f > 1:
            raise ValueError(f"Invalid fraction value: {f}. Allowed range: 0~1")
        cap.budget = int(f * gpu["total_memory"])

    def empty_cache():
        cap.empty_cache()  # an entry in the trace: the replay empties the cache there

    def stats(device=None):
        a, p, _ = cap.ext.counters()
        return {"allocated_bytes.all.current": a, "allocated_bytes.all.peak": p}

    # the generator's state: CUDA's Philox (seed, offset) as the 16-byte CPU tensor get_rng_state returns
    # (CUDAGeneratorImpl::get_state); DTensor's random ops read and advance the offset from it (_random.py)
    rng = {"state": torch.zeros(16, dtype=torch.uint8)}

    def get_rng_state(device="cuda"):
        return rng["state"].clone()

    def set_rng_state(new_state, device="cuda"):
        rng["state"] = new_state.detach().to("cpu", torch.uint8).clone()

    major, minor = gpus.capability(gpu)
    repl = {
        "is_available": lambda: True,
        "device_count": lambda: 1,
        "current_device": lambda: 0,
        "set_device": lambda device: None,
        "get_device_name": lambda device=None: "NVIDIA " + gpu["name"],
        "get_device_capability": lambda device=None: (major, minor),
        "get_device_properties": lambda device=None: _props(gpu),
        "is_bf16_supported": lambda including_emulation=True: major >= 8,
        "memory_allocated": lambda device=None: cap.allocated(),
        "max_memory_allocated": lambda device=None: cap.max_allocated(),
        "memory_reserved": lambda device=None: cap.allocated(),
        "max_memory_reserved": lambda device=None: cap.max_allocated(),
        "reset_peak_memory_stats": lambda device=None: cap.ext.reset_peak(),
        "reset_max_memory_allocated": lambda device=None: cap.ext.reset_peak(),
        "memory_stats": stats,
        "mem_get_info": lambda device=None: (gpu["total_memory"] - gpu["context_bytes"] - cap.allocated(),
                                             gpu["total_memory"]),
        "synchronize": lambda device=None: None,
        "empty_cache": empty_cache,
        "set_per_process_memory_fraction": fraction,
        "manual_seed": lambda seed: None,
        "manual_seed_all": lambda seed: None,
        "seed": lambda: None,
        "seed_all": lambda: None,
        "get_rng_state": get_rng_state,
        "set_rng_state": set_rng_state,
        "get_rng_state_all": lambda: [get_rng_state()],
        "set_rng_state_all": lambda states: set_rng_state(states[0]),
        "is_current_stream_capturing": lambda: False,
    }
    streams = _stream_classes(cap)
    repl.update(streams)
    for name, fn in repl.items():
        saved[name] = getattr(cuda, name)
        setattr(cuda, name, fn)
    mem_saved = {}
    for name in ("memory_allocated", "max_memory_allocated", "memory_reserved", "max_memory_reserved",
                 "reset_peak_memory_stats", "memory_stats", "mem_get_info", "empty_cache",
                 "set_per_process_memory_fraction"):
        if hasattr(cuda.memory, name):
            mem_saved[name] = getattr(cuda.memory, name)
            setattr(cuda.memory, name, repl[name])
    pin, is_pinned = torch.Tensor.pin_memory, torch.Tensor.is_pinned

    def pin_memory(self, device=None):
        cap.pinned(self)
        return self

    torch.Tensor.pin_memory = pin_memory
    resize = torch.UntypedStorage.resize_

    def resize_(self, size):
        if self.device.type != "meta":
            return resize(self, size)
        from torch.utils._python_dispatch import _disable_current_modes
        with torch._C.DisableTorchFunction(), _disable_current_modes():
            t = torch.empty(0, dtype=torch.uint8, device="meta").set_(self)
        cap.label("UntypedStorage.resize_")
        cap.ext.resize_storage(t, int(size))
        return self
    torch.UntypedStorage.resize_ = resize_
    from .cuda_model import cublas
    clear_ws = getattr(torch._C, "_cuda_clearCublasWorkspaces", None)
    torch._C._cuda_clearCublasWorkspaces = lambda: cublas.clear(cap)
    # torch.accelerator (the DataLoader's pin thread asks it for the device): the GPU as torch.cuda answers
    acc = torch.accelerator
    acc_repl = {"is_available": lambda: True, "device_count": lambda: 1,
                "current_accelerator": lambda check_available=False: torch.device("cuda"),
                "current_device_index": lambda: 0, "current_device_idx": lambda: 0,
                "set_device_index": lambda device: None, "set_device_idx": lambda device: None,
                "synchronize": lambda device=None: None,
                # functions of their own: Dynamo keys a handler by each (variables/torch.py _register)
                "current_stream": lambda device=None: streams["current_stream"](device),
                "set_stream": lambda stream: streams["set_stream"](stream)}
    acc_saved = {n: getattr(acc, n) for n in acc_repl if hasattr(acc, n)}
    for n in acc_saved:
        setattr(acc, n, acc_repl[n])
    try:
        yield
    finally:
        if clear_ws is None:
            del torch._C._cuda_clearCublasWorkspaces
        else:
            torch._C._cuda_clearCublasWorkspaces = clear_ws
        for name, fn in saved.items():
            setattr(cuda, name, fn)
        for name, fn in mem_saved.items():
            setattr(cuda.memory, name, fn)
        for name, fn in acc_saved.items():
            setattr(acc, name, fn)
        torch.Tensor.pin_memory, torch.Tensor.is_pinned = pin, is_pinned
        torch.UntypedStorage.resize_ = resize
