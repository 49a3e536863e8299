/* model_too_large.c - the weights alone exceed the budget: model.to(device) fails while loading, at a named layer.
 *
 * Cause. A model built on the host (nn.Linear's parameters are made in host memory) is moved to the GPU by
 * model.to(device), which Module._apply does one parameter at a time, layer after layer: each parameter's
 * device copy is allocated, filled, and takes the parameter's place (`param.data = param.to(device)`). Nothing
 * but the weights is on the device yet: no input, no activation, no optimizer state. When the weights' bytes
 * exceed the budget, the copy of some parameter part way through the model fails, and the layers moved before it
 * stay on the device, held by the half-moved model. Seed 000 ends on this ("your model is simply too large for
 * the GPU's VRAM to even load"); seed 001 names model parallelism for models "too large to fit on a single GPU".
 *
 * What the user sees. With depth 24 layers of Linear(8192, 8192) in float32 (256 MiB of weight and 32 KiB of
 * bias each: 6 GiB) under a 3968 MiB budget, `model.to("cuda")` raises torch.OutOfMemoryError at layers.15.weight:
 * 15 layers moved, 3.75 GiB allocated and 3842 MiB reserved (a 256 MiB segment per weight and one 2 MiB segment
 * for the biases), and the next 256 MiB segment does not fit. The CI scale (Linear(1024, 1024), 4 MiB weights
 * sharing 20 MiB segments, under 72 MiB) fails at the same parameter. The message names no layer: the scenario
 * names it, as `for name, p in model.named_parameters()` would.
 *
 * The PyTorch code it mirrors (scripts/twins/model_too_large.py runs it):
 *     class Stack(nn.Module):                      # built on the CPU: every parameter in host memory
 *         def __init__(self, width, depth):
 *             super().__init__()
 *             self.layers = nn.ModuleList(nn.Linear(width, width) for _ in range(depth))
 *     model = Stack(width, depth)
 *     for i, layer in enumerate(model.layers):     # model.to("cuda"), as Module._apply does it
 *         for name in ("weight", "bias"):
 *             p = getattr(layer, name)
 *             p.data = p.data.to("cuda")           # torch.OutOfMemoryError at layers.15.weight
 *     def run_layers(model, x):                    # the forward, called as a function (as model(x) is):
 *         with torch.no_grad():                    # the caller's x, the input, stays referenced until it
 *             for layer in model.layers:           # returns, so four activations are live at the peak
 *                 x = F.relu(layer(x))             # (input, x, layer(x), relu's output), not three
 *         return x
 *     x = torch.randn(batch, width, device="cuda")
 *     x = run_layers(model, x)
 * Each forward pass is timed (time_per_sample, synchronised: scn_clock). The host model's values are generated
 * per parameter as nn.Linear's init draws them (U(-1/sqrt(width), 1/sqrt(width))), from oomlab's own random
 * stream: host memory is not what this scenario measures, the device's allocator is.
 *
 * The fixes, and why they work.
 *   fix-half  model.half() on the host, then the same move: every weight takes half the bytes, and the whole
 *       model fits (full scale: 3 GiB of weights, 3078 MiB reserved at the peak, under 3968 MiB). The forward runs in
 *       float16. It halves the problem once; a model twice as large still does not load.
 *   fix-model-parallel  the layers split over `devices` devices (layer i on device i * devices / depth, in
 *       order), the activation copied to the next device where the split falls (`x = x.to("cuda:1")`). Each
 *       device has its own caching allocator and budget (its own row in the table and entry in the JSON's
 *       "devices"), and holds only its share of the weights. On sim these are separate simulated devices; on
 *       cuda, device k is GPU k where the machine has it, else a logical device of GPU 0 (own allocator, own cap;
 *       the table says which). The activation goes GPU to GPU with cudaMemcpyPeer (peer access enabled where the
 *       pair allows it), through the host on sim (see tensor_copy_to). The twin runs each device's share in its
 *       own process, with its own memory fraction.
 *   fix-offload  the weights stay in pinned host memory (pin_memory(), oomlab's pinned host caching allocator),
 *       and two layer slots on the device take them in turn: layer i+1 is copied on a side stream while layer i
 *       computes. The device holds two layers and the activations, whatever the depth; the pinned host
 *       allocator holds the whole model (its counters: host_memory_stats()). time_per_sample shows the price: a
 *       whole model crosses PCIe on every forward pass. On cuda the copies are cudaMemcpyAsync on a side stream,
 *       ordered by events as the twin's wait_stream/wait_event order them, so they overlap the compute; on sim they
 *       are done at once, so the time there says nothing about overlap.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "alloc/hostalloc.h"
#include "kernels.h"
#include "run/scenario.h"
#include "runtime/ops.h"
#include "runtime/tensor.h"

#define MAX_DEPTH 64
#define MIB ((size_t)1 << 20)

static const scenario_param params[] = {
    /* name, help, full, min, max, ci (at ci the weights, 4 MiB, share 20 MiB segments: the ci budget is set so
     * that the same parameter fails; larger values at ci run out of the ci budget at the first layers) */
    {"width", "features of every Linear(width, width) layer", 8192, 16, 8192, 1024},
    {"depth", "Linear layers of the model", 24, 2, MAX_DEPTH, 0},
    {"devices", "devices the layers are split over (fix-model-parallel)", 2, 2, SCN_MAX_DEVICES, 0},
    {"batch", "rows of the randn(batch, width) input of the forward pass", 64, 1, 4096, 8},
};

