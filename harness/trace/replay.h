/* replay.h - replay a PyTorch memory snapshot's trace through the caching allocator model (`oomlab replay`).
 *
 * The input is the dict of torch.cuda.memory._snapshot() as json.dump writes it (scripts/snapshot2json.py
 * converts a _dump_snapshot() pickle, and with --budget adds a top-level "budget": the bytes
 * set_per_process_memory_fraction allowed, which PyTorch's snapshot does not record). device_traces holds one
 * list per device index; every device whose list has events is replayed (or only the one asked for), each in
 * order from an empty allocator on its own dry-run sim device. Its alloc, free_requested and oom events are
 * replayed; the segment_alloc, segment_free, segment_map and segment_unmap events PyTorch recorded are compared
 * with the ones the model produces.
 *   - A recorded segment_free/segment_unmap that the model would not produce itself at that point is taken as
 *     an empty_cache() call.
 *   - An oom event is replayed as the allocation attempt it records (its rounded size).
 *   - New segments are placed the way the CUDA driver places cudaMalloc (device/sim.c), so best-fit ties
 *     between equal-size blocks break as they did on the GPU, also for what-if configs. Under the trace's own
 *     config a segment that PyTorch's trace shows at an address of the same size takes that address when it
 *     is free: cuBLAS and cuDNN call cudaMalloc behind the allocator's back, and this keeps their traces exact.
 * A device whose list has allocs and frees but no segment event (oomlab predict's capture, a hand-made trace) is a
 * prediction, not a check: there are no placements to compare, so none is compared and every segment is placed by
 * the sim's model of the driver; the trace's addresses only pair each free with its alloc.
 * The config is the one recorded in allocator_settings unless opt->alloc_conf is given; the environment
 * (OOMLAB_ALLOC_CONF, PYTORCH_CUDA_ALLOC_CONF, PYTORCH_ALLOC_CONF) is never read here. A replay under the recorded config is a check
 * against the recording; under another config it is a what-if simulation, whose differences from the
 * recording are information.
 *     The driver's first kernel launch moves later segments; opt->kernels says when it happened.
 */
#ifndef OOMLAB_REPLAY_H
#define OOMLAB_REPLAY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "alloc/allocconf.h"
#include "core/compat.h"
#include "alloc/memstats.h"
#include "trace/trace.h"
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

/* What a replay samples for a plot or a growth analysis (replay_options.series). The caller owns the arrays. */
typedef struct replay_series {
    size_t nbuckets;       /* the events cut into nbuckets runs (event i in run i * nbuckets / events); 0: none */
    int64_t *alloc_max;    /* [nbuckets]: the highest allocated_bytes.all.current after an event of the run */
    int64_t *reserved_max; /* [nbuckets]: the same for reserved_bytes.all.current */
    size_t nprobes;        /* events at which to read allocated bytes; 0: none */
    const size_t *probe_at;   /* [nprobes], ascending event indices */
    int64_t *probe_alloc;     /* [nprobes]: allocated_bytes.all.current before that event (at the end if past it) */
} replay_series;

typedef struct replay_options {
    const char *alloc_conf;    /* NULL: the trace's allocator_settings */
    size_t budget_bytes;       /* 0: the file's "budget" if it has one, else none */
    bool one_device;           /* replay only device_traces[device]; else every device that has events */
    int device;                /* with one_device: the device index (cuda:N) */
    replay_kernels kernels;    /* for the sim's address model */
    bool model_addresses;      /* every segment placed by the sim's model of the driver, none at PyTorch's recorded
                                * address (a what-if does so anyway: the recorded addresses describe the recorded
                                * config's history only) */
    size_t kernel_at;          /* REPLAY_KERNELS_AT: the event index */
    const char *snapshot_path; /* NULL: none; else the model's snapshot after the replay (snapshot_write) */
    bool fast;                 /* keep no model trace and compare no segment actions with the recording (advise's
                                * replays: only op-level disagreements, an OOM where PyTorch allocated or the
                                * reverse, set first_divergence) */
    bool stop_at_oom;          /* end each device's replay at the model's first OOM (events: those replayed) */
    replay_series *series;     /* NULL: none; else sampled during the (one-device) replay */
    size_t max_input;          /* --max-input: the largest file read, bytes; 0: fileio_default_limit() */
    size_t device_total;       /* the modelled GPU's totalGlobalMem; 0: an H100 80GB's (DEVICE_SIM_DEFAULT_CAPACITY,
                                * with its measured CUDA context) */
    size_t device_context;     /* the bytes its CUDA context holds outside the allocator; 0: the measured H100's at
                                * the default device_total, none at another */
    uint64_t layout_seed;      /* 0: blocks ordered by the sim's model of the driver's addresses; else by a seeded
                                * other layout's order (device_options.sim_layout_seed; advise's range) */
} replay_options;

