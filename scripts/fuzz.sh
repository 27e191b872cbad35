#!/usr/bin/env bash
# Runs every fuzz target of the module for a fixed time each and prints one
# line per target: package, target, execs, new corpus entries, outcome.
# A crasher is written by `go test` into the package's testdata/fuzz/<Target>/
# (commit it as a regression case once fixed) and makes this script exit 1.
#
#   scripts/fuzz.sh            # FUZZTIME=30s per target
#   FUZZTIME=2m scripts/fuzz.sh
#   FUZZ_ONLY=artifact scripts/fuzz.sh   # packages whose path contains "artifact"
#   FUZZ_PARALLEL=1 scripts/fuzz.sh      # one fuzzing worker (default: one per CPU)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

fuzztime="${FUZZTIME:-30s}"
only="${FUZZ_ONLY:-}"
parallel=()
if [[ -n "${FUZZ_PARALLEL:-}" ]]; then parallel=(-parallel "$FUZZ_PARALLEL"); fi
log="$(mktemp -d)"
trap 'rm -rf "$log"' EXIT

# "pkgdir<TAB>Target" for every func FuzzX(f *testing.F) in a _test.go file.
targets() {
	grep -rl --include='*_test.go' -E '^func Fuzz[A-Za-z0-9_]+\(f \*testing\.F\)' . |
		while read -r file; do
			grep -oE '^func Fuzz[A-Za-z0-9_]+' "$file" | sed 's/^func //' |
				while read -r name; do printf '%s\t%s\n' "$(dirname "$file")" "$name"; done
		done | sort -u
}

failed=0
printf '%-28s %-18s %14s %8s  %s\n' package target execs new outcome
while IFS=$'\t' read -r dir name; do
	[[ -n "$only" && "$dir" != *"$only"* ]] && continue
	out="$log/$(echo "$dir-$name" | tr '/.' '__').txt"
	outcome=ok
	if ! go test "$dir" -run '^$' -fuzz "^${name}\$" -fuzztime "$fuzztime" "${parallel[@]}" >"$out" 2>&1; then
		outcome="FAIL (see $dir/testdata/fuzz/$name)"
		failed=1
	fi
	# go test prints "fuzz: elapsed: 30s, execs: 123456 (4115/sec), new interesting: 3 (total: 40)".
	last="$(grep -E '^fuzz: elapsed: .*execs: [0-9]+' "$out" | tail -1 || true)"
	execs="$(sed -nE 's/.*execs: ([0-9]+).*/\1/p' <<<"$last")"
	fresh="$(sed -nE 's/.*new interesting: ([0-9]+).*/\1/p' <<<"$last")"
	printf '%-28s %-18s %14s %8s  %s\n' "${dir#./}" "$name" "${execs:-?}" "${fresh:-?}" "$outcome"
	if [[ "$outcome" != ok ]]; then sed -n '1,40p' "$out" >&2; fi
done < <(targets)
exit "$failed"
