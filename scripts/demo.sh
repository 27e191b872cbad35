#!/usr/bin/env bash
# End-to-end demo on one machine (`make demo`):
#   Temporal dev server (UI on, in-memory) + environment server + scripted
#   policy server + worker, then a set of rollouts submitted with the starter,
#   waited for and summarised (overall and per environment). Then recovery
#   (skipped with DEMO_CRASH=0): the same set again, submitted with
#   --require-ack; a checkpoint taken mid-flight (--stay-paused); a simulated
#   crash (SIGKILL of the worker, the environment server and the in-memory
#   Temporal dev server, and the transcripts deleted: only the checkpoint
#   directory survives); everything started fresh; the checkpoint restored;
#   the set finished and acknowledged; and its rewards compared, rollout by
#   rollout, with the uninterrupted run.
#
# The set: DEMO_COUNT rollouts (default 24) over DEMO_ENVS (default
# "counter"; a comma-separated list is assigned round-robin), each with its
# environment's scripted policy and default turn limit, e.g.
#   make demo DEMO_ENVS=counter,blackjack,workplace,sandbox DEMO_COUNT=40
#
# Every process logs to a file under a fresh run directory (printed at the
# start and kept afterwards). Readiness is awaited by polling health checks,
# never by fixed sleeps. Everything started here is stopped by PID on exit;
# the script exits non-zero, printing the tail of each log, if a step fails.
#
# Ports: Temporal from temporal-dev.yaml (7233, UI 8233), environment server
# 8091, policy server 8092. They must be free (checked first). The dev server is in-memory, so
# the Web UI shows the set only while the demo runs; TURNSTILE_DEMO_KEEP=1
# keeps everything up until Ctrl-C.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

readonly CONFIG="$root/temporal-dev.yaml"
readonly DEV_ENV="dev"
readonly ENV_LISTEN="127.0.0.1:8091"
readonly POLICY_LISTEN="127.0.0.1:8092"
# Prometheus /metrics of each process (README "Metrics").
readonly ENV_METRICS="127.0.0.1:9091"
readonly POLICY_METRICS="127.0.0.1:9092"
readonly WORKER_METRICS="127.0.0.1:9093"
readonly TASK_QUEUE="${TURNSTILE_TASK_QUEUE:-turnstile-rollouts}"
readonly DEMO_ENVS="${DEMO_ENVS:-counter}"
readonly DEMO_COUNT="${DEMO_COUNT:-24}"
readonly DEMO_CRASH="${DEMO_CRASH:-1}"
[[ "$DEMO_CRASH" == "0" || "$DEMO_CRASH" == "1" ]] || {
  echo "DEMO_CRASH=$DEMO_CRASH: want 1 (default: checkpoint, crash, restore) or 0 (skip that part)" >&2
  exit 2
}
SET_ID="demo-$(date -u +%Y%m%d-%H%M%S)"
readonly SET_ID
# How long each component may take to become ready (the dev server starts in
# a few seconds; the bound only keeps a broken start from hanging forever).
readonly READY_TIMEOUT_SECONDS=120
# How long a set may take to finish (a bound against hangs, not a pace).
readonly SET_TIMEOUT_SECONDS=900

run_dir="$(mktemp -d "${TMPDIR:-/tmp}/turnstile-demo.XXXXXX")"
pids=()
names=()
logs=()

# Messages go to fd 3, a copy of the script's stderr: a trap can run while a
# polled check has stderr redirected to /dev/null, and must still be heard.
exec 3>&2
log() { printf '[demo %s] %s\n' "$(date +%H:%M:%S)" "$*" >&3; }

print_log_tails() {
  local i
  for i in "${!logs[@]}"; do
    [[ -f "${logs[$i]}" ]] || continue
    printf '\n----- last lines of %s (%s) -----\n' "${names[$i]}" "${logs[$i]}" >&3
    tail -n 40 "${logs[$i]}" >&3 || true
  done
}

fail() {
  log "FAILED: $*"
  print_log_tails
  log "logs kept in $run_dir"
  exit 1
}

