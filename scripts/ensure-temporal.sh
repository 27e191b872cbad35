#!/usr/bin/env bash
# Prints the path of a usable Temporal CLI on stdout (and nothing else there).
#
# Same rules as devenv.EnsureCLI: `temporal` on PATH, else ./bin/temporal in
# the project, else build the pinned release into ./bin with `go install`
# (several minutes the first time; the Go build cache makes it fast later).
# Progress goes to stderr.
set -euo pipefail

readonly CLI_PACKAGE="github.com/temporalio/cli/cmd/temporal@v1.5.1"

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

if path="$(command -v temporal 2>/dev/null)"; then
  echo "$path"
  exit 0
fi

local_cli="$root/bin/temporal"
if [[ -f "$local_cli" && -x "$local_cli" ]]; then
  echo "$local_cli"
  exit 0
fi

if ! command -v go >/dev/null 2>&1; then
  echo "ensure-temporal: temporal is not on PATH, not at $local_cli, and there is no go command to build it" >&2
  exit 1
fi

mkdir -p "$root/bin"
echo "ensure-temporal: temporal CLI not found; building $CLI_PACKAGE into $root/bin (takes several minutes the first time)..." >&2
# Build from the project root so its Go settings (GOFLAGS, GOTOOLCHAIN) apply;
# `go install pkg@version` ignores the project's go.mod itself.
if ! (cd "$root" && GOBIN="$root/bin" go install "$CLI_PACKAGE" >&2); then
  echo "ensure-temporal: go install $CLI_PACKAGE failed" >&2
  exit 1
fi
if [[ ! -x "$local_cli" ]]; then
  echo "ensure-temporal: go install finished but $local_cli is not an executable" >&2
  exit 1
fi
echo "ensure-temporal: installed $local_cli" >&2
echo "$local_cli"
