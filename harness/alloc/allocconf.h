/* allocconf.h - the caching allocator's configuration, in PyTorch's PYTORCH_CUDA_ALLOC_CONF syntax.
 *
 * Syntax: "key:value,key:value"; list values in [...]; booleans are exactly True/False; spaces are ignored.
 * The text comes from --alloc-conf, else OOMLAB_ALLOC_CONF, else PyTorch's variables in the order PyTorch 2.11
 * reads them: PYTORCH_CUDA_ALLOC_CONF, PYTORCH_HIP_ALLOC_CONF, PYTORCH_ALLOC_CONF (alloc_conf_pick).
 * Keys and ranges (PyTorch 2.11, c10/core/AllocatorConfig.cpp; values in MB are integers, MiB units):
 *   max_split_size_mb            >= large_segment_size_mb (20 unless set); default unlimited
 *   max_non_split_rounding_mb    >= large_segment_size_mb; default large_segment_size_mb (20)
 *   roundup_power2_divisions     one power of two (1, 2, 4, ...; not 0) for every size, or [MB:div,...,>:div]:
 *                                MB a power of two sets bucket log2(MB) (clamped to 15) and, if first, every
 *                                lower bucket; '>' sets the buckets after the last named one; div 0 or 2^k
 *   garbage_collection_threshold 0 < t < 1; default 0 (off)
 *   expandable_segments          True/False; default False
 *   large_segment_size_mb        > 10; default 20; read before the other keys wherever it stands
 *   per_process_memory_fraction  0 <= f <= 1; default 1 (no cap)
 * The pinned host allocator's keys (hostalloc.h reads them, hostalloc_options_from_conf):
 *   pinned_use_cuda_host_register  True/False (or its ROCm spelling pinned_use_hip_host_register); default False
 *                                  (cudaHostAlloc); True: malloc + cudaHostRegister
 *   pinned_num_register_threads    a power of two <= 128; default 1; threads that touch the pages before
 *                                  cudaHostRegister
 *   pinned_reserve_segment_size_mb > 0; default 0 (none); one pinned segment carved for small requests
 * Accepted and without effect on one stream and one device: release_lock_on_cudamalloc (or its ROCm spelling
 * release_lock_on_hipmalloc), pinned_use_background_threads, graph_capture_record_stream_reuse (True/False),
 * backend:native.
 * Stricter than PyTorch: numbers must be the whole token (no "20abc", no sign), ':' and ',' are required.
 */
#ifndef OOMLAB_ALLOCCONF_H
#define OOMLAB_ALLOCCONF_H

#include <stdbool.h>
#include <stddef.h>

#include "core/compat.h"
#include "core/status.h"

OOM_BEGIN_DECLS

#define ALLOC_CONF_ROUNDUP_BUCKETS 16 /* bucket i covers sizes in [2^(20+i), 2^(21+i)); 0 also below 1 MiB */
#define ALLOC_CONF_TEXT_MAX 512

typedef struct alloc_conf {
    size_t max_split_size;                               /* SIZE_MAX = unlimited */
    size_t max_non_split_rounding;                       /* bytes; default 20 MiB */
    size_t roundup_divisions[ALLOC_CONF_ROUNDUP_BUCKETS]; /* 0 = plain 512 B rounding */
    double gc_threshold;                                 /* 0 = off */
    bool expandable_segments;
    size_t large_segment_size;          /* mid-band segment and large expandable page; default 20 MiB */
    double per_process_memory_fraction; /* 1.0 = no cap */
    bool fraction_set;                  /* per_process_memory_fraction was given */
    bool pinned_use_host_register;      /* pinned_use_cuda_host_register */
    size_t pinned_num_register_threads; /* default 1 */
    size_t pinned_reserve_segment_size; /* pinned_reserve_segment_size_mb in bytes; 0 = none */
    char text[ALLOC_CONF_TEXT_MAX];     /* the settings string as parsed */
} alloc_conf;

/* PyTorch's defaults. */
void alloc_conf_default(alloc_conf *c);

/* Parse text over the defaults. On error returns OOM_EINVAL, leaves *c untouched and writes one line to err
 * naming the key and its allowed range, e.g. "max_split_size_mb must be an integer >= 20 (got 10)" (also kept
 * in the last-error record). text may be NULL or "" (the defaults); it is copied, truncated, into c->text. */
