/* test_snapshot2json.c - scripts/snapshot2json.py: a _dump_snapshot() pickle becomes the JSON `oomlab replay`
 * reads (tuples become lists, --strip-frames empties every frames list, --budget adds the recording's budget);
 * anything that is not a snapshot, or that references a class, is refused with exit 2 and nothing written.
 * Also: the pickle `oomlab replay --snapshot OUT.pickle` writes (the format pytorch.org/memory_viz reads)
 * converts back to the same dict as its JSON. Pickles are made with python3's standard library. */
#include <criterion/criterion.h>

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/fileio.h"
#include "testutil.h"

#define SCRIPT "scripts/snapshot2json.py"

static char tmpdir[64];

static void setup(void) { test_tmpdir_make(tmpdir, "s2j"); }

static void teardown(void) { test_tmpdir_remove(tmpdir); }

TestSuite(snapshot2json, .init = setup, .fini = teardown);

static const char *tpath(const char *name) { return test_path(tmpdir, name); }

/* Run a shell command; its exit status (stdout and stderr go to tmpdir/stdout and tmpdir/stderr). */
static int sh(const char *fmt, const char *a, const char *b)
{
    char cmd[1024], full[1400];
    snprintf(cmd, sizeof cmd, fmt, a, b);
    snprintf(full, sizeof full, "%s >'%s/stdout' 2>'%s/stderr'", cmd, tmpdir, tmpdir);
    int st = system(full);
    cr_assert(st != -1 && WIFEXITED(st), "cannot run: %s", cmd);
    return WEXITSTATUS(st);
}

/* Write a pickle of the Python expression expr (stdlib only; names from collections, json, os, sys available). */
static void make_pickle(const char *name, const char *expr)
{
    char code[900];
    snprintf(code, sizeof code,
             "import collections, json, os, pickle, sys; pickle.dump(%s, open(sys.argv[1], \"wb\"))", expr);
    int rc = sh("python3 -c '%s' '%s'", code, tpath(name));
    char *err = fileio_read_all(tpath("stderr"), NULL);
    cr_assert_eq(rc, 0, "python3 could not write the pickle: %s", err ? err : "");
    free(err);
}

/* Number of entries in tmpdir besides stdout and stderr. */
static int other_files(void)
{
    int rc = sh("ls -A '%s' | grep -c -v -x -e stdout -e stderr%s", tmpdir, "");
    cr_assert(rc == 0 || rc == 1); /* grep -c exits 1 when it counts 0 */
    char *t = fileio_read_all(tpath("stdout"), NULL);
    cr_assert_not_null(t);
    int n = atoi(t);
    free(t);
    return n;
}

/* Run the script on in with -o out; expect exit 2, one stderr line containing what, and nothing written. */
static void expect_refused(const char *in, const char *what)
{
    char args[400];
    snprintf(args, sizeof args, "'%s' -o '%s'", tpath(in), tpath("out.json"));
    int rc = sh("python3 " SCRIPT " %s%s", args, "");
    char *err = fileio_read_all(tpath("stderr"), NULL), *out = fileio_read_all(tpath("stdout"), NULL);
    cr_assert(err && out);
    cr_assert_eq(rc, 2, "exit %d, expected 2: %s", rc, err);
    cr_assert_str_empty(out);
    size_t len = strlen(err);
    cr_assert(len > 1 && strchr(err, '\n') == err + len - 1, "stderr is not one line: %s", err);
    cr_assert_not_null(strstr(err, what), "stderr does not say '%s': %s", what, err);
    cr_assert(access(tpath("out.json"), F_OK) != 0, "out.json was written");
    cr_assert_eq(other_files(), 1, "something besides the input was left in %s", tmpdir);
    free(err);
    free(out);
}

static cJSON *load_json(const char *path)
{
    char *text = fileio_read_all(path, NULL);
    cr_assert_not_null(text, "cannot read %s", path);
    cJSON *doc = cJSON_Parse(text);
    free(text);
    cr_assert_not_null(doc, "%s is not JSON", path);
    return doc;
}

/* Every "frames" member anywhere in v is an empty list; returns how many there are. */
static int frames_all_empty(const cJSON *v)
{
    int n = 0;
    for (const cJSON *c = v->child; c; c = c->next) {
        if (c->string && strcmp(c->string, "frames") == 0) {
            cr_assert(cJSON_IsArray(c) && cJSON_GetArraySize(c) == 0, "a frames list was not emptied");
            n++;
        } else {
            n += frames_all_empty(c);
        }
    }
    return n;
}

