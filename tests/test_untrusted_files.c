/* test_untrusted_files.c - what oomlab writes stays a regular file written whole (issue 16): the writers refuse a
 * target that is a FIFO, a device, a folder or a symbolic link, temporary files are created exclusively beside
 * the target and never left behind. */
#include <criterion/criterion.h>

#include <dirent.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/fileio.h"
#include "run/scenario.h"
#include "testutil.h"

static char tmpdir[TEST_TMPDIR_MAX];

static void setup(void) { test_tmpdir_make(tmpdir, "untrusted"); }

static void teardown(void) { test_tmpdir_remove(tmpdir); }

TestSuite(untrusted_files, .init = setup, .fini = teardown);

static const char *tp(const char *name) { return test_path(tmpdir, name); }

/* How many entries tmpdir holds (a leftover temporary file shows up here). */
static int entries(void)
{
    DIR *d = opendir(tmpdir);
    cr_assert_not_null(d);
    int n = 0;
    for (struct dirent *e; (e = readdir(d));)
        n += strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0;
    closedir(d);
    return n;
}

/* Run a shell command (formatted); its exit status. (FIFOs, devices and folders are made with the shell's mkfifo,
 * mknod and mkdir: <sys/stat.h> clashes with memstats.h, which testutil.h includes.) */
