# Two commands do all set-up on a fresh machine: `make demo` and `make test`.
# Both create .venv, install torch first when no torch is present (the version in
# constraints.txt: the CPU build from PyTorch's CPU wheel index where nvidia-smi finds no GPU,
# since a bare `torch` from the default index is the multi-GB CUDA build on Linux; the default
# build where it finds one), then the package with its extras, at the versions in
# constraints.txt (the set CI last passed with). The commands then run through the venv:
# `. .venv/bin/activate` puts `export-gelu` on PATH.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.export-gelu-installed
DEMO   := build/demo
TORCH  := $(shell sed -n 's/^torch==//p' constraints.txt)
TORCH_CPU_INDEX ?= https://download.pytorch.org/whl/cpu
PYPI_INDEX      ?= https://pypi.org/simple
# the make goal a user ran, named in `make torch`'s advice when PyTorch's CPU index is out of reach
TORCH_GOAL      ?= $(or $(firstword $(MAKECMDGOALS)),demo)

.PHONY: torch demo test test-fast test-full test-gpu test-min test-latest lint fuzz clean bench

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip

$(STAMP): setup.cfg pyproject.toml constraints.txt | $(PY)
	@$(PY) -c "import torch" 2>/dev/null || $(MAKE) --no-print-directory torch TORCH_GOAL=$(TORCH_GOAL)
	$(PY) -m pip install -q -c constraints.txt -e ".[cpu,examples,test,plot]"
	@touch $(STAMP)

# torch==$(TORCH) into the venv: the CUDA build where nvidia-smi lists a GPU, else the CPU
# build from PyTorch's CPU index (probed first with a 5 s limit; where it cannot be reached,
# the default index, said in one line).
torch: | $(PY)
	@if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then \
		echo "installing torch==$(TORCH): CUDA build (nvidia-smi found a GPU)"; \
		$(PY) -m pip install -q torch==$(TORCH); \
	elif $(PY) -c "import urllib.request as u; u.urlopen('$(TORCH_CPU_INDEX)/torch/', timeout=5)" 2>/dev/null; then \
		echo "installing torch==$(TORCH): CPU build (no CUDA GPU) from $(TORCH_CPU_INDEX)"; \
		$(PY) -m pip install -q --index-url $(TORCH_CPU_INDEX) --extra-index-url $(PYPI_INDEX) torch==$(TORCH); \
	else \
		echo "installing torch==$(TORCH): no CUDA GPU, but $(TORCH_CPU_INDEX) cannot be reached: from the default index"; \
		echo "  note: on Linux the default index's torch is the CUDA build (several GB, minutes to download) where"; \
		echo "  the CPU build is about 200 MB. To avoid it: Ctrl-C now, then either point make at a reachable mirror of"; \
		echo "  PyTorch's CPU index (make $(TORCH_GOAL) TORCH_CPU_INDEX=URL) or install a CPU wheel you have"; \
		echo "  ($(PY) -m pip install torch-$(TORCH)+cpu-....whl) and run make $(TORCH_GOAL) again: it keeps the torch it finds."; \
		$(PY) -m pip install -q torch==$(TORCH); \
	fi

demo: $(STAMP)
	@mkdir -p $(DEMO)
	$(PY) -m export_gelu.examples.save_model gpt2 --format exported -o $(DEMO)/model.pt
	$(VENV)/bin/export-gelu $(DEMO)/model.pt --target trt --report $(DEMO)/report.json
	@echo
	@echo "next: put export-gelu on PATH in this shell, then export the demo for TensorRT 8.2:"
	@echo "  . $(VENV)/bin/activate"
	@echo "  export-gelu $(DEMO)/model.pt --target trt8.2"

# Three lanes (docs/testing.md, "Lanes"), each after ruff, the import contracts
# (import-linter, setup.cfg) and the type checker (mypy, setup.cfg), one pytest-xdist worker
# per core. Models the tests build are kept between runs in .pytest_cache (docs/testing.md);
# `make clean` drops them.
LINT = $(PY) -m ruff check export_gelu tests examples benchmarks && $(VENV)/bin/lint-imports \
	&& $(PY) -m mypy

# The lanes keep Python's compiled files (`__pycache__/`, ignored by git) even where the
# environment says not to (PYTHONDONTWRITEBYTECODE): without them each pytest-xdist worker
# recompiles the tests and pytest rewrites their asserts again (about 10 s per worker on two
# cores), and each program a test starts recompiles the package. `make test PYTEST_ENV=`
# keeps the environment's choice.
PYTEST_ENV ?= PYTHONDONTWRITEBYTECODE=
PYTEST = $(PYTEST_ENV) $(PY) -m pytest

# Every test but the `full` product rows (each behaviour they show is pinned by a test that
# runs here, named at the mark). CI runs this. Each test file runs on one worker (`--dist
# loadfile`), as in test-fast below.
test: $(STAMP)
	$(LINT)
	$(PYTEST) -q -rs -n auto --dist loadfile -m "not full"

