#!/usr/bin/env bash
# Run a command against a private redis-server on a free loopback port (no persistence),
# started here and stopped when the command ends. TUNEFLEET_REDIS_URL points at it.
set -euo pipefail
dir=$(mktemp -d "${TMPDIR:-/tmp}/tunefleet-redis.XXXXXX")
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
redis-server --port "$port" --bind 127.0.0.1 --save "" --appendonly no --dir "$dir" \
  --logfile "$dir/redis.log" --daemonize no &
pid=$!
cleanup() { kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; rm -rf "$dir"; }
trap cleanup EXIT
for _ in $(seq 100); do
  redis-cli -p "$port" ping >/dev/null 2>&1 && break
  sleep 0.05
done
export TUNEFLEET_REDIS_URL="redis://127.0.0.1:$port/0"
"$@"
