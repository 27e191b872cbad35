#!/usr/bin/env bash
# Produces the compatibility fixture integration/testdata/checkpoint-v1 (read
# by integration/compat_test.go): a real checkpoint of a small mixed set, cut
# mid-flight by the code of the checkout this script runs in, and the results
# of an uninterrupted run of the same set to compare a restore with.
#
#   TURNSTILE_TEMPORAL_BIN=/path/to/temporal bash integration/testdata/make-checkpoint-v1.sh OUT_DIR
#
# The fixture is meant to stay what the code of one commit wrote (see its
# README.md, kept by hand): run this only on that commit, never to "refresh"
# the fixture after a change of the checkpoint format.
#
# What it does, on loopback ports, with the real binaries:
#   1. a Temporal dev server (in-memory, search attributes of
#      temporal-dev.yaml), an environment server named env-0 (the name the
#      integration harness gives its first server), the scripted policy server
#      (2s latency, so the cut lands mid-episode; imperfection 0.2) and a
#      worker;
#   2. the set "v1base" (COUNT rollouts over ENVS, seed 7), run to the end:
#      the uninterrupted results;
#   3. a fresh environment server on the same address (so the checkpoint
#      holds no "v1base" session), and the same set as "v1" with
#      --require-ack; once at least one rollout
#      holds its result for acknowledgement and half of the others have made
#      a model call and are still running, `starter checkpoint --stay-paused`;
#   4. OUT_DIR gets cp-v1/ (the committed checkpoint directory, byte for
#      byte), expected.jsonl (per rollout index: env, reward, turns, transcript
#      head, model calls, end; and the receipt of each result the checkpoint
#      holds) and checkpoint.txt (the starter's report of the cut).
# Everything started here is stopped by PID on exit.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
out="${1:?usage: $0 OUT_DIR}"
temporal="${TURNSTILE_TEMPORAL_BIN:?set TURNSTILE_TEMPORAL_BIN to the Temporal CLI}"

# No arithmetic: a stateless rollout cut mid-episode fails its restore on
# the code this fixture was made with (see the README).
readonly ENVS="counter,blackjack,workplace,sandbox"
readonly COUNT=8
readonly SEED=7
readonly BASE_SET="v1base"
readonly SET="v1"
readonly CHECKPOINT_ID="cp-v1"
readonly ENV_NAME="env-0"
readonly POLICY_FLAGS=(--latency 2s --jitter 200ms --imperfection 0.2 --fault-seed 1)
readonly TIMEOUT_SECONDS=600

