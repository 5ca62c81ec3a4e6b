# Set-up is part of every target: `make demo` and `make test` work on a fresh clone.
VENV ?= .venv
PY := $(VENV)/bin/python
# On kernelpilot's own machines a CPU build of torch 2.13.0 is served locally; elsewhere pip
# fetches it (CUDA build on Linux). Override to keep another torch: make test TORCH="torch>=2.4"
TORCH ?= torch==2.13.0
PYTEST_ARGS ?=

.PHONY: setup demo test test-gpu lint bench clean

setup: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	@# The sandbox for pull-request and candidate code (harness/sandbox/bubblewrap.py) is bubblewrap.
	command -v bwrap >/dev/null || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null && \
	  apt-get update -qq && apt-get install -y -qq bubblewrap >/dev/null; } || \
	  { echo "kernelpilot needs bubblewrap (bwrap): apt-get install bubblewrap" >&2; exit 1; }
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q "$(TORCH)"
	$(PY) -m pip install -q -e ".[dev]"
	touch $@

demo: setup
	$(VENV)/bin/kernelpilot optimize examples/fused_gelu_block.py

test: setup
	$(PY) -m pytest -q --durations=25 $(PYTEST_ARGS); rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "pytest collected no tests: failing on purpose"; exit 1; fi; exit $$rc

test-gpu: setup
	$(PY) -m pytest -q -m gpu $(PYTEST_ARGS)

lint: setup
	$(VENV)/bin/ruff check bot agents harness tests bench
	$(VENV)/bin/ruff format --check bot agents harness tests bench
	$(VENV)/bin/mypy
	$(VENV)/bin/actionlint -shellcheck $(VENV)/bin/shellcheck -pyflakes "" .github/workflows/*.yml examples/workflows/*.yml
	$(VENV)/bin/zizmor --offline --persona auditor action.yml .github/workflows/*.yml examples/workflows/*.yml

bench: setup
	$(PY) -m bench offline

clean:
	rm -rf $(VENV) kernelpilot-out .pytest_cache
