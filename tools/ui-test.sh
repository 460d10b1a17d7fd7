#!/usr/bin/env bash
# Web UI checks: install node deps, build web/dist, run the Vitest unit tests,
# then the Playwright (playwright-core + Debian's chromium) end-to-end suite
# against a live `favlo serve` on the real default models.
#
# Env: FAVLO_BIN (default target/debug/favlo), FAVLO_HOME (where the default
# models are pulled; default target/favlo-home), CHROMIUM_BIN (default
# /usr/bin/chromium). Starts and stops the server itself on a free port. When
# the binary serves the UI at `/` itself, the suite uses that; until then a
# Vite preview server serves web/dist and proxies the API to the binary.
# Exit status is non-zero when any step fails.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
WEB="$ROOT/web"
FAVLO_BIN="$(realpath -m "${FAVLO_BIN:-$ROOT/target/debug/favlo}")"
FAVLO_HOME="$(realpath -m "${FAVLO_HOME:-$ROOT/target/favlo-home}")"
export FAVLO_HOME
LOGS="$WEB/test-results"
mkdir -p "$LOGS"

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'
}

wait_http() { # url, seconds, pid
  local url="$1" secs="$2" pid="$3" i
  for ((i = 0; i < secs * 4; i++)); do
    curl -sf -o /dev/null "$url" && return 0
    kill -0 "$pid" 2>/dev/null || { echo "process $pid exited before $url answered" >&2; return 1; }
    sleep 0.25
  done
  echo "timed out waiting for $url" >&2
  return 1
}

PIDS=()
cleanup() {
  local p
  for p in "${PIDS[@]:-}"; do
    [[ -n "$p" ]] && kill "$p" 2>/dev/null && wait "$p" 2>/dev/null || true
  done
}
trap cleanup EXIT

cd "$WEB"
echo "== npm ci"
npm ci --no-audit --no-fund
echo "== build"
npm run build
echo "== unit tests (vitest)"
npx vitest run

[[ -x "$FAVLO_BIN" ]] || { echo "FAVLO_BIN=$FAVLO_BIN is not an executable (cargo build -p favlo)" >&2; exit 1; }
[[ -x "${CHROMIUM_BIN:-/usr/bin/chromium}" ]] || { echo "chromium missing: apt-get install -y chromium" >&2; exit 1; }

API_PORT="$(free_port)"
echo "== favlo serve on 127.0.0.1:$API_PORT (FAVLO_HOME=$FAVLO_HOME)"
"$FAVLO_BIN" serve --port "$API_PORT" --no-default-pull >"$LOGS/favlo-serve.log" 2>&1 &
PIDS+=("$!")
wait_http "http://127.0.0.1:$API_PORT/health" 120 "${PIDS[-1]}"
export FAVLO_URL="http://127.0.0.1:$API_PORT"

if curl -sf "$FAVLO_URL/" 2>/dev/null | grep -q 'name="generator" content="favlo-web"'; then
  echo "== the binary serves the UI at /"
  export UI_URL="$FAVLO_URL"
else
  UI_PORT="$(free_port)"
  echo "== the binary does not serve the UI yet: vite preview on 127.0.0.1:$UI_PORT proxying the API"
  node node_modules/vite/bin/vite.js preview --host 127.0.0.1 --port "$UI_PORT" --strictPort >"$LOGS/vite-preview.log" 2>&1 &
  PIDS+=("$!")
  wait_http "http://127.0.0.1:$UI_PORT/health" 60 "${PIDS[-1]}"
  export UI_URL="http://127.0.0.1:$UI_PORT"
fi

echo "== end to end (playwright-core + chromium) against $UI_URL"
npx vitest run --config vitest.e2e.config.ts
echo "== screenshots in $LOGS"
