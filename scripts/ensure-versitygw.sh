#!/usr/bin/env bash
# Prints the path of a usable versitygw (Versity's S3 gateway) on stdout, and
# nothing else there. The storage tests start it as a real S3-compatible
# server over a temporary directory.
#
# $TURNSTILE_VERSITYGW_BIN if set, else ./bin/versitygw in the project if it
# is the pinned version (a stamp file records that), else build the pinned
# release into ./bin with `go install` (a few minutes the first time; the Go
# build cache makes it fast later). Progress goes to stderr.
set -euo pipefail

readonly VERSION="v1.8.0"
readonly PACKAGE="github.com/versity/versitygw/cmd/versitygw@$VERSION"

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

if [[ -n "${TURNSTILE_VERSITYGW_BIN:-}" ]]; then
  echo "$TURNSTILE_VERSITYGW_BIN"
  exit 0
fi

bin="$root/bin/versitygw"
stamp="$root/bin/.versitygw-$VERSION"
if [[ -x "$bin" && -f "$stamp" ]]; then
  echo "$bin"
  exit 0
fi

if ! command -v go >/dev/null 2>&1; then
  echo "ensure-versitygw: no $bin and no go command to build it" >&2
  exit 1
fi

mkdir -p "$root/bin"
echo "ensure-versitygw: building $PACKAGE into $root/bin (a few minutes the first time)..." >&2
if ! (cd "$root" && GOBIN="$root/bin" go install "$PACKAGE" >&2); then
  echo "ensure-versitygw: go install $PACKAGE failed" >&2
  exit 1
fi
rm -f "$root"/bin/.versitygw-*
touch "$stamp"
echo "ensure-versitygw: installed $bin" >&2
echo "$bin"
