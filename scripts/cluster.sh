#!/usr/bin/env bash
# A real Temporal cluster on one machine: the Temporal server (all four
# services in one process, v1.29.1 built from the Go module proxy) with
# PostgreSQL 15 for persistence and visibility, on free loopback ports.
# Nothing in turnstile changes to run on it but the connection settings.
#
#   scripts/cluster.sh up      start it (idempotent), print the settings
#   scripts/cluster.sh env     print the settings (export lines) of a running one
#   scripts/cluster.sh down    stop it and remove its state
#   scripts/cluster.sh status  is it running?
#
# State (PostgreSQL data, server config, logs, pids) lives in
# $TURNSTILE_CLUSTER_DIR (default ./.turnstile/cluster). CLUSTER_SHARDS sets
# the number of history shards (default 8; fixed once the cluster exists).
# Progress goes to stderr; `up` and `env` print only export lines on stdout,
# so `eval "$(scripts/cluster.sh up)"` points this shell at the cluster.
set -euo pipefail

readonly SERVER_VERSION="v1.29.1"
readonly SERVER_PACKAGE="go.temporal.io/server/cmd/server@$SERVER_VERSION"
readonly SQLTOOL_PACKAGE="go.temporal.io/server/cmd/tools/sql@$SERVER_VERSION"
readonly NAMESPACE="default"

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
state="${TURNSTILE_CLUSTER_DIR:-$root/.turnstile/cluster}"
shards="${CLUSTER_SHARDS:-8}"

log() { echo "cluster: $*" >&2; }
die() { log "$*"; exit 1; }

# ensure_server installs the pinned server and its SQL tool into ./bin
# (several minutes the first time; the Go build cache makes it fast later).
ensure_server() {
  local stamp="$root/bin/.temporal-server-$SERVER_VERSION"
  if [[ -x "$root/bin/temporal-server" && -x "$root/bin/temporal-sql-tool" && -f "$stamp" ]]; then
    return
  fi
  command -v go >/dev/null || die "no go command to build the Temporal server"
  local tmp
  tmp="$(mktemp -d)"
  log "building $SERVER_PACKAGE and its SQL tool into $root/bin (takes several minutes the first time)..."
  (cd "$root" && GOBIN="$tmp" go install "$SERVER_PACKAGE" "$SQLTOOL_PACKAGE" >&2) ||
    die "go install $SERVER_PACKAGE $SQLTOOL_PACKAGE failed"
  mkdir -p "$root/bin"
  mv "$tmp/server" "$root/bin/temporal-server"
  mv "$tmp/sql" "$root/bin/temporal-sql-tool"
  rmdir "$tmp"
  rm -f "$root"/bin/.temporal-server-*
  touch "$stamp"
}

# pg_bin finds the PostgreSQL server binaries: on PATH, else the newest
# Debian-style /usr/lib/postgresql/N/bin.
pg_bin() {
  if command -v pg_ctl >/dev/null && command -v initdb >/dev/null; then
    dirname "$(readlink -f "$(command -v pg_ctl)")"
    return
  fi
  local d
  d="$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)"
  [[ -n "$d" && -x "$d/pg_ctl" ]] ||
    die "PostgreSQL server binaries not found (initdb, pg_ctl): install them, e.g. apt-get install postgresql-15"
  echo "$d"
}

# free_port prints a free loopback port below 32768: the server stores
# membership ports as PostgreSQL smallint.
free_port() {
  python3 -c '
import random, socket
while True:
    p = random.randrange(20000, 32000)
    s = socket.socket()
    try:
        s.bind(("127.0.0.1", p))
    except OSError:
        continue
    finally:
        s.close()
    print(p)
    break'
}

# as_pg runs a PostgreSQL command as an unprivileged user: the server
# refuses to run as root.
as_pg() {
  if [[ "$(id -u)" == 0 ]]; then
    runuser -u postgres -- "$@"
  else
    "$@"
  fi
}