static const scenario_variant variants[] = {
    {"bug", VARIANT_BUG, "model.to(device) of a float32 model whose weights exceed the budget", ""},
    {"fix-half", VARIANT_FIX, "model.half() on the host, then model.to(device): half the bytes per weight", ""},
    {"fix-model-parallel", VARIANT_FIX, "the layers split over `devices` devices, the activation copied between them",
     ""},
    {"fix-offload", VARIANT_FIX, "weights in pinned host memory, streamed into two device layer slots", ""},
};

/* ---- the model on the host --------------------------------------------------------------------------------- */

/* Parameter j (0 weight, 1 bias) of layer i, as nn.Linear(width, width) draws it on the CPU, in host memory of
 * dtype dt (f32, or f16 after model.half()). buf holds width * width elements of dt. Element e is a hash of its
 * index (kernels.h's oom_rng_hash, counter-based): each element independent of the one before, so the loop runs at
 * the memory's pace (0.09 s for an 8192 x 8192 weight on the 2-core host, where a chained generator took 0.46 s,
 * 11 s for the full-scale model of every variant). */
static void host_param(uint64_t seed, int i, int j, int64_t width, dtype dt, void *buf)
{
    int64_t n = j == 0 ? width * width : width;
    double bound = 1.0 / sqrt((double)width);
    uint64_t base = oom_rng_hash(seed ^ ((uint64_t)i << 8) ^ (uint64_t)j, 0);
    for (int64_t e = 0; e < n; e++) {
        float v = (float)((double)(oom_rng_hash(base, (uint64_t)e) >> 11) * 0x1.0p-53 * 2.0 * bound - bound);
        if (dt == DT_F16)
            ((uint16_t *)buf)[e] = f32_to_f16(v);
        else
            ((float *)buf)[e] = v;
    }
}

static const char *const PNAME[2] = {"weight", "bias"};

typedef struct model {
    int depth;
    int64_t width;
    dtype dt;
    tensor *p[MAX_DEPTH][2]; /* the device copies moved so far (NULL: still on the host) */
} model;

static void model_free(model *m)
{
    for (int i = 0; i < m->depth; i++)
        for (int j = 0; j < 2; j++)
            tensor_assign(&m->p[i][j], NULL);
}

/* model.to(device) as Module._apply does it, layer i to device dev_of[i], one parameter at a time; a sample after
 * each layer. Returns false after an OOM, caught and named (layers.I.weight), with the moved layers kept. */
static bool model_to(scn *s, model *m, const int *dev_of, int *oom_layer)
{
    rt *r0 = scn_rt(s);
    size_t nbuf = (size_t)(m->width * m->width) * dtype_size(m->dt);
    void *buf = r0->computes ? malloc(nbuf) : NULL;
    if (r0->computes && !buf) {
        fprintf(stderr, "oomlab: out of host memory\n");
        abort();
    }
    bool ok = true;
    for (int i = 0; i < m->depth && ok; i++) {
        rt *r = scn_rt_device(s, dev_of ? dev_of[i] : 0);
        for (int j = 0; j < 2 && ok; j++) {
            int64_t shape[2] = {m->width, m->width};
            if (buf)
                host_param(r0->seed, i, j, m->width, m->dt, buf);
            /* p.data = p.data.to(device) */
            m->p[i][j] = buf ? tensor_from_host(r, m->dt, j == 0 ? 2 : 1, shape, buf)
                             : tensor_empty(r, m->dt, j == 0 ? 2 : 1, shape);
            if (!m->p[i][j]) {
                char what[64];
                snprintf(what, sizeof what, "model.to(device): layers.%d.%s", i, PNAME[j]);
                if (!scn_caught(s, what)) {
                    ok = false; /* not an OOM: the runner reports it */
                    break;
                }
                *oom_layer = i;
                ok = false;
            }
        }
        if (ok)
            scn_step(s, "moved layer %d", i);
    }
    free(buf);
    return ok;
}