oom_status alloc_conf_parse(alloc_conf *c, const char *text, char *err, size_t errcap);

/* The longest error line alloc_conf_parse and alloc_conf_set_roundup_bucket write (the unknown-key message lists
 * every known key; echoed tokens are cut to ECHO_MAX bytes): an err of this size is never cut. */
#define ALLOC_CONF_ERR_MAX 1024

/* One bucket of roundup_power2_divisions as a snapshot's allocator_settings records it. PyTorch writes a dict with
 * one entry per bucket, {"1": d0, "2": d1, "4": d2, ..., "32768": d15}: the key is the bucket's lower bound in
 * MiB (torch/csrc/cuda/Module.cpp doubles roundup_key from 1). Sets the bucket the key names (log2(mb), clamped
 * to 15, as the list form [MB:div,...] names it) to divisions, both checked as the list form checks them: mb a
 * power of two, divisions 0 or a power of two, decimal digits only. Other buckets are left as they are. On error
 * returns OOM_EINVAL, leaves *c untouched and writes one line naming the entry, e.g.
 * 'roundup_power2_divisions["1"]: divisions must be 0 or a power of two (got 3)'. */
oom_status alloc_conf_set_roundup_bucket(alloc_conf *c, const char *mb, const char *divisions, char *err,
                                         size_t errcap);

/* The environment variables alloc_conf_pick reads, most specific first: oomlab's own, then PyTorch 2.11's in its
 * order (AcceleratorAllocatorConfig::instance in c10/core/AllocatorConfig.cpp takes the first that is set of
 * PYTORCH_CUDA_ALLOC_CONF, PYTORCH_HIP_ALLOC_CONF, PYTORCH_ALLOC_CONF; a CUDA build reads the HIP one too, as
 * measured in tests/data/twins/fidelity.torch.json). */
#define ALLOC_CONF_ENV_VARS                                                                                     \
    "OOMLAB_ALLOC_CONF", "PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_HIP_ALLOC_CONF", "PYTORCH_ALLOC_CONF"

/* The settings string to use: cli if non-NULL, else the first of ALLOC_CONF_ENV_VARS that is set, else "".
 * A variable that is set but empty still wins (PyTorch parses it: the defaults). *source names where it came
 * from ("--alloc-conf", the variable's name, or "default") when source is non-NULL; a string that fails to
 * parse is reported with that name in front ("PYTORCH_CUDA_ALLOC_CONF: Unrecognized key ..."). */
const char *alloc_conf_pick(const char *cli, const char **source);

/* The variables that turn caching off (cachealloc_options.uncached), oomlab's own first, then PyTorch 2.11's
 * (forceUncachedAllocator reads both, c10::utils::check_env: "1" true, "0" false). */
#define ALLOC_NO_CACHING_ENV_VARS                                                                              \
    "OOMLAB_NO_CUDA_MEMORY_CACHING", "PYTORCH_NO_CUDA_MEMORY_CACHING", "PYTORCH_NO_HIP_MEMORY_CACHING"

/* Whether caching is off: OOMLAB_NO_CUDA_MEMORY_CACHING decides when set; else off when either PyTorch variable is
 * "1", as PyTorch's has_cuda_env || has_rocm_env. *on gets the answer, *source the variable that decided it (NULL
 * when none did: none is set, or only PyTorch's, at "0"). A value other than "0" or "1" is OOM_EINVAL with one line in err naming the
 * variable (stricter than PyTorch, which warns and ignores it). */
oom_status alloc_no_caching_pick(bool *on, const char **source, char *err, size_t errcap);

/* roundup_power2_divisions for a request of size bytes (PyTorch's bucket lookup: floor(log2 size) - 20,
 * clamped to 0..15). */
size_t alloc_conf_divisions(const alloc_conf *c, size_t size);

/* Write the canonical settings (all modeled keys, fixed order) as "key:value,..." into buf, truncated to cap;
 * returns buf. Unlimited max_split_size reads "unlimited"; the divisions use the shortest list form. */
char *alloc_conf_format(const alloc_conf *c, char *buf, size_t cap);

OOM_END_DECLS

#endif
