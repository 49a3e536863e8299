/* main.c - the oomlab command line: list, describe, run, plot, parity, predict (cli/predict.h), replay,
 * bench alloc|gemm|step, compare,
 * baseline, history, export (cli/tracking.h), version,
 * help. The commands, their options and their help are the table `commands` below: `oomlab help`, `oomlab help
 * COMMAND` and `oomlab COMMAND --help` print from it, and main() reads it to accept --flag=value wherever a
 * --flag takes a value. A new option goes into that table and into its command's parser.
 *
 * Exit status: 0 success (run: every variant shows what it must; replay: the model agrees with PyTorch's
 * segment actions on every device, or a what-if replay), 1 a result that fails (run: an expectation does not
 * hold, or a variant crashed or timed out, which a closing line counts; replay under the recording's settings:
 * some device diverges; compare: a regression; faultsweep: a fault point was not clean), 2 bad input (one error
 * line on stderr, nothing written).
 */
#include <cJSON.h>
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "alloc/allocconf.h"
#include "cli/advise.h"
#include "cli/bench.h"
#include "cli/buildinfo.h"
#include "device/device.h"
#include "cli/parity.h"
#include "cli/predict.h"
#include "cli/tracking.h"
#include "run/history.h"
#include "run/plot.h"
#include "alloc/replay.h"
#include "run/faultsweep.h"
#include "run/report.h"
#include "run/report_html.h"
#include "run/runset.h"
#include "run/runner.h"
#include "run/runset.h"
#include "run/scenario.h"
#include "run/sweep.h"
#include "core/echo.h"
#include "core/fileio.h"
#include "core/units.h"

#define EXIT_BAD_INPUT 2

/* An option of a command: its name, the value it takes (NULL: a flag that takes none) and what it does. */
typedef struct cli_option {
    const char *name;  /* "--budget", "-o" */
    const char *value; /* "SIZE"; NULL for a flag */
    const char *help;  /* lines separated by '\n' */
    bool repeats;      /* may be given more than once */
} cli_option;

#define CLI_MAX_OPTIONS 16

/* A command: `oomlab NAME ARGS [OPTIONS]`, what it does, and its options (up to the first with no name). */
typedef struct cli_command {
    const char *name;    /* "run", "bench alloc" */
    const char *args;    /* the positional arguments, "" for none */
    const char *summary; /* what it does, lines separated by '\n' */
    cli_option options[CLI_MAX_OPTIONS];
} cli_command;

/* A command whose arguments start with SCRIPT (predict) runs another program: the words from its first
 * positional one on are that program's, passed on as they are (--help among them included). */
static bool command_script_args(const cli_command *c) { return strncmp(c->args, "SCRIPT", 6) == 0; }

#define OPT_BACKEND \
    {"--backend", "auto|cuda|sim", \
     "the device: cuda (a real GPU) or sim (simulated);\nauto (the default): cuda when a GPU is visible, else sim", \
     false}
#define MAX_INPUT_HELP \
    "the largest input file read (default 4GiB, or the host's available memory if that is smaller); a\n" \
    "larger one is refused before it is read, a stream (a pipe, a FIFO) once that much came"
#define OPT_MAX_INPUT {"--max-input", "SIZE", MAX_INPUT_HELP, false}
#define BUDGET_HELP "a size: bytes, or a number with KiB, MiB, GiB, TiB, KB, MB, GB, TB (1GiB, 512MiB)"

