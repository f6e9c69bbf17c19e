# One-command set-up: `make demo` runs the embedded ladder, `make test` the whole suite.
# The virtualenv lives outside the clone (torch is large): install once, reuse it.
VENV ?= $(HOME)/.cache/groundstream/venv
PY := $(VENV)/bin/python
DEPS_STAMP := $(VENV)/.deps-$(shell sha256sum pyproject.toml | cut -c1-16)

.PHONY: venv demo test test-unit lint format bench kafka-start kafka-stop

$(DEPS_STAMP): pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test]'
	touch $@

venv: $(DEPS_STAMP)
	@# Point the shared venv's `groundstream` at this clone (fast: no dependencies).
	$(PY) -m pip install --quiet --no-deps -e .

demo: venv
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