start_postgres() {
  local bin="$1" port="$2"
  local data="$state/pg/data"
  if [[ ! -f "$data/PG_VERSION" ]]; then
    mkdir -p "$state/pg"
    [[ "$(id -u)" == 0 ]] && chown -R postgres "$state/pg"
    as_pg "$bin/initdb" -D "$data" -U temporal --auth=trust -E UTF8 >"$state/pg/initdb.log" 2>&1 ||
      die "initdb failed: $(tail -5 "$state/pg/initdb.log")"
  fi
  if as_pg "$bin/pg_ctl" -D "$data" status >/dev/null 2>&1; then
    return
  fi
  as_pg "$bin/pg_ctl" -D "$data" -l "$state/pg/postgres.log" -w -t 60 \
    -o "-p $port -k $state/pg -c listen_addresses=127.0.0.1 -c max_connections=200 -c fsync=on" start >&2 ||
    die "PostgreSQL did not start: $(tail -5 "$state/pg/postgres.log")"
}

setup_schema() {
  local port="$1" db schema
  for db in temporal temporal_visibility; do
    schema="postgresql/v12/temporal"
    [[ "$db" == temporal_visibility ]] && schema="postgresql/v12/visibility"
    local tool=("$root/bin/temporal-sql-tool" --plugin postgres12 --ep 127.0.0.1 -p "$port" -u temporal --pw temporal --db "$db")
    "${tool[@]}" create-database >>"$state/schema.log" 2>&1 || true
    "${tool[@]}" setup-schema -v 0.0 >>"$state/schema.log" 2>&1 || die "setup-schema of $db failed (see $state/schema.log)"
    "${tool[@]}" update-schema --schema-name "$schema" >>"$state/schema.log" 2>&1 || die "update-schema of $db failed (see $state/schema.log)"
  done
}

write_config() {
  local pgport="$1"
  local fe="$2" fehttp="$3" hist="$4" match="$5" work="$6"
  mkdir -p "$state/config/dynamicconfig"
  cat >"$state/config/dynamicconfig/cluster.yaml" <<EOF
# Written by scripts/cluster.sh. Same behaviour as temporal-dev.yaml's dev server.
system.enableActivityEagerExecution:
  - value: true
system.enableEagerWorkflowStart:
  - value: true
limit.maxIDLength:
  - value: 255
EOF
  cat >"$state/config/cluster.yaml" <<EOF
# Written by scripts/cluster.sh.
log:
  stdout: true
  level: warn
persistence:
  defaultStore: postgres-default
  visibilityStore: postgres-visibility
  numHistoryShards: $shards
  datastores:
    postgres-default:
      sql:
        pluginName: "postgres12"
        databaseName: "temporal"
        connectAddr: "127.0.0.1:$pgport"
        connectProtocol: "tcp"
        user: "temporal"
        password: "temporal"
        maxConns: 40
        maxIdleConns: 40
        maxConnLifetime: "1h"
    postgres-visibility:
      sql:
        pluginName: "postgres12"
        databaseName: "temporal_visibility"
        connectAddr: "127.0.0.1:$pgport"
        connectProtocol: "tcp"
        user: "temporal"
        password: "temporal"
        maxConns: 10
        maxIdleConns: 10
        maxConnLifetime: "1h"
global:
  membership:
    maxJoinDuration: 30s
    broadcastAddress: "127.0.0.1"
services:
  frontend:
    rpc: {grpcPort: $fe, membershipPort: $(free_port), bindOnLocalHost: true, httpPort: $fehttp}
  matching:
    rpc: {grpcPort: $match, membershipPort: $(free_port), bindOnLocalHost: true}
  history:
    rpc: {grpcPort: $hist, membershipPort: $(free_port), bindOnLocalHost: true}
  worker:
    rpc: {grpcPort: $work, membershipPort: $(free_port), bindOnLocalHost: true}
clusterMetadata:
  enableGlobalNamespace: false
  failoverVersionIncrement: 10
  masterClusterName: "active"
  currentClusterName: "active"
  clusterInformation:
    active:
      enabled: true
      initialFailoverVersion: 1
      rpcName: "frontend"
      rpcAddress: "127.0.0.1:$fe"
dcRedirectionPolicy:
  policy: "noop"
dynamicConfigClient:
  filepath: "$state/config/dynamicconfig/cluster.yaml"
  pollInterval: "10s"
EOF
}

