# oomlab - GPU out-of-memory scenarios on a PyTorch-faithful caching allocator.
#
#   make                 build build/oomlab, optimised (OOM_DEBUG=0, -O2; the cuda backend is compiled in when nvcc
#                        is found)
#   make run SCENARIO=fragmentation [BACKEND=cuda|sim] [ARGS="--variant bug"]
#                        install missing Debian packages, build, run a scenario (cuda when a GPU is
#                        visible, else sim), print its table, write results/runs/.../SCENARIO.json and
#                        its plot SCENARIO.png; without SCENARIO, the whole catalog in one table
#   make test            install missing Debian packages and build/venv (torch 2.11 and the zoo's model libraries
#                        for oomlab predict's tests: scripts/predict_venv.sh --zoo, at once when present), build the
#                        checked build (build/checked:
#                        OOM_DEBUG=2, the allocator validator after every call) and run the Criterion suite on it (sim)
#   make test BACKEND=cuda   the same suite on a real GPU (one job at a time)
#   make bench           build with OOM_DEBUG=0 and run the benchmarks
#   make bench-torch     oomlab's allocator against PyTorch's in one run, alternating (a GPU and torch needed;
#                        scripts/twins/alloc_bench.py, ARGS="--rounds 15"; on the GPU machine run that script
#                        with .gpubundle/oomlab-bench)
#   make bench-predict   oomlab predict's cost on the CPU: the zoo and a Llama 8B and 70B built on the host
#                        (scripts/bench_predict.py, ARGS="llama70b hf_bert_cls"; build/venv with the zoo's libraries)
#   make baseline [BACKEND=cuda]   regenerate results/baselines/BACKEND/ (sim: the committed ones), showing what changes
#   make nightly [BACKEND=...]     run the catalog, compare with the baseline, append to results/history.csv
#   make report          the catalog and oversize_batch's sweep at full scale (REPORT_ARGS, default --dry-run),
#                        then results/report/index.html (oomlab report); make report-check renders it in
#                        headless chromium (installed on demand) and checks every section and image
#   make debug / asan    OOM_DEBUG=3 at -O0 (build/debug) / the catalog and the suite under clang's
#                        address, leak and undefined-behaviour sanitizers (build/asan, no cuda)
#   make fuzz [FUZZ_SECONDS=60] [FUZZ=replay]   build and run the libFuzzer harnesses of tests/fuzz
#   make deps            apt-get the packages that are missing
#   make clean

PACKAGES := libcjson-dev libcriterion-dev gnuplot-nox libxml2-utils python3-venv xz-utils

CC      ?= cc
NVCC    ?= $(shell command -v nvcc 2>/dev/null || { test -x /usr/local/cuda/bin/nvcc && echo /usr/local/cuda/bin/nvcc; })
CUDA_HOME ?= $(patsubst %/bin/nvcc,%,$(NVCC))

# The build users run is optimised with the validator off; `make test` builds the checked one into CHECKED.
BUILD   ?= build
DEBUG   ?= 0
CHECKED := build/checked
BACKEND ?= sim
OPT     ?= -O2
STD     := -std=c11
WARN    := -Wall -Wextra -Wpedantic -Wshadow -Wstrict-prototypes -Werror
CPPFLAGS := -D_POSIX_C_SOURCE=200809L -DOOM_DEBUG=$(DEBUG) -Iharness -Ikernels -I/usr/include/cjson
CFLAGS  ?= $(STD) $(WARN) $(OPT) -g $(SANITIZE)
LDLIBS  := -lcjson -lm -lpthread
LDFLAGS += $(SANITIZE)

