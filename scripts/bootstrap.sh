#!/usr/bin/env bash
# Make this machine ready for tunefleet: system packages (git, redis-server; with `test`, also what the
# tests drive: tmux, bubblewrap, chromium, promtool, systemd-analyze), then a virtualenv with the
# project and its dev tools, installed from the hashed lock file requirements/dev.lock (`make lock`
# refreshes it). Idempotent; safe to run on every `make` target.
set -euo pipefail
cd "$(dirname "$0")/.."

need=()
command -v git >/dev/null 2>&1 || need+=(git)
command -v redis-server >/dev/null 2>&1 || need+=(redis-server)
if [ "${1:-}" = test ]; then  # what only the tests use
  command -v tmux >/dev/null 2>&1 || need+=(tmux)                # `tunefleet watch`, driven in tmux
  command -v bwrap >/dev/null 2>&1 || need+=(bubblewrap)         # a sandboxed runner
  command -v chromium >/dev/null 2>&1 || need+=(chromium)        # the dashboard, in a real browser
  command -v promtool >/dev/null 2>&1 || need+=(prometheus)      # promtool check metrics
  command -v systemd-analyze >/dev/null 2>&1 || need+=(systemd) # systemd-analyze verify of deploy/systemd
  [ -x /usr/bin/python3 ] && /usr/bin/python3 -c "import seccomp" >/dev/null 2>&1 || need+=(python3-seccomp) # deploy/seccomp
fi
python3 -c 'import venv, ensurepip' >/dev/null 2>&1 || need+=(python3-venv)
if [ ${#need[@]} -gt 0 ]; then
  if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
    echo "bootstrap: installing ${need[*]} with apt-get" >&2
    apt-get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
  elif command -v apt-get >/dev/null 2>&1 && command -v sudo >/dev/null 2>&1; then
    echo "bootstrap: installing ${need[*]} with sudo apt-get" >&2
    sudo apt-get update -qq >/dev/null
    sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
  else
    echo "bootstrap: missing ${need[*]}: install them with your package manager (Debian: apt-get install ${need[*]})" >&2
    exit 1
  fi
fi

python3 -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)' || {
  echo "bootstrap: tunefleet needs Python 3.11 or newer; python3 is $(python3 --version)" >&2
  exit 1
}

stamp=.venv/.installed
lock=requirements/dev.lock
if [ ! -x .venv/bin/python ] || [ pyproject.toml -nt "$stamp" ] || [ "$lock" -nt "$stamp" ]; then
  echo "bootstrap: installing tunefleet and its dev tools into .venv (from $lock)" >&2
  mkdir -p var
  python3 -m venv .venv
  # Every dependency comes from the lock, checked against its hashes; then the project itself, editable,
  # with the locked setuptools and nothing else (--no-deps: the lock already holds what it needs).
  # llama-cpp-python is left out: scripts/local_model.sh builds it without native CPU flags.
  awk '/^llama-cpp-python==/{skip=1} skip{if(!/\\$/)skip=0; next} {print}' "$lock" >var/dev-without-llama.lock
  if ! { .venv/bin/python -m pip install -q --require-hashes --no-deps -r var/dev-without-llama.lock \
      && .venv/bin/python -m pip install -q --no-deps --no-build-isolation -e .; } \
      >var/bootstrap.log 2>&1; then
    cat var/bootstrap.log >&2
    echo "bootstrap: pip install failed (log above, also in var/bootstrap.log)" >&2
    exit 1
  fi
  touch "$stamp"
fi

# The project's own bytecode, written here as pip writes its dependencies' at install. Where
# PYTHONDONTWRITEBYTECODE is set (many CI and container images), Python never caches it, and every process
# the fleet and its tests start (workers, the daemon, the CLI) would compile the project's modules anew:
# about 0.2 s of CPU each (7 % of the test suite's CPU here). Only what changed is compiled again (0.3 s when
# nothing has); Python ignores a cached file whose source is newer.
.venv/bin/python -m compileall -q -j 0 service workers tests/support >/dev/null