running() {
  [[ -f "$state/server.pid" ]] && kill -0 "$(cat "$state/server.pid")" 2>/dev/null
}

print_env() {
  [[ -f "$state/env" ]] || die "no cluster in $state (scripts/cluster.sh up)"
  cat "$state/env"
}

wait_frontend() {
  local addr="$1" cli="$2" i
  for i in $(seq 1 120); do
    if "$cli" operator cluster health --address "$addr" >/dev/null 2>&1; then
      return
    fi
    running || die "the Temporal server exited: $(tail -20 "$state/server.log")"
    sleep 1 # readiness polling interval
  done
  die "the Temporal server did not answer within 120s: $(tail -20 "$state/server.log")"
}

up() {
  if running; then
    log "already running ($state)"
    print_env
    return
  fi
  ensure_server
  local cli bin pgport fe
  cli="$("$root/scripts/ensure-temporal.sh")"
  bin="$(pg_bin)"
  mkdir -p "$state"
  if [[ -f "$state/pgport" ]]; then pgport="$(cat "$state/pgport")"; else pgport="$(free_port)"; echo "$pgport" >"$state/pgport"; fi
  log "PostgreSQL ($bin) on 127.0.0.1:$pgport, data in $state/pg"
  start_postgres "$bin" "$pgport"
  if [[ ! -f "$state/schema-done" ]]; then
    setup_schema "$pgport"
    touch "$state/schema-done"
  fi
  fe="$(free_port)"
  write_config "$pgport" "$fe" "$(free_port)" "$(free_port)" "$(free_port)" "$(free_port)"
  log "Temporal server $SERVER_VERSION ($shards history shards) on 127.0.0.1:$fe"
  nohup "$root/bin/temporal-server" --root "$state" --config config --env cluster --allow-no-auth start \
    >"$state/server.log" 2>&1 &
  echo $! >"$state/server.pid"
  wait_frontend "127.0.0.1:$fe" "$cli"
  "$cli" operator namespace describe --namespace "$NAMESPACE" --address "127.0.0.1:$fe" >/dev/null 2>&1 ||
    "$cli" operator namespace create --namespace "$NAMESPACE" --retention 72h --address "127.0.0.1:$fe" >&2
  # Namespace creation reaches every frontend cache within seconds; starter
  # setup checks the namespace, then registers turnstile's search attributes.
  local i
  for i in $(seq 1 30); do
    if (cd "$root" && go run ./cmd/starter --address "127.0.0.1:$fe" --namespace "$NAMESPACE" setup >&2); then
      break
    fi
    [[ "$i" == 30 ]] && die "starter setup failed"
    sleep 1 # the namespace propagating to the frontend
  done
  printf 'export TEMPORAL_ADDRESS=127.0.0.1:%s\nexport TEMPORAL_NAMESPACE=%s\n' "$fe" "$NAMESPACE" >"$state/env"
  log "up: $(tr '\n' ' ' <"$state/env")"
  print_env
}

down() {
  if [[ -f "$state/server.pid" ]]; then
    local pid
    pid="$(cat "$state/server.pid")"
    if kill -0 "$pid" 2>/dev/null; then
      kill "$pid"
      for _ in $(seq 1 30); do kill -0 "$pid" 2>/dev/null || break; sleep 1; done
      kill -9 "$pid" 2>/dev/null || true
    fi
  fi
  if [[ -f "$state/pg/data/postmaster.pid" ]]; then
    as_pg "$(pg_bin)/pg_ctl" -D "$state/pg/data" -m fast -w stop >&2 || true
  fi
  rm -rf "$state"
  log "down"
}

case "${1:-}" in
  up) up ;;
  env) print_env ;;
  down) down ;;
  status) if running; then log "running"; print_env; else log "not running"; exit 1; fi ;;
  *) echo "usage: $0 up|env|down|status" >&2; exit 2 ;;
esac
