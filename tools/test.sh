#!/usr/bin/env bash
# The whole test suite: formatting, lints, unit/integration tests (with the real
# default models pulled into $FAVLO_HOME), and end-to-end tests against a live
# `favlo serve` driven by official client libraries.
set -euo pipefail
cd "$(dirname "$0")/.."
export FAVLO_HOME="${FAVLO_HOME:-$PWD/target/favlo-home}"
export CARGO_TERM_COLOR=never

echo "== cargo fmt"
cargo fmt --all --check
echo "== cargo clippy"
cargo clippy --workspace --all-targets -- -D warnings
echo "== the CUDA backend builds (its tests run on a GPU machine, they skip here)"
cargo clippy -p favlo-runtime -p favlo-llama -p favlo --features favlo-runtime/cuda,favlo-llama/cuda,favlo/cuda --all-targets -- -D warnings
echo "== build"
cargo build -p favlo
FAVLO_BIN="$PWD/target/debug/favlo"
export FAVLO_BIN

echo "== pull the real default models into $FAVLO_HOME"
"$FAVLO_BIN" pull smollm2-135m-instruct qwen2.5-coder-0.5b-instruct all-minilm-l6-v2 qwen3-tokenizer piper-joe-medium dcgan-faces
model() { "$FAVLO_BIN" models --path "$@"; }
export FAVLO_TEST_SMOLLM2_GGUF="$(model smollm2-135m-instruct --file model.gguf)"
export FAVLO_TEST_QWEN25_GGUF="$(model qwen2.5-coder-0.5b-instruct --file model.gguf)"
export FAVLO_TEST_MINILM_DIR="$(model all-minilm-l6-v2)"
export FAVLO_TEST_QWEN3_TOKENIZER="$(model qwen3-tokenizer --file tokenizer.json)"
export FAVLO_TEST_PIPER_ONNX="$(ls "$(model piper-joe-medium)"/*.onnx | head -n 1)"
export FAVLO_TEST_DCGAN_WEIGHTS="$(model dcgan-faces --file weights.tar)"

echo "== cargo test"
cargo test --workspace
cargo test -p favlo-runtime --features cuda --lib --test cuda_kernels

echo "== end-to-end (official openai and mcp SDKs against a live favlo serve, the preemption harness)"
python3 -m pytest -q tests/e2e
echo "== end-to-end (official TypeScript MCP SDK against a live favlo serve)"
(cd tests/e2e-ts && npm ci --no-audit --no-fund)
node --test tests/e2e-ts/

echo "== web UI (Vitest units, Playwright in Chromium against a live favlo serve)"
FAVLO_BIN="$FAVLO_BIN" FAVLO_HOME="$FAVLO_HOME" bash tools/ui-test.sh