HARNESS_C := $(filter-out harness/cli/main.c,$(wildcard harness/*/*.c))
SCEN_C    := $(wildcard scenarios/*.c)
KREF_C    := $(wildcard kernels/*.c)
TEST_C    := $(wildcard tests/*.c)
LIB_OBJ   := $(patsubst %.c,$(BUILD)/%.o,$(HARNESS_C) $(SCEN_C) $(KREF_C)) $(BUILD)/gen/stories.o $(BUILD)/gen/commit.o

ifneq ($(NVCC),)
  HAS_CUDA := 1
  CU_SRC   := $(wildcard harness/*/*.cu) $(wildcard kernels/*.cu)
  LIB_OBJ  += $(patsubst %.cu,$(BUILD)/%.o,$(CU_SRC))
  CPPFLAGS += -DOOM_HAVE_CUDA=1
  # Static cudart loads libcuda at run time, so the binary also starts on machines with no driver (CI).
  LDLIBS   += -L$(CUDA_HOME)/lib64 -lcudart_static -ldl -lrt -lstdc++
  NVFLAGS  := -std=c++17 -O2 -g -lineinfo -DOOM_DEBUG=$(DEBUG) -DOOM_HAVE_CUDA=1 -Iharness -Ikernels \
              -Werror all-warnings \
              -Xcompiler -Wall,-Wextra,-Werror
  # Hopper (sm_90 cubin, PTX for newer GPUs); the wgmma/TMA GEMM needs sm_90a's features, which no other GPU runs
  # (k_gemm_cuda takes it only on compute capability 9.0).
  NVARCH   := -gencode arch=compute_90,code=[sm_90,compute_90]
  $(BUILD)/kernels/gemm_sm90.o: NVARCH := -gencode arch=compute_90a,code=sm_90a
endif

.PHONY: all run test predict-deps bench bench-torch bench-predict debug asan fuzz deps clean gpu-bundle report report-check gallery baseline nightly mdlint FORCE

all: $(BUILD)/oomlab

# The flags a folder's objects were built with: when DEBUG, OPT, SANITIZE or the compilers change, the stamp
# changes and every object is rebuilt, so a folder never mixes checked and optimised objects.
BUILD_FLAGS := $(CC) $(CPPFLAGS) $(CFLAGS) $(REF_OPT) | $(NVCC) $(NVFLAGS) $(NVARCH) | $(LDFLAGS)
$(BUILD)/.flags: FORCE
	@mkdir -p $(@D); echo '$(BUILD_FLAGS)' | cmp -s - $@ || echo '$(BUILD_FLAGS)' > $@
FORCE:

$(BUILD)/%.o: %.c $(BUILD)/.flags
	@mkdir -p $(dir $@)
	$(CC) $(CPPFLAGS) $(CFLAGS) $(if $(filter kernels/%_ref.c,$<),$(REF_OPT)) -MMD -MP -c $< -o $@

$(BUILD)/%.o: %.cu $(BUILD)/.flags
	@mkdir -p $(dir $@)
	$(NVCC) $(NVFLAGS) $(NVARCH) -MMD -MP -c $< -o $@

# Each scenario's story, from its one home, the opening comment of scenarios/NAME.c (harness/run/story.h).
$(BUILD)/gen/stories.c: $(SCEN_C) scripts/gen_stories.sh
	@mkdir -p $(dir $@)
	bash scripts/gen_stories.sh $(SCEN_C) > $@.tmp && mv $@.tmp $@

$(BUILD)/gen/stories.o: $(BUILD)/gen/stories.c $(BUILD)/.flags
	$(CC) $(CPPFLAGS) $(CFLAGS) -MMD -MP -c $< -o $@

# The commit the binary is built from, for `oomlab --version` (harness/cli/version.c), with "-dirty" when tracked
# files differ from it: asked of git on every make (HEAD moves without any source changing) and rewritten only
# when it changes, so version.o is rebuilt exactly then. Outside a git checkout it is "unknown".
$(BUILD)/gen/commit.c: FORCE
	@mkdir -p $(@D); c=$$(git rev-parse --short=12 HEAD 2>/dev/null) || c=unknown; \
	  if [ "$$c" != unknown ] && [ -n "$$(git status --porcelain --untracked-files=no 2>/dev/null)" ]; then c="$$c-dirty"; fi; \
	  printf '/* Generated by the Makefile: the commit of this build. */\nconst char oom_build_commit[] = "%s";\n' "$$c" > $@.tmp; \
	  if cmp -s $@.tmp $@; then rm -f $@.tmp; else mv $@.tmp $@; fi

$(BUILD)/gen/commit.o: $(BUILD)/gen/commit.c $(BUILD)/.flags
	$(CC) $(CPPFLAGS) $(CFLAGS) -c $< -o $@

$(BUILD)/liboomlab.a: $(LIB_OBJ)
	@rm -f $@
	ar rcs $@ $^

$(BUILD)/oomlab: $(BUILD)/harness/cli/main.o $(BUILD)/liboomlab.a
	$(CC) $(LDFLAGS) $^ $(LDLIBS) -o $@

$(BUILD)/oomlab_tests: $(patsubst %.c,$(BUILD)/%.o,$(TEST_C)) $(BUILD)/liboomlab.a
	$(CC) $(LDFLAGS) $^ $(LDLIBS) -lcriterion -o $@

# Test-only scenarios (tests/fixtures: a crash, a hang, leaks on an OOM path), never in build/oomlab: linked into
# the suite, and into build/oomlab_fixtures, the command line with them, which the suite runs as a user would.
FIXTURE_OBJ := $(BUILD)/tests/fixtures/scenarios.o
$(BUILD)/oomlab_fixtures: $(BUILD)/harness/cli/main.o $(FIXTURE_OBJ) $(BUILD)/liboomlab.a
	$(CC) $(LDFLAGS) $^ $(LDLIBS) -o $@
$(BUILD)/oomlab_tests: $(FIXTURE_OBJ) | $(BUILD)/oomlab_fixtures

# The Python of oomlab predict, build/venv (torch 2.11.0 from the package registry, only what its import needs);
# make test runs it, oomlab predict runs it on first use; make run never needs it.
predict-deps:
	@bash scripts/predict_venv.sh

# Install the Debian packages that are missing (apt-get; needs root or sudo).
deps:
	@missing=""; for p in $(PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  echo "make deps: installing$$missing"; \
	  SUDO=""; [ "$$(id -u)" = 0 ] || SUDO=sudo; \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq $$missing >/dev/null || \
	    { echo "make deps: apt-get install$$missing failed" >&2; exit 2; }; \
	fi

# The run command of the README. BACKEND given on the command line picks the backend; otherwise auto.
# make exits 2 whenever a recipe fails, whatever its status; only in question mode (-q) does a recipe's status 1
# come through as make's own. So `make run` (alone on the command line, and not under -n) runs in question mode
# with its recipe lines marked + (run even under -q), and the sub-make that installs and builds runs without
# -q: make exits with oomlab's own status, 0, 1 or 2.
RUN_BACKEND := $(if $(filter command line environment,$(origin BACKEND)),$(BACKEND),auto)
ifeq ($(MAKECMDGOALS),run)
  ifeq ($(findstring n,$(firstword -$(MAKEFLAGS))),)
    MAKEFLAGS += -q
    RUN_ALWAYS := +
  endif
endif
run:
	$(RUN_ALWAYS)@flags="$$MAKEFLAGS"; first="$${flags%% *}"; rest="$${flags#"$$first"}"; \
	  MAKEFLAGS="$$(printf '%s' "$$first" | tr -d q)$$rest" $(MAKE) --no-print-directory deps $(BUILD)/oomlab
	$(RUN_ALWAYS)$(BUILD)/oomlab run $(SCENARIO) --backend $(RUN_BACKEND) --plot $(ARGS)

# The suite runs in one binary so Criterion prints one closing Synthesis line.
# BACKEND=cuda runs the backend-parameterised tests on the GPU, one job at a time; without a GPU (nvidia-smi
# lists none) or without the cuda backend (nvcc not found) it stops before anything, in one line.
TEST_JOBS := $(if $(filter cuda,$(BACKEND)),--jobs 1,)
ifeq ($(BACKEND)$(filter test,$(MAKECMDGOALS)),cudatest)
  ifeq ($(HAS_CUDA),)
    $(error make test BACKEND=cuda: the cuda backend cannot be built here (nvcc not found); make test runs the suite on sim)
  endif
  ifeq ($(shell nvidia-smi -L 2>/dev/null | grep -c '^GPU'),0)
    $(error make test BACKEND=cuda: no GPU is visible here (nvidia-smi lists none); make test runs the suite on sim)
  endif
endif
# The suite runs the checked build (its own folder, so it never overwrites the optimised objects): the test binary
# and the oomlab it runs both validate the allocator after every call; the prediction parity suite alone runs the
# optimised build/oomlab (OOMLAB_PARITY_BIN: advise's bisections of a zoo trace under the validator take minutes).
test: deps
	@bash scripts/check_layers.sh
	$(MAKE) --no-print-directory mdlint
	@bash scripts/predict_venv.sh --zoo
	$(MAKE) --no-print-directory BUILD=$(CHECKED) DEBUG=2 $(CHECKED)/oomlab $(CHECKED)/oomlab_tests
	$(MAKE) --no-print-directory build/oomlab
	OOMLAB_TEST_BACKEND=$(BACKEND) OOMLAB_BIN=$(CHECKED)/oomlab OOMLAB_PARITY_BIN=build/oomlab $(CHECKED)/oomlab_tests --color=never $(TEST_JOBS) $(TESTFLAGS)

# The Markdown a reader sees, linted: PyMarkdown (PyPI's pymarkdownlnt, pinned) in a venv of its own under build/,
# installed on first use (python3-venv is in PACKAGES), with .pymarkdown.json (long lines are the house style) and
# the closed-fences rule of scripts/mdlint. make test runs it.
MD_FILES := README.md CONTRIBUTING.md BENCHMARKS.md docs/parity.md tests/fuzz/README.md
MDLINT_VENV := build/mdlint
MDLINT_VERSION := 0.9.41
$(MDLINT_VENV)/bin/pymarkdown:
	python3 -m venv $(MDLINT_VENV)
	$(MDLINT_VENV)/bin/pip install --quiet --disable-pip-version-check pymarkdownlnt==$(MDLINT_VERSION)
mdlint: deps $(MDLINT_VENV)/bin/pymarkdown
	@PYMARKDOWN=$(MDLINT_VENV)/bin/pymarkdown bash scripts/mdlint/check.sh $(MD_FILES)

bench:
	$(MAKE) --no-print-directory BUILD=build/bench DEBUG=0 OPT="-O3 -march=x86-64-v3" build/bench/oomlab
	build/bench/oomlab bench alloc --backend $(if $(filter cuda,$(BACKEND)),cuda,auto) $(ARGS)
	build/bench/oomlab bench gemm --backend $(if $(filter cuda,$(BACKEND)),cuda,auto)
	build/bench/oomlab bench kernels --backend $(if $(filter cuda,$(BACKEND)),cuda,auto)
	build/bench/oomlab bench step --backend sim
	build/bench/oomlab bench replay
	$(if $(filter cuda,$(BACKEND)),build/bench/oomlab bench step --backend cuda)

bench-predict: build/oomlab predict-deps
	@bash scripts/predict_venv.sh --zoo
	python3 scripts/bench_predict.py --oomlab build/oomlab $(ARGS)

bench-torch:
	$(MAKE) --no-print-directory BUILD=build/bench DEBUG=0 OPT="-O3 -march=x86-64-v3" build/bench/oomlab
	python3 scripts/twins/alloc_bench.py --oomlab build/bench/oomlab $(ARGS)

debug:
	$(MAKE) --no-print-directory BUILD=build/debug DEBUG=3 OPT=-O0 build/debug/oomlab build/debug/oomlab_tests

# The sanitized build: clang's AddressSanitizer, LeakSanitizer and UBSan (float-cast-overflow included), every
# finding fatal, in build/asan, checked (OOM_DEBUG=3), without the cuda backend (NVCC=: nvcc's objects carry no
# instrumentation). `make asan` runs the CI-scale catalog and the suite under it; .ci/run runs it. The CPU reference
# kernels (kernels/*_ref.c, REF_OPT) are built at -O2 there, still instrumented: at -O1 their loops were most of
# the sanitized catalog's time.
SAN_CC    ?= clang
SAN_FLAGS := -fsanitize=address,undefined,float-cast-overflow -fno-sanitize-recover=all -fno-omit-frame-pointer
SAN_ENV   := ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
             LSAN_OPTIONS=suppressions=$(CURDIR)/tests/lsan.supp:print_suppressions=0
asan fuzz: PACKAGES += clang libclang-rt-14-dev
asan: deps
	$(MAKE) --no-print-directory BUILD=build/asan CC=$(SAN_CC) NVCC= DEBUG=3 OPT=-O1 REF_OPT=-O2 SANITIZE="$(SAN_FLAGS)" \
	  build/asan/oomlab build/asan/oomlab_tests
	$(SAN_ENV) build/asan/oomlab run --backend sim --scale ci --no-write
	$(SAN_ENV) OOMLAB_BIN=build/asan/oomlab build/asan/oomlab_tests --color=never $(TESTFLAGS)

# libFuzzer harnesses (tests/fuzz/fuzz_NAME.c, tests/fuzz/README.md): built in build/fuzz with the sanitizers of
# make asan plus coverage, then each run for FUZZ_SECONDS from its committed seeds (tests/fuzz/corpus/NAME, read
# only) into build/fuzz/corpus/NAME. A finding stops make; its input is in build/fuzz/artifacts.
# FUZZ=NAME runs one harness.
FUZZ_SECONDS ?= 60
FUZZ         ?= $(patsubst tests/fuzz/fuzz_%.c,%,$(wildcard tests/fuzz/fuzz_*.c))
FUZZ_ARGS    := -timeout=10 -rss_limit_mb=2048 -print_final_stats=1
FUZZ_ARGS_replay    := -max_len=65536 -dict=tests/fuzz/replay.dict
FUZZ_ARGS_allocconf := -max_len=512 -dict=tests/fuzz/allocconf.dict
FUZZ_ARGS_results   := -max_len=65536 -dict=tests/fuzz/results.dict
FUZZ_ARGS_figures   := -max_len=65536 -dict=tests/fuzz/results.dict
FUZZ_ARGS_history   := -max_len=65536 -dict=tests/fuzz/history.dict
fuzz: deps
	$(MAKE) --no-print-directory BUILD=build/fuzz CC=$(SAN_CC) NVCC= DEBUG=3 OPT=-O1 \
	  SANITIZE="$(SAN_FLAGS) -fsanitize=fuzzer-no-link -fsanitize-coverage-ignorelist=tests/fuzz/coverage_ignore.txt" \
	  $(patsubst %,build/fuzz/fuzz_%,$(FUZZ))
	@mkdir -p build/fuzz/artifacts
	$(foreach h,$(FUZZ),mkdir -p build/fuzz/corpus/$(h) && \
	  $(SAN_ENV) build/fuzz/fuzz_$(h) -max_total_time=$(FUZZ_SECONDS) $(FUZZ_ARGS) $(FUZZ_ARGS_$(h)) \
	    -artifact_prefix=build/fuzz/artifacts/$(h)- build/fuzz/corpus/$(h) tests/fuzz/corpus/$(h) &&) true

$(BUILD)/fuzz_%: tests/fuzz/fuzz_%.c tests/fuzz/fuzzutil.h $(BUILD)/liboomlab.a
	$(CC) $(CPPFLAGS) $(CFLAGS) -fsanitize=fuzzer $< $(BUILD)/liboomlab.a $(LDLIBS) -o $@

clean:
	rm -rf build

-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)

# Everything the GPU machine needs, built here (it has no Criterion or cJSON): the checked build (build/checked,
# as make test runs it), the bench build, and the shared libraries they load (minus glibc and the driver), in
# .gpubundle/ (ignored by git). Then, with the device tool: carry .gpubundle and run scripts/gpu_check.sh there
# (CONTRIBUTING.md, "Running on a GPU").
gpu-bundle: deps
	$(MAKE) --no-print-directory BUILD=$(CHECKED) DEBUG=2 $(CHECKED)/oomlab $(CHECKED)/oomlab_tests
	$(MAKE) --no-print-directory BUILD=build/bench DEBUG=0 OPT="-O3 -march=x86-64-v3" build/bench/oomlab
	rm -rf .gpubundle && mkdir -p .gpubundle/lib
	cp $(CHECKED)/oomlab $(CHECKED)/oomlab_tests $(CHECKED)/oomlab_fixtures .gpubundle/
	cp build/bench/oomlab .gpubundle/oomlab-bench
	strip --strip-debug .gpubundle/oomlab .gpubundle/oomlab_tests .gpubundle/oomlab_fixtures .gpubundle/oomlab-bench  # the 64 MiB the device tool carries
	ldd $(CHECKED)/oomlab_tests $(CHECKED)/oomlab | awk '/=> \// {print $$3}' | sort -u | \
	  grep -v -E '/(libc|libm|libcuda|libresolv|libpthread|libdl|librt|ld-linux[^/]*)\.so' | \
	  xargs -r cp -L -t .gpubundle/lib

# The report: the catalog and oversize_batch's sweep at full scale, where PyTorch's twins ran, as a dry run on sim by
# default (the allocator's accounting, no compute: seconds; REPORT_ARGS="--backend cuda" measures on a GPU), then
# one static page. A run whose expectations fail still gets its page (the page shows the ✗), and make says so.
REPORT_ARGS ?= --dry-run
report: deps
	$(MAKE) --no-print-directory $(BUILD)/oomlab
	@run=$$($(BUILD)/oomlab run $(REPORT_ARGS)); rc=$$?; dir=$$(printf '%s\n' "$$run" | sed -n 's/^results: //p'); \
	  sw=$$($(BUILD)/oomlab run oversize_batch --sweep batch=64..16384 $(REPORT_ARGS) | sed -n 's/^results: //p'); \
	  [ -n "$$dir" ] && [ -n "$$sw" ] || { echo "make report: the runs wrote no results" >&2; exit 2; }; \
	  echo "runs: $$dir $$sw"; \
	  $(BUILD)/oomlab report "$$dir" "$$sw" -o results/report || exit $$?; \
	  [ $$rc = 0 ] || { echo "make report: some expectation failed (exit $$rc): see the page" >&2; exit $$rc; }

# The README's gallery (docs/img/gallery): the catalog at full scale (dry run on sim) and oversize_batch's sweep,
# drawn by scripts/gallery.sh; tests/test_plot.c checks that the committed images are byte for byte what it draws.
gallery: deps
	$(MAKE) --no-print-directory $(BUILD)/oomlab
	bash scripts/gallery.sh $(BUILD)/oomlab docs/img/gallery

# The page as a reader gets it: headless chromium (Debian's, installed here when missing, not part of PACKAGES)
# renders it, every section and image is checked, and docs/img/report.png is its screenshot.
report-check: report
	@command -v chromium >/dev/null 2>&1 || $(MAKE) --no-print-directory deps PACKAGES=chromium
	bash scripts/report_check.sh results/report docs/img/report.png

# Nightly regression tracking (README.md, "Nightly tracking"). make baseline regenerates the baselines of BACKEND
# (default sim: the committed ones, at ci scale) and shows what changes before it writes; make nightly runs the
# catalog (cuda when a GPU is visible, unless BACKEND says otherwise), compares it with the baseline, appends it to
# results/history.csv, prints the steps in the history and exports it for CI dashboards (scripts/nightly.sh).
baseline: deps $(BUILD)/oomlab
	@bash scripts/baseline.sh $(BUILD)/oomlab $(BACKEND)

nightly: deps $(BUILD)/oomlab
	@bash scripts/nightly.sh $(BUILD)/oomlab $(RUN_BACKEND)