work="$(mktemp -d "${TMPDIR:-/tmp}/turnstile-fixture.XXXXXX")"
pids=()
log() { printf '[fixture %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
on_exit() {
  local status=$? i
  for ((i = ${#pids[@]} - 1; i >= 0; i--)); do
    [[ -n "${pids[$i]}" ]] || continue # stopped already
    kill -TERM "${pids[$i]}" 2>/dev/null || true
    wait "${pids[$i]}" 2>/dev/null || true
  done
  if ((status != 0)); then
    log "failed (status $status); logs in $work"
  else
    rm -rf "$work"
  fi
}
trap on_exit EXIT

# start NAME COMMAND...: runs COMMAND in the background, logging to $work/NAME.log.
start() {
  local name="$1"
  shift
  "$@" </dev/null >"$work/$name.log" 2>&1 &
  pids+=("$!")
  log "started $name (pid $!)"
}

# wait_until WHAT CHECK...: polls CHECK until it succeeds or TIMEOUT_SECONDS pass.
wait_until() {
  local what="$1" deadline=$((SECONDS + TIMEOUT_SECONDS))
  shift
  until "$@" >/dev/null 2>&1; do
    if ((SECONDS >= deadline)); then
      log "$what: not after ${TIMEOUT_SECONDS}s"
      exit 1
    fi
    sleep 0.2
  done
  log "$what"
}

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
http_ok() { curl -fsS -o /dev/null --max-time 2 "$1"; }
ready_url() { test -s "$1" && head -n 1 "$1"; }

log "building the binaries of $(git -C "$root" rev-parse HEAD) into $work/bin"
(cd "$root" && go build -o "$work/bin/" ./cmd/devserver ./cmd/envserver ./cmd/policyserver ./cmd/worker ./cmd/starter)
bin="$work/bin"

port="$(free_port)"
read -r -a dev_args <<<"$("$bin/devserver" --config "$root/temporal-dev.yaml" --env dev --port "$port" --headless --log-level error --print-flags)"
# The printed command line starts with the CLI's own name.
start temporal "$temporal" "${dev_args[@]:1}"
export TEMPORAL_ADDRESS="127.0.0.1:$port" TEMPORAL_NAMESPACE=default
wait_until "Temporal dev server ready on $TEMPORAL_ADDRESS" "$temporal" operator cluster health --address "$TEMPORAL_ADDRESS"

TURNSTILE_CONTROL_TOKEN="$(head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n')"
TURNSTILE_DATA_TOKEN="$(head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n')"
export TURNSTILE_CONTROL_TOKEN TURNSTILE_DATA_TOKEN
# start_envserver LISTEN: an environment server; sets env_url and env_index.
start_envserver() {
  rm -f "$work/env.url"
  start envserver "$bin/envserver" --listen "$1" --ready-file "$work/env.url" --name "$ENV_NAME"
  env_index=$((${#pids[@]} - 1))
  wait_until "environment server wrote its URL" ready_url "$work/env.url"
  env_url="$(ready_url "$work/env.url")"
  wait_until "environment server healthy at $env_url" http_ok "$env_url/healthz"
}
start_envserver 127.0.0.1:0

start policyserver "$bin/policyserver" --listen 127.0.0.1:0 --ready-file "$work/policy.url" "${POLICY_FLAGS[@]}"
wait_until "policy server wrote its URL" ready_url "$work/policy.url"
model_url="$(ready_url "$work/policy.url")"
wait_until "policy server healthy at $model_url" http_ok "${model_url%/v1}/healthz"

mkdir -p "$work/transcripts"
start worker env TURNSTILE_ENV_URL="$env_url" TURNSTILE_MODEL_BASE_URL="$model_url" \
  TURNSTILE_TRANSCRIPT_DIR="$work/transcripts" TURNSTILE_LOG_LEVEL=warn "$bin/worker"
worker_polling() {
  "$temporal" task-queue describe --address "$TEMPORAL_ADDRESS" --namespace default \
    --task-queue turnstile-rollouts -o json | grep -q '"identity"'
}
wait_until "worker polling" worker_polling

# count QUERY: how many runs visibility finds (JSON output leaves a zero out).
count() {
  local n
  n="$("$temporal" workflow count --address "$TEMPORAL_ADDRESS" --namespace default --query "$1" -o json |
    grep -o '"count": *"\?[0-9]*' | grep -o '[0-9]*$' || true)"
  echo "${n:-0}"
}

# ---- the uninterrupted run ----
log "set $BASE_SET: $COUNT rollouts over $ENVS, seed $SEED, run to the end"
"$bin/starter" submit --set "$BASE_SET" --count "$COUNT" --env "$ENVS" --seed "$SEED" --wait >"$work/submit-base.log" 2>&1
"$bin/starter" results --set "$BASE_SET" >"$work/baseline.jsonl"
if (($(grep -c '"receipt"' "$work/baseline.jsonl") != COUNT)); then
  log "the uninterrupted set did not complete every rollout:"
  cat "$work/baseline.jsonl" >&2
  exit 1
fi

# ---- the same set, cut mid-flight ----
# A fresh environment server on the same address (the worker's default), so
# the checkpoint holds the sessions of the set it cuts and no others.
kill -TERM "${pids[$env_index]}"
wait "${pids[$env_index]}" || true
pids[env_index]=""
start_envserver "${env_url#http://}"
log "set $SET: the same rollouts, --require-ack"
"$bin/starter" submit --set "$SET" --count "$COUNT" --env "$ENVS" --seed "$SEED" --require-ack >"$work/submit.log" 2>&1
held_q="RolloutSet=\"$SET\" AND RolloutPhase=\"awaiting_ack\""
busy_q="RolloutSet=\"$SET\" AND ExecutionStatus=\"Running\" AND RolloutPhase!=\"awaiting_ack\" AND RolloutTurn>=1"
mid_flight() {
  local held busy
  held="$(count "$held_q")"
  busy="$(count "$busy_q")"
  ((held >= 1 && 2 * busy >= COUNT))
}
wait_until "set $SET mid-flight" mid_flight
log "cut: $(count "$held_q") rollouts hold their result, $(count "$busy_q") are mid-episode"
"$bin/starter" checkpoint --set "$SET" --id "$CHECKPOINT_ID" --root "$work/checkpoints" \
  --participants "$env_url" --timeout 60s --stay-paused --wait >"$work/checkpoint.txt"
cat "$work/checkpoint.txt" >&2
# The results the checkpoint holds (every rollout is parked: nothing moves).
"$bin/starter" results --set "$SET" >"$work/held.jsonl" 2>/dev/null

# ---- the fixture ----
mkdir -p "$out"
rm -rf "${out:?}/$CHECKPOINT_ID"
cp -a "$work/checkpoints/$CHECKPOINT_ID" "$out/$CHECKPOINT_ID"
# Per index: the uninterrupted outcome, and the receipt of the result the
# checkpoint holds, if it holds one.
jq -c --slurpfile held "$work/held.jsonl" '
  (.rollout_id | sub("^.*-"; "") | tonumber) as $i
  | ($held | map(select((.rollout_id | sub("^.*-"; "") | tonumber) == $i)) | first) as $h
  | {index: $i, env, reward, turns, head, calls: .usage.calls,
     terminated: (.terminated // false), truncated: (.truncated // false)}
    + (if $h then {held_receipt: $h.receipt} else {} end)' \
  "$work/baseline.jsonl" | sort -t: -k2 -n >"$out/expected.jsonl"
grep -v '^dir ' "$work/checkpoint.txt" >"$out/checkpoint.txt"
held_n="$(grep -c '"held_receipt"' "$out/expected.jsonl" || true)"
unacked="$(awk '$1 == "completed_unacked" { print $2 }' "$work/checkpoint.txt")"
if [[ "$held_n" != "$unacked" ]]; then
  log "the checkpoint holds $unacked completed results, but $held_n receipts were read"
  exit 1
fi
log "fixture written to $out ($(du -sb "$out" | cut -f1) bytes)"
