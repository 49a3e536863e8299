/* test_memstats.c - stat semantics, resets, checks, format_size, and memory_stats()/memory_summary() against
 * PyTorch 2.11 recordings (tests/data/NAME.stats.json). */
#include <criterion/criterion.h>
#include <criterion/parameterized.h>

#include <cjson/cJSON.h>
#include <glob.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "alloc/memstats.h"
#include "core/fileio.h"
#include "core/status.h"

#define STATS_GLOB "tests/data/*.stats.json"

/* ---- data-driven: one test per recording ---- */

typedef struct stats_file {
    char path[256];
} stats_file;

static void free_params(struct criterion_test_params *crp) { cr_free(crp->params); }

ParameterizedTestParameters(memstats, recorded)
{
    glob_t g;
    size_t n = 0;
    stats_file *files = NULL;
    if (glob(STATS_GLOB, 0, NULL, &g) == 0) {
        files = cr_calloc(g.gl_pathc ? g.gl_pathc : 1, sizeof *files);
        for (size_t i = 0; files && i < g.gl_pathc; i++)
            if (strlen(g.gl_pathv[i]) < sizeof files[n].path)
                strcpy(files[n++].path, g.gl_pathv[i]);
        globfree(&g);
    }
    return cr_make_param_array(stats_file, files, n, free_params);
}

/* Load "memory_stats" into *m (every key must be known and integral); returns the parsed document. */
static cJSON *load_recording(const char *path, memstats *m)
{
    char *text = fileio_read_all(path, NULL);
    cr_assert_not_null(text, "cannot read %s", path);
    cJSON *doc = cJSON_Parse(text);
    free(text);
    cr_assert_not_null(doc, "%s: bad JSON", path);
    const cJSON *ms = cJSON_GetObjectItemCaseSensitive(doc, "memory_stats");
    cr_assert(cJSON_IsObject(ms), "%s: no memory_stats", path);

    memset(m, 0, sizeof *m);
    size_t i = 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, ms)
    {
        cr_assert(cJSON_IsNumber(it), "%s: %s is not a number", path, it->string);
        double d = it->valuedouble;
        cr_assert(d == floor(d) && fabs(d) < 9007199254740992.0, "%s: %s = %g is not an exact integer", path,
                  it->string, d);
        cr_assert(memstats_set(m, it->string, (int64_t)d), "%s: unknown key %s", path, it->string);
        /* the file's keys are PyTorch's sorted order; ours must match position for position */
        const char *key = NULL;
        int64_t v = 0;
        cr_assert(memstats_key(m, i, &key, &v), "%s: key %zu (%s) beyond ours", path, i, it->string);
        cr_assert_str_eq(key, it->string, "%s: key %zu", path, i);
        cr_assert_eq(v, (int64_t)d, "%s: %s reads back %lld", path, key, (long long)v);
        i++;
    }
    cr_assert_eq(i, (size_t)MEMSTATS_NKEYS, "%s: %zu keys, expected %d", path, i, MEMSTATS_NKEYS);
    return doc;
}

/* The full summary minus its "from large pool"/"from small pool" rows. */
static char *drop_pool_rows(const char *full)
{
    char *out = malloc(strlen(full) + 1);
    cr_assert_not_null(out);
    size_t o = 0;
    for (const char *p = full; *p;) {
        const char *nl = strchr(p, '\n');
        size_t len = nl ? (size_t)(nl - p) + 1 : strlen(p);
        bool pool = (len > 22 && (strncmp(p, "|       from large pool", 23) == 0 ||
                                  strncmp(p, "|       from small pool", 23) == 0));
        if (!pool) {
            memcpy(out + o, p, len);
            o += len;
        }
        p += len;
    }
    out[o] = '\0';
    return out;
}