static const cli_command commands[] = {
    {"list", "", "the scenario catalog", {{0}}},
    {"describe", "SCENARIO", "a scenario's story, variants and parameters", {{0}}},
    {"run",
     "[SCENARIO]",
     "run a scenario's variants (no SCENARIO: the whole catalog, one table), print the table and write\n"
     "results/runs/STAMP-BACKEND/SCENARIO.json (--plot: and SCENARIO.png beside it); each variant in its own\n"
     "process (a crash or a hang is reported and the others run); exit 0: every variant shows what it must,\n"
     "1: one does not, or crashed or timed out (a closing line counts those), 2: bad input",
     {
         {"--variant", "V[,V]",
          "run only these variants (default: every variant; oomlab describe SCENARIO lists them)", true},
         OPT_BACKEND,
         {"--scale", "ci|full",
          "full: the workload PyTorch's twin runs (the default on cuda and with --dry-run; on sim it\n"
          "computes every kernel on the CPU, minutes: --dry-run gives its counters in a second);\n"
          "ci: shrunk to run on sim's CPU references in seconds (the default on sim)",
          false},
         {"--budget", "SIZE",
          "the memory the run may use, like torch.cuda.set_per_process_memory_fraction; default: the\n"
          "scenario's own, so the OOM comes at the same step on every GPU;\n" BUDGET_HELP,
          false},
         {"--set", "NAME=VALUE",
          "change a scenario parameter, each at most once (oomlab describe SCENARIO lists them)", true},
         {"--alloc-conf", "S",
          "allocator settings for every variant, in PYTORCH_CUDA_ALLOC_CONF syntax (a variant's\n"
          "own keys win); default: the first of $OOMLAB_ALLOC_CONF, $PYTORCH_CUDA_ALLOC_CONF,\n"
          "$PYTORCH_HIP_ALLOC_CONF, $PYTORCH_ALLOC_CONF that is set",
          false},
         {"--dry-run", NULL, "the same accounting at full scale on sim, with no memory behind it and no compute",
          false},
         {"--real-addresses", NULL,
          "cuda: break ties between equal free blocks by the driver's own addresses in this process,\n"
          "not by where sim's model of the driver (PyTorch's process) puts segments (the default)",
          false},
         {"--json", NULL,
          "print the results JSON (schema oomlab.run/1; an array for the catalog) instead of the\n"
          "table; the file is still written, its path on stderr",
          false},
         {"--plot", NULL,
          "draw the results beside the results file (gnuplot): SCENARIO.png, SCENARIO-peaks.png and, with\n"
          "an OOM, SCENARIO-segments.png; a sweep: SCENARIO.sweep.png",
          false},
         {"--out", "DIR", "write the results under DIR/STAMP-BACKEND/ (default: results/runs)", false},
         {"--no-write", NULL, "write no results file (not with --out)", false},
         {"--sweep", "PARAM=LO..HI",
          "run the variants at every power of two in LO..HI, each in a fresh runtime: peak allocated and\n"
          "reserved bytes per value, and the largest value that fits the budget, found as accelerate's\n"
          "find_executable_batch_size finds it (from HI, x0.9 on each OOM) and exactly (bisection); writes\n"
          "SCENARIO.sweep.json (schema oomlab.sweep/1); needs a SCENARIO",
          false},
         {"--timeout", "SECONDS",
          "kill a variant still running after SECONDS and report it timed out (0: no limit); default: the\n"
          "scenario's own limit, else 600 s. Each variant runs in its own process: a crash (a signal, a\n"
          "CUDA error) or a hang is reported as crashed or timeout, the other variants still run, exit 1",
          false},
         {"--no-fork", NULL, "run the variants in this process (to debug one with gdb): no isolation, no timeout",
          false},
         {"--jobs", "N",
          "run N variants' processes at once (the catalog's, a scenario's, a sweep's values); default: the\n"
          "online cores, on cuda no more than the GPU's free memory holds (budget plus a context each);\n"
          "output and results files are those of --jobs 1; --no-fork runs one",
          false},
     }},
    {"faultsweep",
     "[SCENARIO]",
     "SQLite's OOM loop (no SCENARIO: the whole catalog): fail the n-th device allocation and every later one,\n"
     "for n = 1, 2, ... until a run no longer reaches its fault, then the same for pinned host allocations; each\n"
     "point in its own process must end clean: no crash or hang, an OOM as the allocator's normal result, every\n"
     "tensor released, 0 bytes allocated, the allocator validators passing (and, built with make asan, no leak\n"
     "LeakSanitizer finds); prints points and failures per variant, exit 1 if a point was not clean",
     {
         {"--variant", "V[,V]", "sweep only these variants (needs a SCENARIO)", true},
         OPT_BACKEND,
         {"--scale", "ci|full", "as for run (default: ci on sim, full on cuda)", false},
         {"--set", "NAME=VALUE", "change a scenario parameter (needs a SCENARIO)", true},
         {"--only", "device|host", "fail only device allocations, or only pinned host allocations (default: both)",
          false},
         {"--stride", "N", "test every N-th fault point (1, 1+N, 1+2N, ...; default 1: every point)", false},
         {"--timeout", "SECONDS", "a point still running after SECONDS is killed and not clean (default: run's)",
          false},
         {"--jobs", "N", "run N points at once, as for run (the report is that of --jobs 1)", false},
     }},
    {"plot",
     "RESULTS.json|RUNDIR | --trend HISTORY.csv",
     "draw a results file (gnuplot): a run's allocated and reserved memory at each sample, per variant, or\n"
     "a sweep's peaks against the swept parameter (RUNDIR: each results file of a run folder, beside it);\n"
     "--peaks, --segments: the run's other figures;\n"
     "--trend: the nightly history, one figure per scenario, backend and scale",
     {
         {"-o", "OUT.png|OUT.svg|DIR",
          "the picture to write, a PNG or an SVG (default: RESULTS.png, RESULTS-peaks.png,\n"
          "RESULTS-segments.png); with --trend the folder (default: trend/ beside the CSV)",
          false},
         {"--peaks", NULL, "each variant's peak allocated and reserved memory as bars, with the budget", false},
         {"--segments", NULL,
          "the allocator's segments at each variant's first OOM, block by block (as memory_viz draws them)", false},
         {"--trend", "HISTORY.csv",
          "plot results/history.csv (utc_date,commit,backend,device,scale,scenario,variant,metric,value):\n"
          "DIR/SCENARIO-BACKEND-SCALE.png, a panel per metric, a line per variant",
          false},
         OPT_MAX_INPUT,
     }},
    {"report",
     "RESULTS...",
     "one static page (OUT/index.html, offline, no JavaScript) explaining each scenario with its measurements:\n"
     "its story (from scenarios/NAME.c), its figures, the table of measured numbers and PyTorch's beside\n"
     "them; RESULTS are results files or a run's folder (a catalog run's STAMP-BACKEND), sweeps included",
     {
         {"-o", "DIR", "the folder to write (default: results/report); replaced only once complete", false},
         {"--twins", "DIR",
          "where the PyTorch twins' recordings are (NAME.torch.json; default: tests/data/twins when it exists)",
          false},
         OPT_MAX_INPUT,
     }},
    {"parity",
     "[WORKLOAD...]",
     "the runtime's memory on the workloads of scripts/twins/mlp_parity.py, one JSON object per line\n"
     "(workloads: eval_leak, eval_item, eval_nograd, train_sgd, train_adam, rnn_chain; default: all)",
     {OPT_BACKEND}},
    {"predict",
     "SCRIPT [ARGS...]",
     "will a PyTorch training script fit on a GPU, without one? Runs the unmodified SCRIPT with ARGS on the CPU,\n"
     "every CUDA tensor on the meta device, under scripts/oomlab_capture (Python: --python, else build/venv,\n"
     "installed on first use by scripts/predict_venv.sh), and replays the allocations and frees the CUDA path\n"
     "would make through the allocator model: peak allocated and reserved bytes (uncapped), whether it fits on\n"
     "--gpu under --budget (the CUDA context is outside the allocator: the whole device leaves the allocator\n"
     "total - context), the OOM it would hit (step, op, PyTorch's message), advise's minimum budget per allocator\n"
     "setting and verdict, steps and leaks, and the placeholders and modelled allocations of the capture. Options\n"
     "come before SCRIPT; the script's output goes to stderr. Exit 0: a prediction (fits or not), 2: bad input\n"
     "(a missing script, an unknown GPU, a script that raises: its traceback then one line, or never uses CUDA)",
     {
         {"--gpu", "NAME",
          "the GPU (default H100-80GB; the capture's table: H100-80GB, H200, A100-40GB, A100-80GB, L4,\n"
          "RTX-4090, ...: PYTHONPATH=scripts python -m oomlab_capture --list-gpus)",
          false},
         {"--budget", "SIZE",
          "the allocator's budget, like torch.cuda.set_per_process_memory_fraction(SIZE / total);\n"
          "default: the whole device; " BUDGET_HELP,
          false},
         {"--alloc-conf", "S",
          "allocator settings for the prediction (PYTORCH_CUDA_ALLOC_CONF syntax; also one more row of\n"
          "advise's table); default: PyTorch's defaults (the environment is not read)",
          false},
         {"--trace", "OUT.json",
          "keep the predicted trace (PyTorch's snapshot format: oomlab replay, oomlab advise, memory_viz)", false},
         {"--plot", "OUT.png|OUT.svg", "draw advise's figure of the predicted trace (gnuplot)", false},
         {"--json", NULL, "print the prediction as one JSON object (schema oomlab.predict/1)", false},
         {"--python", "PATH", "run the capture with this Python (your own environment, with torch 2.11)", false},
         {"--sweep", "NAME=LO..HI",
          "the largest value of a script parameter that fits, by bisection over fresh captures: each\n"
          "probe replaces {NAME} in ARGS with the value and sets the environment variable NAME to it;\n"
          "prints each probe (value, peaks, fits) and the answer, and says when peaks are not monotonic",
          false},
     }},
    {"replay",
     "FILE",
     "replay a PyTorch memory snapshot (JSON from scripts/snapshot2json.py) through the allocator model, every\n"
     "device with events: under the recording's settings a check against PyTorch's segment actions (exit 1 if\n"
     "it diverges), under another --alloc-conf a what-if simulation (exit 0)",
     {
         {"--device", "N", "replay only device N (N or cuda:N)", false},
         {"--kernels", "first|none|EVENT",
          "when the program first launched a kernel, for the sim's model of the driver's addresses:\n"
          "after the first allocation (first, the default), never (none: torch.empty and del alone), or\n"
          "before trace event EVENT",
          false},
         {"--addresses", "recorded|model",
          "recorded (the default for a check): each segment at PyTorch's address where that range is free;\n"
          "model: every segment where the sim's model of the driver puts it (a what-if always does)",
          false},
         {"--alloc-conf", "S",
          "a what-if: replay under these allocator settings (PYTORCH_CUDA_ALLOC_CONF syntax) instead of\n"
          "the recording's (the environment's are never used, and the output says so)",
          false},
         {"--budget", "SIZE",
          "a memory budget, like torch.cuda.set_per_process_memory_fraction (wins over the file's\n"
          "\"budget\"); " BUDGET_HELP,
          false},
         {"--snapshot", "OUT",
          "write the model's snapshot after the replay, as JSON, or as a pickle for pytorch.org/memory_viz\n"
          "when OUT ends in .pickle or .pkl",
          false},
         {"--json", NULL, "print memory_stats() and the replay's figures as one JSON object", false},
         OPT_MAX_INPUT,
     }},
    {"advise",
     "FILE",
     "is an OOM fragmentation? From a snapshot (JSON of scripts/snapshot2json.py, or the pickle of\n"
     "torch.cuda.memory._dump_snapshot), parsed once and replayed many times: the minimum budget per allocator\n"
     "setting by bisection, the workload's need, a verdict, and growth across repeated steps",
     {
         {"--device", "N", "advise on device N (N or cuda:N); default: the one device with events", false},
         {"--budget", "SIZE",
          "the budget of the recorded run (set_per_process_memory_fraction x total; wins over the file's\n"
          "\"budget\"): whether each setting would have fitted there;\n" BUDGET_HELP,
          false},
         {"--try", "S", "one more allocator setting to try (PYTORCH_CUDA_ALLOC_CONF syntax)", true},
         {"--only", NULL, "try only PyTorch's defaults, the recording's own settings and the --try ones", false},
         {"--step-marker", "TEXT",
          "steps start where user_metadata (torch.cuda.memory._set_memory_metadata) changes to a text\n"
          "starting with TEXT; default: steps found from the repeated pattern of allocation sizes",
          false},
         {"--kernels", "first|none|EVENT", "when the program first launched a kernel (as for replay)", false},
         {"--json", NULL, "print the advice as one JSON object (schema oomlab.advise/1)", false},
         {"--plot", "OUT.png|OUT.svg",
          "draw the minimum budget per setting, and allocated and reserved over the trace for the\n"
          "defaults and the best setting (gnuplot)",
          false},
         OPT_MAX_INPUT,
     }},
    {"bench alloc",
     "",
     "ns per malloc+free pair on a cache hit (cuda: also cudaMalloc and cudaMallocAsync)",
     {
         OPT_BACKEND,
         {"--iters", "N", "malloc+free pairs per timed run (1 to 100000000; default 200000)", false},
         {"--json", NULL, "print the figures as JSON", false},
     }},
    {"bench gemm",
     "",
     "ms per call of the CPU reference GEMM; cuda: TFLOP/s of oomlab's GEMM against cuBLAS",
     {
         OPT_BACKEND,
         {"--json", NULL, "print the figures as JSON", false},
     }},
    {"bench step",
     "",
     "ms per training step and per forward of MLP(width, depth 4), CI scale by default (256, batch 64)",
     {
         OPT_BACKEND,
         {"--width", "N", "the MLP's width (1 to 65536; default 256)", false},
         {"--batch", "N", "the batch size (1 to 65536; default 64)", false},
         {"--json", NULL, "print the figures as JSON", false},
     }},
    {"compare",
     "BASELINE CURRENT",
     "what moved between two runs (results files or run folders: oomlab run's, results/baselines/BACKEND):\n"
     "a table of scenario, variant, metric, baseline, current, change; exit 1 on a regression. Byte counters\n"
     "and counts must match exactly, outcomes, OOM steps and expectations must be unchanged",
     {
         {"--tolerance", "P%", "let byte counters and counts move by P% of the baseline (default: exact)", false},
         {"--time-tolerance", "P%",
          "compare times: slower by more than P% is a regression (default: times not compared;\n"
          "on sim they never fail)",
          false},
         OPT_MAX_INPUT,
     }},
    {"baseline",
     "CURRENT DIR",
     "make CURRENT (a passing run: a results file or run folder) the baseline in DIR (results/baselines/BACKEND):\n"
     "prints what changes (the compare table), then writes DIR/SCENARIO.json atomically, less what changes from\n"
     "run to run (start time, notes, and on sim the times); make baseline runs it",
     {OPT_MAX_INPUT}},
    {"history",
     "FILE.csv",
     "the nightly history (header " HISTORY_HEADER "):\n"
     "print every step in it, a change that held for --min-runs runs, once, at the run where it started",
     {
         {"--append", "RUN", "first append the rows of RUN (a results file or run folder) to FILE.csv", false},
         {"--commit", "C", "the commit RUN was built from (with --append)", false},
         {"--min-runs", "N", "the shortest change reported as a step (default 2: a one-run blip is none)", false},
         {"--threshold", "P%", "report only steps larger than P% of the level before (default: any)", false},
         OPT_MAX_INPUT,
     }},
    {"export",
     "RUN",
     "write a run (a results file or run folder) in the formats CI dashboards read, no glue needed",
     {
         {"--junit", "FILE", "JUnit XML: one testcase per expectation of each variant (Jenkins/Ant schema)", false},
         {"--gbench", "FILE", "Google Benchmark JSON: each variant's time, its peak bytes as counters", false},
         {"--smaller-is-better", "FILE",
          "github-action-benchmark's customSmallerIsBetter array: each variant's byte metrics", false},
         OPT_MAX_INPUT,
     }},
    {"bench replay",
     "",
     "a seeded 1,000,000-event trace: parse (trace_load) and replay rates, separately, and advise's time",
     {
         {"--events", "N", "events in the trace (1000 to 20000000; default 1000000)", false},
         {"--seed", "N", "the workload's seed (default 1)", false},
         {"--json", NULL, "print the figures as JSON", false},
     }},
    {"version", "", "oomlab's version, whether the cuda backend is built in, and which build it is (optimised or "
                    "checked; also: oomlab --version)", {{0}}},
    {"help", "[COMMAND]", "the commands; with COMMAND, its usage and options (also: oomlab COMMAND --help)", {{0}}},
};

