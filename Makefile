# The targets the README names. Set-up never pulls the multi-GB CUDA build of torch
# onto a CPU machine: a torch that is already there (e.g. on a GPU machine) is kept,
# and otherwise the local CPU build torch==2.13.0 is installed.
PYTHON ?= python3

.PHONY: install-core install demo test test-gpu bench-knn

# gpumine with its core dependencies only (no optional extra)
install-core:
	$(PYTHON) -c "import torch" 2>/dev/null || $(PYTHON) -m pip install torch==2.13.0
	$(PYTHON) -m pip install -q -e .

install: install-core
	$(PYTHON) -m pip install -q -e ".[test]"

demo: install-core
	$(PYTHON) -m gpumine demo

test: install
	$(PYTHON) -m pytest -q -m "not slow and not gpu" --doctest-modules tests src/gpumine

# on a machine with a CUDA GPU
test-gpu:
	$(PYTHON) -m pytest -q -m gpu

bench-knn:
	$(PYTHON) -m benchmarks.knn --out benchmarks/results/knn.json --markdown benchmarks/results/knn.md

# the Sphinx site in docs/_build/html (warnings are errors); needs the docs extra (Sphinx,
# sphinx-gallery, matplotlib). It runs every script of docs/examples on the CPU for the gallery
# (docs/auto_examples, generated); a failing example stops the build.
.PHONY: docs
docs: install-core
	$(PYTHON) -m pip install -q -e ".[docs]"
	$(PYTHON) -m sphinx -W -b html docs docs/_build/html
