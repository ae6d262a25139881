# Two commands on a fresh machine with Python 3 and a C compiler:
#   make demo   virtual environment + install + examples/quickstart.py end to end
#   make test   virtual environment + test dependencies + the whole suite
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
# Every exporter distribution is installed alongside the core (editable, like a uv workspace).
EXPORTERS := $(patsubst %/pyproject.toml,%,$(wildcard exporters/*/pyproject.toml))
EDITABLE  := $(foreach d,$(EXPORTERS),-e ./$(d))
EDITABLE_TEST := $(foreach d,$(EXPORTERS),-e './$(d)[test]')
PIP := $(BIN)/python -m pip install --disable-pip-version-check --quiet

.PHONY: demo test lint matrix memcheck clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

# setup.py and the C sources too: a changed accelerator is rebuilt by the editable install.
$(VENV)/.demo: $(BIN)/python pyproject.toml setup.py $(wildcard src/brickscope/*.c src/brickscope/*.h src/brickscope/*/*.c src/brickscope/*/*.h) $(wildcard exporters/*/pyproject.toml) $(wildcard exporters/*/setup.py) $(wildcard exporters/*/src/brickscope/*/*/*.c)
	$(PIP) -e '.[cuda,demo]' $(EDITABLE)
	touch $@

$(VENV)/.test: $(VENV)/.demo
	$(PIP) -e '.[cuda,demo,test]' $(EDITABLE_TEST)
	# tests/torch: the CPU build of the pinned torch (a local file; a plain `pip install torch`
	# would pull GBs of CUDA wheels), and nvtx, which runs as a no-op without a GPU.
	$(PIP) torch==2.13.0 --only-binary=:all: 'nvtx>=0.2'
	touch $@

demo: $(VENV)/.demo
	$(BIN)/python examples/quickstart.py --out out --no-report
	@echo; echo '$$ brickscope report out/trace.pftrace --top 5 --step 2:   # warm-up steps 0-1 left out'
	$(BIN)/brickscope report out/trace.pftrace --top 5 --step 2:

# The whole suite twice: with the C accelerators (a missing one fails the run), then with
# every pure-Python fallback (docs/native.md).
test: $(VENV)/.test
	BRICKSCOPE_REQUIRE_NATIVE=1 $(BIN)/python -m pytest -q
	BRICKSCOPE_PURE_PYTHON=1 $(BIN)/python -m pytest -q

# The C accelerators under valgrind memcheck against the pure-Python run of the same driver
# (the checker first proves it fails on an injected bug), then the million-scope leak check
# (docs/native.md, "Memory checks"). valgrind is Debian's package, installed when missing.
memcheck: $(VENV)/.test
	command -v valgrind >/dev/null || (apt-get update -qq && apt-get install -y -qq valgrind)
	$(BIN)/python tests/native/memcheck.py --self-test
	$(BIN)/python tests/native/memcheck.py --cuda
	$(BIN)/python tests/native/leakcheck.py

# ruff and mypy as pyproject.toml configures them ([tool.ruff], [tool.mypy]; docs/ci.md).
lint: $(VENV)/.test
	$(BIN)/ruff check .
	$(BIN)/python -m mypy

# The unit suites on every CPython 3.10-3.13 pyenv holds x the lowest and newest
# OpenTelemetry releases declared, each in its own environment under build/matrix/ (.ci/matrix).
matrix:
	.ci/matrix

clean:
	rm -rf $(VENV) out .pytest_cache build src/brickscope/*.so
