#!/usr/bin/env bash
# Installs the Debian packages dsv41 builds and tests with. Idempotent and quiet:
# does nothing when everything is present, otherwise one apt-get call for what is missing.
set -euo pipefail
PKGS=(
  cmake ninja-build g++ pkg-config ccache
  nlohmann-json3-dev libpcre2-dev libutf8proc-dev libcli11-dev libfmt-dev
  libxxhash-dev libzstd-dev libcpp-httplib-dev curl
  libssl-dev
  libpng-dev libjpeg62-turbo-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  python3-numpy python3-torch libopenblas0-pthread python3-pytest python3-pil
)
if [ "${1:-}" = "--fuzz" ]; then PKGS+=(clang libclang-rt-14-dev); fi
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
echo "install-deps: installing ${missing[*]}" >&2
SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq >/dev/null
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