ParameterizedTest(stats_file *f, memstats, recorded)
{
    memstats m;
    cJSON *doc = load_recording(f->path, &m);

    /* memstats_get agrees with memstats_key for every key */
    for (size_t i = 0; i < MEMSTATS_NKEYS; i++) {
        const char *key;
        int64_t v, w;
        cr_assert(memstats_key(&m, i, &key, &v));
        cr_assert(memstats_get(&m, key, &w), "%s", key);
        cr_assert_eq(v, w, "%s", key);
    }
    cr_assert_eq(memstats_check(&m), OOM_OK, "%s: %s", f->path, oom_error_msg());

    const cJSON *sum = cJSON_GetObjectItemCaseSensitive(doc, "memory_summary");
    cr_assert(cJSON_IsString(sum), "%s: no memory_summary", f->path);
    char *got = memstats_summary(&m, 0, false);
    cr_assert_not_null(got);
    cr_assert_str_eq(got, sum->valuestring, "%s: memory_summary differs", f->path);
    free(got);

    char *want = drop_pool_rows(sum->valuestring);
    got = memstats_summary(&m, 0, true);
    cr_assert_not_null(got);
    cr_assert_str_eq(got, want, "%s: abbreviated memory_summary differs", f->path);
    free(got);
    free(want);

    /* "{format_size(allowed)} allowed; " in each recorded OOM message */
    const cJSON *msgs = cJSON_GetObjectItemCaseSensitive(doc, "oom_messages");
    const cJSON *allowed = cJSON_GetObjectItemCaseSensitive(doc, "allowed");
    const cJSON *msg;
    cJSON_ArrayForEach(msg, msgs)
    {
        cr_assert(cJSON_IsString(msg));
        cr_assert(cJSON_IsNumber(allowed), "%s: OOM messages without a cap", f->path);
        char sz[32], needle[64];
        memstats_format_size((uint64_t)allowed->valuedouble, sz, sizeof sz);
        snprintf(needle, sizeof needle, " %s allowed; ", sz);
        cr_assert_not_null(strstr(msg->valuestring, needle), "%s: '%s' not in '%s'", f->path, needle,
                           msg->valuestring);
    }
    cJSON_Delete(doc);
}

Test(memstats, recordings_present)
{
    glob_t g;
    cr_assert_eq(glob(STATS_GLOB, 0, NULL, &g), 0, "no %s (run from the repo root)", STATS_GLOB);
    cr_assert_geq(g.gl_pathc, 1);
    globfree(&g);
}

/* ---- keys ---- */

Test(memstats, keys_sorted_and_known)
{
    memstats m = {0};
    const char *prev = NULL, *key;
    int64_t v;
    for (size_t i = 0; i < MEMSTATS_NKEYS; i++) {
        cr_assert(memstats_key(&m, i, &key, &v));
        if (prev)
            cr_assert_lt(strcmp(prev, key), 0, "%s before %s", prev, key);
        prev = key;
        /* each key addresses a distinct field */
        cr_assert(memstats_set(&m, key, (int64_t)i + 1));
    }
    for (size_t i = 0; i < MEMSTATS_NKEYS; i++) {
        cr_assert(memstats_key(&m, i, &key, &v));
        cr_assert_eq(v, (int64_t)i + 1, "%s", key);
    }
    cr_assert_not(memstats_key(&m, MEMSTATS_NKEYS, &key, &v));
    cr_assert_not(memstats_get(&m, "allocated.all.current", &v)); /* the docstring's name; the key is allocation */
    cr_assert_not(memstats_set(&m, "num_oom_rejections", 1));     /* post-2.11 */
    cr_assert_not(memstats_get(&m, "active.all", &v));
    cr_assert_not(memstats_get(&m, "", &v));

    memstats z = {0};
    z.allocated_bytes[STAT_LARGE].peak = 77;
    z.oversize_segments.freed = 5;
    z.max_split_size = -1;
    z.num_sync_all_streams = 9;
    cr_assert(memstats_get(&z, "allocated_bytes.large_pool.peak", &v));
    cr_assert_eq(v, 77);
    cr_assert(memstats_get(&z, "oversize_segments.freed", &v));
    cr_assert_eq(v, 5);
    cr_assert(memstats_get(&z, "max_split_size", &v));
    cr_assert_eq(v, -1);
    cr_assert(memstats_get(&z, "num_sync_all_streams", &v));
    cr_assert_eq(v, 9);
    cr_assert(memstats_set(&z, "inactive_split.small_pool.current", 4));
    cr_assert_eq(z.inactive_split[STAT_SMALL].current, 4);
}

/* ---- stat semantics ---- */

