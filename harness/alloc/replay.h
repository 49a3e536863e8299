/* replay.h - replay a PyTorch memory snapshot's trace through the caching allocator model (`oomlab replay`).
 *
 * The input is the dict of torch.cuda.memory._snapshot() as json.dump writes it (scripts/snapshot2json.py
 * converts a _dump_snapshot() pickle). The alloc, free_requested and oom events of device_traces[0] are
 * replayed in order from an empty allocator on a dry-run sim device; the segment_alloc, segment_free,
 * segment_map and segment_unmap events PyTorch recorded are compared with the ones the model produces.
 *   - A recorded segment_free/segment_unmap that the model would not produce itself at that point is taken as
 *     an empty_cache() call.
 *   - An oom event is replayed as the allocation attempt it records (its rounded size).
 *   - New segments are placed the way the CUDA driver places cudaMalloc (device_sim.c), so best-fit ties
 *     between equal-size blocks break as they did on the GPU, also for what-if configs. Under the trace's own
 *     config a segment that PyTorch's trace shows at an address of the same size takes that address when it
 *     is free: cuBLAS and cuDNN call cudaMalloc behind the allocator's back, and this keeps their traces exact.
 *     The driver's first kernel launch moves later segments; opt->kernels says when it happened.
 * Without an alloc_conf override the config recorded in allocator_settings is used.
 */
#ifndef OOMLAB_REPLAY_H
#define OOMLAB_REPLAY_H

#include <stdbool.h>
#include <stddef.h>

#include "alloc/allocconf.h"
#include "core/compat.h"
#include "alloc/memstats.h"
#include "core/status.h"

OOM_BEGIN_DECLS

/* When the recorded program first launched a kernel: the CUDA driver then frees the address range it reserved
 * at context creation, and later segments go there (device_note_kernel_launch). A trace records no kernels:
 * the default takes the launch right after the first allocation, as in a program that computes on its first
 * tensor; a program of torch.empty and del alone launches none. */
typedef enum replay_kernels {
    REPLAY_KERNELS_FIRST_ALLOC, /* after the first alloc event (the default) */
    REPLAY_KERNELS_NONE,        /* never */
    REPLAY_KERNELS_AT,          /* before event kernel_at */
} replay_kernels;

typedef struct replay_options {
    const char *alloc_conf;    /* NULL: the trace's allocator_settings */
    replay_kernels kernels;    /* for the sim's address model */
    size_t kernel_at;          /* REPLAY_KERNELS_AT: the event index */
    size_t budget_bytes;       /* 0: no budget */
    const char *snapshot_path; /* NULL: none; else the model's snapshot after the replay (snapshot_write) */
} replay_options;

typedef struct replay_result {
    size_t events;            /* trace entries read */
    long first_divergence;    /* index of the first event where the segment actions disagree; -1 if none */
    char divergence[256];     /* what disagreed there */
    size_t model_ooms;        /* allocations that failed in the model */
    long first_oom_event;     /* index of the first of them; -1 if none */
    char oom_message[1200];   /* the model's OOM text for it */
    memstats stats;           /* the model's memory_stats() at the end */
    alloc_conf conf;          /* the config the replay used */
    size_t budget_bytes;
    long kernel_event;        /* the event before which the sim saw the first kernel launch; -1 if none */
} replay_result;

/* Replay the snapshot JSON in path. OOM_EINVAL or OOM_EIO for bad input, with one line in err that names the
 * problem; OOM_OK otherwise (a divergence is a result, not an error). With opt->snapshot_path, the model's
 * _snapshot() (its segments and the whole replayed trace) is written there at the end; a failed write is
 * OOM_EIO (or OOM_ENOMEM_HOST) and leaves no file. */
oom_status replay_file(const char *path, const replay_options *opt, replay_result *res, char *err, size_t errcap);

OOM_END_DECLS

#endif
