#!/usr/bin/env bash
# Prints the path of a usable Toxiproxy server (Shopify's fault-injection
# proxy) on stdout, and nothing else there. The network-fault tests put it
# between the processes they start (latency, jitter, timeouts, resets).
#
# $TURNSTILE_TOXIPROXY_BIN if set, else ./bin/toxiproxy-server in the project
# if it is the pinned version (a stamp file records that), else build the
# pinned release into ./bin with `go install` (a minute or two the first
# time; the Go build cache makes it fast later). Progress goes to stderr.
set -euo pipefail

readonly VERSION="v2.12.0"
readonly PACKAGE="github.com/Shopify/toxiproxy/v2/cmd/server@$VERSION"

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

if [[ -n "${TURNSTILE_TOXIPROXY_BIN:-}" ]]; then
  echo "$TURNSTILE_TOXIPROXY_BIN"
  exit 0
fi

bin="$root/bin/toxiproxy-server"
stamp="$root/bin/.toxiproxy-$VERSION"
if [[ -x "$bin" && -f "$stamp" ]]; then
  echo "$bin"
  exit 0
fi

if ! command -v go >/dev/null 2>&1; then
  echo "ensure-toxiproxy: no $bin and no go command to build it" >&2
  exit 1
fi

mkdir -p "$root/bin"
# The command's package is named server: build it aside, then name it.
build="$(mktemp -d)"
trap 'rm -rf "$build"' EXIT
echo "ensure-toxiproxy: building $PACKAGE into $root/bin (a minute or two the first time)..." >&2
if ! (cd "$root" && GOBIN="$build" go install "$PACKAGE" >&2); then
  echo "ensure-toxiproxy: go install $PACKAGE failed" >&2
  exit 1
fi
mv "$build/server" "$bin"
rm -f "$root"/bin/.toxiproxy-*
touch "$stamp"
echo "ensure-toxiproxy: installed $bin" >&2
echo "$bin"