Test(memstats, increase_decrease)
{
    memstat s = {0};
    stat_increase(&s, 100);
    stat_increase(&s, 50);
    stat_decrease(&s, 120);
    stat_increase(&s, 10);
    cr_assert_eq(s.current, 40);
    cr_assert_eq(s.peak, 150);
    cr_assert_eq(s.allocated, 160);
    cr_assert_eq(s.freed, 120);

    memstat a[STAT_TYPES] = {{0}};
    stat_array_update(a, STAT_LARGE, 1 << 20);
    stat_array_update(a, STAT_SMALL, 512);
    stat_array_update(a, STAT_LARGE, -(1 << 20));
    stat_array_update(a, STAT_SMALL, 0);
    cr_assert_eq(a[STAT_ALL].current, 512);
    cr_assert_eq(a[STAT_ALL].peak, (1 << 20) + 512);
    cr_assert_eq(a[STAT_ALL].allocated, (1 << 20) + 512);
    cr_assert_eq(a[STAT_ALL].freed, 1 << 20);
    cr_assert_eq(a[STAT_LARGE].current, 0);
    cr_assert_eq(a[STAT_LARGE].peak, 1 << 20);
    cr_assert_eq(a[STAT_LARGE].freed, 1 << 20);
    cr_assert_eq(a[STAT_SMALL].current, 512);
    cr_assert_eq(a[STAT_SMALL].peak, 512);
    cr_assert_eq(a[STAT_SMALL].freed, 0);
}

/* A small history: one large and one small block, one freed; plus an oversize block. */
static void populate(memstats *m)
{
    memset(m, 0, sizeof *m);
    m->max_split_size = 64 << 20;
    stat_array_update(m->segment, STAT_LARGE, 1);
    stat_array_update(m->reserved_bytes, STAT_LARGE, 100 << 20);
    stat_array_update(m->allocation, STAT_LARGE, 1);
    stat_array_update(m->allocated_bytes, STAT_LARGE, 80 << 20);
    stat_array_update(m->active, STAT_LARGE, 1);
    stat_array_update(m->active_bytes, STAT_LARGE, 80 << 20);
    stat_array_update(m->requested_bytes, STAT_LARGE, 80 << 20);
    stat_increase(&m->oversize_allocations, 1);
    stat_increase(&m->oversize_segments, 1);
    stat_array_update(m->inactive_split, STAT_LARGE, 1);
    stat_array_update(m->inactive_split_bytes, STAT_LARGE, 20 << 20);
    stat_array_update(m->segment, STAT_SMALL, 1);
    stat_array_update(m->reserved_bytes, STAT_SMALL, 2 << 20);
    stat_array_update(m->allocation, STAT_SMALL, 1);
    stat_array_update(m->allocated_bytes, STAT_SMALL, 1024);
    stat_array_update(m->active, STAT_SMALL, 1);
    stat_array_update(m->active_bytes, STAT_SMALL, 1024);
    stat_array_update(m->requested_bytes, STAT_SMALL, 1000);
    stat_array_update(m->inactive_split, STAT_SMALL, 1);
    stat_array_update(m->inactive_split_bytes, STAT_SMALL, (2 << 20) - 1024);
    /* free the large block */
    stat_array_update(m->allocation, STAT_LARGE, -1);
    stat_array_update(m->allocated_bytes, STAT_LARGE, -(80 << 20));
    stat_array_update(m->active, STAT_LARGE, -1);
    stat_array_update(m->active_bytes, STAT_LARGE, -(80 << 20));
    stat_array_update(m->requested_bytes, STAT_LARGE, -(80 << 20));
    stat_decrease(&m->oversize_allocations, 1);
    stat_array_update(m->inactive_split, STAT_LARGE, -1);
    stat_array_update(m->inactive_split_bytes, STAT_LARGE, -(20 << 20));
    m->num_alloc_retries = 2;
    m->num_ooms = 1;
    m->num_sync_all_streams = 3;
    m->num_device_alloc = 2;
    m->num_device_free = 4;
}