/* The forward pass under no_grad, layer by layer, x copied to the next layer's device where the split falls;
 * the output stays held (returned). time_per_sample after the "forward" sample. Each device's share is a call,
 * `x = run_layers(model, x)` (on device k > 0 with x the copy that arrived there, as the twin's process of
 * device k and `self.seq2(x.to("cuda:1"))` do): the caller's reference keeps the share's input allocated until
 * its last layer has run, so the peak is four activations (PyTorch measured: tests/data/twins). */
static tensor *forward(scn *s, model *m, const int *dev_of, tensor *x, int *copies)
{
    double t0 = scn_clock(s);
    int dev = 0;
    tensor *held = tensor_retain(x); /* the caller's reference to this device's share input */
    RT_NO_GRAD(scn_rt(s))
    {
        for (int i = 0; i < m->depth && x; i++) {
            int want = dev_of ? dev_of[i] : 0;
            if (want != dev) { /* x = x.to(f"cuda:{want}") */
                rt *to = scn_rt_device(s, want);
                tensor_assign(&x, tensor_copy_to(to, x));
                tensor_release(held); /* the previous share has returned */
                held = tensor_retain(x);
                dev = want;
                (*copies)++;
            }
            tensor *y = op_linear(x, m->p[i][0], m->p[i][1]);
            tensor *z = op_relu(y);
            tensor_release(y);
            tensor_assign(&x, z);
        }
    }
    tensor_release(held); /* x = run_layers(model, x): the input goes when the call returns */
    for (int k = 1; k < scn_devices(s); k++) /* every device's work done before the clock reads */
        rt_sync(scn_rt_device(s, k));
    double t1 = scn_clock(s);
    if (!x)
        return NULL; /* an OOM: the caller catches it */
    scn_step(s, "forward");
    if (scn_computes(s))
        scn_metric(s, "time_per_sample", "s", (t1 - t0) / (double)scn_param(s, "batch"));
    else
        scn_note(s, "time_per_sample: not measured in a dry run");
    return x;
}

static const char *fmt_size(int64_t b, char *buf, size_t cap)
{
    return memstats_format_size((uint64_t)(b < 0 ? 0 : b), buf, cap);
}

/* ---- the variants ------------------------------------------------------------------------------------------ */