static int sh(const char *fmt, ...)
{
    char cmd[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    int st = system(cmd);
    return st == -1 ? -1 : WEXITSTATUS(st);
}

/* The permission bits of path, and what 0666 less the umask is. */
static unsigned mode_of(const char *path)
{
    char cmd[512];
    snprintf(cmd, sizeof cmd, "stat -c %%a '%s'", path);
    FILE *p = popen(cmd, "r");
    unsigned m = 0;
    cr_assert(p && fscanf(p, "%o", &m) == 1);
    pclose(p);
    return m;
}

static unsigned default_mode(void)
{
    FILE *p = popen("umask", "r");
    unsigned um = 0;
    cr_assert(p && fscanf(p, "%o", &um) == 1);
    pclose(p);
    return 0666 & ~um;
}

static char *slurp(const char *path)
{
    char *t = fileio_read_all(path, NULL);
    cr_assert_not_null(t, "%s", path);
    return t;
}

Test(untrusted_files, temp_beside_is_exclusive_and_named_beside)
{
    char tmp[256];
    const char *target = tp("out.svg");
    int fd = fileio_temp_beside(target, tmp, sizeof tmp);
    cr_assert_geq(fd, 0, "%s", oom_error_msg());
    cr_assert_eq(strncmp(tmp, target, strlen(target)), 0);
    cr_assert_eq(strncmp(tmp + strlen(target), ".tmp.", 5), 0, "%s", tmp);
    cr_assert_eq(strlen(tmp), strlen(target) + 11, "%s", tmp);
    cr_assert_str_eq(fileio_kind(tmp), "a regular file");
    cr_assert_eq(mode_of(tmp), default_mode(), "mode %o", mode_of(tmp));
    cr_assert_eq(write(fd, "new\n", 4), 4);
    close(fd);
    char tmp2[256];
    int fd2 = fileio_temp_beside(target, tmp2, sizeof tmp2);
    cr_assert_geq(fd2, 0);
    cr_assert_str_neq(tmp, tmp2, "two temporary files, two names");
    close(fd2);
    unlink(tmp2);
    cr_assert_eq(fileio_publish(tmp, target), OOM_OK, "%s", oom_error_msg());
    char *t = slurp(target);
    cr_assert_str_eq(t, "new\n");
    free(t);
    cr_assert_eq(entries(), 1, "only the published file");
}

Test(untrusted_files, temp_beside_names_its_failure)
{
    char tmp[256];
    cr_assert_eq(fileio_temp_beside(tp("no/such/folder/out.svg"), tmp, sizeof tmp), -1);
    cr_assert_not_null(strstr(oom_error_msg(), "cannot create a temporary file beside it"), "%s", oom_error_msg());
    cr_assert_eq(fileio_temp_beside(tp("x"), tmp, 8), -1, "too small a buffer");
}

/* Every kind of non-regular target is refused by publish, write_atomic and write_new, and is left as it was. */
static void refused(const char *target, const char *kind)
{
    char tmp[256];
    int fd = fileio_temp_beside(target, tmp, sizeof tmp);
    cr_assert_geq(fd, 0);
    close(fd);
    int before = entries();
    cr_assert_eq(fileio_publish(tmp, target), OOM_EINVAL);
    cr_assert_not_null(strstr(oom_error_detail(), kind), "%s", oom_error_detail());
    cr_assert_not_null(strstr(oom_error_detail(), "not a regular file"), "%s", oom_error_detail());
    cr_assert_null(strchr(oom_error_detail(), '\n'), "one line");
    cr_assert_eq(access(tmp, F_OK), -1, "the temporary file is removed");
    cr_assert_eq(entries(), before - 1);
    cr_assert_eq(fileio_write_atomic(target, "x\n", 2), OOM_EINVAL);
    cr_assert_not_null(strstr(oom_error_detail(), kind), "%s", oom_error_detail());
    bool existed = true;
    cr_assert_eq(fileio_write_new(target, "x\n", 2, &existed), OOM_EINVAL);
    cr_assert_not(existed);
    cr_assert_eq(entries(), before - 1, "nothing left beside it");
    cr_assert_str_eq(fileio_kind(target), kind, "%s is still %s", target, kind);
}

Test(untrusted_files, a_fifo_is_not_replaced)
{
    cr_assert_eq(sh("mkfifo '%s'", tp("fifo")), 0);
    refused(tp("fifo"), "a FIFO");
}

Test(untrusted_files, a_folder_is_not_replaced)
{
    cr_assert_eq(sh("mkdir '%s'", tp("folder")), 0);
    refused(tp("folder"), "a directory");
}

Test(untrusted_files, a_planted_link_is_not_followed_or_replaced)
{
    cr_assert_eq(fileio_write_atomic(tp("victim"), "precious\n", 9), OOM_OK);
    cr_assert_eq(symlink(tp("victim"), tp("link")), 0);
    refused(tp("link"), "a symbolic link");
    char *t = slurp(tp("victim"));
    cr_assert_str_eq(t, "precious\n", "the link's target is untouched");
    free(t);
}

Test(untrusted_files, a_character_device_is_not_replaced)
{
    /* a null device of our own in the scratch folder (root only); the system's /dev/null is never used */
    if (sh("mknod '%s' c 1 3 2>/dev/null", tp("null")) != 0)
        cr_skip_test("mknod failed (it needs root)");
    refused(tp("null"), "a character device");
}

Test(untrusted_files, regular_files_are_replaced_whole_and_leave_nothing)
{
    cr_assert_eq(fileio_write_atomic(tp("f"), "one\n", 4), OOM_OK);
    cr_assert_eq(fileio_write_atomic(tp("f"), "two\n", 4), OOM_OK);
    char *t = slurp(tp("f"));
    cr_assert_str_eq(t, "two\n");
    free(t);
    bool existed = false;
    cr_assert_eq(fileio_write_new(tp("f"), "three\n", 6, &existed), OOM_EIO);
    cr_assert(existed);
    cr_assert_eq(fileio_write_new(tp("g"), "new\n", 4, &existed), OOM_OK);
    cr_assert_not(existed);
    t = slurp(tp("g"));
    cr_assert_str_eq(t, "new\n");
    free(t);
    cr_assert_eq(entries(), 2, "f and g, no temporary file");
    cr_assert_eq(mode_of(tp("g")), default_mode(), "the mode fopen gave: 0666 less the umask");
}

/* ---- the commands: an output that is not a regular file is refused before any work (issue 16, item 2) ---- */

static const char *bin(void)
{
    const char *b = getenv("OOMLAB_BIN");
    return b && b[0] ? b : "build/oomlab";
}

/* `oomlab ARGS` (formatted), stdout to tmpdir/stdout, stderr to tmpdir/stderr: expect exit 2, nothing on stdout
 * and one line on stderr that contains what. */
static void expect_refused(const char *what, const char *fmt, ...)
{
    char args[1024], cmd[1600];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof args, fmt, ap);
    va_end(ap);
    snprintf(cmd, sizeof cmd, "'%s' %s >'%s' 2>'%s'", bin(), args, tp("stdout"), tp("stderr"));
    int rc = sh("%s", cmd);
    char *out = slurp(tp("stdout")), *err = slurp(tp("stderr"));
    cr_assert_eq(rc, 2, "oomlab %s: exit %d (%s)", args, rc, err);
    cr_assert_str_empty(out, "oomlab %s wrote: %s", args, out);
    size_t len = strlen(err);
    cr_assert(len > 1 && strchr(err, '\n') == err + len - 1, "not one line: %s", err);
    cr_assert_not_null(strstr(err, what), "oomlab %s: '%s' not in: %s", args, what, err);
    free(out);
    free(err);
    unlink(tp("stdout"));
    unlink(tp("stderr"));
}