#define NCOMMANDS (sizeof commands / sizeof commands[0])
#define HELP_WIDTH 116 /* usage lines wrap before this column */

/* The command named name (and sub, for "bench alloc"); NULL if none. */
static const cli_command *command_find(const char *name, const char *sub)
{
    size_t n = strlen(name);
    for (size_t i = 0; i < NCOMMANDS; i++) {
        const char *c = commands[i].name;
        if (strcmp(c, name) == 0)
            return &commands[i];
        if (sub && strncmp(c, name, n) == 0 && c[n] == ' ' && strcmp(c + n + 1, sub) == 0)
            return &commands[i];
    }
    return NULL;
}

/* True when name is a group of commands ("bench": "bench alloc", ...). */
static bool command_is_group(const char *name)
{
    size_t n = strlen(name);
    for (size_t i = 0; i < NCOMMANDS; i++)
        if (strncmp(commands[i].name, name, n) == 0 && commands[i].name[n] == ' ')
            return true;
    return false;
}

static const cli_option *option_find(const cli_command *c, const char *name, size_t len)
{
    for (const cli_option *o = c->options; o < c->options + CLI_MAX_OPTIONS && o->name; o++)
        if (strlen(o->name) == len && strncmp(o->name, name, len) == 0)
            return o;
    return NULL;
}

/* "NAME ARGS [--opt VALUE] [--flag]..." after prefix, wrapped under its first argument. The lines break at the
 * same places whatever the prefix, so `oomlab help` shows the same usage lines as `oomlab help COMMAND`. */
static void print_synopsis(FILE *f, const char *prefix, const cli_command *c)
{
    const int width = HELP_WIDTH - (int)strlen("usage: oomlab ");
    fputs(prefix, f);
    const bool script = command_script_args(c); /* its options come before SCRIPT: the words after are the script's */
    int col = fprintf(f, "%s%s%s", c->name, c->args[0] && !script ? " " : "", script ? "" : c->args);
    int indent = (int)strlen(prefix) + col + 1; /* under the first option */
    for (const cli_option *o = c->options; o <= c->options + CLI_MAX_OPTIONS; o++) {
        char item[96];
        bool last = o == c->options + CLI_MAX_OPTIONS || !o->name;
        if (last && !script)
            break;
        int n = last ? snprintf(item, sizeof item, "%s", c->args)
                     : snprintf(item, sizeof item, "[%s%s%s]%s", o->name, o->value ? " " : "",
                                o->value ? o->value : "", o->repeats ? "..." : "");
        if (col + 1 + n > width) {
            fprintf(f, "\n%*s%s", indent, "", item);
            col = indent - (int)strlen(prefix) + n;
        } else {
            col += fprintf(f, " %s", item);
        }
        if (last)
            break;
    }
    fputc('\n', f);
}

/* text, its lines after the first indented by indent columns. */
static void print_lines(FILE *f, const char *text, int indent)
{
    for (const char *p = text; *p; p++) {
        fputc(*p, f);
        if (*p == '\n')
            fprintf(f, "%*s", indent, "");
    }
    fputc('\n', f);
}

/* `oomlab help COMMAND` and `oomlab COMMAND --help`. */
static void print_command_help(FILE *f, const cli_command *c)
{
    print_synopsis(f, "usage: oomlab ", c);
    fputc('\n', f);
    print_lines(f, c->summary, 0);
    if (!c->options[0].name)
        return;
    int w = 0;
    for (const cli_option *o = c->options; o < c->options + CLI_MAX_OPTIONS && o->name; o++) {
        int n = (int)(strlen(o->name) + (o->value ? 1 + strlen(o->value) : 0));
        w = n > w ? n : w;
    }
    fprintf(f, "\noptions:\n");
    for (const cli_option *o = c->options; o < c->options + CLI_MAX_OPTIONS && o->name; o++) {
        char head[96];
        snprintf(head, sizeof head, "%s%s%s", o->name, o->value ? " " : "", o->value ? o->value : "");
        fprintf(f, "  %-*s  ", w, head);
        print_lines(f, o->help, w + 4);
        if (o->repeats)
            fprintf(f, "  %-*s  (may be given more than once)\n", w, "");
    }
}

/* Every command of a group ("bench"), one after the other. */
static void print_group_help(FILE *f, const char *group)
{
    size_t n = strlen(group);
    bool first = true;
    for (size_t i = 0; i < NCOMMANDS; i++) {
        if (strncmp(commands[i].name, group, n) == 0 && commands[i].name[n] == ' ') {
            if (!first)
                fputc('\n', f);
            print_command_help(f, &commands[i]);
            first = false;
        }
    }
}

/* `oomlab help`: every command, its usage and what it does. */
static void print_overview(FILE *f)
{
    fprintf(f, "usage: oomlab COMMAND [ARGS]   (oomlab help COMMAND, or oomlab COMMAND --help: its options)\n");
    for (size_t i = 0; i < NCOMMANDS; i++) {
        const cli_command *c = &commands[i];
        char head[64];
        int len = snprintf(head, sizeof head, "%s%s%s", c->name, c->args[0] ? " " : "", c->args);
        if (!c->options[0].name && len <= 26 && !strchr(c->summary, '\n')) { /* one line: usage, then what */
            fprintf(f, "  %-26s %s\n", head, c->summary);
            continue;
        }
        print_synopsis(f, "  ", c);
        fprintf(f, "      ");
        print_lines(f, c->summary, 6);
    }
    fprintf(f, "exit status: 0 success, 1 a result that fails (run: an expectation does not hold, or a variant crashed\n"
               "or timed out, said in a closing line; replay: the model diverges from PyTorch; compare: a regression;\n"
               "faultsweep: a fault point was not clean), 2 bad input (one error line on stderr, nothing written)\n");
}

/* One error line, exit 2. An argument the format quotes ('%s') is the user's: it is cut to a readable length
 * (echo_cut); an unquoted one is a message oomlab made and is printed whole. */
static int bad_input(const char *fmt, const char *arg)
{
    char cut[ECHO_BUF], line[2048];
    if (strstr(fmt, "'%s'"))
        arg = echo_str(arg, cut);
    snprintf(line, sizeof line, fmt, arg);
    fprintf(stderr, "oomlab: %s\n", echo_one_line(line)); /* a path with a newline: still one line */
    return EXIT_BAD_INPUT;
}

#define MAX_INPUT_BAD                                                                                          \
    "--max-input: '%s' is not a size of at least 1 byte (bytes, or a number with KiB, MiB, GiB, TiB, KB, MB, GB, TB)"

static bool parse_max_input(const char *s, size_t *out) { return units_parse_size(s, out) == OOM_OK && *out > 0; }

/* --max-input of a command other than replay (which keeps it in its options): taken out of args[0..*n) and set
 * as the bound of every input file this process reads (runset_set_max_input). The values of c's other options are
 * skipped, so a value that reads "--max-input" is left to its option. 0, or the exit status of a bad value. */
static int take_max_input(const cli_command *c, char **args, int *n)
{
    int w = 0;
    for (int i = 0; i < *n; i++) {
        const cli_option *o = c ? option_find(c, args[i], strlen(args[i])) : NULL;
        if (o && strcmp(o->name, "--max-input") == 0) {
            size_t bytes = 0;
            if (i + 1 >= *n)
                return bad_input("%s needs a value", "--max-input");
            if (!parse_max_input(args[++i], &bytes))
                return bad_input(MAX_INPUT_BAD, args[i]);
            runset_set_max_input(bytes);
            continue;
        }
        args[w++] = args[i];
        if (o && o->value && i + 1 < *n)
            args[w++] = args[++i];
    }
    *n = w;
    args[w] = NULL;
    return 0;
}

/* A command that does not exist: one line, and where the word is a scenario's name, the command that runs it. */
static int unknown_command(const char *cmd)
{
    if (!scenario_find(cmd))
        return bad_input("unknown command '%s' (oomlab help lists them)", cmd);
    /* a catalog name: short and ours, echoed whole */
    fprintf(stderr, "oomlab: unknown command '%s': it is a scenario; run it with oomlab run %s\n", cmd, cmd);
    return EXIT_BAD_INPUT;
}

/* The value of --backend at argv[*i] (advancing *i): 0, or the exit status of a bad one (its line printed). */
static int take_backend(int argc, char **argv, int *i, device_kind *kind)
{
    if (++*i >= argc)
        return bad_input("%s needs a value", "--backend");
    if (device_kind_parse(argv[*i], kind) != OOM_OK)
        return bad_input("--backend: '%s' is not auto, cuda or sim", argv[*i]);
    return 0;
}

/* Print a cJSON object and free it. */
static void print_json(cJSON *o)
{
    char *s = cJSON_Print(o);
    if (s) {
        puts(s);
        free(s);
    }
    cJSON_Delete(o);
}

/* The allocator-config variables a replay does not read (the recording's own settings apply): design.md's
 * precedence for `run`, and PyTorch's newer name. */
static const char *const replay_env_vars[] = {"OOMLAB_ALLOC_CONF", "PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_HIP_ALLOC_CONF",
                                             "PYTORCH_ALLOC_CONF"};
#define REPLAY_NENV (sizeof replay_env_vars / sizeof replay_env_vars[0])

static const char *const budget_source_json[] = {"none", "--budget", "file"};

