# Two entry points for a fresh clone: `make demo` (train a small model, then sample from it) and
# `make test` (the whole test suite). Each creates ./.venv on first use; nothing needs to be
# installed by hand beyond a Python 3.10+ with the venv module.
#
# A stamp file in .venv records what was installed; it is older than pyproject.toml after the
# dependencies change, and the next run reinstalls. `demo` installs the runtime only (no torch);
# `test` adds the [test] extra (pytest, hypothesis, torch, keras, onnx, onnxruntime, transformers, ruff, numpydoc),
# which also satisfies `demo`. `docs` adds the [docs] extra (Sphinx, myst-parser, numpydoc, furo) to
# the test extra and builds the documentation site from docs/ into $(DOCS_OUT) (default build/docs),
# offline, with every warning an error; the Learn pages' figures are drawn by running their code.
# Extra pytest options: make test PYTEST_ARGS="-k corpus -x". Extra pip options: PIP_FLAGS=...

PYTHON ?= python3
VENV := .venv
PIP_FLAGS ?=
PYTEST_ARGS ?=
RUNTIME_STAMP := $(VENV)/.installed-runtime
TEST_STAMP := $(VENV)/.installed-test
DOCS_STAMP := $(VENV)/.installed-docs
DOCS_OUT ?= build/docs

.PHONY: demo test docs bench clean

demo: $(RUNTIME_STAMP)
	OMP_NUM_THREADS=1 $(VENV)/bin/hiddenstate demo

test: $(TEST_STAMP)
	OMP_NUM_THREADS=1 $(VENV)/bin/python -m pytest $(PYTEST_ARGS)

docs: $(DOCS_STAMP)
	OMP_NUM_THREADS=1 MPLBACKEND=Agg $(VENV)/bin/python -m sphinx -W --keep-going -b html -d build/doctrees docs $(DOCS_OUT)

# `bench`: the layers against torch.nn (with our GEMM floor), then the main job's training step and
# validation pass against its torch equivalent; process CPU time (the machine may be shared), ~5 min.
bench: $(TEST_STAMP)
	OMP_NUM_THREADS=1 $(VENV)/bin/python benchmarks/bench_layers.py --clock cpu --budget 6 --rounds 7
	OMP_NUM_THREADS=1 $(VENV)/bin/python benchmarks/bench_train.py --clock cpu

$(VENV)/bin/python:
	$(PYTHON) -m venv $(VENV)

$(RUNTIME_STAMP): pyproject.toml | $(VENV)/bin/python
	$(VENV)/bin/python -m pip install $(PIP_FLAGS) -e .
	touch $@

$(TEST_STAMP): pyproject.toml | $(VENV)/bin/python
	$(VENV)/bin/python -m pip install $(PIP_FLAGS) -e '.[test]'
	touch $@ $(RUNTIME_STAMP)

$(DOCS_STAMP): pyproject.toml | $(VENV)/bin/python
	$(VENV)/bin/python -m pip install $(PIP_FLAGS) -e '.[test,docs]'
	touch $@ $(TEST_STAMP) $(RUNTIME_STAMP)

clean:
	rm -rf $(VENV) build dist src/*.egg-info .pytest_cache .hypothesis