static oom_status run_loaded(scn *s, const scenario_variant *v, dtype dt, const int *dev_of, int ndev)
{
    int64_t width = scn_param(s, "width"), batch = scn_param(s, "batch");
    int depth = (int)scn_param(s, "depth");
    rt *r = scn_rt(s);
    for (int k = 1; k < ndev; k++) /* cuda:1 .. exist before the model is made */
        if (!scn_rt_device(s, k))
            return OOM_ENODEV;
    model m = {.depth = depth, .width = width, .dt = dt};
    int oom_layer = -1;
    bool loaded = model_to(s, &m, dev_of, &oom_layer);
    if (!rt_ok(r))
        return rt_status(r);
    char b1[32], b2[32], b3[32];
    char cap[32];
    fmt_size((int64_t)scn_budget(s), cap, sizeof cap);
    const scn_oom *oom = scn_first_oom(s);
    /* what the loaded weights hold, device by device, from the counters */
    int64_t held[SCN_MAX_DEVICES] = {0}, held_reserved[SCN_MAX_DEVICES] = {0}, held_all = 0;
    for (int k = 0; k < scn_devices(s); k++) {
        held[k] = scn_stat_device(s, k, "allocated_bytes.all.current");
        held_reserved[k] = scn_stat_device(s, k, "reserved_bytes.all.current");
        held_all += held[k];
    }
    if (!loaded) {
        scn_step(s, "after the OOM");
        model_free(&m);
        scn_step(s, "freed the model");
        char what[64];
        snprintf(what, sizeof what, "%s", oom->what + strlen("model.to(device): "));
        scn_expect(s, oom->allocated == (size_t)held[oom->device] && oom_layer >= 0,
                   "the OOM comes while loading, with nothing but weights on device %d: %d layers moved (%s), then "
                   "%s fails",
                   oom->device, oom_layer, fmt_size((int64_t)oom->allocated, b1, sizeof b1), what);
        scn_expect(s, oom->reserved + oom->alloc_size > scn_budget(s),
                   "the next segment (%s) does not fit beside the %s reserved under %s",
                   fmt_size((int64_t)oom->alloc_size, b1, sizeof b1), fmt_size((int64_t)oom->reserved, b2, sizeof b2),
                   cap);
        if (v->kind == VARIANT_FIX)
            scn_not_reproduced(s, "%s does not fit either: %s fails on device %d after %s of weights (%s)", v->name,
                               what, oom->device, fmt_size((int64_t)oom->allocated, b1, sizeof b1), cap);
        else
            scn_note(s, "model.to(device) fails at %s after %d of %d layers", what, oom_layer, depth);
        return rt_status(r);
    }
    /* loaded: the forward pass */
    tensor *x = tensor_randn(r, dt, SHAPE(batch, width), 0.0, 1.0);
    int copies = 0;
    tensor *out = NULL;
    if (x) {
        scn_step(s, "input");
        out = forward(s, &m, dev_of, x, &copies);
    }
    bool ran = out != NULL && rt_ok(r);
    int last = dev_of ? dev_of[depth - 1] : 0;
    int64_t out_dev_alloc = scn_stat_device(s, last, "allocated_bytes.all.current");
    tensor_release(out);
    if (!ran && scn_caught(s, "forward")) {
        scn_step(s, "after the OOM");
        model_free(&m);
        scn_not_reproduced(s, "the weights fit (%s) but the forward pass at batch %lld does not", fmt_size(held_all, b1, sizeof b1),
                           (long long)batch);
        scn_expect(s, scn_first_oom(s) != NULL, "the forward pass runs out of memory, not the loading");
        return rt_status(r);
    }
    model_free(&m);
    scn_step(s, "freed the model");
    if (!rt_ok(r))
        return rt_status(r);
    scn_metric(s, "weights_on_device", "bytes", (double)held_all);
    if (v->kind == VARIANT_BUG) {
        scn_not_reproduced(s, "the float32 weights fit: %s allocated, %s reserved under %s",
                           fmt_size(held[0], b1, sizeof b1), fmt_size(held_reserved[0], b2, sizeof b2), cap);
        scn_expect(s, ran, "model.to(device) and the forward pass at batch %lld run", (long long)batch);
        return OOM_OK;
    }
    if (dev_of == NULL) {
        scn_expect(s, ran && held[0] <= (int64_t)scn_budget(s) && held_reserved[0] <= (int64_t)scn_budget(s),
                   "the %s weights load: %s allocated, %s reserved under %s; the forward pass runs",
                   dtype_str(dt), fmt_size(held[0], b1, sizeof b1), fmt_size(held_reserved[0], b2, sizeof b2), cap);
        return OOM_OK;
    }
    /* model-parallel */
    for (int k = 0; k < ndev; k++)
        scn_note(s, "device %d holds %s of weights (%s reserved)", k, fmt_size(held[k], b1, sizeof b1),
                 fmt_size(held_reserved[k], b2, sizeof b2));
    int used = 0;
    for (int k = 0; k < ndev; k++)
        used += held[k] > 0;
    int boundaries = 0;
    for (int i = 1; i < depth; i++)
        boundaries += dev_of[i] != dev_of[i - 1];
    scn_expect(s, ran && used == (depth < ndev ? depth : ndev) && copies == boundaries,
               "the %d layers load on %d devices, each under its own %s cap, and the forward pass runs (activation "
               "copies between devices: %d)",
               depth, used, cap, copies);
    scn_expect(s, out_dev_alloc > held[last], "the output is on the last device (%d): %s there after the forward pass",
               last, fmt_size(out_dev_alloc - held[last], b3, sizeof b3));
    if (held_all <= (int64_t)scn_budget(s))
        scn_not_reproduced(s, "the whole model (%s) would fit one device's budget: no split needed", fmt_size(held_all, b1, sizeof b1));
    else
        scn_expect(s, true, "together the devices hold %s of weights, more than one device's %s", fmt_size(held_all, b1, sizeof b1), cap);
    return OOM_OK;
}