/* One device's replay as a JSON object. */
static cJSON *replay_device_json(const replay_result *res)
{
    cJSON *d = cJSON_CreateObject();
    cJSON_AddNumberToObject(d, "device", res->device);
    cJSON_AddNumberToObject(d, "events", (double)res->events);
    cJSON_AddBoolToObject(d, "prediction", res->prediction);
    if (res->first_divergence >= 0)
        cJSON_AddNumberToObject(d, "first_divergence", (double)res->first_divergence);
    else
        cJSON_AddNullToObject(d, "first_divergence");
    cJSON_AddStringToObject(d, "divergence", res->divergence);
    cJSON_AddNumberToObject(d, "model_ooms", (double)res->model_ooms);
    if (res->first_oom_event >= 0)
        cJSON_AddNumberToObject(d, "first_oom_event", (double)res->first_oom_event);
    else
        cJSON_AddNullToObject(d, "first_oom_event");
    cJSON_AddStringToObject(d, "oom_message", res->oom_message);
    if (res->budget_bytes)
        cJSON_AddNumberToObject(d, "cap", (double)res->budget_bytes);
    else
        cJSON_AddNullToObject(d, "cap");
    if (res->kernel_event >= 0)
        cJSON_AddNumberToObject(d, "kernel_event", (double)res->kernel_event);
    else
        cJSON_AddNullToObject(d, "kernel_event");
    cJSON *m = cJSON_AddObjectToObject(d, "memory_stats");
    for (size_t i = 0; m && i < MEMSTATS_NKEYS; i++) {
        const char *key;
        int64_t v;
        memstats_key(&res->stats, i, &key, &v);
        cJSON_AddNumberToObject(m, key, (double)v);
    }
    return d;
}

static void replay_print_device(const replay_result *res, bool whatif)
{
    printf("cuda:%d: %zu events\n", res->device, res->events);
    if (res->prediction && res->first_divergence >= 0)
        printf("  trace: %s\n", res->divergence);
    else if (res->prediction)
        printf("  segment actions: none recorded (a prediction: the model's own)\n");
    else if (res->first_divergence < 0)
        printf("  segment actions: agree with PyTorch's\n");
    else if (whatif)
        printf("  segment actions: first differ from the recording at %s\n", res->divergence);
    else
        printf("  segment actions: diverge at %s\n", res->divergence);
    if (res->model_ooms)
        printf("  OOMs: %zu, the first at event %ld:\n    %s\n", res->model_ooms, res->first_oom_event,
               res->oom_message);
    static const char *const keys[] = {
        "allocated_bytes.all.current", "allocated_bytes.all.peak", "reserved_bytes.all.current",
        "reserved_bytes.all.peak",     "segment.all.current",      "num_device_alloc",
        "num_device_free",             "num_alloc_retries",        "num_ooms",
    };
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        int64_t v = 0;
        memstats_get(&res->stats, keys[i], &v);
        printf("    %-28s %lld\n", keys[i], (long long)v);
    }
}

/* A trace event index: decimal digits only. */
static bool parse_event(const char *s, size_t *out)
{
    if (!*s || strlen(s) > 15 || strspn(s, "0123456789") != strlen(s))
        return false;
    *out = (size_t)strtoull(s, NULL, 10);
    return true;
}

static int cmd_replay(int argc, char **argv)
{
    const char *file = NULL;
    replay_options opt = {0};
    bool json = false;
    for (int i = 0; i < argc; i++) {
        if (strcmp(argv[i], "--json") == 0) {
            json = true;
        } else if (strcmp(argv[i], "--alloc-conf") == 0) {
            if (++i >= argc)
                return bad_input("%s needs a value", "--alloc-conf");
            opt.alloc_conf = argv[i];
        } else if (strcmp(argv[i], "--budget") == 0) {
            if (++i >= argc)
                return bad_input("%s needs a value", "--budget");
            if (units_parse_size(argv[i], &opt.budget_bytes) != OOM_OK)
                return bad_input("--budget: '%s' is not a size (bytes, or a number with KiB, MiB, GiB, TiB, KB, "
                                 "MB, GB, TB)",
                                 argv[i]);
        } else if (strcmp(argv[i], "--device") == 0) {
            if (++i >= argc)
                return bad_input("%s needs a value", "--device");
            const char *s = strncmp(argv[i], "cuda:", 5) == 0 ? argv[i] + 5 : argv[i];
            char *end = NULL;
            errno = 0;
            long v = strtol(s, &end, 10);
            if (!isdigit((unsigned char)s[0]) || !end || *end || errno || v > 65535)
                return bad_input("--device: '%s' is not a device index (0, 1, ... or cuda:N)", argv[i]);
            opt.one_device = true;
            opt.device = (int)v;
        } else if (strcmp(argv[i], "--addresses") == 0) {
            if (++i >= argc)
                return bad_input("%s needs a value", "--addresses");
            if (strcmp(argv[i], "model") == 0)
                opt.model_addresses = true;
            else if (strcmp(argv[i], "recorded") != 0)
                return bad_input("--addresses: '%s' is not recorded or model", argv[i]);
        } else if (strcmp(argv[i], "--kernels") == 0) {
            if (++i >= argc)
                return bad_input("%s needs a value", "--kernels");
            if (strcmp(argv[i], "none") == 0)
                opt.kernels = REPLAY_KERNELS_NONE;
            else if (strcmp(argv[i], "first") == 0)
                opt.kernels = REPLAY_KERNELS_FIRST_ALLOC;
            else if (parse_event(argv[i], &opt.kernel_at))
                opt.kernels = REPLAY_KERNELS_AT;
            else
                return bad_input("--kernels: '%s' is not first, none or an event number", argv[i]);
        } else if (strcmp(argv[i], "--snapshot") == 0) {
            if (++i >= argc)
                return bad_input("%s needs a value", "--snapshot");
            if (!argv[i][0])
                return bad_input("%s needs a file name", "--snapshot");
            if (fileio_check_target(argv[i]) != OOM_OK) /* before the replay, not after it */
                return bad_input("replay: --snapshot: %s", oom_error_detail());
            opt.snapshot_path = argv[i];
        } else if (strcmp(argv[i], "--max-input") == 0) {
            if (++i >= argc)
                return bad_input("%s needs a value", "--max-input");
            if (!parse_max_input(argv[i], &opt.max_input))
                return bad_input(MAX_INPUT_BAD, argv[i]);
        } else if (argv[i][0] == '-' && argv[i][1]) {
            return bad_input("replay: unknown option '%s'", argv[i]);
        } else if (!file) {
            file = argv[i];
        } else {
            return bad_input("replay: unexpected argument '%s'", argv[i]);
        }
    }
    if (!file)
        return bad_input("%s", "replay: missing FILE (a snapshot JSON)");
    /* The recording's allocator_settings apply unless --alloc-conf is given: an exported config never overrides
     * a recording, and the output says so. */
    const char *ignored[REPLAY_NENV];
    for (size_t i = 0; i < REPLAY_NENV; i++) {
        const char *v = getenv(replay_env_vars[i]);
        ignored[i] = v && v[0] ? v : NULL;
    }
    replay_report rep;
    char err[REPLAY_ERR_MAX];
    oom_status st = replay_trace(file, &opt, &rep, err, sizeof err);
    if (st != OOM_OK) {
        replay_report_free(&rep);
        return bad_input("replay: %s", err);
    }
    bool diverged = false;
    for (size_t i = 0; i < rep.ndevices; i++)
        diverged |= rep.devices[i].first_divergence >= 0;
    char conftext[ALLOC_CONF_TEXT_MAX], rectext[ALLOC_CONF_TEXT_MAX];
    alloc_conf_format(&rep.conf, conftext, sizeof conftext);
    alloc_conf_format(&rep.recorded, rectext, sizeof rectext);
    if (json) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "schema", "oomlab.replay/1");
        cJSON_AddStringToObject(o, "file", file);
        cJSON_AddStringToObject(o, "mode", rep.prediction ? "prediction" : rep.whatif ? "whatif" : "check");
        cJSON_AddStringToObject(o, "alloc_conf", conftext);
        cJSON_AddStringToObject(o, "alloc_conf_source", opt.alloc_conf ? "--alloc-conf" : "trace");
        if (rep.recorded_error[0])
            cJSON_AddNullToObject(o, "recorded_alloc_conf");
        else
            cJSON_AddStringToObject(o, "recorded_alloc_conf", rectext);
        if (rep.budget_bytes)
            cJSON_AddNumberToObject(o, "budget", (double)rep.budget_bytes);
        else
            cJSON_AddNullToObject(o, "budget");
        cJSON_AddStringToObject(o, "budget_source", budget_source_json[rep.budget_source]);
        cJSON *ign = cJSON_AddArrayToObject(o, "ignored_environment");
        for (size_t i = 0; ign && i < REPLAY_NENV; i++) {
            if (!ignored[i])
                continue;
            cJSON *e = cJSON_CreateObject();
            cJSON_AddStringToObject(e, "name", replay_env_vars[i]);
            cJSON_AddStringToObject(e, "value", ignored[i]);
            cJSON_AddItemToArray(ign, e);
        }
        if (rep.whatif || rep.prediction)
            cJSON_AddNullToObject(o, "agree");
        else
            cJSON_AddBoolToObject(o, "agree", !diverged);
        cJSON *devs = cJSON_AddArrayToObject(o, "devices");
        for (size_t i = 0; devs && i < rep.ndevices; i++)
            cJSON_AddItemToArray(devs, replay_device_json(&rep.devices[i]));
        print_json(o);
    } else {
        printf("replay: %s\n", file);
        if (rep.prediction)
            printf("mode: prediction (the trace has no segment events, so nothing to check against: the model "
                   "places every segment, the trace's addresses only pair frees with allocs)\n");
        else if (rep.whatif)
            printf("mode: what-if simulation (--alloc-conf is not the recording's config): differences from the "
                   "recording are information, not failures\n");
        else
            printf("mode: check against the recording\n");
        printf("config: %s (%s)\n", conftext,
               !opt.alloc_conf ? "from the trace" : rep.whatif ? "--alloc-conf" : "--alloc-conf, the recording's own");
        if (rep.recorded_error[0])
            printf("recorded config: unreadable (%s)\n", rep.recorded_error);
        else if (rep.whatif)
            printf("recorded config: %s (the trace's allocator_settings)\n", rectext);
        for (size_t i = 0; i < REPLAY_NENV; i++)
            if (ignored[i])
                printf("ignored: %s=%s (a replay uses the recording's allocator_settings; --alloc-conf for a "
                       "what-if)\n",
                       replay_env_vars[i], ignored[i]);
        if (rep.budget_source == REPLAY_BUDGET_OPTION)
            printf("budget: %zu bytes (--budget)\n", rep.budget_bytes);
        else if (rep.budget_source == REPLAY_BUDGET_FILE)
            printf("budget: %zu bytes (the file's \"budget\")\n", rep.budget_bytes);
        else if (rep.ndevices && rep.devices[0].budget_bytes)
            printf("budget: %zu bytes (per_process_memory_fraction in the config)\n", rep.devices[0].budget_bytes);
        else
            printf("budget: none (a recording made under set_per_process_memory_fraction needs --budget)\n");
        printf("addresses: %s; ", rep.whatif || opt.model_addresses || rep.prediction
                                      ? "the sim's model of the driver"
                                      : "PyTorch's where free, else the sim's model of the driver");
        long kev = rep.ndevices ? rep.devices[0].kernel_event : -1;
        if (opt.kernels == REPLAY_KERNELS_FIRST_ALLOC && kev >= 0)
            printf("the first kernel launched after the first allocation, before event %ld (--kernels first, the "
                   "default)\n",
                   kev);
        else if (kev >= 0)
            printf("the first kernel launched before event %ld (--kernels)\n", kev);
        else
            printf("no kernel launched (--kernels)\n");
        for (size_t i = 0; i < rep.ndevices; i++)
            replay_print_device(&rep.devices[i], rep.whatif);
    }
    replay_report_free(&rep);
    return !rep.whatif && !rep.prediction && diverged ? 1 : 0;
}