Test(untrusted_files, commands_refuse_a_fifo_a_link_or_a_device)
{
    cr_assert_eq(sh("mkfifo '%s'", tp("full")), 0);
    cr_assert_eq(fileio_write_atomic(tp("victim"), "precious\n", 9), OOM_OK);
    cr_assert_eq(symlink(tp("victim"), tp("link")), 0);
    bool dev = sh("mknod '%s' c 1 3 2>/dev/null", tp("null")) == 0;
    char targets[3][128] = {""}; /* copies: tp's buffers rotate */
    snprintf(targets[0], sizeof targets[0], "%s", tp("full"));
    snprintf(targets[1], sizeof targets[1], "%s", tp("link"));
    if (dev)
        snprintf(targets[2], sizeof targets[2], "%s", tp("null"));
    const char *kinds[] = {"is a FIFO, not a regular file", "is a symbolic link, not a regular file",
                           "is a character device, not a regular file"};
    for (int i = 0; i < 3 && targets[i][0]; i++) {
        const char *target = targets[i];
        expect_refused(kinds[i], "replay tests/data/train_mlp.trace.json --snapshot '%s'", target);
        expect_refused(kinds[i], "advise tests/data/train_mlp.trace.json --plot '%s'", target);
        expect_refused(kinds[i], "history '%s' --append results/baselines/sim/fragmentation.json --commit x", target);
        expect_refused(kinds[i], "export results/baselines/sim --junit '%s'", target);
    }
    cr_assert_str_eq(fileio_kind(tp("full")), "a FIFO");
    cr_assert_str_eq(fileio_kind(tp("link")), "a symbolic link");
    char *t = slurp(tp("victim"));
    cr_assert_str_eq(t, "precious\n");
    free(t);
    cr_assert_eq(entries(), dev ? 4 : 3, "nothing left beside them");
}

/* The catalog's name pattern is the catalog's: every scenario and variant matches it; a path never does. */
Test(untrusted_files, the_name_pattern_is_the_catalogs)
{
    for (size_t i = 0; i < scenario_catalog_size; i++) {
        const scenario *sc = scenario_catalog[i];
        cr_assert(scenario_name_ok(sc->name), "%s", sc->name);
        for (size_t k = 0; k < sc->nvariants; k++)
            cr_assert(scenario_name_ok(sc->variants[k].name), "%s/%s", sc->name, sc->variants[k].name);
    }
    const char *bad[] = {"", "../x", "..", ".", "a/b", "/abs", "A", "1abc", "-x", "_x", "a b", "a\nb", "a.json",
                         "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa" /* 65 */};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        cr_assert_not(scenario_name_ok(bad[i]), "'%s'", bad[i]);
    cr_assert(scenario_name_ok("aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"), "64 bytes");
    cr_assert_not(scenario_name_ok(NULL));
}

/* Input is checked before an output folder is made: a rejected command leaves nothing (issue 16, item 11). */
Test(untrusted_files, no_output_folder_for_rejected_input)
{
    cr_assert_eq(fileio_write_atomic(tp("bad.csv"), "date,value\n1,2\n", 15), OOM_OK);
    expect_refused("line 1 is not the header", "plot --trend '%s' -o '%s'", tp("bad.csv"), tp("trends"));
    cr_assert_null(fileio_kind(tp("trends")), "plot --trend made its folder for a file it refused");
    expect_refused("no_such_scenario", "run no_such_scenario --backend sim --out '%s'", tp("runs"));
    cr_assert_null(fileio_kind(tp("runs")), "run made its folder for a scenario it refused");
    cr_assert_eq(entries(), 1, "only bad.csv");
}

