#!/usr/bin/env bash
# End-to-end demo on one machine (`make demo`):
#   Temporal dev server (UI on, in-memory) + environment server + scripted
#   policy server + worker, then a set of rollouts submitted with the starter,
#   waited for and summarised (overall and per environment).
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
readonly TASK_QUEUE="${TURNSTILE_TASK_QUEUE:-turnstile-rollouts}"
readonly DEMO_ENVS="${DEMO_ENVS:-counter}"
readonly DEMO_COUNT="${DEMO_COUNT:-24}"
SET_ID="demo-$(date -u +%Y%m%d-%H%M%S)"
readonly SET_ID
# How long each component may take to become ready (the dev server starts in
# a few seconds; the bound only keeps a broken start from hanging forever).
readonly READY_TIMEOUT_SECONDS=120

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
  "$ENV_LISTEN=environment server" "$POLICY_LISTEN=policy server"

# ---- Temporal dev server ---------------------------------------------------
start devserver "$root/bin/devserver" --config "$CONFIG" --env "$DEV_ENV" --headless=false
wait_until "Temporal dev server" "${pids[-1]}" \
  "$temporal" operator cluster health --address "$TEMPORAL_ADDRESS"

# ---- environment server ----------------------------------------------------
env_ready="$run_dir/envserver.url"
start envserver "$root/bin/envserver" --listen "$ENV_LISTEN" --ready-file "$env_ready"
wait_until "environment server" "${pids[-1]}" test -s "$env_ready"
env_url="$(head -n 1 "$env_ready")"
wait_until "environment server health" "${pids[-1]}" http_ok "$env_url/healthz"

# ---- policy server ---------------------------------------------------------
policy_ready="$run_dir/policyserver.url"
start policyserver "$root/bin/policyserver" --listen "$POLICY_LISTEN" \
  --latency 200ms --jitter 50ms --imperfection 0.2 --ready-file "$policy_ready"
wait_until "policy server" "${pids[-1]}" test -s "$policy_ready"
wait_until "policy server health" "${pids[-1]}" http_ok "http://$POLICY_LISTEN/healthz"

# ---- worker ----------------------------------------------------------------
mkdir -p "$run_dir/transcripts"
start worker env \
  TURNSTILE_ENV_URL="$env_url" \
  TURNSTILE_MODEL_BASE_URL="http://$POLICY_LISTEN/v1" \
  TURNSTILE_TRANSCRIPT_DIR="$run_dir/transcripts" \
  TEMPORAL_ADDRESS="$TEMPORAL_ADDRESS" \
  TEMPORAL_NAMESPACE="$TEMPORAL_NAMESPACE" \
  "$root/bin/worker"
wait_until "worker" "${pids[-1]}" worker_polling

# The Web UI filtered to this set.
query="RolloutSet=\"$SET_ID\""
query="${query//=/%3D}"
query="${query//\"/%22}"
ui_host="$ip"
[[ "$ui_host" == "127.0.0.1" ]] && ui_host="localhost"
ui_url="http://$ui_host:$ui_port/namespaces/$TEMPORAL_NAMESPACE/workflows?query=$query"
log "Web UI for this set (live while the demo runs): $ui_url"

# ---- a set of rollouts -----------------------------------------------------
# Each rollout uses its environment's scripted policy (scripted-<env>) and
# default turn limit; the starter assigns DEMO_ENVS round-robin.
log "submitting set $SET_ID ($DEMO_COUNT rollouts over $DEMO_ENVS, scripted policies, seed 7)"
# Progress (stderr) shows here; the submit's own output goes to its log. It
# runs in the background so that a SIGTERM or Ctrl-C reaches the traps at
# once (bash defers traps until a foreground command ends) and stop_all
# stops it with the rest.
"$root/bin/starter" submit --set "$SET_ID" --count "$DEMO_COUNT" --env "$DEMO_ENVS" --seed 7 --wait \
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

# ---- CHECKPOINT / CRASH / RESTORE (to come) --------------------------------
# This is where the recovery part of the demo goes: submit a second set, take
# a checkpoint mid-run (starter checkpoint ...), kill the worker and the
# environment server by PID (SIGKILL), restart them with start/wait_until as
# above, restore the checkpoint, wait for the set, and compare its summary
# with the uninterrupted one. Not part of the demo yet.
# ----------------------------------------------------------------------------

log "done. Web UI for this set: $ui_url"
log "logs and transcripts: $run_dir"
if [[ "${TURNSTILE_DEMO_KEEP:-}" == "1" ]]; then
  # The dev server is in-memory: the UI shows the set only while it runs.
  log "TURNSTILE_DEMO_KEEP=1: everything keeps running; press Ctrl-C to stop"
  wait "${pids[0]}" || true
fi