/* The options every benchmark takes, --json and --backend, at argv[*i]: true when it was one of them (*rc: 0, or
 * the exit status of a bad value, its line printed). */
static bool bench_common_option(int argc, char **argv, int *i, bool *json, device_kind *kind, int *rc)
{
    *rc = 0;
    if (strcmp(argv[*i], "--json") == 0) {
        *json = true;
        return true;
    }
    if (strcmp(argv[*i], "--backend") == 0) {
        *rc = take_backend(argc, argv, i, kind);
        return true;
    }
    return false;
}

/* The integer value of the option at argv[*i] (advancing *i), in [lo, hi]: 0, or the exit status of a bad one. */
static int take_count(int argc, char **argv, int *i, long lo, long hi, const char *what, long *out)
{
    const char *o = argv[*i];
    if (++*i >= argc)
        return bad_input("%s needs a value", o);
    char *end = NULL;
    long v = strtol(argv[*i], &end, 10);
    if (!end || *end || v < lo || v > hi) {
        fprintf(stderr, "oomlab: %s: '%s' is not %s from %ld to %ld\n", o, argv[*i], what, lo, hi);
        return EXIT_BAD_INPUT;
    }
    *out = v;
    return 0;
}

/* A benchmark's exit status: 0, 1 when it failed, 2 when the backend asked for is not there. */
static int bench_exit(oom_status st)
{
    if (st == OOM_ENODEV)
        return bad_input("%s", "bench: --backend cuda, but no GPU is visible or the cuda backend is not built in");
    return st == OOM_OK ? 0 : 1;
}

static int cmd_bench_gemm(int argc, char **argv)
{
    bench_gemm_options opt = {.kind = DEVICE_AUTO};
    for (int i = 0; i < argc; i++) {
        int rc;
        if (bench_common_option(argc, argv, &i, &opt.json, &opt.kind, &rc)) {
            if (rc)
                return rc;
        } else {
            return bad_input("bench gemm: unknown option '%s'", argv[i]);
        }
    }
    return bench_exit(bench_gemm(&opt, stdout));
}

static int cmd_bench_step(int argc, char **argv)
{
    bench_step_options opt = {.kind = DEVICE_AUTO};
    for (int i = 0; i < argc; i++) {
        int rc = 0;
        if (bench_common_option(argc, argv, &i, &opt.json, &opt.kind, &rc)) {
        } else if (strcmp(argv[i], "--width") == 0 || strcmp(argv[i], "--batch") == 0) {
            long *v = strcmp(argv[i], "--width") == 0 ? &opt.width : &opt.batch;
            rc = take_count(argc, argv, &i, 1, 65536, "a size", v);
        } else {
            return bad_input("bench step: unknown option '%s'", argv[i]);
        }
        if (rc)
            return rc;
    }
    return bench_exit(bench_step(&opt, stdout));
}

static int cmd_bench_replay(int argc, char **argv)
{
    bench_replay_options opt = {.events = 1000000, .seed = 1};
    for (int i = 0; i < argc; i++) {
        int rc = 0;
        long v = 0;
        if (strcmp(argv[i], "--json") == 0) {
            opt.json = true;
        } else if (strcmp(argv[i], "--events") == 0) {
            rc = take_count(argc, argv, &i, 1000, 20000000, "a count", &v);
            opt.events = (size_t)v;
        } else if (strcmp(argv[i], "--seed") == 0) {
            rc = take_count(argc, argv, &i, 1, 2147483647, "a seed", &v);
            opt.seed = (uint64_t)v;
        } else {
            return bad_input("bench replay: unknown option '%s'", argv[i]);
        }
        if (rc)
            return rc;
    }
    return bench_exit(bench_replay(&opt, stdout));
}

static int cmd_bench(int argc, char **argv)
{
    if (argc >= 1 && strcmp(argv[0], "gemm") == 0)
        return cmd_bench_gemm(argc - 1, argv + 1);
    if (argc >= 1 && strcmp(argv[0], "step") == 0)
        return cmd_bench_step(argc - 1, argv + 1);
    if (argc >= 1 && strcmp(argv[0], "replay") == 0)
        return cmd_bench_replay(argc - 1, argv + 1);
    if (argc < 1 || strcmp(argv[0], "alloc") != 0)
        return bad_input("%s", "bench: the benchmark to run is 'alloc', 'gemm', 'step' or 'replay'");
    bench_options opt = {.kind = DEVICE_AUTO, .iters = 0};
    for (int i = 1; i < argc; i++) {
        int rc = 0;
        if (bench_common_option(argc, argv, &i, &opt.json, &opt.kind, &rc)) {
        } else if (strcmp(argv[i], "--iters") == 0) {
            long v = 0;
            rc = take_count(argc, argv, &i, 1, 100000000, "a count", &v);
            opt.iters = v;
        } else {
            return bad_input("bench: unknown option '%s'", argv[i]);
        }
        if (rc)
            return rc;
    }
    return bench_exit(bench_alloc(&opt, stdout));
}

static int cmd_list(void)
{
    for (size_t i = 0; i < scenario_catalog_size; i++) {
        const scenario *sc = scenario_catalog[i];
        printf("%-16s %s\n", sc->name, sc->title);
    }
    return 0;
}

static const scenario *find_scenario(const char *name)
{
    const scenario *sc = scenario_find(name);
    if (!sc) {
        fprintf(stderr, "oomlab: no scenario '%s' (oomlab list shows the catalog:", name);
        for (size_t i = 0; i < scenario_catalog_size; i++)
            fprintf(stderr, " %s", scenario_catalog[i]->name);
        fprintf(stderr, ")\n");
    }
    return sc;
}

static int cmd_describe(int argc, char **argv)
{
    if (argc != 1)
        return bad_input("%s", "describe: give one SCENARIO");
    const scenario *sc = find_scenario(argv[0]);
    if (!sc)
        return EXIT_BAD_INPUT;
    char budget[32], cibudget[32];
    printf("%s: %s\n\n%s\n\nbudget: %s at full scale, %s at ci scale (--budget)\n\nvariants:\n", sc->name, sc->title,
           sc->story, memstats_format_size(sc->default_budget, budget, sizeof budget),
           memstats_format_size(sc->ci_budget ? sc->ci_budget : sc->default_budget, cibudget, sizeof cibudget));
    for (size_t i = 0; i < sc->nvariants; i++) {
        const scenario_variant *v = &sc->variants[i];
        printf("  %-26s %s%s%s%s\n", v->name, v->summary, v->alloc_conf[0] ? " [" : "", v->alloc_conf,
               v->alloc_conf[0] ? "]" : "");
    }
    printf("\nparameters (--set name=value; --scale full is the default on cuda and in a dry run, ci on sim):\n");
    printf("  %-12s %7s %7s  %s\n", "name", "full", "ci", "meaning (range)");
    for (size_t i = 0; i < sc->nparams; i++) {
        const scenario_param *p = &sc->params[i];
        printf("  %-12s %7lld %7lld  %s (%lld to %lld)\n", p->name, (long long)p->def,
               (long long)scenario_param_default(p, SCALE_CI), p->help, (long long)p->min, (long long)p->max);
    }
    return 0;
}

/* --set NAME=VALUE with an integer VALUE. */
static bool parse_set(const char *arg, run_set *out, char *name, size_t cap)
{
    const char *eq = strchr(arg, '=');
    if (!eq || eq == arg || (size_t)(eq - arg) >= cap)
        return false;
    memcpy(name, arg, (size_t)(eq - arg));
    name[eq - arg] = '\0';
    char *end = NULL;
    errno = 0;
    long long v = strtoll(eq + 1, &end, 10);
    if (!eq[1] || !end || *end || errno)
        return false;
    out->name = name;
    out->value = v;
    return true;
}

/* --variant V (repeatable) or --variant A,B: append each name. */
static int take_variants(char *arg, run_options *o)
{
    for (char *tok = strtok(arg, ","); tok; tok = strtok(NULL, ",")) {
        if (o->nvariants == RUN_MAX_VARIANTS)
            return bad_input("--variant: at most %s variants", "32");
        o->variants[o->nvariants++] = tok;
    }
    return 0;
}

/* --timeout SECONDS: a positive number of seconds, or 0 for no limit (stored as -1). 0, or the exit status. */
static int take_timeout(const char *arg, double *out)
{
    char *end = NULL;
    errno = 0;
    double v = strtod(arg, &end);
    if (!arg[0] || !end || *end || errno || !(v >= 0) || v > 1e6)
        return bad_input("--timeout: '%.64s' is not a number of seconds from 0 (no limit) to 1000000", arg);
    *out = v == 0 ? -1 : v;
    return 0;
}