/* A temporary file a killed writer left (issue 16, item 11: nightly/junit.xml.tmp.*, history.csv.tmp.PID.0) is
 * removed by the next write of the same file, and said so; one still locked by its writer, or touched within the
 * last minute, is left alone. */
Test(untrusted_files, a_killed_writers_temporary_files_are_cleaned)
{
    const char *stale[] = {"junit.xml.tmp.Ab12Cd", "junit.xml.tmp.99999999.0", "junit.xml.tmp.99999999"};
    const char *kept[] = {"junit.xml.tmp.Fresh1", "junit.xml.tmp.Locked", "junit.xml.tmp.toolong7", "other.tmp.Ab12Cd"};
    for (size_t i = 0; i < 3; i++) {
        cr_assert_eq(fileio_write_atomic(tp(stale[i]), "partial", 7), OOM_OK);
        cr_assert_eq(sh("touch -d '2 hours ago' '%s'", tp(stale[i])), 0);
    }
    for (size_t i = 0; i < 4; i++) {
        cr_assert_eq(fileio_write_atomic(tp(kept[i]), "partial", 7), OOM_OK);
        if (i > 0)
            cr_assert_eq(sh("touch -d '2 hours ago' '%s'", tp(kept[i])), 0);
    }
    /* flock(1) holds junit.xml.tmp.Locked locked while oomlab runs, as its writer would */
    char cmd[1200];
    snprintf(cmd, sizeof cmd,
             "flock -x '%s' '%s' export results/baselines/sim/fragmentation.json --junit '%s' >'%s' 2>'%s'",
             tp("junit.xml.tmp.Locked"), bin(), tp("junit.xml"), tp("stdout"), tp("stderr"));
    cr_assert_eq(sh("%s", cmd), 0);
    char *err = slurp(tp("stderr"));
    for (size_t i = 0; i < 3; i++) {
        cr_assert_null(fileio_kind(tp(stale[i])), "%s is still there", stale[i]);
        char line[512];
        snprintf(line, sizeof line, "oomlab: removed %s (7 bytes), a temporary file left by a writer that was stopped\n",
                 tp(stale[i]));
        cr_assert_not_null(strstr(err, line), "'%s' not in: %s", line, err);
    }
    for (size_t i = 0; i < 4; i++)
        cr_assert_str_eq(fileio_kind(tp(kept[i])), "a regular file", "%s was removed", kept[i]);
    cr_assert_str_eq(fileio_kind(tp("junit.xml")), "a regular file");
    free(err);
}

/* scripts/baseline.sh runs the catalog into $TMPDIR/oomlab-baseline.PID.XXXXXX: removed when it fails, and a
 * folder a killed run left is removed by the next run once its PID is gone (issue 16, item 11). The catalog run
 * is /bin/false here: a failing run. */
Test(untrusted_files, baseline_sh_leaves_no_folder_and_cleans_a_killed_runs)
{
    cr_assert_eq(sh("mkdir '%s' '%s'", tp("oomlab-baseline.99999999.AbCdEf"), tp("oomlab-baseline.1.live00")), 0);
    cr_assert_eq(sh("touch '%s'", tp("oomlab-baseline.99999999.AbCdEf/run.txt")), 0);
    int rc = sh("TMPDIR='%s' bash scripts/baseline.sh /bin/false sim >'%s' 2>&1", tmpdir, tp("out"));
    cr_assert_eq(rc, 1, "the run's exit status");
    char *out = slurp(tp("out"));
    char want[256];
    snprintf(want, sizeof want, "make baseline: removed %s, left by a run that was killed\n",
             tp("oomlab-baseline.99999999.AbCdEf"));
    cr_assert_not_null(strstr(out, want), "%s", out);
    free(out);
    cr_assert_null(fileio_kind(tp("oomlab-baseline.99999999.AbCdEf")));
    cr_assert_str_eq(fileio_kind(tp("oomlab-baseline.1.live00")), "a directory", "PID 1 is alive: kept");
    cr_assert_eq(entries(), 2, "the live one and out: the failed run's own folder is gone");
}

/* An append is whole or not at all: a write cut short (here by RLIMIT_FSIZE, as by a full disk) is undone, the
 * file cut back to its size before. */
