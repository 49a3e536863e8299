// meta_alloc.cpp - a recording c10::Allocator for the Meta device (oomlab_capture's C++ extension).
//
// Meta tensors own no memory: PyTorch's own MetaAllocator hands out null pointers. This one does the same but
// gives every allocation of n > 0 bytes a context that remembers a fake address (a 512-aligned bump counter) and
// n, and logs the allocation and, from the DataPtr's deleter, the moment the storage dies. n is the byte count
// the CUDA caching allocator would be asked for by the same storage (empty_generic computes it the same way for
// every device), so the log is the program's device allocations in program order with their real lifetimes.
//
// Meta kernels are not CUDA kernels: a shape function may build temporaries the CUDA kernel never allocates.
// Python brackets each op that has a CUDA kernel with op_begin()/op_end(); an allocation made inside that
// bracket and freed before it closes is a meta temporary: its alloc entry is marked dead and its free is not
// logged. What survives the op (its outputs) stays. Allocations of size 0 are not logged (the caching allocator
// returns a null pointer for them and records nothing).
//
// Python adds the CUDA path's own allocations (workspaces, staging buffers) with fake_alloc/fake_free into the
// same log, so the order between them and the program's storages is kept.
#include <torch/extension.h>

#include <c10/core/Allocator.h>

#include <pybind11/stl.h>

#include <cstdint>
#include <mutex>
#include <vector>

