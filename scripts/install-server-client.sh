#!/usr/bin/env bash
# Installs the official OpenAI Node SDK (tests/server/package.json) into DIR (default
# build/server-client) for the server's client tests. Idempotent and quiet. Without npm or the
# registry the SDK tests skip with that reason, so this never fails the build.
set -uo pipefail
DIR="${1:-build/server-client}"
cd "$(dirname "$0")/.."
if [ -f "$DIR/node_modules/openai/package.json" ]; then exit 0; fi
if ! command -v npm >/dev/null 2>&1; then
  echo "install-server-client: npm not found; the OpenAI SDK tests will skip" >&2
  exit 0
fi
mkdir -p "$DIR"
cp tests/server/package.json "$DIR/"
if ! (cd "$DIR" && npm install --no-audit --no-fund --loglevel=error >/dev/null); then
  echo "install-server-client: npm install failed; the OpenAI SDK tests will skip" >&2
fi
exit 0