#define FRAME(f, l) "{\"filename\": \"" f "\", \"line\": " #l ", \"name\": \"fn\"}"

Test(snapshot2json, strip_frames_and_tuples)
{
    make_pickle("snap.pickle",
                "{\"segments\": [{\"device\": 0, \"address\": 140372342734848, \"total_size\": 2097152, "
                "\"segment_pool_id\": (0, 0), \"frames\": [" FRAME("a.py", 1) "], \"blocks\": [{\"address\": "
                "140372342734848, \"size\": 2097152, \"state\": \"inactive\", \"frames\": [" FRAME("b.py", 2) ", "
                FRAME("c.py", 3) "]}]}], \"device_traces\": [[{\"action\": \"alloc\", \"addr\": 140372342734848, "
                "\"size\": 512, \"stream\": 0, \"frames\": [" FRAME("d.py", 4) "]}]], \"allocator_settings\": "
                "{\"garbage_collection_threshold\": 0.5, \"expandable_segments\": True}, \"external_annotations\": "
                "[]}");
    int rc = sh("python3 " SCRIPT " --strip-frames '%s' -o '%s'", tpath("snap.pickle"), tpath("out.json"));
    char *err = fileio_read_all(tpath("stderr"), NULL);
    cr_assert_eq(rc, 0, "exit %d: %s", rc, err ? err : "");
    cr_assert_str_empty(err);
    free(err);

    cJSON *d = load_json(tpath("out.json"));
    cr_assert_eq(frames_all_empty(d), 3, "expected 3 frames lists (segment, block, trace entry)");
    const cJSON *seg = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(d, "segments"), 0);
    cr_assert_not_null(seg);
    const cJSON *pool = cJSON_GetObjectItemCaseSensitive(seg, "segment_pool_id");
    cr_assert(cJSON_IsArray(pool) && cJSON_GetArraySize(pool) == 2, "the tuple did not become a list");
    cr_assert_eq(cJSON_GetArrayItem(pool, 0)->valuedouble, 0);
    cr_assert_eq(cJSON_GetObjectItemCaseSensitive(seg, "address")->valuedouble, 140372342734848.0);
    const cJSON *e = cJSON_GetArrayItem(cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(d, "device_traces"), 0), 0);
    cr_assert_str_eq(cJSON_GetObjectItemCaseSensitive(e, "action")->valuestring, "alloc");
    cr_assert_eq(cJSON_GetObjectItemCaseSensitive(e, "size")->valuedouble, 512);
    const cJSON *set = cJSON_GetObjectItemCaseSensitive(d, "allocator_settings");
    cr_assert_eq(cJSON_GetObjectItemCaseSensitive(set, "garbage_collection_threshold")->valuedouble, 0.5);
    cr_assert(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(set, "expandable_segments")));
    cJSON_Delete(d);
    cr_assert_eq(other_files(), 2, "a temporary file was left behind"); /* snap.pickle and out.json */
}

Test(snapshot2json, keeps_frames_without_flag)
{
    make_pickle("snap.pickle", "{\"segments\": [], \"device_traces\": [[{\"action\": \"alloc\", \"addr\": 1, "
                               "\"size\": 1, \"frames\": [" FRAME("a.py", 7) "]}]]}");
    int rc = sh("python3 " SCRIPT " '%s' -o '%s'", tpath("snap.pickle"), tpath("out.json"));
    cr_assert_eq(rc, 0);
    cJSON *d = load_json(tpath("out.json"));
    const cJSON *e = cJSON_GetArrayItem(cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(d, "device_traces"), 0), 0);
    const cJSON *frames = cJSON_GetObjectItemCaseSensitive(e, "frames");
    cr_assert_eq(cJSON_GetArraySize(frames), 1);
    cr_assert_eq(cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(frames, 0), "line")->valuedouble, 7);
    cJSON_Delete(d);
}

Test(snapshot2json, not_a_snapshot)
{
    make_pickle("list.pickle", "[1, 2, 3]");
    expect_refused("list.pickle", "not a memory snapshot");
    unlink(tpath("list.pickle"));
    make_pickle("dict.pickle", "{\"segments\": []}");
    expect_refused("dict.pickle", "not a memory snapshot");
}

Test(snapshot2json, class_reference_refused)
{
    make_pickle("od.pickle", "collections.OrderedDict(segments=[], device_traces=[])");
    expect_refused("od.pickle", "collections");
}

