"""torch.distributed under the capture (--rank R --world-size N): one rank of an N-rank job, run alone on the CPU.

The capture is the job's launcher for that rank: it sets what torchrun sets (RANK, WORLD_SIZE, LOCAL_RANK,
LOCAL_WORLD_SIZE, GROUP_RANK, ROLE_RANK, MASTER_ADDR, MASTER_PORT), and dist.init_process_group(any backend,
any init_method) makes a process group of the capture's instead (backend "oomlab_fake", a c10d ProcessGroup in
Python whose collectives complete at once, move nothing and return their tensors, as NCCL's in-place ones do;
PyTorch's own FakeProcessGroup returns a future of None, which the Reducer's all-reduce hook refuses, comm.cpp
parseHookResult) with that rank and world size and a FakeStore. The
script's CUDA tensors are on meta as usual, so DistributedDataParallel runs on the meta parameters: the
Reducer's buckets (torch/csrc/distributed/c10d/reducer.cpp initialize_buckets: one flat tensor per bucket, on
the parameters' device), _sync_module_states' flattened broadcast buffers (c10d broadcast_coalesced) and the
rebuild at the second forward (Reducer::rebuild_buckets) are allocations of the recording allocator, as on
CUDA. What the meta path lacks, each after the PyTorch source it follows:
- _verify_param_shape_across_processes (torch/nn/parallel/distributed.py __init__, reducer.cpp
  verify_params_across_processes) all-gathers every rank's parameter shapes and compares them; the fake group
  gathers nothing, so it is skipped: every rank runs the same script. Its two small tensors of 2 x nparams int64
  (freed at once) are left out of the trace.
- _to_kwargs (distributed.py _pre_forward, device_ids given) moves the inputs to torch.device(type,
  device_ids[0]): on CUDA an input already on cuda:0 stays (no copy); on meta "meta" is not "meta:0", so the
  target is taken index-less there, as CUDA's comparison would find it equal.
- The first iteration's bucket outlives the rebuild. ProcessGroupNCCL's Work for a bucket's all-reduce stashes
  its tensor (stashed_for_allocator_safety_, released only by work.wait()/synchronize(); the Reducer waits on
  the Work's future instead), so the single bucket of iterations before the rebuild stays allocated beside the
  rebuilt ones (measured on 2 x H200: scenarios/data_parallel.c's story). The fake group's Work holds nothing:
  the capture holds every tensor all-reduced from DistributedDataParallel's construction until
  Reducer._rebuild_buckets() first returns True, until dist.destroy_process_group() or the capture's end (a
  tensor all-reduced by the script itself in that time is held the same way; FSDP2 builds no Reducer, and its
  synchronous all-reduces wait on their Work).
NCCL's own buffers are cudaMalloc'd by libnccl outside the caching allocator: not in the trace; oomlab predict
charges them as the process's non-PyTorch memory (harness/device/devcomm.h).
"""
import contextlib
import os
import weakref

import torch
from torch.utils._python_dispatch import TorchDispatchMode

SOURCE_RNG = "torch/distributed/tensor/_random.py OffsetBasedRNGTracker._get_device_state (get_rng_state().to(device))"


