/* test_parallel.c - --jobs: the catalog, a fault sweep and a --sweep run with several variants' processes at once
 * give what one at a time gives: every results file byte for byte less what baseline.c strips as times (started,
 * seconds, cpu_seconds, metrics in s, notes that quote times), the same table, the same fault sweep report.
 * The binary is $OOMLAB_BIN (make test sets it), else build/oomlab; tests run from the repository root. */
#include <criterion/criterion.h>

#include <cjson/cJSON.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "core/fileio.h"
#include "results/baseline.h"
#include "run/scenario.h"
#include "testutil.h"

static char tmpdir[TEST_TMPDIR_MAX];

static void setup(void) { test_tmpdir_make(tmpdir, "parallel"); }

static void teardown(void) { test_tmpdir_remove(tmpdir); }

TestSuite(parallel, .init = setup, .fini = teardown);

/* Run `$OOMLAB_BIN args` (from the fixtures binary beside it when fixtures), stdout into the scratch file out;
 * returns the exit status. */
static int oomlab(bool fixtures, const char *args, const char *out)
{
    char bin[512], cmd[2048];
    test_oomlab_bin(fixtures, bin, sizeof bin);
    snprintf(cmd, sizeof cmd,
             "env -u OOMLAB_ALLOC_CONF -u PYTORCH_CUDA_ALLOC_CONF -u PYTORCH_HIP_ALLOC_CONF -u PYTORCH_ALLOC_CONF "
             "-u OOMLAB_NO_CUDA_MEMORY_CACHING -u PYTORCH_NO_CUDA_MEMORY_CACHING '%s' %s >'%s'",
             bin, args, test_path(tmpdir, out));
    int st = system(cmd);
    cr_assert(st != -1 && WIFEXITED(st), "cannot run: %s", cmd);
    return WEXITSTATUS(st);
}

/* The scratch file name, with the lines that start with each of drop removed (the jobs line, the results path). */
static char *text_without(const char *name, const char *const *drop, size_t ndrop)
{
    char *t = fileio_read_all(test_path(tmpdir, name), NULL);
    cr_assert_not_null(t, "%s was not written", name);
    char *w = t;
    for (char *line = t; *line;) {
        char *nl = strchr(line, '\n');
        size_t len = nl ? (size_t)(nl - line + 1) : strlen(line);
        bool keep = true;
        for (size_t k = 0; k < ndrop; k++)
            keep = keep && strncmp(line, drop[k], strlen(drop[k])) != 0;
        if (keep) {
            memmove(w, line, len);
            w += len;
        }
        line += len;
    }
    *w = '\0';
    return t;
}

/* The one run folder oomlab made under the scratch folder dir. */
static void run_folder(const char *dir, char *out, size_t cap)
{
    char parent[TEST_TMPDIR_MAX + 64];
    snprintf(parent, sizeof parent, "%s", test_path(tmpdir, dir));
    DIR *d = opendir(parent);
    cr_assert_not_null(d, "%s: no such folder", parent);
    struct dirent *e;
    int found = 0;
    while ((e = readdir(d)))
        if (e->d_name[0] != '.') {
            snprintf(out, cap, "%s/%s", parent, e->d_name);
            found++;
        }
    closedir(d);
    cr_assert_eq(found, 1, "%s holds %d run folders", parent, found);
}

/* The file's JSON less its times (baseline_of), as text. */
static char *untimed(const char *path)
{
    char *text = fileio_read_all(path, NULL);
    cr_assert_not_null(text, "%s was not written", path);
    cJSON *j = cJSON_Parse(text);
    cr_assert_not_null(j, "%s is not JSON", path);
    cJSON *b = baseline_of(j);
    cr_assert_not_null(b);
    char *s = cJSON_Print(b);
    cJSON_Delete(b);
    cJSON_Delete(j);
    free(text);
    return s;
}

static const char *const run_drop[] = {"jobs: ", "results: "};

/* The catalog once with jobs jobs, into the scratch folder named dir, its table into dir.txt. A dry run at the ci
 * scale: the runner, its processes and every counter, without the CPU kernels' arithmetic (every variant runs in a
 * process of its own, so jobs cannot share it; the computed catalog runs in .ci/run and in the catalog tests). */
static void catalog(int jobs, const char *dir)
{
    char args[1024], out[64];
    snprintf(args, sizeof args, "run --backend sim --scale ci --dry-run --jobs %d --out '%s'", jobs,
             test_path(tmpdir, dir));
    snprintf(out, sizeof out, "%s.txt", dir);
    cr_assert_eq(oomlab(false, args, out), 0, "oomlab %s failed", args);
}