Test(snapshot2json, code_execution_refused)
{
    /* a pickle whose loading would run os.system: the safe unpickler must refuse it before anything runs */
    char expr[400];
    snprintf(expr, sizeof expr,
             "type(\"X\", (), {\"__reduce__\": lambda self: (os.system, (\"touch %s\",))})()", tpath("pwned"));
    make_pickle("evil.pickle", expr);
    expect_refused("evil.pickle", "system");
    cr_assert(access(tpath("pwned"), F_OK) != 0, "the pickle's payload ran");
}

Test(snapshot2json, not_a_pickle)
{
    FILE *f = fopen(tpath("text.pickle"), "w");
    cr_assert_not_null(f);
    fputs("{\"segments\": [], \"device_traces\": []}\n", f);
    fclose(f);
    expect_refused("text.pickle", "cannot read");
}

/* An output folder that does not exist: one line naming it, no traceback, exit 2, nothing created. */
Test(snapshot2json, output_dir_missing)
{
    make_pickle("snap.pickle", "{\"segments\": [], \"device_traces\": [[]]}");
    char out[256];
    snprintf(out, sizeof out, "%s/missing/out.json", tmpdir);
    int rc = sh("python3 " SCRIPT " '%s' -o '%s'", tpath("snap.pickle"), out);
    char *err = fileio_read_all(tpath("stderr"), NULL), *sout = fileio_read_all(tpath("stdout"), NULL);
    cr_assert(err && sout);
    size_t len = strlen(err);
    cr_assert_eq(rc, 2, "exit %d, expected 2: %s", rc, err);
    cr_assert(len > 1 && strchr(err, '\n') == err + len - 1, "stderr is not one line: %s", err);
    cr_assert_null(strstr(err, "Traceback"), "%s", err);
    cr_assert_not_null(strstr(err, "/missing does not exist"), "stderr does not name the folder: %s", err);
    cr_assert_str_empty(sout);
    cr_assert(access(out, F_OK) != 0);
    cr_assert_eq(other_files(), 1, "something besides the input was left in %s", tmpdir);
    free(err);
    free(sout);
}

/* -o onto a FIFO or a symbolic link: refused in one line, exit 2, the FIFO and the link's target untouched, no
 * temporary file left (issue 16: the rename replaced them). */
Test(snapshot2json, output_not_a_regular_file)
{
    make_pickle("snap.pickle", "{\"segments\": [], \"device_traces\": [[]]}");
    cr_assert_eq(sh("mkfifo '%s'%s", tpath("fifo"), ""), 0);
    cr_assert_eq(fileio_write_atomic(tpath("victim"), "precious", 8), OOM_OK);
    cr_assert_eq(sh("ln -s '%s' '%s'", tpath("victim"), tpath("link")), 0);
    const char *targets[] = {"fifo", "link"}, *kinds[] = {"is a FIFO, not a regular file", "is a symbolic link"};
    for (int i = 0; i < 2; i++) {
        int rc = sh("python3 " SCRIPT " '%s' -o '%s'", tpath("snap.pickle"), tpath(targets[i]));
        char *err = fileio_read_all(tpath("stderr"), NULL), *sout = fileio_read_all(tpath("stdout"), NULL);
        cr_assert(err && sout);
        size_t len = strlen(err);
        cr_assert_eq(rc, 2, "-o %s: exit %d, expected 2: %s", targets[i], rc, err);
        cr_assert(len > 1 && strchr(err, '\n') == err + len - 1, "stderr is not one line: %s", err);
        cr_assert_not_null(strstr(err, kinds[i]), "%s", err);
        cr_assert_str_empty(sout);
        free(err);
        free(sout);
    }
    cr_assert_eq(sh("test -p '%s' && test -L '%s'", tpath("fifo"), tpath("link")), 0, "both still there");
    char *t = fileio_read_all(tpath("victim"), NULL);
    cr_assert_str_eq(t, "precious", "the link's target is untouched");
    free(t);
    cr_assert_eq(other_files(), 4, "snap.pickle, fifo, victim, link: no temporary file left");
}

/* The recording made under a memory fraction (1/60 of the H100's memory): --budget stores what the fraction
 * allowed, and oomlab replay uses it. */