/* The "jobs: N (why)" line of a run's header, when the variants run more than one at a time. */
static void print_jobs(FILE *f, int jobs, const char *why)
{
    if (jobs != 1)
        fprintf(f, "jobs: %d (%s)\n", jobs, why);
}

/* Write one run's results file (into *rundir once one is claimed, else claims one in out_dir). Returns 0 or
 * EXIT_BAD_INPUT (the line printed). */
static int write_one(const run_result *res, const char *out_dir, bool write, char *rundir, size_t rundircap,
                     char *path, size_t pathcap)
{
    path[0] = '\0';
    if (!write)
        return 0;
    oom_status st = rundir[0] ? report_write_in(res, rundir, path, pathcap) : report_write(res, out_dir, path, pathcap);
    if (st != OOM_OK) {
        fprintf(stderr, "oomlab: --out: %s\n", oom_error_detail());
        return EXIT_BAD_INPUT;
    }
    const char *slash = strrchr(path, '/');
    snprintf(rundir, rundircap, "%.*s", (int)(slash ? slash - path : 0), path);
    return 0;
}

/* `oomlab run SCENARIO --sweep PARAM=LO..HI`: the sweep's table or JSON, and its results file. */
static int run_sweep(const scenario *sc, const run_options *o, const char *arg, const char *out_dir, bool write,
                     bool json, bool plot)
{
    char param[64], err[ALLOC_CONF_ERR_MAX + 256];
    int64_t lo = 0, hi = 0;
    if (!sweep_parse(arg, param, sizeof param, &lo, &hi))
        return bad_input("--sweep: '%s' is not PARAM=LO..HI (integers)", arg);
    if (sweep_validate(sc, o, param, lo, hi, err, sizeof err) != OOM_OK)
        return bad_input("%s", err);
    sweep_result res;
    if (runner_sweep(sc, o, param, lo, hi, &res, err, sizeof err) != OOM_OK)
        return bad_input("%s", err);
    char path[1024] = "";
    if (write && sweep_write(&res, out_dir, path, sizeof path) != OOM_OK) {
        fprintf(stderr, "oomlab: --out: %s\n", oom_error_detail());
        sweep_result_free(&res);
        return EXIT_BAD_INPUT;
    }
    if (json) {
        cJSON *j = sweep_json(&res);
        if (j)
            print_json(j);
        if (write)
            fprintf(stderr, "results: %s\n", path);
    } else {
        sweep_table(&res, stdout);
        if (write)
            printf("results: %s\n", path);
    }
    int rc = res.passed ? 0 : 1;
    char drawn[2048];
    if (plot && plot_all(path, drawn, sizeof drawn, err, sizeof err) != OOM_OK) { /* a failed result, exit 1 */
        fprintf(stderr, "oomlab: --plot: %s\n", err);
        rc = 1;
    } else if (plot && !json) {
        printf("plot: %s", drawn);
    }
    sweep_result_free(&res);
    return rc;
}

/* --scale full on sim computes every kernel on CPU references: minutes for the catalog. Said before it starts,
 * with the way to the same counters in a second. */
static void full_scale_hint(const run_options *o)
{
    if (o->scale != SCALE_FULL || o->dry_run)
        return;
    if (o->backend == DEVICE_SIM || (o->backend == DEVICE_AUTO && !device_cuda_probe()->visible))
        fprintf(stderr, "oomlab: note: --scale full on sim computes every kernel on the CPU, which takes minutes; "
                        "--dry-run gives the same allocator counters in a second\n");
}

static int cmd_run(int argc, char **argv)
{
    run_options o = {.backend = DEVICE_AUTO, .seed = 0};
    const char *name = NULL, *out_dir = "results/runs", *conf_cli = NULL, *sweep = NULL;
    bool json = false, write = true, plot = false, out_given = false;
    static char set_names[RUN_MAX_SETS][64];
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        bool has_value = strcmp(a, "--variant") == 0 || strcmp(a, "--backend") == 0 || strcmp(a, "--budget") == 0 ||
                         strcmp(a, "--set") == 0 || strcmp(a, "--alloc-conf") == 0 || strcmp(a, "--out") == 0 ||
                         strcmp(a, "--scale") == 0 || strcmp(a, "--sweep") == 0 || strcmp(a, "--timeout") == 0;
        if (has_value && i + 1 >= argc)
            return bad_input("%s needs a value", a);
        if (strcmp(a, "--variant") == 0) {
            int rc = take_variants(argv[++i], &o);
            if (rc)
                return rc;
        } else if (strcmp(a, "--backend") == 0) {
            int rc = take_backend(argc, argv, &i, &o.backend);
            if (rc)
                return rc;
        } else if (strcmp(a, "--scale") == 0) {
            const char *v = argv[++i];
            if (strcmp(v, "ci") == 0)
                o.scale = SCALE_CI;
            else if (strcmp(v, "full") == 0)
                o.scale = SCALE_FULL;
            else
                return bad_input("--scale: '%.64s' is not ci or full", v);
        } else if (strcmp(a, "--budget") == 0) {
            if (units_parse_size(argv[++i], &o.budget) != OOM_OK)
                return bad_input("--budget: '%s' is not a size (bytes, or a number with KiB, MiB, GiB, TiB, KB, "
                                 "MB, GB, TB)",
                                 argv[i]);
        } else if (strcmp(a, "--set") == 0) {
            if (o.nsets == RUN_MAX_SETS)
                return bad_input("--set: at most %s settings", "16");
            if (!parse_set(argv[++i], &o.sets[o.nsets], set_names[o.nsets], sizeof set_names[0]))
                return bad_input("--set: '%s' is not NAME=INTEGER", argv[i]);
            o.nsets++;
        } else if (strcmp(a, "--alloc-conf") == 0) {
            conf_cli = argv[++i];
        } else if (strcmp(a, "--sweep") == 0) {
            if (sweep)
                return bad_input("%s", "--sweep: one parameter at a time");
            sweep = argv[++i];
        } else if (strcmp(a, "--out") == 0) {
            out_dir = argv[++i];
            out_given = true;
            if (!out_dir[0])
                return bad_input("%s needs a directory", "--out");
        } else if (strcmp(a, "--no-write") == 0) {
            write = false;
        } else if (strcmp(a, "--timeout") == 0) {
            int rc = take_timeout(argv[++i], &o.timeout_s);
            if (rc)
                return rc;
        } else if (strcmp(a, "--no-fork") == 0) {
            o.no_fork = true;
        } else if (strcmp(a, "--jobs") == 0) {
            long v = 0;
            int rc = take_count(argc, argv, &i, 1, RUN_MAX_JOBS, "a number of jobs", &v);
            if (rc)
                return rc;
            o.jobs = (int)v;
        } else if (strcmp(a, "--dry-run") == 0) {
            o.dry_run = true;
        } else if (strcmp(a, "--real-addresses") == 0) {
            o.real_addresses = true;
        } else if (strcmp(a, "--plot") == 0) {
            plot = true;
        } else if (strcmp(a, "--json") == 0) {
            json = true;
        } else if (a[0] == '-' && a[1]) {
            return bad_input("run: unknown option '%s'", a);
        } else if (!name) {
            name = a;
        } else {
            return bad_input("run: unexpected argument '%s'", a);
        }
    }
    if (plot && !write)
        return bad_input("%s", "--plot draws the results file, which --no-write does not write");
    if (out_given && !write)
        return bad_input("%s", "--out names where results are written, and --no-write writes none: give one");
    if (!name && (o.nvariants || o.nsets))
        return bad_input("%s", "run: --variant and --set need a SCENARIO (variants and parameters are a scenario's)");
    if (sweep && !name)
        return bad_input("%s", "run: --sweep needs a SCENARIO (parameters are a scenario's)");
    const scenario *one = NULL;
    if (name && !(one = find_scenario(name)))
        return EXIT_BAD_INPUT;
    /* the user's settings, from the most specific source that is set; a bad one is named with its source */
    o.alloc_conf = alloc_conf_pick(conf_cli, &o.alloc_conf_source);
    char err[ALLOC_CONF_ERR_MAX + 256];
    alloc_conf user_conf;
    if (alloc_conf_parse(&user_conf, o.alloc_conf, err, sizeof err) != OOM_OK) {
        fprintf(stderr, "oomlab: %s: %s\n", o.alloc_conf_source, err);
        return EXIT_BAD_INPUT;
    }
    if (alloc_no_caching_pick(&o.uncached, &o.uncached_source, err, sizeof err) != OOM_OK)
        return bad_input("%s", err);
    if (sweep) {
        full_scale_hint(&o);
        return run_sweep(one, &o, sweep, out_dir, write, json, plot);
    }
    const scenario *const *list = one ? &one : scenario_catalog;
    size_t n = one ? 1 : scenario_catalog_size;
    for (size_t k = 0; k < n; k++) /* every scenario's options are checked before anything runs or is written */
        if (runner_validate(list[k], &o, err, sizeof err) != OOM_OK) /* a settings error names its key and range */
            return bad_input("%s", err);
    full_scale_hint(&o);
    run_result *res = calloc(n, sizeof *res);
    char (*paths)[1024] = calloc(n, sizeof *paths);
    if (!res || !paths) {
        free(res);
        free(paths);
        return bad_input("%s", "out of host memory");
    }
    /* every variant of every scenario as a child, --jobs at a time; the results are written in catalog order */
    const run_options **opts = calloc(n, sizeof *opts);
    size_t budget = 0;
    for (size_t k = 0; opts && k < n; k++) {
        opts[k] = &o;
        size_t b = o.budget ? o.budget : list[k]->default_budget > list[k]->ci_budget ? list[k]->default_budget
                                                                                       : list[k]->ci_budget;
        budget = b > budget ? b : budget;
    }
    char why[RUN_JOBS_WHY_MAX];
    int jobs = runner_jobs(&o, budget, why, sizeof why);
    size_t nvar = 0; /* no more jobs than variants to run (each --variant names one, checked above) */
    for (size_t k = 0; k < n; k++)
        nvar += o.nvariants ? (size_t)o.nvariants : list[k]->nvariants;
    if (nvar && (size_t)jobs > nvar)
        jobs = (int)nvar;
    if (!opts || runner_run_batch(list, opts, n, res, jobs, err, sizeof err) != OOM_OK) {
        if (!opts)
            snprintf(err, sizeof err, "out of host memory");
        free(opts);
        free(res);
        free(paths);
        return bad_input("%s", err);
    }
    free(opts);
    char rundir[1024] = "";
    int rc = 0;
    for (size_t k = 0; k < n && rc == 0; k++)
        rc = write_one(&res[k], out_dir, write, rundir, sizeof rundir, paths[k], sizeof paths[0]);
    if (rc) {
        for (size_t k = 0; k < n; k++)
            run_result_free(&res[k]);
        free(res);
        free(paths);
        return rc;
    }
    bool passed = true, plot_failed = false;
    for (size_t k = 0; k < n; k++) {
        passed = passed && res[k].passed;
        if (plot) { /* the results are written: a plot that fails is a failed result (exit 1), not bad input */
            char drawn[4096]; /* NAME.png, NAME-peaks.png, NAME-segments.png beside NAME.json */
            if (plot_all(paths[k], drawn, sizeof drawn, err, sizeof err) != OOM_OK) {
                fprintf(stderr, "oomlab: --plot: %s\n", err);
                plot_failed = true;
            } else if (!json) {
                for (char *line = drawn, *nl; (nl = strchr(line, '\n')); line = nl + 1)
                    printf("plot: %.*s\n", (int)(nl - line), line);
            }
        }
    }
    if (json) { /* the results JSON on stdout (an array for the catalog); the file is written all the same */
        cJSON *j = one ? report_json(&res[0]) : cJSON_CreateArray();
        for (size_t k = 0; !one && j && k < n; k++) {
            cJSON *e = report_json(&res[k]);
            if (!e || !cJSON_AddItemToArray(j, e)) {
                cJSON_Delete(e);
                cJSON_Delete(j);
                j = NULL;
            }
        }
        if (j)
            print_json(j);
        for (size_t k = 0; write && k < n; k++)
            fprintf(stderr, "results: %s\n", paths[k]);
    } else {
        print_jobs(stdout, jobs, why); /* the header's first line; the JSON has none (it is --jobs 1's) */
        if (one)
            report_table(&res[0], stdout);
        else
            report_catalog_table(res, n, stdout);
        if (write)
            printf("results: %s\n", one ? paths[0] : rundir);
    }
    rc = passed && !plot_failed ? 0 : 1;
    for (size_t k = 0; k < n; k++)
        run_result_free(&res[k]);
    free(res);
    free(paths);
    return rc;
}

