/* trace.h - a PyTorch memory snapshot's trace, read once into memory (the one reader of snapshot JSON traces).
 *
 * The input is the dict of torch.cuda.memory._snapshot() as json.dump writes it (scripts/snapshot2json.py
 * converts a _dump_snapshot() pickle). trace_load reads the file in one pass without building a JSON tree:
 * device_traces is scanned entry by entry into a flat array of events per device (16-byte fields, no strings),
 * every other top-level value is skipped after its syntax is checked, and only the small ones the replay
 * needs, allocator_settings and "budget", and oomlab predict's "oomlab_capture", are parsed with cJSON. A 1,000,000-event trace (~100 MB) takes the file
 * plus 24 bytes an event. A file that is not valid JSON is parsed again with cJSON for the error line (where it
 * is truncated, or the byte, line and column of the bad text), so the messages are cJSON's.
 *
 * `oomlab replay` (trace/replay.h) and `oomlab advise` (analysis/advise.h) replay from a trace_file any number of
 * times.
 */
#ifndef OOMLAB_TRACE_H
#define OOMLAB_TRACE_H

#include <cJSON.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "alloc/allocconf.h"
#include "alloc/cachealloc.h"
#include "core/compat.h"
#include "core/fileio.h"
#include "core/status.h"

OOM_BEGIN_DECLS

/* One trace entry: alloc, free_requested, free_completed, segment_*, snapshot, oom, empty_cache. For oom, addr is the
 * entry's device_free (PyTorch keeps the device's free bytes there); size is its size (oom: rounded). stream: the
 * entry's "stream" as a small number, 0 for stream 0 and the others 1, 2, ... in order of first appearance on its
 * device (trace_device.streams). pool: 0, or the private pool (a CUDA graph's memory, 1, 2, ... as
 * trace_file.pools numbers them) an alloc was made in: the entry's own "pool" (oomlab predict's capture writes it),
 * else the pool of the recorded segment that holds the address (the snapshot's segments[].segment_pool_id). */
typedef struct trace_event {
    uint64_t addr;
    uint64_t size;
    ca_action action;
    int16_t stream;
    int16_t pool;
} trace_event;

#define TRACE_MAX_STREAMS 64 /* distinct streams per device; a trace with more is refused */
#define TRACE_MAX_POOLS 64   /* distinct private pools in a snapshot's segments */

/* Where an entry's user_metadata (torch.cuda.memory._set_memory_metadata) changed: from event `event` on it is
 * the text at strpool + text (as the JSON has it, escapes not decoded). */
typedef struct trace_mark {
    size_t event;
    size_t text;
} trace_mark;

/* One device's list of device_traces. Invariant: ev[0..n) in the recorded order; marks sorted by event, each
 * text different from the one before (the text before the first mark is ""). */
typedef struct trace_device {
    trace_event *ev;
    size_t n, cap;
    trace_mark *marks;
    size_t nmarks, marks_cap;
    size_t cur_len; /* the length of the last mark's text (0 before the first) */
    uint64_t streams[TRACE_MAX_STREAMS]; /* the recorded stream of each number; streams[0] = 0 */
    size_t nstreams;                     /* numbers given so far (at least 1 once an event was read) */
} trace_device;

/* A segment of the snapshot's final state that belongs to a private pool: where, and the pool's number. */
typedef struct trace_seg_pool {
    uint64_t device, address;
    int pool;
} trace_seg_pool;

/* What the file's "budget" holds (scripts/snapshot2json.py --budget writes it). */
typedef enum trace_budget {
    TRACE_BUDGET_ABSENT, /* no key, or null */
    TRACE_BUDGET_BYTES,  /* a whole number of bytes > 0: budget_bytes */
    TRACE_BUDGET_BAD,    /* anything else: an error when the budget is needed */
} trace_budget;