namespace {

enum Action : uint8_t { ALLOC = 0, FREE = 1, OOM = 2, MARK = 3 };

struct Ctx;

struct Entry {
  uint8_t action;
  bool dead;  // an alloc found to be a meta temporary: dropped at drain
  uint64_t addr;
  uint64_t size;
  int64_t tag;  // the Python side's op serial at the time
  struct Ctx* ctx;  // the storage's context while it lives (for reordering an op's outputs)
};

struct Ctx;
struct Ctx {
  uint64_t addr;
  uint64_t size;
  int64_t index;  // absolute log index of the alloc entry; -1: not recorded (made while not capturing)
  uint64_t gen;   // the capture that recorded it (a storage outliving its capture is no event of the next)
  uint8_t own;    // Own: not one of the program's CUDA storages (made in own_meta mode): no device memory
};

std::mutex mu;
bool recording = false;
bool paused = false;      // pause(): new storages get no entry (torch.compile's fake tensors), frees still logged
// What a storage is when it is not one of the program's CUDA storages (own_meta(): no entry, marked so):
// OWN_META the program's own meta tensor (made under torch.device("meta")); OWN_HOST a host tensor whose
// storage the capture never allocates (a module's parameter built on the CPU: devmap.defer_host), which
// becomes CUDA memory only when moved there.
enum Own : uint8_t { OWN_NONE = 0, OWN_META = 1, OWN_HOST = 2 };
uint8_t own_mode = OWN_NONE;
uint64_t generation = 0;  // one per start()
std::vector<Entry> log_entries;
int64_t log_base = 0;     // absolute index of log_entries[0] (entries before were drained)
uint64_t next_addr = 0;   // the bump counter of fake addresses
int depth = 0;            // nesting of op_begin brackets
int64_t frame_start = 0;  // absolute log index where the outermost open bracket began
int64_t tag = 0;
// Sum of the live allocations as the caching allocator counts them (allocated_bytes: sizes rounded up to
// 512, at least 512; a block handed out unsplit counts whole, which only the replay knows): what the
// program's torch.cuda.memory_allocated() answers under the capture.
uint64_t live_bytes = 0, peak_bytes = 0;
uint64_t dropped = 0;                     // meta temporaries dropped

constexpr uint64_t kAlign = 512;
uint64_t rounded(uint64_t n) { return n < kAlign ? kAlign : (n + kAlign - 1) / kAlign * kAlign; }
constexpr uint64_t kBase = 0x7f0000000000ull;

uint64_t bump(uint64_t n) {
  uint64_t a = kBase + next_addr;
  next_addr += (n + kAlign - 1) / kAlign * kAlign;
  return a;
}

void note_free(Ctx* c) {
  if (c->index < 0 || c->gen != generation || !recording)
    return;
  int64_t rel = c->index - log_base;
  if (depth > 0 && c->index >= frame_start && rel >= 0) {
    log_entries[rel].dead = true;  // made and freed inside one op: a meta temporary
    dropped++;
  } else {
    log_entries.push_back({FREE, false, c->addr, c->size, tag, nullptr});
  }
  if (c->index >= log_base && c->index - log_base < (int64_t)log_entries.size())
    log_entries[c->index - log_base].ctx = nullptr;
  live_bytes -= rounded(c->size);
}

void deleter(void* p) {
  Ctx* c = static_cast<Ctx*>(p);
  {
    std::lock_guard<std::mutex> g(mu);
    note_free(c);
  }
  delete c;
}

// A request above 2^53 bytes: more than any GPU has, and more than a trace holds exactly (a JSON number). The GPU
// run raises torch.OutOfMemoryError there (CUDACachingAllocator.cpp: from 1 EB before any counter moves, else
// after its OOM path), so it is thrown here too, and logged as an "oom" event of 2^53 bytes; the first such
// request's real size is kept for the report (oversized()).
constexpr size_t kTraceMax = size_t(1) << 53;
size_t oversized_bytes = 0;

struct RecordingMetaAllocator final : public c10::Allocator {
  c10::DataPtr allocate(size_t n) override {
    if (n == 0)
      return {nullptr, nullptr, &noop, c10::Device(c10::DeviceType::Meta)};
    if (n > kTraceMax) {
      {
        std::lock_guard<std::mutex> g(mu);
        if (recording && !paused) {
          log_entries.push_back({OOM, false, 0, kTraceMax, tag, nullptr});
          if (!oversized_bytes)
            oversized_bytes = n;
        }
      }
      if (n >= (size_t(1) << 60))
        TORCH_CHECK_WITH(OutOfMemoryError, false, "CUDA out of memory. Tried to allocate more than 1EB memory.");
      TORCH_CHECK_WITH(OutOfMemoryError, false, "CUDA out of memory. Tried to allocate ", n,
                       " bytes, more than any GPU has.");
    }
    Ctx* c = new Ctx{0, n, -1, 0, OWN_NONE};
    {
      std::lock_guard<std::mutex> g(mu);
      c->own = own_mode;
      if (recording && !paused && !own_mode) {
        c->addr = bump(n);
        c->gen = generation;
        c->index = log_base + (int64_t)log_entries.size();
        log_entries.push_back({ALLOC, false, c->addr, n, tag, c});
        live_bytes += rounded(n);
        if (live_bytes > peak_bytes)
          peak_bytes = live_bytes;
      }
    }
    return {nullptr, c, &deleter, c10::Device(c10::DeviceType::Meta)};
  }
  static void noop(void*) {}
  void copy_data(void*, const void*, std::size_t) const override {}
};

RecordingMetaAllocator the_allocator;

void install() { c10::SetAllocator(c10::DeviceType::Meta, &the_allocator, /*priority=*/200); }

void start() {
  std::lock_guard<std::mutex> g(mu);
  log_entries.clear();
  log_base = 0;
  next_addr = 0;
  depth = 0;
  frame_start = 0;
  tag = 0;
  live_bytes = peak_bytes = dropped = 0;
  oversized_bytes = 0;
  generation++;
  recording = true;
}

void stop() {
  std::lock_guard<std::mutex> g(mu);
  recording = false;
}
bool pause_recording(bool p) {
  std::lock_guard<std::mutex> g(mu);
  bool was = paused;
  paused = p;
  return was;
}

int own_meta(int p) {
  TORCH_CHECK(p >= OWN_NONE && p <= OWN_HOST, "own_meta: 0, 1 or 2");
  std::lock_guard<std::mutex> g(mu);
  int was = own_mode;
  own_mode = (uint8_t)p;
  return was;
}

// 1: t's storage is the program's own meta, 2: a deferred host storage (Own); 0: one of the program's CUDA
// storages (or made outside the capture); -1: no storage bytes (nothing to tell).
int is_own(const at::Tensor& t) {
  const c10::Storage& s = t.storage();
  if (!s || s.data_ptr().get_deleter() != &deleter)
    return -1;
  Ctx* c = static_cast<Ctx*>(s.data_ptr().get_context());
  return c ? c->own : 0;
}

void set_tag(int64_t t) {
  std::lock_guard<std::mutex> g(mu);
  tag = t;
}

void op_begin() {
  std::lock_guard<std::mutex> g(mu);
  if (depth++ == 0)
    frame_start = log_base + (int64_t)log_entries.size();
}

// Close the bracket. outputs: the fake addresses of the op's output storages in the order the op returns
// them. A CUDA kernel allocates its outputs in that order; a meta function may not (nll_loss_forward's meta
// makes total_weight before output), so the op's surviving allocations are put in output order, in the
// slots they already take in the log.
void op_end(const std::vector<uint64_t>& outputs) {
  std::lock_guard<std::mutex> g(mu);
  if (depth == 0)
    return;
  if (--depth > 0 || outputs.size() < 2)
    return;
  std::vector<int64_t> slots;
  for (int64_t i = frame_start - log_base; i < (int64_t)log_entries.size(); i++)
    if (log_entries[i].action == ALLOC && !log_entries[i].dead && log_entries[i].ctx)
      slots.push_back(i);
  std::vector<Entry> ordered;
  for (uint64_t a : outputs)
    for (int64_t i : slots)
      if (log_entries[i].addr == a) {
        bool seen = false;
        for (const Entry& e : ordered)
          seen = seen || e.addr == a;
        if (!seen)
          ordered.push_back(log_entries[i]);
      }
  if (ordered.size() != slots.size())
    return;  // something else survived too: keep the allocation order
  for (size_t k = 0; k < slots.size(); k++) {
    log_entries[slots[k]] = ordered[k];
    ordered[k].ctx->index = log_base + slots[k];
  }
}

// A modelled allocation of the CUDA path (not a storage): returns its fake address.
uint64_t fake_alloc(uint64_t n) {
  std::lock_guard<std::mutex> g(mu);
  uint64_t a = bump(n);
  log_entries.push_back({ALLOC, false, a, n, tag, nullptr});
  live_bytes += rounded(n);
  if (live_bytes > peak_bytes)
    peak_bytes = live_bytes;
  return a;
}

void fake_free(uint64_t addr, uint64_t n) {
  std::lock_guard<std::mutex> g(mu);
  log_entries.push_back({FREE, false, addr, n, tag, nullptr});
  live_bytes -= rounded(n);
}

// The recording's context of t's storage while its allocation is live in this recording, else null; under mu.
static Ctx* live_ctx(const at::Tensor& t) {
  const c10::Storage& s = t.storage();
  if (!s || s.data_ptr().get_deleter() != &deleter)
    return nullptr;
  Ctx* c = static_cast<Ctx*>(s.data_ptr().get_context());
  return c && c->index >= 0 && c->gen == generation && recording ? c : nullptr;
}

// Take a recorded storage out of the trace: one meta makes that CUDA does not put on the device (a Philox
// seed the CUDA kernel keeps on the host). Its alloc entry is dropped if not drained yet, else freed now.
void forget(const at::Tensor& t) {
  std::lock_guard<std::mutex> g(mu);
  Ctx* c = live_ctx(t);
  if (!c)
    return;
  int64_t rel = c->index - log_base;
  if (rel >= 0)
    log_entries[rel].dead = true;
  else
    log_entries.push_back({FREE, false, c->addr, c->size, tag, nullptr});
  live_bytes -= rounded(c->size);
  c->index = -1;
}

// A point in the log the Python side names (size: its kind; cudagraphs.py's torch.cuda.empty_cache()).
void mark(uint64_t kind) {
  std::lock_guard<std::mutex> g(mu);
  if (recording)
    log_entries.push_back({MARK, false, 0, kind, tag, nullptr});
}

// Free a recorded storage's allocation now, though the tensor lives on (the CUDA graph trees free a path's live
// outputs at a new generation: torch._C._free_And_Remove_DeleterFn); its own end then logs nothing.
void free_now(const at::Tensor& t) {
  std::lock_guard<std::mutex> g(mu);
  Ctx* c = live_ctx(t);
  if (!c)
    return;
  log_entries.push_back({FREE, false, c->addr, c->size, tag, nullptr});
  if (c->index >= log_base && c->index - log_base < (int64_t)log_entries.size())
    log_entries[c->index - log_base].ctx = nullptr;
  live_bytes -= rounded(c->size);
  c->index = -1;
}

// UntypedStorage.resize_(n) of t's storage as CUDA's resize_bytes_cuda makes it (aten/src/ATen/native/cuda/
// Resize.cpp): n bytes allocated anew (nothing at 0), then the old allocation freed as the storage lets it go.
// FSDP frees and re-makes its unsharded parameters this way (_fsdp_common.py free_storage, alloc_storage).
void resize_storage(const at::Tensor& t, uint64_t n) {
  c10::StorageImpl* s = t.storage().unsafeGetStorageImpl();
  c10::DataPtr data = n ? the_allocator.allocate(n) : c10::DataPtr(nullptr, c10::Device(c10::DeviceType::Meta));
  s->set_data_ptr_noswap(std::move(data));
  s->set_nbytes(n);
}

// The log so far as a list of (action, addr, size, tag), dead entries left out; only outside any op bracket.
// Python objects are made only after mu is released, here and below: making a tuple can run the garbage
// collector, whose tensor frees call deleter, which takes mu (a capture hung so in fsdp_mlp.py's checkpointing).
py::list drain() {
  std::vector<Entry> taken;
  {
    std::lock_guard<std::mutex> g(mu);
    if (depth == 0) {
      log_base += (int64_t)log_entries.size();
      taken.swap(log_entries);
    }
  }
  py::list out;
  for (const Entry& e : taken)
    if (!e.dead)
      out.append(py::make_tuple((int)e.action, e.addr, e.size, e.tag));
  return out;
}

// The storage's (addr, size) if it was recorded, else None: lets Python name a tensor's allocation.
py::object storage_entry(const at::Tensor& t) {
  const c10::Storage& s = t.storage();
  if (!s)
    return py::none();
  const c10::DataPtr& dp = s.data_ptr();
  if (dp.get_deleter() != &deleter)
    return py::none();
  Ctx* c = static_cast<Ctx*>(dp.get_context());
  uint64_t addr, size;
  {
    std::lock_guard<std::mutex> g(mu);
    if (!c || c->index < 0 || c->gen != generation)
      return py::none();
    addr = c->addr;
    size = c->size;
  }
  return py::make_tuple(addr, size);
}

size_t oversized() {
  std::lock_guard<std::mutex> g(mu);
  return oversized_bytes;
}

py::tuple counters() {
  uint64_t live, peak, gone;
  {
    std::lock_guard<std::mutex> g(mu);
    live = live_bytes;
    peak = peak_bytes;
    gone = dropped;
  }
  return py::make_tuple(live, peak, gone);
}

void reset_peak() {
  std::lock_guard<std::mutex> g(mu);
  peak_bytes = live_bytes;
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("install", &install, "make this the Meta device's allocator");
  m.def("start", &start, "clear the log and start recording");
  m.def("stop", &stop, "stop recording (storages made before keep their entries)");
  m.def("pause", &pause_recording, "pause(True): storages made from now get no entry; the previous setting returned");
  m.def("own_meta", &own_meta, "own_meta(1 or 2): storages made from now are the program's own meta (1) or deferred host storages (2): no entry; own_meta(0) ends it; the previous setting returned");
  m.def("is_own", &is_own, "1: the storage is the program's own meta, 2: a deferred host storage, 0: neither, -1: no storage bytes");
  m.def("set_tag", &set_tag);
  m.def("op_begin", &op_begin);
  m.def("op_end", &op_end);
  m.def("fake_alloc", &fake_alloc);
  m.def("fake_free", &fake_free);
  m.def("forget", &forget);
  m.def("mark", &mark);
  m.def("free_now", &free_now);
  m.def("resize_storage", &resize_storage, "a storage resized as CUDA resizes one: the new allocation, the old freed");
  m.def("drain", &drain);
  m.def("storage_entry", &storage_entry);
  m.def("counters", &counters);
  m.def("oversized", &oversized, "the first request above 2^53 bytes (0: none), logged as an oom event");
  m.def("reset_peak", &reset_peak);
}