# children PID prints the PIDs of PID's child processes (the dev server
# wrapper runs `temporal server start-dev` as one).
children() { pgrep -P "$1" 2>/dev/null || true; }

# stop_pid NAME PID: SIGTERM, then SIGKILL after a grace period.
stop_pid() {
  local name="$1" pid="$2" deadline
  kill -0 "$pid" 2>/dev/null || return 0
  log "stopping $name (pid $pid)"
  kill -TERM "$pid" 2>/dev/null || true
  deadline=$((SECONDS + 15))
  while kill -0 "$pid" 2>/dev/null && ((SECONDS < deadline)); do
    sleep 0.2
  done
  if kill -0 "$pid" 2>/dev/null; then
    log "$name (pid $pid) did not stop; killing it"
    kill -KILL "$pid" 2>/dev/null || true
  fi
}

# stop_all stops what this script started, newest first, by PID, and then
# any child of those a killed parent left behind.
stop_all() {
  local i pid child kids
  for ((i = ${#pids[@]} - 1; i >= 0; i--)); do
    pid="${pids[$i]}"
    [[ -n "$pid" ]] || continue # killed on purpose by the crash
    kids="$(children "$pid")"
    stop_pid "${names[$i]}" "$pid"
    wait "$pid" 2>/dev/null || true
    for child in $kids; do
      stop_pid "child $child of ${names[$i]}" "$child"
    done
  done
}

on_exit() {
  local status=$?
  trap - EXIT INT TERM
  stop_all
  if ((status != 0)); then
    log "exit status $status; logs in $run_dir"
  fi
  exit "$status"
}
trap on_exit EXIT
trap 'log "interrupted"; exit 130' INT
trap 'log "terminated"; exit 143' TERM

# start NAME COMMAND... runs COMMAND in the background, logging to
# $run_dir/NAME.log, and records its PID.
start() {
  local name="$1"
  shift
  local logfile="$run_dir/$name.log"
  "$@" </dev/null >"$logfile" 2>&1 3>&- &
  pids+=("$!")
  names+=("$name")
  logs+=("$logfile")
  log "started $name (pid $!, log $logfile)"
}

# wait_until NAME PID CHECK... polls CHECK until it succeeds, failing early if
# the process PID has exited and after READY_TIMEOUT_SECONDS.
wait_until() {
  local name="$1" pid="$2"
  shift 2
  local deadline=$((SECONDS + READY_TIMEOUT_SECONDS))
  until "$@" >/dev/null 2>&1; do
    if ! kill -0 "$pid" 2>/dev/null; then
      fail "$name exited before it was ready"
    fi
    if ((SECONDS >= deadline)); then
      fail "$name not ready after ${READY_TIMEOUT_SECONDS}s"
    fi
    sleep 0.2
  done
  log "$name is ready"
}

http_ok() { curl -fsS -o /dev/null --max-time 2 "$1"; }

# port_in_use HOST PORT: something accepts connections there.
port_in_use() { (exec 4<>"/dev/tcp/$1/$2") 2>/dev/null; }

# require_free_ports HOST:PORT=WHAT... fails, naming every busy port and what
# the demo wanted it for, before anything is started.
require_free_ports() {
  local spec addr what busy=()
  for spec in "$@"; do
    addr="${spec%%=*}"
    what="${spec#*=}"
    if port_in_use "${addr%:*}" "${addr##*:}"; then
      busy+=("$addr ($what)")
    fi
  done
  if ((${#busy[@]})); then
    fail "port(s) already in use: ${busy[*]}. Stop whatever listens there (another demo, a dev server: see \`ss -ltnp\`) and run the demo again."
  fi
}

# worker_polling: the worker has at least one poller on the task queue.
worker_polling() {
  "$temporal" task-queue describe --address "$TEMPORAL_ADDRESS" --namespace "$TEMPORAL_NAMESPACE" \
    --task-queue "$TASK_QUEUE" -o json | grep -q '"identity"'
}

# flag_value FLAG ARGS... prints the value following FLAG in ARGS.
flag_value() {
  local want="$1"
  shift
  while (($#)); do
    if [[ "$1" == "$want" && $# -ge 2 ]]; then
      echo "$2"
      return 0
    fi
    shift
  done
  return 1
}

command -v curl >/dev/null || fail "curl is needed to poll health endpoints"
log "run directory: $run_dir"

# ---- build -----------------------------------------------------------------
log "building binaries into $root/bin"
mkdir -p "$root/bin"
go build -o "$root/bin/" ./cmd/... >"$run_dir/build.log" 2>&1 || {
  logs+=("$run_dir/build.log")
  names+=("build")
  fail "go build ./cmd/..."
}
# Check the set before starting anything: a bad DEMO_ENVS fails here.
"$root/bin/starter" submit --dry-run --set "$SET_ID" --count "$DEMO_COUNT" --env "$DEMO_ENVS" --seed 7 2>&1 |
  while IFS= read -r line; do log "$line"; done ||
  fail "DEMO_ENVS=$DEMO_ENVS DEMO_COUNT=$DEMO_COUNT: the starter refuses this set (message above)"
temporal="$(scripts/ensure-temporal.sh)" || fail "no Temporal CLI"

# The dev server's address, namespace and UI port, all from temporal-dev.yaml.
read -r -a devserver_cmd <<<"$("$root/bin/devserver" --config "$CONFIG" --env "$DEV_ENV" --headless=false --print-flags)" ||
  fail "read $CONFIG"
ip="$(flag_value --ip "${devserver_cmd[@]}")"
port="$(flag_value --port "${devserver_cmd[@]}")"
ui_port="$(flag_value --ui-port "${devserver_cmd[@]}" || echo $((port + 1000)))"
export TEMPORAL_ADDRESS="$ip:$port"
TEMPORAL_NAMESPACE="$(flag_value --namespace "${devserver_cmd[@]}")"
export TEMPORAL_NAMESPACE

require_free_ports "$TEMPORAL_ADDRESS=Temporal frontend" "$ip:$ui_port=Temporal Web UI" \
  "$ENV_LISTEN=environment server" "$POLICY_LISTEN=policy server" \
  "$ENV_METRICS=environment server metrics" "$POLICY_METRICS=policy server metrics" "$WORKER_METRICS=worker metrics"

# The environment servers' two planes each want a bearer token: fresh random
# ones per demo run. The environment server, the worker (its environment
# activities send the data token; its Checkpoint/Restore activities and
# start-overs the control token) and the starter (resume) all read them from
# these variables, which keeps them out of the process list.
TURNSTILE_CONTROL_TOKEN="$(head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n')"
TURNSTILE_DATA_TOKEN="$(head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n')"
export TURNSTILE_CONTROL_TOKEN TURNSTILE_DATA_TOKEN

# start_devserver, start_envserver and start_worker start one component each
# and wait until it is ready; SUFFIX ("" or "-2") names the log files, so
# the components started after the crash log apart.

# ---- Temporal dev server ---------------------------------------------------
start_devserver() {
  start "devserver$1" "$root/bin/devserver" --config "$CONFIG" --env "$DEV_ENV" --headless=false
  wait_until "Temporal dev server" "${pids[-1]}" \
    "$temporal" operator cluster health --address "$TEMPORAL_ADDRESS"
}

# ---- environment server ----------------------------------------------------
start_envserver() {
  env_ready="$run_dir/envserver$1.url"
  start "envserver$1" "$root/bin/envserver" --listen "$ENV_LISTEN" --ready-file "$env_ready" --metrics-listen "$ENV_METRICS"
  wait_until "environment server" "${pids[-1]}" test -s "$env_ready"
  env_url="$(head -n 1 "$env_ready")"
  wait_until "environment server health" "${pids[-1]}" http_ok "$env_url/healthz"
}

# ---- policy server ---------------------------------------------------------
start_policyserver() {
  policy_ready="$run_dir/policyserver.url"
  start policyserver "$root/bin/policyserver" --listen "$POLICY_LISTEN" \
    --latency 200ms --jitter 50ms --imperfection 0.2 --ready-file "$policy_ready" --metrics-listen "$POLICY_METRICS"
  wait_until "policy server" "${pids[-1]}" test -s "$policy_ready"
  wait_until "policy server health" "${pids[-1]}" http_ok "http://$POLICY_LISTEN/healthz"
}

# ---- worker ----------------------------------------------------------------
start_worker() {
  mkdir -p "$run_dir/transcripts"
  start "worker$1" env \
    TURNSTILE_ENV_URL="$env_url" \
    TURNSTILE_MODEL_BASE_URL="http://$POLICY_LISTEN/v1" \
    TURNSTILE_TRANSCRIPT_DIR="$run_dir/transcripts" \
    TEMPORAL_ADDRESS="$TEMPORAL_ADDRESS" \
    TEMPORAL_NAMESPACE="$TEMPORAL_NAMESPACE" \
    TURNSTILE_METRICS_LISTEN="$WORKER_METRICS" \
    "$root/bin/worker"
  wait_until "worker" "${pids[-1]}" worker_polling
}

start_devserver ""
start_envserver ""
start_policyserver
start_worker ""

# The Web UI filtered to this set.
query="RolloutSet=\"$SET_ID\""
query="${query//=/%3D}"
query="${query//\"/%22}"
ui_host="$ip"
[[ "$ui_host" == "127.0.0.1" ]] && ui_host="localhost"
ui_url="http://$ui_host:$ui_port/namespaces/$TEMPORAL_NAMESPACE/workflows?query=$query"
log "Web UI for this set (live while the demo runs): $ui_url"
log "Prometheus metrics: worker http://$WORKER_METRICS/metrics, environment server http://$ENV_METRICS/metrics, policy server http://$POLICY_METRICS/metrics"

# ---- a set of rollouts -----------------------------------------------------
# Each rollout uses its environment's scripted policy (scripted-<env>) and
# default turn limit; the starter assigns DEMO_ENVS round-robin.
log "submitting set $SET_ID ($DEMO_COUNT rollouts over $DEMO_ENVS, scripted policies, seed 7)"
# Progress (stderr) shows here; the submit's own output goes to its log. It
# runs in the background so that a SIGTERM or Ctrl-C reaches the traps at
# once (bash defers traps until a foreground command ends) and stop_all
# stops it with the rest.
"$root/bin/starter" submit --set "$SET_ID" --count "$DEMO_COUNT" --env "$DEMO_ENVS" --seed 7 --capture-tokens --wait \
  </dev/null >"$run_dir/starter-submit.log" 2> >(tee "$run_dir/starter-progress.log" >&3) &
pids+=("$!")
names+=("starter submit")
logs+=("$run_dir/starter-submit.log")
wait "${pids[-1]}" || {
  logs+=("$run_dir/starter-progress.log")
  names+=("starter submit (stderr)")
  fail "starter submit"
}
log "$(head -n 1 "$run_dir/starter-submit.log")"
log "every rollout closed; summary:"
"$root/bin/starter" summary --set "$SET_ID" 2>&1 | tee "$run_dir/starter-summary.log" ||
  {
    logs+=("$run_dir/starter-summary.log")
    names+=("starter summary")
    fail "starter summary"
  }

# Its results, kept to compare the recovered set with (the in-memory dev
# server holding them dies in the crash below).
"$root/bin/starter" results --set "$SET_ID" >"$run_dir/results-uninterrupted.jsonl" ||
  fail "starter results --set $SET_ID"

# ---- CHECKPOINT / CRASH / RESTORE -----------------------------------------
# The same set again (same seed, so the same tasks and rollout seeds), with
# results held for acknowledgement. Mid-flight it is checkpointed and left
# paused, then everything but the policy server and the checkpoint directory
# dies (SIGKILL), comes back empty, and the checkpoint is restored.

# env_applied prints the environment server's count of applied mutations
# (a data-plane read: the token goes in a header read from a file
# descriptor, not on curl's command line).
env_applied() {
  curl -fsS --max-time 2 -H @<(printf 'Authorization: Bearer %s\n' "$TURNSTILE_DATA_TOKEN") "$env_url/v1/stats" |
    grep -o '"applied":[0-9]*' | cut -d: -f2
}

# count_runs QUERY prints how many runs visibility finds for QUERY.
# (JSON output leaves a zero count out.)
count_runs() {
  local out n
  out="$("$temporal" workflow count --address "$TEMPORAL_ADDRESS" --namespace "$TEMPORAL_NAMESPACE" \
    --query "$1" -o json)" || return 1
  n="$(grep -o '"count": *"\?[0-9]*' <<<"$out" | grep -o '[0-9]*$' || true)"
  echo "${n:-0}"
}

# run_step NAME LOGFILE COMMAND... runs a starter step to its end, logging
# to LOGFILE, bounded by SET_TIMEOUT_SECONDS. It runs in the background, so a
# SIGTERM or Ctrl-C reaches the traps at once (bash defers traps until a
# foreground command ends) and stop_all stops it with the rest.
run_step() {
  local name="$1" logfile="$2"
  shift 2
  timeout "$SET_TIMEOUT_SECONDS" "$@" </dev/null >"$logfile" 2>&1 3>&- &
  pids+=("$!")
  names+=("$name")
  logs+=("$logfile")
  wait "${pids[-1]}" || fail "$name (exit status $?; a status of 124 is the ${SET_TIMEOUT_SECONDS}s bound)"
  pids[-1]="" # ended
}

# ms_since START_NS prints the milliseconds since START_NS (date +%s%N).
ms_since() { echo $((($(date +%s%N) - $1) / 1000000)); }

# index_of NAME prints the index of the process NAME in pids/names.
index_of() {
  local i
  for i in "${!names[@]}"; do
    [[ "${names[$i]}" == "$1" ]] && { echo "$i"; return 0; }
  done
  return 1
}

# crash SIGKILLs the named processes and every child of theirs (the dev
# server's `temporal` child included), all at once, by PID, and waits until
# they are gone. Their entries are emptied, so stop_all skips them.
crash() {
  local name i pid victims=() child
  for name in "$@"; do
    i="$(index_of "$name")" || fail "crash: no process $name"
    pid="${pids[$i]}"
    victims+=("$pid")
    for child in $(children "$pid"); do victims+=("$child"); done
    pids[i]=""
  done
  log "SIGKILL ${*} (pids ${victims[*]})"
  kill -KILL "${victims[@]}" 2>/dev/null || true
  for pid in "${victims[@]}"; do
    wait "$pid" 2>/dev/null || true # reaps our own children
    while kill -0 "$pid" 2>/dev/null; do sleep 0.05; done
  done
}

# wait_for_set QUERY_DONE WHAT: polls until no run of the recovered set
# matches "still to do" (QUERY_DONE), failing after SET_TIMEOUT_SECONDS.
wait_for_set() {
  local todo="$1" what="$2" deadline=$((SECONDS + SET_TIMEOUT_SECONDS)) n
  while :; do
    n="$(count_runs "$todo")" || fail "count rollouts of $REC_SET"
    ((n == 0)) && break
    ((SECONDS < deadline)) || fail "set $REC_SET: $n rollouts not $what after ${SET_TIMEOUT_SECONDS}s"
    sleep 0.5
  done
}

# compare_results BASE RECOVERED: every rollout (by index) has the same
# environment, transcript head (the digest of its whole conversation),
# reward, turn count and end (terminated/truncated) in both result files.
compare_results() {
  local key='[(.rollout_id | sub("^.*-"; "")), .env, .head, .reward, .turns, (.terminated // false), (.truncated // false)] | @tsv'
  if ! command -v jq >/dev/null; then
    log "jq not found: the rollout-by-rollout comparison is skipped"
    return 0
  fi
  jq -r "$key" "$1" | sort >"$run_dir/compare-uninterrupted.tsv"
  jq -r "$key" "$2" | sort >"$run_dir/compare-recovered.tsv"
  if ! diff -u "$run_dir/compare-uninterrupted.tsv" "$run_dir/compare-recovered.tsv" >"$run_dir/compare.diff"; then
    cat "$run_dir/compare.diff" >&3
    fail "the recovered set differs from the uninterrupted one (index, env, transcript head, reward, turns, terminated, truncated; diff above)"
  fi
  log "the recovered set matches the uninterrupted one rollout by rollout: $(wc -l <"$run_dir/compare-recovered.tsv") rollouts, same env, transcript head, reward, turns and end"
}

# evidence_of_failures prints (and saves) the history of every rollout of
# the recovered set that did not complete.
evidence_of_failures() {
  local id
  for id in $("$root/bin/starter" results --set "$REC_SET" 2>/dev/null |
    grep '"error"' | grep -o '"rollout_id":"[^"]*"' | cut -d'"' -f4); do
    log "rollout $id failed; its history: $run_dir/failed-$id.txt"
    "$temporal" workflow show -w "rollout/$id" --address "$TEMPORAL_ADDRESS" \
      --namespace "$TEMPORAL_NAMESPACE" >"$run_dir/failed-$id.txt" 2>&1 || true
    tail -n 30 "$run_dir/failed-$id.txt" >&3
  done
}

if [[ "$DEMO_CRASH" != "0" ]]; then
  REC_SET="$SET_ID-rec"
  CHECKPOINT_ID="ck-$REC_SET"
  CHECKPOINT_ROOT="$run_dir/checkpoints"
  # The uninterrupted set tells how many mutations a set applies.
  expected="$(env_applied)" || fail "read the environment server's stats"
  log "recovery: the uninterrupted set applied $expected environment mutations"

  "$root/bin/starter" submit --set "$REC_SET" --count "$DEMO_COUNT" --env "$DEMO_ENVS" --seed 7 --capture-tokens --require-ack \
    </dev/null >"$run_dir/starter-submit-rec.log" 2>&1 || {
    logs+=("$run_dir/starter-submit-rec.log")
    names+=("starter submit (recovery)")
    fail "starter submit --require-ack"
  }
  log "$(head -n 1 "$run_dir/starter-submit-rec.log") (--require-ack, not waited for)"

  # Mid-flight: a third of the mutations applied, and not every rollout done.
  base="$expected"
  target=$((base + (expected + 2) / 3))
  not_done="RolloutSet=\"$REC_SET\" AND ExecutionStatus=\"Running\" AND RolloutPhase!=\"awaiting_ack\""
  deadline=$((SECONDS + SET_TIMEOUT_SECONDS))
  while :; do
    applied="$(env_applied)" || fail "read the environment server's stats"
    ((applied >= target)) && break
    ((SECONDS < deadline)) || fail "set $REC_SET: only $((applied - base)) mutations after ${SET_TIMEOUT_SECONDS}s"
    sleep 0.1
  done
  left="$(count_runs "$not_done")" || fail "count rollouts of $REC_SET"
  log "mid-flight: $((applied - base)) of about $expected mutations applied, $left of $DEMO_COUNT rollouts still running"
  ((left > 0)) || log "warning: every rollout had finished already; the checkpoint holds only completed results"

  log "checkpoint $CHECKPOINT_ID of set $REC_SET into $CHECKPOINT_ROOT (--stay-paused)"
  t0="$(date +%s%N)"
  run_step "starter checkpoint" "$run_dir/starter-checkpoint.log" \
    "$root/bin/starter" checkpoint --set "$REC_SET" --id "$CHECKPOINT_ID" --root "$CHECKPOINT_ROOT" \
    --participants "$env_url" --timeout 60s --stay-paused --wait
  checkpoint_ms="$(ms_since "$t0")"
  while IFS= read -r line; do log "  $line"; done <"$run_dir/starter-checkpoint.log"
  checkpoint_bytes="$(du -sb "$CHECKPOINT_ROOT/$CHECKPOINT_ID" | cut -f1)"
  log "checkpoint time: ${checkpoint_ms} ms (starter checkpoint --wait, wall clock)"
  log "checkpoint size: ${checkpoint_bytes} bytes (du -sb $CHECKPOINT_ROOT/$CHECKPOINT_ID)"

  # ---- the crash: nothing survives but the checkpoint directory ----
  crash worker envserver devserver
  rm -rf "$run_dir/transcripts"
  log "crashed: worker, environment server and Temporal dev server killed; transcripts deleted"

  start_devserver "-2"
  start_envserver "-2"
  start_worker "-2"

  log "restore $CHECKPOINT_ID"
  t0="$(date +%s%N)"
  run_step "starter restore" "$run_dir/starter-restore.log" \
    "$root/bin/starter" restore --id "$CHECKPOINT_ID" --root "$CHECKPOINT_ROOT" --participants "$env_url" --wait
  restore_ms="$(ms_since "$t0")"
  while IFS= read -r line; do log "  $line"; done <"$run_dir/starter-restore.log"
  log "restore time: ${restore_ms} ms (starter restore --wait, wall clock)"

  wait_for_set "$not_done" "finished"
  failed="$(count_runs "RolloutSet=\"$REC_SET\" AND ExecutionStatus!=\"Running\" AND ExecutionStatus!=\"Completed\"")"
  if ((failed > 0)); then
    evidence_of_failures
    fail "$failed rollouts of $REC_SET did not complete after the restore (histories above and in $run_dir)"
  fi
  log "every rollout of $REC_SET holds its result; acknowledging them"
  "$root/bin/starter" acknowledge --set "$REC_SET" --all-completed 2>&1 | while IFS= read -r line; do log "  $line"; done
  wait_for_set "RolloutSet=\"$REC_SET\" AND ExecutionStatus=\"Running\"" "closed"

  "$root/bin/starter" results --set "$REC_SET" >"$run_dir/results-recovered.jsonl" ||
    fail "starter results --set $REC_SET"
  log "recovered set $REC_SET, summary:"
  "$root/bin/starter" summary --set "$REC_SET" 2>&1 | tee "$run_dir/starter-summary-rec.log" >&3 ||
    fail "starter summary --set $REC_SET"

  completed_n="$(grep -c '"receipt"' "$run_dir/results-recovered.jsonl" || true)"
  if ((completed_n != DEMO_COUNT)) || grep -q '"error"' "$run_dir/results-recovered.jsonl"; then
    evidence_of_failures
    fail "recovered set: $completed_n of $DEMO_COUNT rollouts completed"
  fi
  log "recovered set: all $completed_n rollouts completed"
  compare_results "$run_dir/results-uninterrupted.jsonl" "$run_dir/results-recovered.jsonl"
fi
# ----------------------------------------------------------------------------

# The trainer's view of the last set: every finished rollout as one JSON
# line, token ids and log-probs included (the scripted policy server speaks
# vLLM's token dialect; after a restore the transcripts came back from the
# checkpoint).
export_set="$SET_ID"
[[ "$DEMO_CRASH" != "0" ]] && export_set="$REC_SET"
"$root/bin/starter" export --set "$export_set" --transcript-dir "$run_dir/transcripts" --file "$run_dir/export.jsonl" ||
  fail "starter export --set $export_set"
log "exported $(wc -l <"$run_dir/export.jsonl") trajectories of $export_set to $run_dir/export.jsonl; the first:"
python3 "$root/scripts/show-trajectory.py" "$run_dir/export.jsonl" | while IFS= read -r line; do log "  $line"; done

log "done. Web UI for this set: $ui_url"
log "logs and transcripts: $run_dir"
if [[ "${TURNSTILE_DEMO_KEEP:-}" == "1" ]]; then
  # The dev server is in-memory: the UI shows the set only while it runs.
  log "TURNSTILE_DEMO_KEEP=1: everything keeps running; press Ctrl-C to stop"
  wait "${pids[$(index_of "devserver-2" || index_of devserver)]}" || true
fi