/* A loaded snapshot trace. */
typedef struct trace_file {
    size_t ndevices;          /* the length of device_traces */
    trace_device *dev;        /* one per index (cuda:N), some possibly empty */
    alloc_conf recorded;      /* the config in allocator_settings (PyTorch's defaults when absent) */
    char recorded_error[ALLOC_CONF_ERR_MAX]; /* why allocator_settings did not parse ("" if it did); recorded is
                                              * the default */
    trace_budget budget;
    size_t budget_bytes;      /* with TRACE_BUDGET_BYTES */
    cJSON *capture;           /* the top-level "oomlab_capture" value (oomlab predict's capture: its GPU,
                               * placeholders, modelled allocations), parsed; NULL when absent */
    int64_t pools[TRACE_MAX_POOLS][2]; /* the segment_pool_id of private pool n + 1 */
    size_t npools;
    trace_seg_pool *seg_pools; /* the snapshot's segments in private pools, sorted by (device, address) */
    size_t nseg_pools;
    char *strpool;            /* the user_metadata texts of the marks, NUL-separated */
    size_t strpool_len, strpool_cap;
} trace_file;

/* Read the snapshot JSON at path. OOM_EINVAL or OOM_EIO with one line in err that names the problem: a
 * directory, an unreadable or empty file, a pickle, a truncated or invalid JSON (byte offset and line), not an
 * object, no 'device_traces' list, an entry that is not a list, an entry without a known 'action' or with a bad
 * 'addr'/'device_free'/'size' ("cuda:N event I ..."); OOM_ENOMEM_HOST when out of host memory. t is zeroed first;
 * free it with trace_free whatever the status. A file without any event is not an error here. */
oom_status trace_load(const char *path, trace_file *t, char *err, size_t errcap);

/* trace_load within a bound: a regular file larger than max_input bytes (0: fileio_default_limit(), 4 GiB or the
 * host's available memory) is refused, OOM_EINVAL, before it is read; a stream (a FIFO, a pipe) is opened once and
 * read up to the bound. */
oom_status trace_load_max(const char *path, size_t max_input, trace_file *t, char *err, size_t errcap);

/* A snapshot file's bytes: mapped (maplen > 0) or read. */
typedef struct trace_text {
    char *text; /* NUL-terminated at len */
    size_t len, maplen;
} trace_text;

/* The bytes of path, through one open (a FIFO or a /dev/fd/N pipe is read once) within lim: a directory, an
 * unreadable file, a regular file larger than lim (refused before it is read) or a stream with more are OOM_EINVAL
 * or OOM_EIO with one line in err. Free in with trace_text_free whatever the status. */
oom_status trace_read(const char *path, const fileio_limit *lim, trace_text *in, char *err, size_t errcap);
void trace_text_free(trace_text *in);

/* The same from text[0..len) already in memory, with a NUL at text[len] (fileio_read_limited gives it): what
 * `oomlab advise` parses after reading its FILE once or converting a pickle; name stands for the file in errors. */
oom_status trace_parse(const char *name, const char *text, size_t len, trace_file *t, char *err, size_t errcap);

void trace_free(trace_file *t);

/* "cuda:0, cuda:2": the devices that have events, into buf. */
void trace_devices_with_events(const trace_file *t, char *buf, size_t cap);

/* True when device d's list has a segment_alloc, segment_free, segment_map or segment_unmap entry. A list of
 * allocs and frees alone (oomlab predict's capture, a hand-made trace) records no placements to check: its replay
 * is a prediction (trace/replay.h). */
bool trace_has_segment_events(const trace_file *t, size_t d);

/* The GPU an oomlab predict trace was captured for ("oomlab_capture"."gpu": total_memory, context_bytes, whole
 * numbers of bytes, total above the context): true with *total and *context set; false for any other trace. */
bool trace_capture_gpu(const trace_file *t, size_t *total, size_t *context);

/* The user_metadata text in force at event i of device d ("" before the first mark). */
const char *trace_metadata_at(const trace_file *t, size_t d, size_t i);

OOM_END_DECLS

#endif