/* Where the budget came from. */
typedef enum replay_budget_source {
    REPLAY_BUDGET_NONE,   /* no budget (a per_process_memory_fraction in the config still caps) */
    REPLAY_BUDGET_OPTION, /* opt->budget_bytes (--budget) */
    REPLAY_BUDGET_FILE,   /* the file's "budget" (scripts/snapshot2json.py --budget) */
} replay_budget_source;

/* One device's replay. */
typedef struct replay_result {
    int device;               /* its index in device_traces (cuda:N) */
    size_t events;            /* trace entries read */
    long first_divergence;    /* index of the first event where the segment actions disagree; -1 if none */
    char divergence[256];     /* what disagreed there */
    size_t model_ooms;        /* allocations that failed in the model */
    long first_oom_event;     /* index of the first of them; -1 if none */
    char oom_message[1200];   /* the model's OOM text for it */
    memstats stats;           /* the model's memory_stats() at the end */
    alloc_conf conf;          /* the config the replay used */
    size_t budget_bytes;      /* the cap the allocator applied (cachealloc_budget); 0: none */
    long kernel_event;        /* the event before which the sim saw the first kernel launch; -1 if none */
    bool prediction;          /* the device's list has no segment event: nothing compared (first_divergence is
                               * only an op-level disagreement: a free of an unknown address) */
    size_t device_total;      /* the sim device's memory the replay ran on */
} replay_result;

/* A replay of a whole file. */
typedef struct replay_report {
    bool whatif;                        /* opt->alloc_conf given and different from the recorded settings */
    bool prediction;                    /* every replayed device is a prediction (no segment events) */
    alloc_conf conf;                    /* the config the replay used */
    alloc_conf recorded;                /* the config in the trace's allocator_settings */
    char recorded_error[ALLOC_CONF_ERR_MAX]; /* with alloc_conf: why allocator_settings did not parse ("" if it did) */
    size_t budget_bytes;                /* the budget asked for (0: none) */
    replay_budget_source budget_source; /* where it came from */
    size_t ntraces;                     /* the length of device_traces */
    size_t ndevices;                    /* devices replayed */
    replay_result *devices;             /* one per replayed device, in index order (replay_report_free) */
} replay_report;

/* Replay the snapshot JSON in path: every device whose trace has events, or only opt->device. OOM_EINVAL or
 * OOM_EIO for bad input, with one line in err that names the problem (a file that is a directory, a pickle, a
 * truncated or invalid JSON with the byte offset and line, no events on any device or on the one asked for);
 * OOM_OK otherwise (a divergence is a result, not an error). With opt->snapshot_path, the model's _snapshot()
 * (every replayed device's segments and whole replayed trace, at its own index) is written there at the end; a
 * failed write is OOM_EIO (or OOM_ENOMEM_HOST) and leaves no file. rep is zeroed first; free it with
 * replay_report_free whatever the status. */
/* err of this size holds every message of replay_trace whole (but for a path longer than a few hundred bytes). */
#define REPLAY_ERR_MAX (ALLOC_CONF_ERR_MAX + 512)

oom_status replay_trace(const char *path, const replay_options *opt, replay_report *rep, char *err, size_t errcap);

/* replay_trace of a trace already loaded (trace/trace.h): any number of replays parse the file once. path names
 * it in messages. */
oom_status replay_loaded(const trace_file *t, const char *path, const replay_options *opt, replay_report *rep,
                         char *err, size_t errcap);

void replay_report_free(replay_report *rep);

/* Replay one device: replay_trace, then the result of the one device replayed. OOM_EINVAL when several devices
 * have events and opt does not pick one. */
oom_status replay_file(const char *path, const replay_options *opt, replay_result *res, char *err, size_t errcap);

OOM_END_DECLS

#endif
