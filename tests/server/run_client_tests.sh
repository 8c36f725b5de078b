#!/usr/bin/env bash
# ctest entry for the server's client tests: runs `node --test` on one test file, or exits 77
# (ctest: skipped) saying why when node, curl or the OpenAI SDK is missing.
# Usage: run_client_tests.sh FILE.test.mjs [needs-sdk]
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
if ! command -v node >/dev/null 2>&1; then echo "SKIP: node not found"; exit 77; fi
if ! command -v curl >/dev/null 2>&1; then echo "SKIP: curl not found"; exit 77; fi
if [ "${2:-}" = "needs-sdk" ] && [ ! -f "${DSV41_SDK_DIR:-}/node_modules/openai/package.json" ]; then
  echo "SKIP: the openai npm package is not installed in ${DSV41_SDK_DIR:-?} (scripts/install-server-client.sh; npm unreachable?)"
  exit 77
fi
if [ ! -f "${DSV41_SERVER_MODEL:-}/config.json" ]; then echo "SKIP: test model ${DSV41_SERVER_MODEL:-?} not found"; exit 77; fi
exec node --test --test-concurrency=1 "$here/$1"
