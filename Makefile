# `make demo` and `make test` set up everything they need (system packages, virtualenv, Redis).
PY := .venv/bin/python
DEMO_STORE := var/demo-store
DEMO_LLM := var/demo-llm
DEMO_NOISY := var/demo-noisy-store

.PHONY: setup setup-test setup-model demo demo-serve demo-noisy demo-llm test lint unit chaos bench clean lock

setup:
	@scripts/bootstrap.sh

demo: setup
	@rm -rf $(DEMO_STORE) var/demo-sandbox-down
	@scripts/with-redis.sh env TUNEFLEET_STORE=$(DEMO_STORE) TUNEFLEET_LOG_LEVEL=warning \
		$(PY) -m service demo --tuning examples/demo/tuning.yaml --workers 2

# The finished demo's dashboard (its versions, diffs and reasons), on a loopback port until Ctrl-C.
demo-serve: setup
	@scripts/with-redis.sh env TUNEFLEET_STORE=$(DEMO_STORE) TUNEFLEET_LOG_LEVEL=warning \
		$(PY) -m service demo-serve examples/demo/tuning.yaml

# The demo world with chance in it (examples/noisy/): flaky runs, a grader that errs, edits that harm;
# it prints the true held-out pass rates (the world's ground truth) beside the measured ones.
demo-noisy: setup
	@rm -rf $(DEMO_NOISY)
	@scripts/with-redis.sh env TUNEFLEET_STORE=$(DEMO_NOISY) TUNEFLEET_LOG_LEVEL=warning \
		$(PY) -m service demo --tuning examples/noisy/tuning.yaml --workers 2 --no-goals

# The embedded real model (llama-cpp-python built without native CPU flags, once per machine, and
# SmolLM2-135M-Instruct): the tests' and demo-llm's; see scripts/local_model.sh.
setup-model: setup
	@scripts/local_model.sh

# A tuning (and a goal) whose runner, analyzer and applier are that real model, served by llama-cpp-python
# on 127.0.0.1:8931 (LLAMA_PORT) for the length of the demo: no key, nothing to run beforehand.
demo-llm: setup-model
	@rm -rf $(DEMO_LLM)
	@scripts/with-redis.sh scripts/with-llama.sh env TUNEFLEET_STORE=$(DEMO_LLM)/store TUNEFLEET_LOG_LEVEL=warning \
		$(PY) -m service demo --tuning examples/llm-demo/tuning.yaml --workers 1 --goals examples/llm-demo/goals --timeout-s 1800

setup-test:
	@scripts/bootstrap.sh test
	@scripts/local_model.sh

test: setup-test lint unit

lint:
	$(PY) -m ruff check service workers tests bench
	$(PY) -m ruff format --check service workers tests bench
	$(PY) -m mypy

# The tests run on TEST_WORKERS processes side by side (pytest-xdist); each test has its own Redis,
# store and ports. Most of a test's time is spent waiting on real processes, so 4 beat 2 and 3 on 2
# cores, and 6 gained nothing more. `make unit TEST_WORKERS=0` runs them in this one process.
TEST_WORKERS ?= 4
unit:
	$(PY) -m pytest -q -n $(TEST_WORKERS) --dist worksteal --durations=15

clean:
	rm -rf var .venv .mypy_cache .ruff_cache .pytest_cache

DURATION ?= 60
chaos: setup
	PYTHONPATH=. $(PY) scripts/chaos.py --duration-s $(DURATION)

bench: setup-model
	PYTHONPATH=. $(PY) -m bench

# Resolve the dependencies anew (newest versions within pyproject.toml's ranges) and write the hashed
# lock files that bootstrap and deploy/Dockerfile install from; `make lock LOCK_UPGRADE=` keeps the
# current pins and only adds what pyproject.toml asks for anew. See docs/operations.md, "Locked
# dependencies".
LOCK_UPGRADE ?= --upgrade
LOCK_FLAGS := --quiet $(LOCK_UPGRADE) --generate-hashes --allow-unsafe --strip-extras --no-emit-index-url \
	--no-emit-find-links --resolver=backtracking
lock: setup
	$(PY) -m piptools compile $(LOCK_FLAGS) --extra dev --extra bench -o requirements/dev.lock \
		pyproject.toml requirements/build.in
	$(PY) -m piptools compile $(LOCK_FLAGS) -o requirements/runtime.lock \
		pyproject.toml requirements/build.in requirements/runtime.in
