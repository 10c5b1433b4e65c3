# The README's commands. Everything installs into .venv from the pinned files in envs/.
VENV ?= .venv
PYTHON := $(VENV)/bin/python
SNAKEMAKE := $(VENV)/bin/snakemake
CORES ?= all
PYTEST_ARGS ?=

.PHONY: sweep test test-fast bench clean

# The default sweep of config/config.yaml on this machine; jobs run one at a time (each takes
# every core), so timings are not disturbed by a neighbour.
sweep: $(VENV)/.installed
	$(SNAKEMAKE) --cores $(CORES) --keep-going

test: $(VENV)/.installed
	$(PYTHON) -m pytest $(PYTEST_ARGS)

# Everything but the tests that train models or drive whole sweeps.
test-fast: $(VENV)/.installed
	$(PYTHON) -m pytest -m "not slow and not slurm" $(PYTEST_ARGS)

# Benchmarks print `name value unit` lines (benchmarks/README.md); they measure, they do not judge.
bench: $(VENV)/.installed
	$(PYTHON) benchmarks/bench_analysis.py
	$(PYTHON) benchmarks/bench_trainer.py
	$(PYTHON) benchmarks/bench_protocols.py
	$(PYTHON) benchmarks/bench_breakdown.py
	$(PYTHON) benchmarks/bench_history.py

$(VENV)/.installed: envs/requirements.txt envs/workflow.txt envs/constraints.txt pyproject.toml
	python3 -m venv $(VENV)
	$(VENV)/bin/pip install --quiet -r envs/requirements.txt -c envs/constraints.txt
	$(VENV)/bin/pip install --quiet --no-deps --no-build-isolation -e .
	touch $@

clean:
	rm -rf results logs resources .snakemake