/* issue(i) of the twin: side.wait_stream(compute); with torch.cuda.stream(side): both slot tensors
 * .copy_(pinned, non_blocking=True); ev.record(side). The copy overlaps the compute queued before it on cuda. */
static oom_status issue_layer(rt *r, devstream side, tensor *const slot[2], void *const src[2], devevent *ev)
{
    devevent after = 0;
    oom_status st = device_event_record(r->dev, 0, &after); /* the compute that last read this slot */
    if (st == OOM_OK)
        st = device_stream_wait_event(r->dev, side, after);
    if (after)
        device_event_destroy(r->dev, after);
    for (int j = 0; j < 2 && st == OOM_OK; j++)
        st = tensor_copy_from_host_async_(slot[j], src[j], side);
    if (st == OOM_OK)
        st = device_event_record(r->dev, side, ev);
    return st;
}

static oom_status run_offload(scn *s)
{
    int64_t width = scn_param(s, "width"), batch = scn_param(s, "batch");
    int depth = (int)scn_param(s, "depth");
    rt *r = scn_rt(s);
    char b1[32], b2[32], b3[32], cap[32];
    fmt_size((int64_t)scn_budget(s), cap, sizeof cap);
    /* the two device slots first: a layer that cannot be held twice fails before anything is pinned */
    tensor *slot[2][2] = {{NULL, NULL}, {NULL, NULL}};
    bool made = true;
    for (int k = 0; k < 2 && made; k++) /* [(torch.empty(width, width), torch.empty(width)) for _ in range(2)] */
        made = (slot[k][0] = tensor_empty(r, DT_F32, SHAPE(width, width))) != NULL &&
               (slot[k][1] = tensor_empty(r, DT_F32, SHAPE(width))) != NULL;
    if (!made) {
        for (int k = 0; k < 2; k++)
            for (int j = 0; j < 2; j++)
                tensor_release(slot[k][j]);
        if (!scn_caught(s, "layer slots"))
            return rt_status(r);
        scn_step(s, "after the OOM");
        scn_not_reproduced(s, "two layers do not fit the %s budget at width %lld", cap, (long long)width);
        scn_expect(s, scn_first_oom(s) != NULL, "the OOM comes at the two layer slots");
        return OOM_OK;
    }
    scn_step(s, "layer slots");
    int64_t slots = scn_stat(s, "allocated_bytes.all.current");
    /* w_host = [p.data.pin_memory() for p in model.parameters()] */
    hostalloc *ha = NULL;
    hostalloc_options hopt = {0};
    oom_status st = hostalloc_new(r->dev, &hopt, &ha);
    void *pinned[MAX_DEPTH][2] = {{NULL}};
    for (int i = 0; i < depth && st == OOM_OK; i++)
        for (int j = 0; j < 2 && st == OOM_OK; j++) {
            size_t nb = (size_t)(j == 0 ? width * width : width) * sizeof(float);
            st = hostalloc_malloc(ha, nb, &pinned[i][j]);
            if (st == OOM_OK && r->computes)
                host_param(r->seed, i, j, width, DT_F32, pinned[i][j]);
        }
    hostalloc_stats hs;
    if (ha)
        hostalloc_get_stats(ha, &hs);
    int64_t pinned_bytes = ha ? hs.allocated_bytes.current : 0;
    tensor *x = st == OOM_OK ? tensor_randn(r, DT_F32, SHAPE(batch, width), 0.0, 1.0) : NULL;
    if (x)
        scn_step(s, "input");
    int64_t with_input = scn_stat(s, "allocated_bytes.all.current");
    devstream side = 0; /* side = torch.cuda.Stream() */
    if (st == OOM_OK)
        st = device_stream_create(r->dev, &side);
    devevent ev = 0;
    double t0 = scn_clock(s);
    RT_NO_GRAD(r)
    {
        /* the side stream copies layer i + 1 into its slot while layer i computes */
        if (x && st == OOM_OK)
            st = issue_layer(r, side, slot[0], pinned[0], &ev);
        for (int i = 0; i < depth && x && st == OOM_OK; i++) {
            st = device_stream_wait_event(r->dev, 0, ev); /* compute.wait_event(ev) */
            device_event_destroy(r->dev, ev);
            ev = 0;
            if (st == OOM_OK && i + 1 < depth)
                st = issue_layer(r, side, slot[(i + 1) % 2], pinned[i + 1], &ev);
            if (st != OOM_OK)
                break;
            tensor *y = op_linear(x, slot[i % 2][0], slot[i % 2][1]);
            tensor *z = op_relu(y);
            tensor_release(y);
            tensor_assign(&x, z);
            if (x)
                scn_step(s, "layer %d", i);
        }
    }
    double t1 = scn_clock(s);
    if (ev)
        device_event_destroy(r->dev, ev);
    if (side) /* torch.cuda.synchronize(): no copy still writing into a slot when it is freed */
        device_stream_destroy(r->dev, side);
    bool ran = x != NULL && rt_ok(r) && st == OOM_OK;
    if (ran) {
        scn_step(s, "forward");
        if (scn_computes(s))
            scn_metric(s, "time_per_sample", "s", (t1 - t0) / (double)batch);
        else
            scn_note(s, "time_per_sample: not measured in a dry run");
        scn_metric(s, "pinned_host_bytes", "bytes", (double)pinned_bytes);
    }
    tensor_release(x);
    for (int k = 0; k < 2; k++)
        for (int j = 0; j < 2; j++)
            tensor_release(slot[k][j]);
    hostalloc_delete(ha); /* the pinned weights go with the model */
    if (st == OOM_ENOMEM_PINNED) {
        scn_not_reproduced(s, "the host cannot pin the whole model: %s", oom_error_msg());
        return OOM_OK;
    }
    if (st != OOM_OK)
        return st;
    if (!ran) {
        if (!scn_caught(s, "forward"))
            return rt_status(r);
        scn_not_reproduced(s, "two layers fit but the forward pass at batch %lld does not", (long long)batch);
        return OOM_OK;
    }
    scn_step(s, "freed the model");
    int64_t peak = scn_stat(s, "allocated_bytes.all.peak"), act = with_input - slots;
    scn_expect(s, peak <= slots + 3 * act,
               "the device peak, %s, is the two layer slots (%s) and at most three activations (%s each), for %d "
               "layers",
               fmt_size(peak, b1, sizeof b1), fmt_size(slots, b2, sizeof b2), fmt_size(act, b3, sizeof b3), depth);
    scn_note(s, "the pinned host allocator holds the whole model: %s (host_memory_stats allocated_bytes)",
             fmt_size(pinned_bytes, b1, sizeof b1));
    return OOM_OK;
}