Test(parallel, the_catalog_with_4_jobs_is_the_catalog_with_1, .timeout = 900)
{
    catalog(1, "one");
    catalog(4, "four");
    char *one = text_without("one.txt", run_drop, 2), *four = text_without("four.txt", run_drop, 2);
    cr_assert_str_eq(four, one, "the catalog's table differs with --jobs 4");
    char *raw = fileio_read_all(test_path(tmpdir, "four.txt"), NULL);
    cr_assert(raw && strncmp(raw, "jobs: 4 (--jobs)\n", 17) == 0, "no jobs line first: %.80s", raw ? raw : "");
    char *raw1 = fileio_read_all(test_path(tmpdir, "one.txt"), NULL);
    cr_assert(raw1 && !strstr(raw1, "jobs: "), "--jobs 1 prints a jobs line: %.80s", raw1 ? raw1 : "");
    free(raw);
    free(raw1);
    free(one);
    free(four);
    char d1[TEST_TMPDIR_MAX + 384], d4[TEST_TMPDIR_MAX + 384], p1[TEST_TMPDIR_MAX + 512], p4[TEST_TMPDIR_MAX + 512];
    run_folder("one", d1, sizeof d1);
    run_folder("four", d4, sizeof d4);
    for (size_t k = 0; k < scenario_catalog_size; k++) {
        snprintf(p1, sizeof p1, "%s/%s.json", d1, scenario_catalog[k]->name);
        snprintf(p4, sizeof p4, "%s/%s.json", d4, scenario_catalog[k]->name);
        char *a = untimed(p1), *b = untimed(p4);
        cr_assert_str_eq(b, a, "%s differs with --jobs 4", scenario_catalog[k]->name);
        free(a);
        free(b);
    }
}

static const char *const sweep_drop[] = {"jobs: "};

Test(parallel, a_fault_sweep_with_4_jobs_is_the_sweep_with_1, .timeout = 600)
{
    /* every point clean, then a leak and a crash found on the OOM path (the fixtures), every other point */
    static const struct {
        bool fixtures;
        const char *args;
        int rc;
    } sweeps[] = {
        {false, "faultsweep fragmentation --backend sim", 0},
        {true, "faultsweep leaky_fixture --backend sim --stride 2", 1},
    };
    for (size_t k = 0; k < sizeof sweeps / sizeof sweeps[0]; k++) {
        char args[512];
        snprintf(args, sizeof args, "%s --jobs 1", sweeps[k].args);
        cr_assert_eq(oomlab(sweeps[k].fixtures, args, "one.txt"), sweeps[k].rc, "%s", args);
        snprintf(args, sizeof args, "%s --jobs 4", sweeps[k].args);
        cr_assert_eq(oomlab(sweeps[k].fixtures, args, "four.txt"), sweeps[k].rc, "%s", args);
        char *one = text_without("one.txt", sweep_drop, 1), *four = text_without("four.txt", sweep_drop, 1);
        cr_assert_str_eq(four, one, "%s: the report differs with --jobs 4", sweeps[k].args);
        char *raw = fileio_read_all(test_path(tmpdir, "four.txt"), NULL);
        cr_assert(raw && strstr(raw, "\njobs: 4 (--jobs)\n"), "no jobs line: %.200s", raw ? raw : "");
        free(raw);
        free(one);
        free(four);
    }
}

Test(parallel, a_sweep_with_4_jobs_is_the_sweep_with_1, .timeout = 600)
{
    char args[1024], path[2][TEST_TMPDIR_MAX + 512];
    const char *dirs[2] = {"one", "four"};
    for (int k = 0; k < 2; k++) {
        snprintf(args, sizeof args, "run oversize_batch --backend sim --sweep batch=64..1024 --jobs %d --out '%s'",
                 k ? 4 : 1, test_path(tmpdir, dirs[k]));
        char out[32];
        snprintf(out, sizeof out, "%s.txt", dirs[k]);
        cr_assert_eq(oomlab(false, args, out), 0, "%s", args);
        char d[TEST_TMPDIR_MAX + 384];
        run_folder(dirs[k], d, sizeof d);
        snprintf(path[k], sizeof path[k], "%s/oversize_batch.sweep.json", d);
    }
    char *one = text_without("one.txt", run_drop, 2), *four = text_without("four.txt", run_drop, 2);
    cr_assert_str_eq(four, one, "the sweep's table differs with --jobs 4");
    free(one);
    free(four);
    /* the sweep file: byte for byte but its start time */
    char *a = fileio_read_all(path[0], NULL), *b = fileio_read_all(path[1], NULL);
    cr_assert(a && b);
    cJSON *ja = cJSON_Parse(a), *jb = cJSON_Parse(b);
    cr_assert(ja && jb);
    cJSON_DeleteItemFromObjectCaseSensitive(ja, "started");
    cJSON_DeleteItemFromObjectCaseSensitive(jb, "started");
    char *ta = cJSON_Print(ja), *tb = cJSON_Print(jb);
    cr_assert_str_eq(tb, ta, "the sweep's results file differs with --jobs 4");
    free(ta);
    free(tb);
    cJSON_Delete(ja);
    cJSON_Delete(jb);
    free(a);
    free(b);
}
