# sweepit's tasks. `make help` lists them all.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
# torch==2.13.0 is taken from local disk on the project's machines as a CPU build; elsewhere pip picks
# the platform's default wheel. Override for another build: make install TORCH_SPEC='torch==2.5.1'; TORCH_SPEC=none
# installs none, for a torch the site provides (ppc64le, where PyPI has none), seen with VENV_FLAGS=--system-site-packages
TORCH_SPEC ?= torch==2.13.0
VENV_FLAGS ?=
PYTEST_ARGS ?=
# The tests run in TEST_PROCESSES parallel processes (pytest-xdist; most of the suite waits on subprocesses and the
# Slurm cluster, so more processes than cores pay off; 6 took longer than 4 on 2 cores, measured again after the
# suite's cuts: bench/results/test-suite/processes/); tests sharing a costly set-up stay in one process
# (tests/conftest.py). TEST_PROCESSES=0 runs
# them in this one process, in order.
TEST_PROCESSES ?= 4
PYTEST := $(PY) -m pytest -n $(TEST_PROCESSES) --dist loadgroup
# Where PYTHONDONTWRITEBYTECODE is set (this project's machines and CI), Python keeps no bytecode cache of sweepit's
# sources (an editable install), and every process of the suite (Hydra apps, Slurm tasks) would compile them again:
# about 0.4 s of CPU a process that imports all of sweepit. Compiled once before the tests (only what changed since).
COMPILE := $(PY) -m compileall -q -j 0 src tests examples bench train.py
SWEEPS := $(basename $(notdir $(wildcard sweeps/*.yaml)))

.DEFAULT_GOAL := help
.PHONY: help install test test-slow test-fast test-floors lint typecheck check config-reference commands-reference api-reference docs clean-outputs bench bench-throughput bench-mnist-best bench-report bench-scale bench-launcher test-launcher bench-gpu gpu-pack bench-slurm bench-slurm-jobs test-slurm sweep-optuna bench-optuna bench-optuna-workers bench-packing bench-halving \
        slurm-up slurm-down slurm-status \
        $(addprefix sweep-,$(SWEEPS))

help: ## List every target with what it does
	@grep -hE '^[a-zA-Z_%-]+:.*## ' $(MAKEFILE_LIST) | sed -E 's/:.*## /\t/' | \
	  awk -F'\t' '{printf "  %-22s %s\n", $$1, $$2}'
	@for s in $(SWEEPS); do printf "  %-22s %s\n" "sweep-$$s" "$$(sed -n 1p sweeps/$$s.yaml | sed 's/^# //')"; done

install: ## Create .venv and install sweepit (editable) with its dev tools
	$(PYTHON) -m venv $(VENV_FLAGS) $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(if $(filter none,$(TORCH_SPEC)),@echo "TORCH_SPEC=none: torch is not installed (the environment's is used)",$(PY) -m pip install --quiet "$(TORCH_SPEC)")
	$(PY) -m pip install --quiet -e '.[dev]'
	@$(COMPILE)
	@$(PY) -c "import torch, hydra, sweepit; print(f'sweepit {sweepit.__version__} with torch {torch.__version__}, hydra {hydra.__version__}')"

# Two tiers, both run by CI: `make test` every entry path and behaviour once, at the smallest size that shows it;
# `make test-slow` the tests marked tier_slow (pyproject.toml's markers: benchmark smokes, the README's fresh install
# and studies at their README size, README commands whose path `make test` covers through another test).
test: ## Run every entry path and behaviour once, smallest size (real multiruns, Slurm; not make test-slow's tests)
	@$(COMPILE)
	$(PYTEST) -m "not tier_slow" $(PYTEST_ARGS)

test-slow: ## Run what make test leaves out: benchmark smokes, the README's fresh install and studies at README size
	@$(COMPILE)
	$(PYTEST) -m tier_slow $(PYTEST_ARGS)

test-fast: ## Run the tests that take seconds: leaves out real multiruns, Slurm tests and make test-slow's
	@$(COMPILE)
	$(PYTEST) -m "not slow and not slurm and not tier_slow" $(PYTEST_ARGS)

# The declared minimums (pyproject.toml) of the libraries whose APIs the launchers and the sweeper build on, in a venv
# of their own beside the same torch: the Optuna sweeper's, the launchers' and the composition's tests run there.
# Hydra's launcher suites and a real Slurm sweep run apart: after those suites, Hydra's plugin scan has executed its
# config-source module again, and the compose tests' pickling of a config loader is refused in that process.
FLOORS_VENV := .venv-floors
FLOORS := optuna hydra-core omegaconf submitit
FLOORS_TESTS := tests/search/test_optuna_parts.py tests/search/test_optuna_habits.py tests/search/test_optuna_sweep.py \
                tests/search/test_optuna_on_any_launcher.py tests/local/test_local_launcher.py \
                tests/hydra_plugins/test_compose_once.py tests/hydra_plugins/test_composed.py tests/slurm
FLOORS_APART := tests/hydra_plugins/test_local_hydra_suites.py \
                tests/slurm/test_slurm_launcher_sweep.py::test_four_job_sweep_is_one_array_and_ends_with_the_results_table

$(FLOORS_VENV)/installed: pyproject.toml scripts/floors.py
	rm -rf $(FLOORS_VENV)
	$(PYTHON) -m venv $(VENV_FLAGS) $(FLOORS_VENV)
	$(FLOORS_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(if $(filter none,$(TORCH_SPEC)),,$(FLOORS_VENV)/bin/python -m pip install --quiet "$(TORCH_SPEC)")
	$(FLOORS_VENV)/bin/python -m pip install --quiet -e . $$($(FLOORS_VENV)/bin/python scripts/floors.py $(FLOORS))
	@$(FLOORS_VENV)/bin/python -c "import importlib.metadata as m; print('floors:', ', '.join(f'{p} {m.version(p)}' \
	  for p in '$(FLOORS) torch'.split()))" > $@ && cat $@

test-floors: $(FLOORS_VENV)/installed ## The sweeper's, launchers' and compose tests on the declared minimum optuna, hydra-core, omegaconf, submitit (.venv-floors; about 3 min, 4.5 when it builds the venv)
	$(FLOORS_VENV)/bin/python -m pytest -n $(TEST_PROCESSES) --dist loadgroup -m "not slurm or no_cluster" \
	  $(FLOORS_TESTS) $(PYTEST_ARGS)
	$(FLOORS_VENV)/bin/python -m pytest -n $(TEST_PROCESSES) --dist loadgroup $(FLOORS_APART) $(PYTEST_ARGS)

test-launcher: ## The local launcher's tests (tests/local, tests/hydra_plugins): real multiruns and Hydra's launcher suites (about a minute)
	@$(COMPILE)
	$(PYTEST) tests/local tests/hydra_plugins $(PYTEST_ARGS)

test-slurm: ## The Slurm tests against the local cluster: launcher, Optuna, examples, Hydra's suites (make slurm-up first; about 5 min)
	@$(COMPILE)
	$(PYTEST) tests/slurm $(PYTEST_ARGS)

lint: ## Ruff lint, and the package's layers (import-linter's contracts in pyproject.toml)
	$(VENV)/bin/ruff check src tests bench examples scripts train.py
	$(VENV)/bin/lint-imports

typecheck: ## Mypy on the package and the entry point
	$(VENV)/bin/mypy

check: lint typecheck test ## Lint, typecheck and test

# Not --quiet: it hides the warnings that strict mode fails on (a link to a missing anchor), and the build passes.
docs: ## Build the documentation site (docs/, bench/RESULTS.md) into site/; a broken link or missing page fails
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict

config-reference: ## Write docs/configuration.md from the schema dataclasses (a test fails when it is out of date)
	$(PY) scripts/config_reference.py

commands-reference: ## Write docs/commands.md from the sweepit command's parser (a test fails when it is out of date)
	$(PY) scripts/commands_reference.py

api-reference: ## Write docs/api.md from sweepit's __all__ and docstrings (a test fails when it is out of date)
	$(PY) scripts/api_reference.py

# One target per file of sweeps/ (extra overrides: ARGS='epochs=2'); `make help` lists them with their question.
# A static pattern rule: GNU make skips implicit rules for .PHONY targets, so a plain `sweep-%:` rule did nothing.
STUDY_TARGETS := $(filter-out sweep-scaling,$(addprefix sweep-,$(SWEEPS)))
$(STUDY_TARGETS): sweep-%: sweeps/%.yaml
	$(PY) train.py -m --config-dir sweeps --config-name $* $(ARGS)

# The scaling study over the GPUs the local launcher can hand out (1..N), on CIFAR-10 where CIFAR_ROOT (or a
# data.root in ARGS) holds it, else on synthetic images; without a GPU, its CPU variant. scripts/scaling_plan.py
# decides and says which, and what a machine of one GPU cannot show; one job at a time, so that timings are alone.
CIFAR_ROOT ?= data/cifar10
sweep-scaling: sweeps/scaling.yaml
	@plan=$$($(PY) scripts/scaling_plan.py --cifar-root "$(CIFAR_ROOT)" --args "$(ARGS)") && \
	  echo "$(PY) train.py -m --config-dir sweeps --config-name scaling $$plan hydra.launcher.n_workers=1 $(ARGS)" && \
	  $(PY) train.py -m --config-dir sweeps --config-name scaling $$plan hydra.launcher.n_workers=1 $(ARGS)

sweep-optuna: sweep-optuna_lr ## Optuna search: optimizer x log-uniform lr on digits (TPE + Hyperband, 4 trials in flight)

bench: bench-throughput bench-report ## Run the quick benchmarks (each script takes --json PATH: its raw figures for bench/RESULTS.md)

bench-throughput: ## MNIST CNN samples/s: sweepit vs a torch DataLoader loop, like for like in fp32 and bf16 (ARGS='--root DIR'; synthetic if no MNIST; ~4 min)
	$(PY) bench/bench_throughput.py $(ARGS)

bench-report: ## Time `sweepit report` on a generated 1,000-job sweep against reading it with summary.collect
	$(PY) bench/bench_report.py $(ARGS)

bench-scale: ## Driver side at 1k, 10k, 100k generated jobs: planning, sweep.json writes, status, ls, report (~30 min)
	$(PY) bench/bench_scale.py $(ARGS)

bench-launcher: ## Local launcher vs Hydra's basic and submitit_local: wall, CPU, tree memory, per-job overhead (~7 min)
	$(PY) bench/bench_local_launcher.py $(ARGS)

bench-slurm: ## Slurm launcher vs hydra-submitit-launcher on the local cluster: 64 jobs, sbatch calls, scancel-to-report (~10 min; holds /tmp/slurm-bench.lock)
	flock /tmp/slurm-bench.lock $(PY) bench/bench_slurm.py $(ARGS)

bench-slurm-jobs: ## One Slurm job per combination, sweepit vs hydra-submitit-launcher: 16 jobs of 1 s of a plain app, alternated pairs, wall, driver CPU, each job's overhead (~3 min; holds /tmp/slurm-bench.lock)
	flock /tmp/slurm-bench.lock $(PY) bench/bench_slurm_jobs.py $(ARGS)

bench-packing: ## Packed Slurm workers vs one Slurm job per job: 2,000 jobs of 0.1 s, wall vs ideal, sbatch calls, Slurm jobs (~35 min; holds /tmp/slurm-bench.lock)
	flock /tmp/slurm-bench.lock $(PY) bench/bench_packing.py $(ARGS)

bench-optuna-workers: ## Optuna on Slurm, per-trial jobs vs worker mode, same 64-trial study: wall, sbatch/squeue/sacct/scontrol calls (~5 min; holds /tmp/slurm-bench.lock)
	flock /tmp/slurm-bench.lock $(PY) bench/bench_optuna_workers.py $(ARGS)

bench-optuna: ## Search efficiency vs the optimizer x lr grid: replayed curves and the sweeper running its study (MNIST_ROOT=dir, or digits; ~15 min)
	$(PY) bench/bench_optuna.py $(if $(MNIST_ROOT),--root "$(MNIST_ROOT)",--task digits) $(ARGS)

bench-halving: ## Successive halving vs the full grid on the seed study's 10 optimizers x 4 lr, digits: its pick against the grids' seed spread, epoch-seconds (~5 min)
	$(PY) bench/bench_halving.py $(ARGS)

bench-mnist-best: ## The mnist_best study on real MNIST (MNIST_ROOT=dir with the IDX files); long
	$(PY) bench/bench_mnist_best.py --root "$(MNIST_ROOT)" $(ARGS)

bench-gpu: ## On a GPU node: mnist_best time to 99.4%, CIFAR-10 ResNet-50 sweepit vs DataLoader (same precision), scaling on all GPUs (ARGS='--mnist-root DIR --cifar-root DIR --json PATH'; --smoke: tiny, on CPU)
	$(PY) bench/bench_gpu.py $(ARGS)

# bench/gpu_check.sh's pack: what a lent GPU machine lacks (its image has torch, but no Hydra), carried with the tree.
gpu-pack: ## Fill .devpkgs/ and .devdata/ for `bash bench/gpu_check.sh run` on a lent GPU machine: Hydra, OmegaConf, ANTLR, PyYAML, packaging, cloudpickle as .venv has them, MNIST from MNIST_ROOT (default ../shared/data/mnist); at most 64 MiB
	PY=$(PY) bash bench/gpu_check.sh pack

slurm-up: ## Start the local one-node Slurm cluster with 4 fake GPUs (root; installs Debian's packages once)
	scripts/slurm-cluster.sh up

slurm-down: ## Stop the local Slurm cluster (cancels its jobs)
	scripts/slurm-cluster.sh down

slurm-status: ## Show the local Slurm cluster's daemons and node; fails when it cannot take jobs
	scripts/slurm-cluster.sh status

clean-outputs: ## Delete outputs/ (every sweep's results)
	rm -rf outputs