Test(memstats, reset_peak)
{
    memstats m;
    populate(&m);
    cr_assert_eq(memstats_check(&m), OOM_OK, "%s", oom_error_msg());
    cr_assert_eq(m.allocated_bytes[STAT_ALL].peak, (80 << 20) + 1024);
    memstats_reset_peak(&m);
    cr_assert_eq(m.allocated_bytes[STAT_ALL].peak, 1024);
    cr_assert_eq(m.allocated_bytes[STAT_LARGE].peak, 0);
    cr_assert_eq(m.allocated_bytes[STAT_SMALL].peak, 1024);
    cr_assert_eq(m.inactive_split_bytes[STAT_ALL].peak, (2 << 20) - 1024);
    cr_assert_eq(m.oversize_allocations.peak, 0);
    cr_assert_eq(m.oversize_segments.peak, 1);
    /* the rest is untouched */
    cr_assert_eq(m.allocated_bytes[STAT_ALL].allocated, (80 << 20) + 1024);
    cr_assert_eq(m.allocated_bytes[STAT_ALL].freed, 80 << 20);
    cr_assert_eq(m.num_ooms, 1);
    for (size_t i = 0; i < MEMSTATS_NKEYS; i++) {
        const char *key;
        int64_t v, cur;
        memstats_key(&m, i, &key, &v);
        size_t n = strlen(key);
        if (n > 5 && strcmp(key + n - 5, ".peak") == 0) {
            char ck[64];
            snprintf(ck, sizeof ck, "%.*s.current", (int)(n - 5), key);
            cr_assert(memstats_get(&m, ck, &cur));
            cr_assert_eq(v, cur, "%s", key);
        }
    }
    cr_assert_eq(memstats_check(&m), OOM_OK, "%s", oom_error_msg());
}

Test(memstats, reset_accumulated)
{
    memstats m;
    populate(&m);
    memstats before = m;
    memstats_reset_accumulated(&m);
    for (size_t i = 0; i < MEMSTATS_NKEYS; i++) {
        const char *key;
        int64_t v, old;
        memstats_key(&m, i, &key, &v);
        memstats_get(&before, key, &old);
        size_t n = strlen(key);
        bool acc = (n > 10 && strcmp(key + n - 10, ".allocated") == 0) || (n > 6 && strcmp(key + n - 6, ".freed") == 0);
        bool counter = strcmp(key, "num_alloc_retries") == 0 || strcmp(key, "num_ooms") == 0 ||
                       strcmp(key, "num_sync_all_streams") == 0 || strcmp(key, "num_device_alloc") == 0 ||
                       strcmp(key, "num_device_free") == 0;
        cr_assert_eq(v, (acc || counter) ? 0 : old, "%s: %lld (was %lld)", key, (long long)v, (long long)old);
    }
    cr_assert_eq(m.max_split_size, 64 << 20);
    cr_assert_eq(m.reserved_bytes[STAT_ALL].current, (100 << 20) + (2 << 20));
    cr_assert_eq(m.reserved_bytes[STAT_ALL].peak, (100 << 20) + (2 << 20));
    cr_assert_eq(m.oversize_segments.current, 1);
    cr_assert_eq(m.oversize_segments.allocated, 0);
    cr_assert_eq(m.num_device_free, 0);
}

/* ---- memstats_check ---- */