Test(snapshot2json, budget_stored_and_used)
{
    make_pickle("pressure.pickle", "json.load(open(\"tests/data/pressure.trace.json\"))");
    int rc = sh("python3 " SCRIPT " '%s' --budget 1416958225 -o '%s'", tpath("pressure.pickle"), tpath("out.json"));
    char *err = fileio_read_all(tpath("stderr"), NULL);
    cr_assert_eq(rc, 0, "exit %d: %s", rc, err ? err : "");
    free(err);
    cJSON *d = load_json(tpath("out.json"));
    const cJSON *b = cJSON_GetObjectItemCaseSensitive(d, "budget");
    cr_assert(cJSON_IsNumber(b) && b->valuedouble == 1416958225.0, "no top-level budget of 1416958225");
    cJSON_Delete(d);

    const char *bin = getenv("OOMLAB_BIN");
    char fmt[300];
    snprintf(fmt, sizeof fmt, "'%s' replay '%%s'%%s", bin && bin[0] ? bin : "build/oomlab");
    rc = sh(fmt, tpath("out.json"), "");
    char *out = fileio_read_all(tpath("stdout"), NULL);
    cr_assert_eq(rc, 0, "the replay with the stored budget: exit %d: %s", rc, out);
    cr_assert_not_null(strstr(out, "budget: 1416958225 bytes (the file's \"budget\")"), "%s", out);
    free(out);

    /* the sizes oomlab takes */
    rc = sh("python3 " SCRIPT " '%s' --budget 1.5GiB -o '%s'", tpath("pressure.pickle"), tpath("out.json"));
    cr_assert_eq(rc, 0);
    d = load_json(tpath("out.json"));
    cr_assert_eq(cJSON_GetObjectItemCaseSensitive(d, "budget")->valuedouble, 1610612736.0);
    cJSON_Delete(d);
    unlink(tpath("out.json"));

    /* bad sizes are refused, nothing written */
    static const char *const bad[] = {"0", "12XB", "1.5", "lots", "-5", "1e9", "0.3KiB"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char arg[64];
        snprintf(arg, sizeof arg, "--budget=%s '%s'", bad[i], tpath("pressure.pickle"));
        char what[64];
        snprintf(what, sizeof what, "--budget: '%s' is not a size", bad[i]);
        rc = sh("python3 " SCRIPT " %s -o '%s'", arg, tpath("out.json"));
        err = fileio_read_all(tpath("stderr"), NULL);
        cr_assert_eq(rc, 2, "--budget %s: exit %d: %s", bad[i], rc, err);
        cr_assert_not_null(strstr(err, what), "--budget %s: %s", bad[i], err);
        cr_assert(strchr(err, '\n') == err + strlen(err) - 1, "not one line: %s", err);
        cr_assert(access(tpath("out.json"), F_OK) != 0, "--budget %s: out.json was written", bad[i]);
        free(err);
    }
}

/* Remove time_us from every trace entry (it is the clock at recording, different on every run). */
static void drop_times(cJSON *snap)
{
    cJSON *t0 = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(snap, "device_traces"), 0);
    cr_assert_not_null(t0);
    cJSON *e;
    cJSON_ArrayForEach(e, t0) cJSON_DeleteItemFromObjectCaseSensitive(e, "time_us");
}

Test(snapshot2json, oomlab_pickle_round_trip)
{
    const char *b = getenv("OOMLAB_BIN");
    if (!b || !b[0])
        b = "build/oomlab";
    char fmt[400];
    /* no allocator-config variable of the caller's shell reaches the replay */
    snprintf(fmt, sizeof fmt,
             "env -u OOMLAB_ALLOC_CONF -u PYTORCH_CUDA_ALLOC_CONF -u PYTORCH_HIP_ALLOC_CONF -u PYTORCH_ALLOC_CONF "
             "'%s' replay tests/data/pressure.trace.json --budget 1416958225 --snapshot '%%s'%%s",
             b);
    cr_assert_eq(sh(fmt, tpath("model.pickle"), ""), 0, "oomlab replay --snapshot .pickle failed");
    cr_assert_eq(sh(fmt, tpath("model.json"), ""), 0, "oomlab replay --snapshot .json failed");
    int rc = sh("python3 " SCRIPT " '%s' -o '%s'", tpath("model.pickle"), tpath("converted.json"));
    char *err = fileio_read_all(tpath("stderr"), NULL);
    cr_assert_eq(rc, 0, "snapshot2json refused oomlab's pickle: %s", err ? err : "");
    free(err);
    cJSON *a = load_json(tpath("converted.json")), *j = load_json(tpath("model.json"));
    drop_times(a);
    drop_times(j);
    cr_assert(cJSON_Compare(a, j, true), "the pickle and the JSON snapshot differ");
    /* the float setting stayed a float: python's json writes it with a decimal point */
    char *text = fileio_read_all(tpath("converted.json"), NULL);
    cr_assert_not_null(strstr(text, "\"garbage_collection_threshold\":0.0"), "threshold is not a float");
    free(text);
    cJSON_Delete(a);
    cJSON_Delete(j);
}