/* `oomlab faultsweep [SCENARIO]`: the table, exit 1 when a point was not clean. */
static int cmd_faultsweep(int argc, char **argv)
{
    faultsweep_options fo = {.run = {.backend = DEVICE_AUTO}, .stride = 1, .device = true, .host = true};
    run_options *o = &fo.run;
    const char *name = NULL;
    static char set_names[RUN_MAX_SETS][64];
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        bool has_value = strcmp(a, "--variant") == 0 || strcmp(a, "--backend") == 0 || strcmp(a, "--set") == 0 ||
                         strcmp(a, "--scale") == 0 || strcmp(a, "--only") == 0 || strcmp(a, "--stride") == 0 ||
                         strcmp(a, "--timeout") == 0;
        if (has_value && i + 1 >= argc)
            return bad_input("%s needs a value", a);
        int rc = 0;
        if (strcmp(a, "--variant") == 0) {
            rc = take_variants(argv[++i], o);
        } else if (strcmp(a, "--backend") == 0) {
            rc = take_backend(argc, argv, &i, &o->backend);
        } else if (strcmp(a, "--scale") == 0) {
            const char *v = argv[++i];
            if (strcmp(v, "ci") == 0 || strcmp(v, "full") == 0)
                o->scale = v[0] == 'c' ? SCALE_CI : SCALE_FULL;
            else
                return bad_input("--scale: '%.64s' is not ci or full", v);
        } else if (strcmp(a, "--set") == 0) {
            if (o->nsets == RUN_MAX_SETS)
                return bad_input("--set: at most %s settings", "16");
            if (!parse_set(argv[++i], &o->sets[o->nsets], set_names[o->nsets], sizeof set_names[0]))
                return bad_input("--set: '%s' is not NAME=INTEGER", argv[i]);
            o->nsets++;
        } else if (strcmp(a, "--only") == 0) {
            const char *v = argv[++i];
            if (strcmp(v, "device") != 0 && strcmp(v, "host") != 0)
                return bad_input("--only: '%.64s' is not device or host", v);
            fo.device = v[0] == 'd';
            fo.host = v[0] == 'h';
        } else if (strcmp(a, "--stride") == 0) {
            long v = 0;
            rc = take_count(argc, argv, &i, 1, FAULTSWEEP_MAX_POINT, "a stride", &v);
            fo.stride = (uint64_t)v;
        } else if (strcmp(a, "--timeout") == 0) {
            rc = take_timeout(argv[++i], &o->timeout_s);
        } else if (strcmp(a, "--jobs") == 0) {
            long v = 0;
            rc = take_count(argc, argv, &i, 1, RUN_MAX_JOBS, "a number of jobs", &v);
            o->jobs = (int)v;
        } else if (a[0] == '-' && a[1]) {
            return bad_input("faultsweep: unknown option '%s'", a);
        } else if (!name) {
            name = a;
        } else {
            return bad_input("faultsweep: unexpected argument '%s'", a);
        }
        if (rc)
            return rc;
    }
    if (!name && (o->nvariants || o->nsets))
        return bad_input("%s", "faultsweep: --variant and --set need a SCENARIO");
    const scenario *one = NULL;
    if (name && !(one = find_scenario(name)))
        return EXIT_BAD_INPUT;
    char err[512];
    o->alloc_conf = alloc_conf_pick(NULL, &o->alloc_conf_source);
    alloc_conf user_conf;
    if (alloc_conf_parse(&user_conf, o->alloc_conf, err, sizeof err) != OOM_OK) {
        fprintf(stderr, "oomlab: %s: %s\n", o->alloc_conf_source, err);
        return EXIT_BAD_INPUT;
    }
    if (o->alloc_conf && o->alloc_conf[0]) /* the environment's settings change every point: say so */
        printf("settings: '%s' from %s, under each variant's own\n", o->alloc_conf, o->alloc_conf_source);
    faultsweep_result res;
    if (faultsweep_run(one ? &one : scenario_catalog, one ? 1 : scenario_catalog_size, &fo, &res, err, sizeof err) !=
        OOM_OK)
        return bad_input("%s", err);
    faultsweep_table(&res, stdout);
    int rc = res.passed ? 0 : 1;
    faultsweep_result_free(&res);
    return rc;
}

/* plot RUNDIR: the figure of each results file of the folder (runset's reading: NAME.json, in name order, sweeps
 * skipped), beside it as NAME.png (NAME-peaks.png, NAME-segments.png). */
static int plot_folder(const char *in, bool peaks, bool segments)
{
    runset rs;
    char err[512], out[RUNSET_PATH_MAX + 16];
    if (runset_load(in, &rs, err, sizeof err) != OOM_OK)
        return bad_input("plot: %s", err);
    int rc = 0;
    for (size_t i = 0; i < rs.n && rc == 0; i++) {
        const char *path = rs.docs[i].path;
        snprintf(out, sizeof out, "%.*s%s.png", (int)(strlen(path) - 5), path,
                 peaks ? "-peaks" : segments ? "-segments" : "");
        oom_status st = peaks      ? plot_peaks(path, out, err, sizeof err)
                        : segments ? plot_segments(path, out, err, sizeof err)
                                   : plot_run(path, out, err, sizeof err);
        if (st != OOM_OK)
            rc = bad_input("plot: %s", err);
        else
            printf("%s\n", out);
    }
    runset_free(&rs);
    return rc;
}

static int cmd_plot(int argc, char **argv)
{
    const char *in = NULL, *out = NULL, *trend = NULL;
    bool peaks = false, segments = false;
    for (int i = 0; i < argc; i++) {
        if (strcmp(argv[i], "-o") == 0) {
            if (++i >= argc || !argv[i][0])
                return bad_input("%s needs a file name", "-o");
            out = argv[i];
        } else if (strcmp(argv[i], "--peaks") == 0) {
            peaks = true;
        } else if (strcmp(argv[i], "--segments") == 0) {
            segments = true;
        } else if (strcmp(argv[i], "--trend") == 0) {
            if (++i >= argc || !argv[i][0])
                return bad_input("%s needs a file name", "--trend");
            trend = argv[i];
        } else if (argv[i][0] == '-') {
            return bad_input("plot: unknown option '%s'", argv[i]);
        } else if (!in) {
            in = argv[i];
        } else {
            return bad_input("plot: unexpected argument '%s'", argv[i]);
        }
    }
    char def[1100], err[512];
    if (trend) { /* the history's figures into the folder -o (default: beside the CSV, in trend/) */
        if (in || peaks || segments)
            return bad_input("%s", "plot --trend CSV draws the history alone (no RESULTS.json, --peaks, --segments)");
        if (!out) {
            const char *slash = strrchr(trend, '/');
            snprintf(def, sizeof def, "%.*strend", slash ? (int)(slash - trend + 1) : 0, trend);
            out = def;
        }
        char written[8192]; /* plot_trend makes the folder out once the history is read */
        if (plot_trend(trend, out, "png", written, sizeof written, err, sizeof err) != OOM_OK)
            return bad_input("plot: %s", err);
        printf("%s", written);
        return 0;
    }
    if (!in)
        return bad_input("%s", "plot: missing RESULTS.json (oomlab run writes one)");
    if (peaks && segments)
        return bad_input("%s", "plot: --peaks or --segments, one figure at a time");
    DIR *dir = opendir(in);
    if (dir) { /* a run folder, as compare and report read it: one figure beside each results file */
        closedir(dir);
        if (out)
            return bad_input("%s", "plot: -o names one figure; a run folder gets one beside each results file");
        return plot_folder(in, peaks, segments);
    }
    if (!out) {
        size_t n = strlen(in);
        bool json = n > 5 && strcmp(in + n - 5, ".json") == 0;
        snprintf(def, sizeof def, "%.*s%s.png", (int)(json ? n - 5 : n), in,
                 peaks ? "-peaks" : segments ? "-segments" : "");
        out = def;
    }
    oom_status st = peaks      ? plot_peaks(in, out, err, sizeof err)
                    : segments ? plot_segments(in, out, err, sizeof err)
                               : plot_run(in, out, err, sizeof err);
    if (st != OOM_OK)
        return bad_input("plot: %s", err);
    printf("%s\n", out);
    return 0;
}