Test(memstats, check_catches_corruption)
{
    memstats m;
    populate(&m);
    cr_assert_eq(memstats_check(&m), OOM_OK);
    memset(&m, 0, sizeof m);
    cr_assert_eq(memstats_check(&m), OOM_OK);

    /* current != allocated - freed */
    populate(&m);
    m.active_bytes[STAT_SMALL].current += 1;
    m.active_bytes[STAT_ALL].current += 1;
    m.active_bytes[STAT_ALL].peak += 1;
    m.active_bytes[STAT_SMALL].peak += 1;
    oom_error_clear();
    cr_assert_eq(memstats_check(&m), OOM_ECORRUPT);
    cr_assert_not_null(strstr(oom_error_msg(), "active_bytes"), "%s", oom_error_msg());
    cr_assert_not_null(strstr(oom_error_msg(), "ECORRUPT"), "%s", oom_error_msg());

    /* peak < current */
    populate(&m);
    m.segment[STAT_LARGE].peak = 0;
    oom_error_clear();
    cr_assert_eq(memstats_check(&m), OOM_ECORRUPT);
    cr_assert_not_null(strstr(oom_error_msg(), "segment.large_pool"), "%s", oom_error_msg());

    /* current < 0 (consistent otherwise) */
    populate(&m);
    m.requested_bytes[STAT_SMALL].freed += 2000;
    m.requested_bytes[STAT_SMALL].current -= 2000;
    m.requested_bytes[STAT_ALL].freed += 2000;
    m.requested_bytes[STAT_ALL].current -= 2000;
    oom_error_clear();
    cr_assert_eq(memstats_check(&m), OOM_ECORRUPT);
    cr_assert_not_null(strstr(oom_error_msg(), "requested_bytes"), "%s", oom_error_msg());

    /* all != small + large, each pool consistent on its own */
    populate(&m);
    stat_increase(&m.reserved_bytes[STAT_SMALL], 512);
    oom_error_clear();
    cr_assert_eq(memstats_check(&m), OOM_ECORRUPT);
    cr_assert_not_null(strstr(oom_error_msg(), "reserved_bytes.all"), "%s", oom_error_msg());

    /* the oversize stats */
    populate(&m);
    m.oversize_segments.freed = 7;
    oom_error_clear();
    cr_assert_eq(memstats_check(&m), OOM_ECORRUPT);
    cr_assert_not_null(strstr(oom_error_msg(), "oversize_segments"), "%s", oom_error_msg());

    /* overflow in allocated - freed is corruption, not UB */
    memset(&m, 0, sizeof m);
    m.allocation[STAT_LARGE].allocated = INT64_MIN;
    m.allocation[STAT_LARGE].freed = 1;
    m.allocation[STAT_LARGE].current = INT64_MAX;
    m.allocation[STAT_LARGE].peak = INT64_MAX;
    cr_assert_eq(memstats_check(&m), OOM_ECORRUPT);
}

/* ---- format_size ---- */

static void expect_size(uint64_t b, const char *want)
{
    char buf[32];
    cr_assert_eq(memstats_format_size(b, buf, sizeof buf), buf);
    cr_assert_str_eq(buf, want, "format_size(%llu)", (unsigned long long)b);
}

Test(memstats, format_size)
{
    expect_size(0, "0 bytes");
    expect_size(1, "1 bytes");
    expect_size(1024, "1024 bytes");
    expect_size(1025, "1.00 KiB");
    expect_size(1536, "1.50 KiB");
    expect_size(1048576, "1024.00 KiB");
    expect_size(1048577, "1.00 MiB");
    expect_size(20971520, "20.00 MiB");
    expect_size(2097152, "2.00 MiB");
    expect_size(208u << 20, "208.00 MiB");
    expect_size(1073741824ULL, "1024.00 MiB");
    expect_size(1073741825ULL, "1.00 GiB");
    expect_size(1416958225ULL, "1.32 GiB");
    expect_size(85017493504ULL, "79.18 GiB");
    expect_size(UINT64_MAX, "17179869184.00 GiB");
}

/* ---- memory_summary on hand-built stats ---- */

static const struct {
    const char *key;
    int64_t v;
} synthetic[] = {
    {"num_ooms", 3},
    {"num_alloc_retries", 12345678},
    {"allocated_bytes.all.current", 2097152},          /* 2 MiB reads as KiB */
    {"allocated_bytes.all.peak", 805306368},           /* 768 MiB: first MiB */
    {"allocated_bytes.all.allocated", 786431},         /* just under 768 KiB: bytes */
    {"allocated_bytes.all.freed", 786432},             /* 768 KiB */
    {"active_bytes.all.peak", 1024},
    {"active_bytes.all.allocated", 858993459200},      /* 800 GiB */
    {"active_bytes.all.freed", 1023},
    {"requested_bytes.all.current", 1000},
    {"requested_bytes.all.peak", 805306367},           /* 1 byte under 768 MiB: KiB */
    {"reserved_bytes.all.current", 20971520},
    {"reserved_bytes.all.peak", 3377699720527872},     /* 3 PiB reads as TiB */
    {"inactive_split_bytes.all.current", 824633720832},
    {"allocation.all.current", 749999},
    {"allocation.all.peak", 750000},
    {"allocation.all.allocated", 750000000},
    {"allocation.all.freed", 1234567},
    {"segment.all.current", 7},
    {"segment.all.peak", 749999999},
    {"segment.all.allocated", 9999999999},
    {"oversize_allocations.current", 1},
    {"oversize_allocations.peak", 2},
    {"oversize_allocations.allocated", 750001},
    {"oversize_allocations.freed", 750000},
    {"oversize_segments.peak", 999999},
};