Test(untrusted_files, an_append_cut_short_is_undone)
{
    const char *old = "header\nrow 1\n";
    cr_assert_eq(fileio_write_atomic(tp("h.csv"), old, strlen(old)), OOM_OK);
    int fd = -1;
    cr_assert_eq(fileio_open_locked(tp("h.csv"), &fd), OOM_OK, "%s", oom_error_msg());
    signal(SIGXFSZ, SIG_IGN); /* a write past the limit fails with EFBIG instead of killing the process */
    struct rlimit rl = {.rlim_cur = strlen(old) + 10, .rlim_max = RLIM_INFINITY};
    cr_assert_eq(setrlimit(RLIMIT_FSIZE, &rl), 0);
    char rows[4096];
    memset(rows, 'x', sizeof rows);
    cr_assert_eq(fileio_append(fd, tp("h.csv"), rows, sizeof rows), OOM_EIO);
    cr_assert_not_null(strstr(oom_error_msg(), "File too large"), "%s", oom_error_msg());
    cr_assert_eq(fileio_append(fd, tp("h.csv"), "row 2\n", 6), OOM_OK, "what fits still goes in");
    close(fd);
    char *t = slurp(tp("h.csv"));
    cr_assert_str_eq(t, "header\nrow 1\nrow 2\n", "no part of the cut append is left");
    free(t);
}

/* fileio_owned_temp_dir's sweep removes only what a killed owner left: four processes at once each make, use and
 * remove 300 owned folders in one parent, so that each sweep meets the others' folders at every stage (being made,
 * held, being removed at their end: the lock file already unlinked, the lock still held). Not one is called
 * killed, none is left, and a folder whose lock nobody holds is removed and said so. */
Test(untrusted_files, an_owned_temp_folder_is_removed_only_once_its_owner_is_killed)
{
    enum { PROCS = 4, ROUNDS = 300 };
    pid_t kids[PROCS];
    for (int k = 0; k < PROCS; k++) {
        char errp[TEST_TMPDIR_MAX + 16];
        snprintf(errp, sizeof errp, "%s/err%d", tmpdir, k);
        kids[k] = fork();
        cr_assert_geq(kids[k], 0);
        if (kids[k] == 0) {
            if (!freopen(errp, "w", stderr))
                _exit(3);
            for (int i = 0; i < ROUNDS; i++) {
                char dir[TEST_TMPDIR_MAX + 64];
                int fd;
                if (fileio_owned_temp_dir(tmpdir, "owned", "test", dir, sizeof dir, &fd) != OOM_OK)
                    _exit(4);
                fileio_remove_tree(dir);
                close(fd);
            }
            fclose(stderr);
            _exit(0);
        }
    }
    for (int k = 0; k < PROCS; k++) {
        int st = 0;
        cr_assert_eq(waitpid(kids[k], &st, 0), kids[k]);
        cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "process %d: status %d", k, st);
        char name[16];
        snprintf(name, sizeof name, "err%d", k);
        char *err = slurp(tp(name));
        cr_assert_str_empty(err, "process %d: %s", k, err);
        free(err);
        cr_assert_eq(sh("rm '%s'", tp(name)), 0);
    }
    cr_assert_eq(entries(), 0, "a folder was left");

    /* a killed owner's: .lock there, held by nobody */
    cr_assert_eq(sh("mkdir '%s' && touch '%s' '%s'", tp("owned-Kill01"), tp("owned-Kill01/.lock"),
                    tp("owned-Kill01/trace.json")),
                 0);
    cr_assert_not_null(freopen(tp("err"), "w", stderr));
    char dir[TEST_TMPDIR_MAX + 64];
    int fd;
    cr_assert_eq(fileio_owned_temp_dir(tmpdir, "owned", "test", dir, sizeof dir, &fd), OOM_OK);
    fflush(stderr);
    char *err = slurp(tp("err"));
    char want[256];
    snprintf(want, sizeof want, "oomlab: removed %s, left by a test that was killed\n", tp("owned-Kill01"));
    cr_assert_str_eq(err, want);
    free(err);
    cr_assert_null(fileio_kind(tp("owned-Kill01")));
    fileio_remove_tree(dir);
    close(fd);
}