static int cmd_report(int argc, char **argv)
{
    const char *out = "results/report", *twins = NULL, *inputs[64];
    size_t n = 0;
    for (int i = 0; i < argc; i++) {
        if (strcmp(argv[i], "-o") == 0 || strcmp(argv[i], "--twins") == 0) {
            if (i + 1 >= argc || !argv[i + 1][0])
                return bad_input("%s needs a folder", argv[i]);
            *(strcmp(argv[i], "-o") == 0 ? &out : &twins) = argv[i + 1];
            i++;
        } else if (argv[i][0] == '-') {
            return bad_input("report: unknown option '%s'", argv[i]);
        } else if (n == 64) {
            return bad_input("%s", "report: at most 64 results files or folders");
        } else {
            inputs[n++] = argv[i];
        }
    }
    if (n == 0)
        return bad_input("%s", "report: missing RESULTS (a run's folder or results files: oomlab run writes them)");
    FILE *probe = twins ? NULL : fopen("tests/data/twins/fragmentation.torch.json", "r");
    if (probe) { /* the default, said: it puts PyTorch's numbers on the page */
        fclose(probe);
        twins = "tests/data/twins";
    }
    char err[1024];
    if (report_html(inputs, n, twins, out, err, sizeof err) != OOM_OK)
        return bad_input("report: %s", err);
    printf("twins: %s\nreport: %s/index.html\n", twins ? twins : "none (no --twins, no tests/data/twins)", out);
    return 0;
}

static int cmd_parity(int argc, char **argv)
{
    device_kind kind = DEVICE_AUTO;
    const char *names[16];
    size_t n = 0;
    for (int i = 0; i < argc; i++) {
        if (strcmp(argv[i], "--backend") == 0) {
            int rc = take_backend(argc, argv, &i, &kind);
            if (rc)
                return rc;
        } else if (argv[i][0] == '-') {
            return bad_input("parity: unknown option '%s'", argv[i]);
        } else {
            size_t w = 0;
            while (w < parity_nworkloads && strcmp(parity_workloads[w], argv[i]) != 0)
                w++;
            if (w == parity_nworkloads || n == 16)
                return bad_input("parity: unknown workload '%s' (eval_leak, eval_item, eval_nograd, train_sgd, "
                                 "train_adam, rnn_chain)",
                                 argv[i]);
            names[n++] = argv[i];
        }
    }
    if (kind == DEVICE_CUDA && (!device_cuda_built() || !device_cuda_visible()))
        return bad_input("%s", "parity: --backend cuda, but no GPU is visible or the cuda backend is not built in");
    if (n == 0)
        for (; n < parity_nworkloads; n++)
            names[n] = parity_workloads[n];
    int rc = 0;
    for (size_t i = 0; i < n; i++) {
        cJSON *o = NULL;
        if (parity_run(names[i], kind, &o) != OOM_OK) {
            fprintf(stderr, "oomlab: parity %s\n", oom_error_msg());
            rc = 1;
            continue;
        }
        char *s = cJSON_PrintUnformatted(o);
        if (s)
            puts(s);
        free(s);
        cJSON_Delete(o);
    }
    return rc;
}

/* `oomlab help [COMMAND]`: argc/argv after "help". */
static int cmd_help(int argc, char **argv)
{
    if (argc == 0)
        return print_overview(stdout), 0;
    const cli_command *c = command_find(argv[0], argc == 2 ? argv[1] : NULL);
    if (argc == 1 && !c && command_is_group(argv[0]))
        return print_group_help(stdout, argv[0]), 0;
    if (argc > 2 || !c || (argc == 2 && !strchr(c->name, ' '))) {
        char what[256];
        snprintf(what, sizeof what, "%s%s%s", argv[0], argc > 1 ? " " : "", argc > 1 ? argv[1] : "");
        if (argc > 2 || (c && argc == 2))
            return bad_input("help: give one COMMAND (got '%s ...'; oomlab help lists them)", what);
        return bad_input("help: no command '%s' (oomlab help lists them)", what);
    }
    print_command_help(stdout, c);
    return 0;
}

/* The words after a command, as its parser reads them: --flag=value split into --flag and value where c says
 * --flag takes a value (a flag that takes none, given one, is bad input: *rc). Words that are values of the
 * option before them stay as they are; so do words c does not know (its parser names them). *help is set when
 * --help or -h is among the options. NULL with *rc set on bad input or when out of host memory. */
static char **split_flag_values(const cli_command *c, int argc, char **argv, int *outc, bool *help, int *rc)
{
    char **out = malloc(((size_t)argc * 2 + 1) * sizeof *out);
    if (!out) {
        *rc = bad_input("%s", "out of host memory");
        return NULL;
    }
    int n = 0;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i], *eq = strncmp(a, "--", 2) == 0 ? strchr(a, '=') : NULL;
        if (c && command_script_args(c) && (a[0] != '-' || strcmp(a, "--") == 0)) { /* the rest is the script's */
            while (i < argc)
                out[n++] = argv[i++];
            break;
        }
        const cli_option *o = c ? option_find(c, a, eq ? (size_t)(eq - a) : strlen(a)) : NULL;
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0)
            *help = true;
        if (o && eq && !o->value) {
            free(out);
            char name[64];
            snprintf(name, sizeof name, "%.*s", (int)(eq - a), a);
            *rc = bad_input("%s takes no value", name);
            return NULL;
        }
        if (o && eq) { /* --flag=value */
            out[n++] = (char *)o->name;
            out[n++] = (char *)eq + 1;
            continue;
        }
        out[n++] = argv[i];
        if (o && o->value && i + 1 < argc) /* --flag value: the value is taken as it is */
            out[n++] = argv[++i];
    }
    out[n] = NULL;
    *outc = n;
    return out;
}

static int run_command(const char *cmd, int argc, char **argv)
{
    if (strcmp(cmd, "list") == 0)
        return argc == 0 ? cmd_list() : bad_input("%s", "list takes no arguments");
    if (strcmp(cmd, "describe") == 0)
        return cmd_describe(argc, argv);
    if (strcmp(cmd, "run") == 0)
        return cmd_run(argc, argv);
    if (strcmp(cmd, "parity") == 0)
        return cmd_parity(argc, argv);
    if (strcmp(cmd, "plot") == 0)
        return cmd_plot(argc, argv);
    if (strcmp(cmd, "report") == 0)
        return cmd_report(argc, argv);
    if (strcmp(cmd, "faultsweep") == 0)
        return cmd_faultsweep(argc, argv);
    if (strcmp(cmd, "replay") == 0)
        return cmd_replay(argc, argv);
    if (strcmp(cmd, "predict") == 0)
        return cli_predict(argc, argv);
    if (strcmp(cmd, "advise") == 0)
        return cli_advise(argc, argv);
    if (strcmp(cmd, "bench") == 0)
        return cmd_bench(argc, argv);
    if (strcmp(cmd, "compare") == 0)
        return cli_compare(argc, argv);
    if (strcmp(cmd, "baseline") == 0)
        return cli_baseline(argc, argv);
    if (strcmp(cmd, "history") == 0)
        return cli_history(argc, argv);
    if (strcmp(cmd, "export") == 0)
        return cli_export(argc, argv);
    if (strcmp(cmd, "version") == 0) {
        if (argc != 0)
            return bad_input("%s", "version takes no arguments");
        printf("oomlab 0.1 (allocator model: PyTorch 2.11; cuda backend %s; %s)\n",
               device_cuda_built() ? "built in" : "not built", buildinfo_describe());
        return 0;
    }
    if (strcmp(cmd, "help") == 0)
        return cmd_help(argc, argv);
    return unknown_command(cmd);
}

int main(int argc, char **argv)
{
    if (argc < 2)
        return bad_input("%s", "missing COMMAND (oomlab help lists them)");
    const char *cmd = argv[1];
    if (strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0)
        cmd = "help";
    else if (strcmp(cmd, "--version") == 0)
        cmd = "version";
    /* the command's entry: bench's is its subcommand's ("bench alloc"), when one is named */
    const cli_command *c = command_find(cmd, argc > 2 ? argv[2] : NULL);
    if (!c && !command_is_group(cmd))
        return unknown_command(cmd);
    bool help = false;
    int rc = 0, n = 0;
    char **args = NULL;
    if (strcmp(cmd, "help") == 0) { /* its words are command names; help --help is help's own help */
        args = argv + 2;
        n = argc - 2;
        for (int i = 0; i < n; i++)
            help = help || strcmp(args[i], "--help") == 0 || strcmp(args[i], "-h") == 0;
    } else if (!(args = split_flag_values(c, argc - 2, argv + 2, &n, &help, &rc))) {
        return rc;
    }
    if (help) { /* COMMAND --help: whatever else is on the line */
        if (c)
            print_command_help(stdout, c);
        else
            print_group_help(stdout, cmd);
    } else if (strcmp(cmd, "replay") == 0 || (rc = take_max_input(c, args, &n)) == 0) {
        rc = run_command(cmd, n, args);
    }
    if (args != argv + 2)
        free(args);
    return rc;
}