static void build_synthetic(memstats *m)
{
    memset(m, 0, sizeof *m);
    for (size_t i = 0; i < sizeof synthetic / sizeof synthetic[0]; i++)
        cr_assert(memstats_set(m, synthetic[i].key, synthetic[i].v), "%s", synthetic[i].key);
}

Test(memstats, summary_abbreviated_by_hand)
{
    static const char want[] =
        "|===========================================================================|\n"
        "|                  PyTorch CUDA memory summary, device ID 3                 |\n"
        "|---------------------------------------------------------------------------|\n"
        "|            CUDA OOMs: 3            |        cudaMalloc retries: 12345678  |\n"
        "|===========================================================================|\n"
        "|        Metric         | Cur Usage  | Peak Usage | Tot Alloc  | Tot Freed  |\n"
        "|---------------------------------------------------------------------------|\n"
        "| Allocated memory      |   2048 KiB |    768 MiB | 786431 B   |    768 KiB |\n"
        "|---------------------------------------------------------------------------|\n"
        "| Active memory         |      0 B   |   1024 B   |    800 GiB |   1023 B   |\n"
        "|---------------------------------------------------------------------------|\n"
        "| Requested memory      |   1000 B   | 786431 KiB |      0 B   |      0 B   |\n"
        "|---------------------------------------------------------------------------|\n"
        "| GPU reserved memory   |  20480 KiB |   3072 TiB |      0 B   |      0 B   |\n"
        "|---------------------------------------------------------------------------|\n"
        "| Non-releasable memory |    768 GiB |      0 B   |      0 B   |      0 B   |\n"
        "|---------------------------------------------------------------------------|\n"
        "| Allocations           |  749999    |     750 K  |     750 M  |    1234 K  |\n"
        "|---------------------------------------------------------------------------|\n"
        "| Active allocs         |       0    |       0    |       0    |       0    |\n"
        "|---------------------------------------------------------------------------|\n"
        "| GPU reserved segments |       7    |  749999 K  |    9999 M  |       0    |\n"
        "|---------------------------------------------------------------------------|\n"
        "| Non-releasable allocs |       0    |       0    |       0    |       0    |\n"
        "|---------------------------------------------------------------------------|\n"
        "| Oversize allocations  |       1    |       2    |     750 K  |     750 K  |\n"
        "|---------------------------------------------------------------------------|\n"
        "| Oversize GPU segments |       0    |     999 K  |       0    |       0    |\n"
        "|===========================================================================|\n";
    memstats m;
    build_synthetic(&m);
    char *got = memstats_summary(&m, 3, true);
    cr_assert_not_null(got);
    cr_assert_str_eq(got, want);
    free(got);
}

/* Pool rows take the unit of the "all" row, and negatives floor-divide as in Python. */
Test(memstats, summary_pool_rows_floor)
{
    memstats m;
    build_synthetic(&m);
    memstats_set(&m, "allocated_bytes.large_pool.current", -1500);
    memstats_set(&m, "allocated_bytes.large_pool.peak", 805306367);
    memstats_set(&m, "allocation.small_pool.freed", -1);
    memstats_set(&m, "allocation.small_pool.allocated", 1999);
    char *got = memstats_summary(&m, -1, false);
    cr_assert_not_null(got);
    cr_assert_not_null(
        strstr(got, "|                  PyTorch CUDA memory summary, device ID -1                |\n"), "%s", got);
    cr_assert_not_null(
        strstr(got, "\n|       from large pool |     -2 KiB |    767 MiB |      0 B   |      0 KiB |\n"), "%s", got);
    cr_assert_not_null(
        strstr(got, "\n|       from small pool |       0    |       0 K  |       0 M  |      -1 K  |\n"), "%s", got);
    /* 47 lines of 77 characters plus newline */
    size_t lines = 0;
    for (const char *p = got; *p;) {
        const char *nl = strchr(p, '\n');
        cr_assert_not_null(nl);
        cr_assert_eq((size_t)(nl - p), 77, "line %zu: %.*s", lines, (int)(nl - p), p);
        lines++;
        p = nl + 1;
    }
    cr_assert_eq(lines, 47);
    free(got);
}