# While you work: the unit and integration tiers (set at collection from what a test uses,
# tests/tiers.py), less the `slow` rows, with the rewrite fuzzer's `fast` hypothesis profile.
# tests/e2e/ is not collected: every test there is `e2e` by its folder. Each test file runs
# on one worker (`--dist loadfile`): a module's fixtures (a model exported, a graph built) are
# then built once, not once per worker; no file of these tiers is long enough to unbalance them.
test-fast: $(STAMP)
	$(LINT)
	$(PYTEST) -q -rs -n auto --dist loadfile -m "not full and not slow and not e2e" \
		--ignore=tests/e2e --hypothesis-profile fast

# Everything, the `full` product rows included (models × ways × targets): by hand before a
# release and when exporter or model code changes.
test-full: $(STAMP)
	$(LINT)
	$(PYTEST) -q -rs -n auto

# The support window (docs/testing.md, "The support window"): its subset of the tests in a
# venv of its own, at the floor of every dependency (test-min: constraints-min.txt, torch
# 2.6) or at the newest release of each (test-latest: no constraints). torch comes as
# `make torch` gets it (the CPU build from PyTorch's CPU index where reachable, else the
# default index's CUDA build, several GB). pip runs without the machine's pip configuration
# (WINDOW_PIP_ENV), so a local cap or mirror does not decide the versions tested; set
# WINDOW_PIP_ENV= to keep yours.
WINDOW_PIP_ENV ?= PIP_CONFIG_FILE=/dev/null
WINDOW_TESTS   ?= tests/e2e/test_support_window.py tests/exporter/test_torch_versions.py \
	tests/trt_parser/test_released_versions.py tests/cli/test_front_door.py
WINDOW_EXTRAS  := pytest pytest-xdist hypothesis jsonschema
MIN_VENV    ?= build/venv-min
LATEST_VENV ?= build/venv-latest
MIN_TORCH   := $(shell sed -n 's/^torch==//p' constraints-min.txt)

test-min:
	@test -x $(MIN_VENV)/bin/python || $(PYTHON) -m venv $(MIN_VENV)
	@$(MIN_VENV)/bin/python -c "import torch, sys; sys.exit(torch.__version__.split('+')[0] != '$(MIN_TORCH)')" 2>/dev/null || \
		$(WINDOW_PIP_ENV) $(MAKE) --no-print-directory torch VENV=$(MIN_VENV) TORCH=$(MIN_TORCH) TORCH_GOAL=test-min
	$(WINDOW_PIP_ENV) $(MIN_VENV)/bin/python -m pip install -q -c constraints-min.txt -e ".[cpu,examples]" $(WINDOW_EXTRAS)
	$(MIN_VENV)/bin/python -m pytest -q -rs -p no:cacheprovider -n auto $(WINDOW_TESTS)

test-latest:
	@test -x $(LATEST_VENV)/bin/python || $(PYTHON) -m venv $(LATEST_VENV)
	$(WINDOW_PIP_ENV) $(LATEST_VENV)/bin/python -m pip install -q --upgrade torch
	$(WINDOW_PIP_ENV) $(LATEST_VENV)/bin/python -m pip install -q --upgrade -e ".[cpu,examples]" $(WINDOW_EXTRAS)
	$(LATEST_VENV)/bin/python -m pytest -q -rs -p no:cacheprovider -n auto $(WINDOW_TESTS)

# The GPU tests (pytest markers `trt` and `gpu`). On a machine with a CUDA GPU (nvidia-smi):
# swaps onnxruntime for onnxruntime-gpu (the gpu extra; never both) and installs tensorrt (the
# trt extra) where missing; elsewhere the tests are reported skipped, with why.
test-gpu: $(STAMP)
	@if command -v nvidia-smi >/dev/null; then \
		$(PY) -c "import onnxruntime as o, sys; sys.exit('CUDAExecutionProvider' not in o.get_available_providers())" 2>/dev/null || \
		{ $(PY) -m pip uninstall -q -y onnxruntime; $(PY) -m pip install -q -c constraints.txt -e ".[gpu]"; }; \
		$(PY) -c "import tensorrt" 2>/dev/null || $(PY) -m pip install -q -c constraints.txt -e ".[trt]"; \
	fi
	$(PY) -m pytest -q -rs -m "trt or gpu"

# The property-based rewrite fuzzer with many more examples than CI runs, new ones each run
# (the `nightly` hypothesis profile, tests/conftest.py: 5000 for the main property; failures
# are kept in .hypothesis/ and replayed first on the next run).
FUZZ_EXAMPLES ?= 5000
fuzz: $(STAMP)
	EXPORT_GELU_FUZZ_EXAMPLES=$(FUZZ_EXAMPLES) $(PY) -m pytest -q -rs -n auto \
		--hypothesis-profile nightly tests/passes/test_fuzz_rewrites.py

# Every benchmark that writes benchmarks/RESULTS.md, one after another (long: run it on a
# quiet machine). Each runs to the end; the exit status is non-zero if any target was not met.
BENCHES := gelu_bound whole_models toolchain_cost gpu cli_startup
bench: $(STAMP)
	@fail=0; for b in $(BENCHES); do echo "== $(PY) -m benchmarks.$$b"; \
		$(PY) -m benchmarks.$$b || fail=1; done; \
		echo "results: benchmarks/RESULTS.md"; exit $$fail

lint: $(STAMP)
	$(PY) -m ruff check export_gelu tests examples benchmarks

clean:
	rm -rf build .pytest_cache
