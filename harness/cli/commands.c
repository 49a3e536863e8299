/* commands.c - the command table (command.h): every command's name, handler, usage, help and options, in the
 * order `oomlab help` lists them, and the parsing helpers the handlers share. */
#include "cli/command.h"

#include <cJSON.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/echo.h"
#include "core/units.h"
#include "results/history.h"
#include "run/scenario.h"

#define OPT_BACKEND \
    {"--backend", "auto|cuda|sim", \
     "the device: cuda (a real GPU) or sim (simulated);\nauto (the default): cuda when a GPU is visible, else sim", \
     false}
#define MAX_INPUT_HELP \
    "the largest input file read (default 4GiB, or the host's available memory if that is smaller); a\n" \
    "larger one is refused before it is read, a stream (a pipe, a FIFO) once that much came"
#define OPT_MAX_INPUT {"--max-input", "SIZE", MAX_INPUT_HELP, false}
#define BUDGET_HELP "a size: bytes, or a number with KiB, MiB, GiB, TiB, KB, MB, GB, TB (1GiB, 512MiB)"

const cli_command cli_commands[] = {
    {"list", cli_list, 0, "", "the scenario catalog", {{0}}},
    {"describe", cli_describe, 0, "SCENARIO", "a scenario's story, variants and parameters", {{0}}},
    {"run", cli_run, 0,
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
          "print the results JSON (schema oomlab.run/3; an array for the catalog) instead of the\n"
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
    {"faultsweep", cli_faultsweep, 0,
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
    {"plot", cli_plot, 0,
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
    {"report", cli_report, 0,
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
    {"parity", cli_parity, 0,
     "[WORKLOAD...]",
     "the runtime's memory on the workloads of scripts/twins/mlp_parity.py, one JSON object per line\n"
     "(workloads: eval_leak, eval_item, eval_nograd, train_sgd, train_adam, rnn_chain; default: all)",
     {OPT_BACKEND}},
    {"predict", cli_predict, 0,
     "SCRIPT [ARGS...]",
     "will a PyTorch training script fit on a GPU, without one? Runs the unmodified SCRIPT with ARGS on the CPU,\n"
     "every CUDA tensor on the meta device, under scripts/oomlab_capture (Python: --python, else build/venv,\n"
     "installed on first use by scripts/predict_venv.sh), and replays the allocations and frees the CUDA path\n"
     "would make through the allocator model: peak allocated and reserved bytes (uncapped), whether it fits on\n"
     "--gpu under --budget (the CUDA context is outside the allocator: the whole device leaves the allocator\n"
     "total - context), the OOM it would hit (step, op, PyTorch's message), advise's minimum budget per allocator\n"
     "setting and verdict, steps and leaks, and the placeholders and modelled allocations of the capture. Where\n"
     "torch.compile makes choices by timing on the GPU (pad_mm, max-autotune), the script is captured again with\n"
     "them taken the other way and the peaks span both. Options come before SCRIPT; the script's output goes to stderr. Exit 0: a prediction (fits or not), 2: bad input\n"
     "(a missing script, an unknown GPU, a script that raises: its traceback then one line, or never uses CUDA,\n"
     "exits early, or runs past --timeout), 1: the capture was killed from outside, 128+N: oomlab was stopped by\n"
     "signal N (Ctrl-C, SIGTERM): the script and everything it started are ended, nothing is written",
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
          "advise's table); default: the first of $OOMLAB_ALLOC_CONF, $PYTORCH_CUDA_ALLOC_CONF,\n"
          "$PYTORCH_HIP_ALLOC_CONF, $PYTORCH_ALLOC_CONF that is set (said on stderr), else PyTorch's\n"
          "defaults; checked before the capture, which never sees them",
          false},
         {"--trace", "OUT.json",
          "keep the predicted trace (PyTorch's snapshot format: oomlab replay, oomlab advise, memory_viz)", false},
         {"--plot", "OUT.png|OUT.svg", "draw advise's figure of the predicted trace (gnuplot)", false},
         {"--json", NULL, "print the prediction as one JSON object (schema oomlab.predict/8)", false},
         {"--python", "PATH", "run the capture with this Python (your own environment, with torch 2.11)", false},
         {"--timeout", "SECONDS",
          "stop a capture that runs longer (the script and what it started; a placeholder answered\n"
          "20,000 times at one line is said as a possible endless loop); default 3600, 0: no limit",
          false},
         {"--nproc", "N",
          "the script is an N-process torch.distributed job (torchrun --nproc_per_node N): a rank is\n"
          "captured with torchrun's variables, init_process_group on a process group whose collectives\n"
          "complete at once, DDP's buckets recorded; NCCL's buffers (866 MiB per rank, measured on H200)\n"
          "charged outside the allocator; rank 0 first: a script that never initialises\n"
          "torch.distributed is one process, the others are not run; else one rank of each class rank 0\n"
          "names (the same FSDP2 shard sizes, rank 0 apart) is captured and identical ranks reported\n"
          "once (1 to 1024; not with --sweep, --trace or --plot)",
          false},
         {"--jobs", "J",
          "how many of --nproc's captures run at once (default: as many as CPUs); each holds its own\n"
          "host memory, 2.7 GB for an 8B-shaped model",
          false},
         {"--sweep", "NAME=LO..HI",
          "the largest value of a script parameter that fits, by bisection over fresh captures: each\n"
          "probe replaces {NAME} in ARGS with the value and sets the environment variable NAME to it;\n"
          "prints each probe (value, peaks, fits) and the answer, and says when peaks are not monotonic",
          false},
     }},
    {"replay", cli_replay, CLI_OWN_MAX_INPUT,
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
         {"--device-memory", "SIZE",
          "the recording GPU's total memory (torch.cuda.get_device_properties(0).total_memory), which budgets\n"
          "are fractions of; default: an H100 80GB's, 85017493504 bytes; " BUDGET_HELP,
          false},
         {"--snapshot", "OUT",
          "write the model's snapshot after the replay, as JSON, or as a pickle for pytorch.org/memory_viz\n"
          "when OUT ends in .pickle or .pkl",
          false},
         {"--json", NULL, "print memory_stats() and the replay's figures as one JSON object", false},
         OPT_MAX_INPUT,
     }},
    {"advise", cli_advise, 0,
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
         {"--device-memory", "SIZE",
          "the recording GPU's total memory (torch.cuda.get_device_properties(0).total_memory), which budgets\n"
          "are fractions of; default: an H100 80GB's, 85017493504 bytes; " BUDGET_HELP,
          false},
         {"--layouts", "N",
          "other orders of the segments each setting is bisected under besides the model's (0 to 64; default\n"
          "16; 0: the model's alone, about a tenth of the replays): the range over layouts",
          false},
         {"--try", "S", "one more allocator setting to try (PYTORCH_CUDA_ALLOC_CONF syntax)", true},
         {"--only", NULL, "try only PyTorch's defaults, the recording's own settings and the --try ones", false},
         {"--step-marker", "TEXT",
          "steps start where user_metadata (torch.cuda.memory._set_memory_metadata) changes to a text\n"
          "starting with TEXT; default: steps found from the repeated pattern of allocation sizes",
          false},
         {"--kernels", "first|none|EVENT", "when the program first launched a kernel (as for replay)", false},
         {"--json", NULL, "print the advice as one JSON object (schema oomlab.advise/2)", false},
         {"--plot", "OUT.png|OUT.svg",
          "draw the minimum budget per setting, and allocated and reserved over the trace for the\n"
          "defaults and the best setting (gnuplot)",
          false},
         OPT_MAX_INPUT,
     }},
    {"bench alloc", cli_bench_alloc, 0,
     "",
     "ns per malloc+free pair on a cache hit and on a seeded mixed workload (cuda: also cudaMalloc and cudaMallocAsync)",
     {
         OPT_BACKEND,
         {"--iters", "N", "malloc+free pairs per timed run (1 to 100000000; default 200000)", false},
         {"--runs", "N", "timed runs per figure, of which the median and p90 (1 to 1000; default 7)", false},
         {"--seed", "N", "the mixed workload's seed (default 1)", false},
         {"--workload-out", "FILE", "write the mixed workload there (text: a header, then a malloc or free a line)",
          false},
         {"--json", NULL, "print the figures as JSON", false},
     }},
    {"bench gemm", cli_bench_gemm, 0,
     "",
     "ms per call of the CPU reference GEMM; cuda: TFLOP/s of oomlab's GEMM against cuBLAS",
     {
         OPT_BACKEND,
         {"--json", NULL, "print the figures as JSON", false},
     }},
    {"bench kernels", cli_bench_kernels, 0,
     "",
     "ms per call and GB/s of the memory-bound kernels (elementwise, cast, reductions, log_softmax, Adam, randn)\n"
     "on float32 tensors; cuda: beside the device's theoretical memory bandwidth",
     {
         OPT_BACKEND,
         {"--elements", "N", "elements per tensor (4096 to 2147483648; default 64 Mi on cuda, 4 Mi on sim)", false},
         {"--json", NULL, "print the figures as JSON", false},
     }},
    {"bench step", cli_bench_step, 0,
     "",
     "ms per training step and per forward of MLP(width, depth 4), CI scale by default (256, batch 64)",
     {
         OPT_BACKEND,
         {"--width", "N", "the MLP's width (1 to 65536; default 256)", false},
         {"--batch", "N", "the batch size (1 to 65536; default 64)", false},
         {"--json", NULL, "print the figures as JSON", false},
     }},
    {"compare", cli_compare, 0,
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
    {"baseline", cli_baseline, 0,
     "CURRENT DIR",
     "make CURRENT (a passing run: a results file or run folder) the baseline in DIR (results/baselines/BACKEND):\n"
     "prints what changes (the compare table), then writes DIR/SCENARIO.json atomically, less what changes from\n"
     "run to run (start time, notes, and on sim the times); make baseline runs it",
     {OPT_MAX_INPUT}},
    {"history", cli_history, 0,
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
    {"export", cli_export, 0,
     "RUN",
     "write a run (a results file or run folder) in the formats CI dashboards read, no glue needed",
     {
         {"--junit", "FILE", "JUnit XML: one testcase per expectation of each variant (Jenkins/Ant schema)", false},
         {"--gbench", "FILE", "Google Benchmark JSON: each variant's time, its peak bytes as counters", false},
         {"--smaller-is-better", "FILE",
          "github-action-benchmark's customSmallerIsBetter array: each variant's byte metrics", false},
         OPT_MAX_INPUT,
     }},
    {"bench replay", cli_bench_replay, 0,
     "",
     "a seeded 1,000,000-event trace: parse (trace_load) and replay rates, separately, and advise's time",
     {
         {"--events", "N", "events in the trace (1000 to 20000000; default 1000000)", false},
         {"--seed", "N", "the workload's seed (default 1)", false},
         {"--json", NULL, "print the figures as JSON", false},
     }},
    {"version", cli_version, 0, "",
     "oomlab's version, whether the cuda backend is built in, and which build it is (optimised or checked; also: "
     "oomlab --version)",
     {{0}}},
    {"help", cli_help, CLI_WORDS_ARE_COMMANDS, "[COMMAND]",
     "the commands; with COMMAND, its usage and options (also: oomlab COMMAND --help)", {{0}}},
};

const size_t cli_ncommands = sizeof cli_commands / sizeof cli_commands[0];

/* The command named name (and sub, for "bench alloc"); NULL if none. */
const cli_command *cli_command_find(const char *name, const char *sub)
{
    size_t n = strlen(name);
    for (size_t i = 0; i < cli_ncommands; i++) {
        const char *c = cli_commands[i].name;
        if (strcmp(c, name) == 0)
            return &cli_commands[i];
        if (sub && strncmp(c, name, n) == 0 && c[n] == ' ' && strcmp(c + n + 1, sub) == 0)
            return &cli_commands[i];
    }
    return NULL;
}

/* True when name is a group of commands ("bench": "bench alloc", ...). */
bool cli_command_is_group(const char *name)
{
    size_t n = strlen(name);
    for (size_t i = 0; i < cli_ncommands; i++)
        if (strncmp(cli_commands[i].name, name, n) == 0 && cli_commands[i].name[n] == ' ')
            return true;
    return false;
}

const cli_option *cli_option_find(const cli_command *c, const char *name, size_t len)
{
    for (const cli_option *o = c->options; o < c->options + CLI_MAX_OPTIONS && o->name; o++)
        if (strlen(o->name) == len && strncmp(o->name, name, len) == 0)
            return o;
    return NULL;
}

bool cli_command_script_args(const cli_command *c) { return strncmp(c->args, "SCRIPT", 6) == 0; }

/* What a group's commands are, for its error line. */
static const struct {
    const char *name, *noun;
} groups[] = {{"bench", "benchmark"}};

int cli_group_missing(const char *group)
{
    const char *noun = "command";
    for (size_t i = 0; i < sizeof groups / sizeof groups[0]; i++)
        if (strcmp(groups[i].name, group) == 0)
            noun = groups[i].noun;
    char line[512];
    size_t n = strlen(group), len = (size_t)snprintf(line, sizeof line, "%s: the %s to run is", group, noun), k = 0;
    for (size_t i = 0; i < cli_ncommands; i++)
        if (strncmp(cli_commands[i].name, group, n) == 0 && cli_commands[i].name[n] == ' ')
            k++;
    for (size_t i = 0, j = 0; i < cli_ncommands && len < sizeof line; i++) {
        if (strncmp(cli_commands[i].name, group, n) != 0 || cli_commands[i].name[n] != ' ')
            continue;
        len += (size_t)snprintf(line + len, sizeof line - len, "%s'%s'", j == 0 ? " " : j + 1 == k ? " or " : ", ",
                                cli_commands[i].name + n + 1);
        j++;
    }
    return cli_bad_arg("%s", line);
}

/* One error line, exit 2. An argument the format quotes ('%s') is the user's: it is cut to a readable length
 * (echo_cut); an unquoted one is a message oomlab made and is printed whole. */
int cli_bad_arg(const char *fmt, const char *arg)
{
    char cut[ECHO_BUF], line[2048];
    if (strstr(fmt, "'%s'"))
        arg = echo_str(arg, cut);
    snprintf(line, sizeof line, fmt, arg);
    fprintf(stderr, "oomlab: %s\n", echo_one_line(line)); /* a path with a newline: still one line */
    return CLI_EXIT_BAD_INPUT;
}

/* A --max-input value: a size of at least one byte. */
bool cli_parse_max_input(const char *s, size_t *out) { return units_parse_size(s, out) == OOM_OK && *out > 0; }

/* The value of --backend at argv[*i] (advancing *i): 0, or the exit status of a bad one (its line printed). */
int cli_take_backend(int argc, char **argv, int *i, device_kind *kind)
{
    if (++*i >= argc)
        return cli_bad_arg("%s needs a value", "--backend");
    if (device_kind_parse(argv[*i], kind) != OOM_OK)
        return cli_bad_arg("--backend: '%s' is not auto, cuda or sim", argv[*i]);
    return 0;
}

/* Print a cJSON object and free it. */
void cli_print_json(cJSON *o)
{
    char *s = cJSON_Print(o);
    if (s) {
        puts(s);
        free(s);
    }
    cJSON_Delete(o);
}


const scenario *cli_find_scenario(const char *name)
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

/* The integer value of the option at argv[*i] (advancing *i), in [lo, hi]: 0, or the exit status of a bad one. */
int cli_take_count(int argc, char **argv, int *i, long lo, long hi, const char *what, long *out)
{
    const char *o = argv[*i];
    if (++*i >= argc)
        return cli_bad_arg("%s needs a value", o);
    char *end = NULL;
    long v = strtol(argv[*i], &end, 10);
    if (!end || *end || v < lo || v > hi) {
        fprintf(stderr, "oomlab: %s: '%s' is not %s from %ld to %ld\n", o, argv[*i], what, lo, hi);
        return CLI_EXIT_BAD_INPUT;
    }
    *out = v;
    return 0;
}


int cli_bad_input(const char *fmt, ...)
{
    char line[2048]; /* a path or a name from a file with a newline in it still makes one line */
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    fprintf(stderr, "oomlab: %s\n", echo_one_line(line));
    return CLI_EXIT_BAD_INPUT;
}
