# `make demo` and `make test` set up everything they need (system packages, virtualenv, Redis).
PY := .venv/bin/python
DEMO_STORE := var/demo-store

.PHONY: setup setup-test demo test lint unit chaos bench clean

setup:
	@scripts/bootstrap.sh

demo: setup
	@rm -rf $(DEMO_STORE) var/demo-sandbox-down
	@scripts/with-redis.sh env TUNEFLEET_STORE=$(DEMO_STORE) TUNEFLEET_LOG_LEVEL=warning \
		$(PY) -m service demo --tuning examples/demo/tuning.yaml --workers 2

setup-test:
	@scripts/bootstrap.sh test

test: setup-test lint unit

lint:
	$(PY) -m ruff check service workers tests bench
	$(PY) -m ruff format --check service workers tests bench
	$(PY) -m mypy

unit:
	$(PY) -m pytest -q

clean:
	rm -rf var .venv .mypy_cache .ruff_cache .pytest_cache

DURATION ?= 60
chaos: setup
	PYTHONPATH=. $(PY) scripts/chaos.py --duration-s $(DURATION)

bench: setup
	PYTHONPATH=. $(PY) -m bench