class State:
    def __init__(self, rank, world):
        self.rank, self.world = rank, world
        self.initialised = False       # the script called init_process_group
        self.backend = None            # the backend it asked for
        self.stash = []                # tensors held as ProcessGroupNCCL's Work holds them
        self.stashing = False          # from DistributedDataParallel's construction to the Reducer's first rebuild
        self.stashed_bytes = 0
        self.shards = {}               # (dim-0 size, shard mesh dim, mesh) of every FSDP2 parameter: rank_classes

    def rank_classes(self):
        """The rank each rank is alike to, as a list over the world: the first rank whose shard sizes and place
        are its own. A rank's allocations follow its FSDP2 shards (torch.chunk's split of each parameter's dim 0
        over the mesh's shard dim, _fsdp_param.py _init_sharded_param: ceil(d/n) rows, the last ones short or
        empty) and whether it is rank 0 (the scripts' `if rank == 0`); DDP's and the rest are the same on every
        rank. Rank 0 is its own class."""
        shards = []  # (d, ceil(d/n), {rank: its index along the shard dim}) per parameter shape and mesh
        for d, dim, mesh in self.shards.values():
            m = mesh.mesh
            along = torch.unravel_index(torch.arange(m.numel()), m.shape)[dim]
            shards.append((d, -(-d // m.shape[dim]), dict(zip(m.reshape(-1).tolist(), along.tolist()))))
        first, out = {}, []
        for r in range(self.world):
            sig = [r == 0]
            for d, c, where in shards:
                i = where.get(r, -1)
                sig.append(-1 if i < 0 else max(0, min(c, d - i * c)))
            out.append(first.setdefault(tuple(sig), r))
        return out

    def hold(self, tensors):
        """An all-reduce's tensors, held while stashing (see the module doc)."""
        if not self.stashing:
            return
        for t in tensors:
            if isinstance(t, torch.Tensor) and t.is_meta and not any(s is t for s in self.stash):
                self.stash.append(t)
                self.stashed_bytes += t.untyped_storage().nbytes()


def _group_class():
    """A c10d ProcessGroup in Python whose collectives complete at once, each Work's future holding its tensors
    (as NCCL's in-place collectives return them: the Reducer's hook result, comm.cpp parseHookResult). Values
    are not combined: on meta there are none. A collective not listed raises (ProcessGroup's own error)."""
    import torch.distributed as dist
    from torch._C._distributed_c10d import _create_work_from_future

    def done(result):
        fut = torch.futures.Future()
        fut.set_result(result)
        return _create_work_from_future(fut)

    class OomlabGroup(dist.ProcessGroup):
        def __init__(self, rank, world, state):
            super().__init__(rank, world)
            self._state = state

        def getBackendName(self):
            return "oomlab_fake"

        # c10d names a group through its backend (ProcessGroup::getGroupName); a group in Python has none, so
        # the name _new_process_group_helper gives it is kept here (DeviceMesh reads it: device_mesh.py)
        @property
        def group_name(self):
            return getattr(self, "_oomlab_name", "")

        def _set_group_name(self, name):
            self._oomlab_name = name

        @property
        def group_desc(self):
            return getattr(self, "_oomlab_desc", "")

        def _set_group_desc(self, desc):
            self._oomlab_desc = desc

        def allreduce(self, tensors, opts=None):
            self._state.hold(tensors)
            return done(tensors)

        def allreduce_coalesced(self, tensors, opts=None):
            self._state.hold(tensors)
            return done(tensors)

        def broadcast(self, tensors, opts=None):
            return done(tensors)

        def reduce(self, tensors, opts=None):
            return done(tensors)

        def barrier(self, opts=None):
            return done(None)

        def allgather(self, outputs, inputs, opts=None):
            return done(outputs)

        def _allgather_base(self, output, input, opts=None):
            return done(output)

        def allgather_into_tensor_coalesced(self, outputs, inputs, opts=None):
            return done(outputs)

        def reduce_scatter(self, outputs, inputs, opts=None):
            return done(outputs)

        def _reduce_scatter_base(self, output, input, opts=None):
            return done(output)

        def reduce_scatter_tensor_coalesced(self, outputs, inputs, opts=None):
            return done(outputs)

    return OomlabGroup


class _BroadcastBack(TorchDispatchMode):
    """Reducer::sync_bucket_indices (reducer.cpp, inside rebuild_buckets) broadcasts rank 0's bucket indices and
    sizes: a CPU tensor .to(device), broadcast, then copied back into the CPU tensor. Every rank runs the same
    script, so rank 0's values are this rank's: the copy back (meta to CPU, which meta cannot do) keeps the CPU
    tensor as it is. The .to(device) copies are device allocations, recorded as usual."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if (func is torch.ops.aten.copy_.default and isinstance(args[0], torch.Tensor) and args[0].device.type == "cpu"
                and isinstance(args[1], torch.Tensor) and args[1].is_meta):
            return args[0]
        return func(*args, **(kwargs or {}))


_GROUP = None     # the class, registered as backend "oomlab_fake" once per process
_STATE = [None]   # the capture's State the group reports to


ENV = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "ROLE_RANK", "MASTER_ADDR",
       "MASTER_PORT")


@contextlib.contextmanager
def patched(cap, rank, world):
    import torch.distributed as dist
    import torch.distributed.distributed_c10d as c10d
    import torch.nn.parallel.distributed as ddp_mod
    from torch.testing._internal.distributed.fake_pg import FakeStore
    global _GROUP
    if _GROUP is None:
        _GROUP = _group_class()
        dist.Backend.register_backend("oomlab_fake", lambda store, r, n, timeout: _GROUP(r, n, _STATE[0]),
                                      devices=["cpu", "cuda"])
    st = State(rank, world)
    cap.state["dist"] = st
    _STATE[0] = st
    saved_env = {k: os.environ.get(k) for k in ENV}
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE=str(world),
                      GROUP_RANK="0", ROLE_RANK=str(rank), MASTER_ADDR="127.0.0.1", MASTER_PORT="29500")
    real_init, real_destroy = c10d.init_process_group, c10d.destroy_process_group
    real_verify, real_to_kwargs = ddp_mod._verify_param_shape_across_processes, ddp_mod._to_kwargs
    Reducer = torch._C._distributed_c10d.Reducer
    real_rebuild = Reducer._rebuild_buckets

    def init_process_group(backend=None, init_method=None, timeout=None, world_size=-1, rank=-1, store=None,
                           *args, **kwargs):
        st.initialised = True
        st.backend = str(backend) if backend is not None else "default"
        return real_init("oomlab_fake", store=FakeStore(), rank=st.rank, world_size=st.world,
                         **({"timeout": timeout} if timeout is not None else {}))

    def destroy_process_group(group=None):
        if group is None or group is c10d.GroupMember.WORLD:
            st.stash.clear()
            st.stashing = False
        return real_destroy(group)

    def to_kwargs(inputs, kwargs, target_device, use_side_stream):
        if target_device.type == "meta":
            target_device = torch.device("meta")
        return real_to_kwargs(inputs, kwargs, target_device, use_side_stream)

    def rebuild(self):
        with _BroadcastBack():
            r = real_rebuild(self)
        if r:
            st.stashing = False
        return r

    # FSDP2 (fully_shard): lazy_init refuses parameters on meta (_validate_no_meta_params), and under the capture
    # every CUDA parameter is a meta tensor: skipped (a script that leaves its parameters on meta is not refused
    # here, as FSDP refuses it on the GPU)
    from torch.distributed.fsdp._fully_shard import _fsdp_collectives as fsdp_coll
    from torch.distributed.fsdp._fully_shard import _fsdp_init as fsdp_init
    from torch.distributed.fsdp._fully_shard import _fsdp_param_group as fsdp_pg
    from torch.distributed.fsdp._fully_shard import _fsdp_state as fsdp_state
    real_validate = fsdp_pg.FSDPParamGroup._validate_no_meta_params
    fsdp_pg.FSDPParamGroup._validate_no_meta_params = lambda self: None
    # FSDP finds its streams' module from a tensor's device type (device_mesh._get_device_handle: torch.<type>):
    # a meta tensor's is torch.cuda's, as its device is cuda on the GPU
    handle_mods = (fsdp_coll, fsdp_init, fsdp_pg, fsdp_state)
    real_handle = fsdp_coll._get_device_handle

    def device_handle(device_type="cuda"):
        return real_handle("cuda" if device_type == "meta" else device_type)
    for mod in handle_mods:
        mod._get_device_handle = device_handle
    # FSDP's own device (fully_shard: _get_device_from_mesh, cuda:current_device on the GPU) is the meta device
    # here, as the capture's CUDA is: what FSDP allocates in its backward hooks (the autograd engine runs them
    # without the capture's device map) is made on it, recorded
    from torch.distributed.fsdp._fully_shard import _fully_shard as fsdp_fs
    real_mesh_device = fsdp_fs._get_device_from_mesh

    def mesh_device(mesh):
        return torch.device("meta") if mesh.device_type == "cuda" else real_mesh_device(mesh)
    fsdp_fs._get_device_from_mesh = mesh_device
    # DTensor's random ops (nn.init on a sharded parameter) copy CUDA's generator state to the mesh's device
    # (OffsetBasedRNGTracker._get_device_state: a 16-byte tensor on cuda:K) and compare and advance it from
    # inside a dispatch, where the capture's device map and values do not reach: the state stays on the CPU,
    # and its device copy is an allocation of its 16 bytes that lives as long as the state does
    from torch.distributed.tensor import _random as dt_random
    real_rng_state = dt_random.OffsetBasedRNGTracker._get_device_state

    def rng_device_state(self):
        state = self._device_handle.get_rng_state()
        if self._device.type == "cuda":
            n = state.numel() * state.element_size()
            weakref.finalize(state, cap.fake_free, cap.fake_alloc(n, "DTensor RNG state on the device", SOURCE_RNG),
                             n)
        return state
    dt_random.OffsetBasedRNGTracker._get_device_state = rng_device_state
    from torch.distributed.fsdp._fully_shard import _fsdp_param
    real_param_init = _fsdp_param.FSDPParam._init_sharded_param

    def init_sharded_param(self, param, device, shard_placement_fn):
        real_param_init(self, param, device, shard_placement_fn)
        mi, d = self.mesh_info, self._orig_size[self.fsdp_placement.dim]
        st.shards.setdefault((d, mi.shard_mesh_dim, id(mi.mesh)), (d, mi.shard_mesh_dim, mi.mesh))
    _fsdp_param.FSDPParam._init_sharded_param = init_sharded_param
    for mod in (dist, c10d):
        mod.init_process_group, mod.destroy_process_group = init_process_group, destroy_process_group
    def verify_params(*a, **k):
        # DDP's construction (DistributedDataParallel.__init__ calls this before making its Reducer): from here
        # all-reduces are its buckets' and are held until the first rebuild; a synchronous all_reduce elsewhere
        # (FSDP2's HSDP all-reduce of the reduced gradients) waits on its Work, which releases the stash
        st.stashing = True
    ddp_mod._verify_param_shape_across_processes = verify_params
    ddp_mod._to_kwargs = to_kwargs
    Reducer._rebuild_buckets = rebuild
    try:
        yield st
    finally:
        st.stash.clear()
        for mod in (dist, c10d):
            mod.init_process_group, mod.destroy_process_group = real_init, real_destroy
        ddp_mod._verify_param_shape_across_processes, ddp_mod._to_kwargs = real_verify, real_to_kwargs
        Reducer._rebuild_buckets = real_rebuild
        fsdp_pg.FSDPParamGroup._validate_no_meta_params = real_validate
        for mod in handle_mods:
            mod._get_device_handle = real_handle
        fsdp_fs._get_device_from_mesh = real_mesh_device
        dt_random.OffsetBasedRNGTracker._get_device_state = real_rng_state
        _fsdp_param.FSDPParam._init_sharded_param = real_param_init
        if dist.is_initialized():
            real_destroy()
        for k, v in saved_env.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