static oom_status run(scn *s, const scenario_variant *v)
{
    if (strcmp(v->name, "fix-offload") == 0)
        return run_offload(s);
    if (strcmp(v->name, "fix-model-parallel") == 0) {
        int depth = (int)scn_param(s, "depth"), ndev = (int)scn_param(s, "devices");
        int dev_of[MAX_DEPTH];
        for (int i = 0; i < depth; i++) /* contiguous shares, in order */
            dev_of[i] = (int)((int64_t)i * ndev / depth);
        return run_loaded(s, v, DT_F32, dev_of, ndev);
    }
    return run_loaded(s, v, strcmp(v->name, "fix-half") == 0 ? DT_F16 : DT_F32, NULL, 1);
}

const scenario scenario_model_too_large = {
    .name = "model_too_large",
    .title = "model.to(device) OOMs while loading: the weights alone exceed the budget",
    .story = "A model built on the host is moved to the GPU one parameter at a time; when its weights alone "
             "exceed the budget, model.to(device) fails part way, at a named layer (layers.15.weight of 24 "
             "Linear(8192, 8192) layers under 3968 MiB), before any input exists. Half-precision weights fit; "
             "splitting the layers over several devices (each with its own allocator and budget) fits; keeping "
             "the weights in pinned host memory and streaming two layers at a time through the device fits, "
             "at the cost of copying the whole model on every forward pass.",
    .default_budget = (size_t)3968 << 20,
    .ci_budget = (size_t)72 << 20,
    .params = params,
    .nparams = sizeof params / sizeof params[0],
    .variants = variants,
    .nvariants = sizeof variants / sizeof variants[0],
    .run = run,
};
