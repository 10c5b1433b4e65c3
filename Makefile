# The README's commands. Everything installs into .venv from the pinned files in envs/.
VENV ?= .venv
PYTHON := $(VENV)/bin/python
SNAKEMAKE := $(VENV)/bin/snakemake
CORES ?= all
PYTEST_ARGS ?=
# Container-stack stand-ins the test suite also runs the trainers in (envs/stack-*.txt, docs/testing.md:
# Supported stacks). `make test STACKS=` skips them (their tests are then skipped).
STACKS ?= ngc-tensorflow-23.03 ngc-pytorch-24.07

# Local runs never talk to SLURM, yet Snakemake imports every installed executor plugin at start,
# and the slurm plugin then runs `scontrol show config`: where a SLURM client is installed but no
# controller answers, that waits 10 s per start. An empty SLURM_CONF makes scontrol fail at once.
LOCAL_ENV := SLURM_CONF=/dev/null

.PHONY: sweep preview test test-fast stacks bench bundle clean

# The default sweep of config/config.yaml on this machine; jobs run one at a time (each takes
# every core), so timings are not disturbed by a neighbour.
sweep: $(VENV)/.installed
	$(LOCAL_ENV) $(SNAKEMAKE) --cores $(CORES) --keep-going

# What `make sweep` would run: the plan (configurations, GPU-hours) and the job list.
preview: $(VENV)/.installed
	$(LOCAL_ENV) $(SNAKEMAKE) -n

# Two pytest workers. A worker that dies (a segfault in a native library) is not replaced: with
# --dist loadgroup, pytest-xdist 3.8.0 hands a replacement the dead worker's group again, already
# taken, and the run then waits forever (pytest-dev/pytest-xdist issues 1323 and 1327, fixed upstream
# after the pinned 3.8.0). Without a restart the run ends with status 1, the test the worker died in
# failed by name and the rest of its group not run; the other worker finishes its own groups.
WORKERS := -n 2 --max-worker-restart=0

# The SLURM tests (mostly waiting on the test cluster) in one worker, every other test module as a
# group of its own, handed to whichever worker runs dry, costliest first (tests/conftest.py: the
# xdist groups; --no-loadscope-reorder keeps that order instead of pytest-xdist's by test count).
test: $(VENV)/.installed stacks
	$(PYTHON) -m pytest $(WORKERS) --dist loadgroup --no-loadscope-reorder $(PYTEST_ARGS)

# One venv per stack under .stacks/, from the interpreter its file names (envs/make_stack.sh).
stacks: $(STACKS:%=.stacks/%/.installed)

.stacks/%/.installed: envs/stack-%.txt envs/make_stack.sh
	bash envs/make_stack.sh $*

# Everything but the tests that train models, drive sweeps, start Snakemake or the scalesweep
# command in a subprocess, in two workers.
test-fast: $(VENV)/.installed
	$(PYTHON) -m pytest $(WORKERS) -m "not slow and not slurm and not workflow and not command" $(PYTEST_ARGS)

# Benchmarks print `name value unit` lines (benchmarks/README.md); they measure, they do not judge.
# The speed goals' rows (analysis, dry run, compare, offline install, test-fast) run 3 times on this
# checkout and on BENCH_BASE (a commit, checked out into a temporary folder), alternating
# (benchmarks/paired.py): median, min-max and the ratio of each pair. The install builds both
# bundles from the package index.
# A benchmark that fails (a side that ran past its time limit on a busy machine) does not stop the
# others: each failure is noted in BENCH_FAILED, and the run ends with status 1 naming them.
BENCH_BASE ?= 817bbc2
BENCH_FAILED := $(VENV)/.bench-failed
# A value given on make's command line, as one shell word whatever it holds (quotes, spaces, `;`).
shell_quoted = '$(subst ','\'',$(1))'
# benchmarks/$(1).py with the arguments $(2); its name noted in BENCH_FAILED if it fails.
run_bench = $(LOCAL_ENV) $(PYTHON) benchmarks/$(1).py $(2) || echo $(1) >> $(BENCH_FAILED)
bench: $(VENV)/.installed
	@rm -f $(BENCH_FAILED)
	$(call run_bench,bench_analysis,--base-commit $(call shell_quoted,$(BENCH_BASE)))
	$(call run_bench,bench_trainer)
	$(call run_bench,bench_protocols)
	$(call run_bench,bench_breakdown)
	$(call run_bench,bench_history,--base-commit $(call shell_quoted,$(BENCH_BASE)))
	$(call run_bench,bench_bundle,--base-commit $(call shell_quoted,$(BENCH_BASE)))
	$(call run_bench,bench_suite,--base-commit $(call shell_quoted,$(BENCH_BASE)))
	$(call run_bench,bench_energy)
	$(call run_bench,bench_timing)
	@if [ -s $(BENCH_FAILED) ]; then \
		echo "make bench: failed: $$(tr '\n' ' ' < $(BENCH_FAILED))(their errors above); the others ran to their end" >&2; \
		rm -f $(BENCH_FAILED); exit 1; fi

# The offline bundle for a cluster without internet: dist/scalesweep-<commit>-py<XY>.tar.gz
# (envs/bundle.sh, docs/install-offline.md). Needs the network and a Python of that version.
PYTHON_VERSION ?= 3.12
bundle:
	bash envs/bundle.sh $(PYTHON_VERSION) dist

$(VENV)/.installed: envs/requirements.txt envs/workflow.txt envs/constraints.txt pyproject.toml
	python3 -m venv $(VENV)
	$(VENV)/bin/pip install --quiet -r envs/requirements.txt -c envs/constraints.txt
	$(VENV)/bin/pip install --quiet --no-deps --no-build-isolation -e .
	touch $@

# Everything a sweep makes but the sweep history (results/history, the default history_dir): the
# archived sweeps are what `compare` needs later, and no rerun can make them again.
clean:
	rm -rf logs resources .snakemake
	[ ! -d results ] || find results -mindepth 1 -maxdepth 1 ! -name history -exec rm -rf {} +
