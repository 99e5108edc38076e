#!/usr/bin/env bash
# Private PostgreSQL, Redis and etcd servers for the distributed lock's tests: on 127.0.0.1, free
# ports, data in a directory of the caller's, each with a password ("secret").
#
#   scripts/servers.sh install               apt-installs postgresql, redis-server, libpq5,
#                                            libhiredis0.14, etcd-server and etcd-client if
#                                            missing (exit 3 if impossible)
#   scripts/servers.sh start DIR             installs if need be, starts both; writes
#                                            DIR/postgres.url and DIR/redis.url
#   scripts/servers.sh start-redis DIR       installs if need be, starts Redis only (a second
#                                            server, say); writes DIR/redis.url
#   scripts/servers.sh start-postgres DIR    the same for PostgreSQL; writes DIR/postgres.url
#   scripts/servers.sh start-etcd DIR        installs etcd-server and etcd-client if need be, starts
#                                            a private etcd (auth on: user root, password "secret");
#                                            writes DIR/etcd.url (not part of `start`)
#   scripts/servers.sh start-etcd-tls DIR    the same over TLS, with client certificates and no
#                                            password: makes a throwaway CA, a server certificate
#                                            (127.0.0.1) and a client one with openssl in DIR/tls
#                                            (ca.pem, client.pem, client-key.pem), writes
#                                            DIR/etcd.url (etcds://127.0.0.1:PORT, no options)
#   scripts/servers.sh stop DIR              stops all it started there (idempotent)
#   scripts/servers.sh pause|resume|restart|kill postgres|redis|etcd DIR
#                                            faults: SIGSTOP/SIGCONT every process of the server,
#                                            restart it (sessions and unsaved data gone), stop it
#   scripts/servers.sh run -- COMMAND...     start in a temporary directory, run COMMAND with
#                                            LIBSYNC_TEST_SERVERS=DIR, stop (also on failure)
#
# PostgreSQL's initdb and pg_ctl refuse to run as root: as root they run as the `postgres` user
# (which Debian's package makes).
set -euo pipefail
export PATH="$PATH:/usr/sbin:/sbin"  # ldconfig, runuser
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
pg_bin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1 || true)

as_postgres() {
  # (from /, which the postgres user may enter: the caller's directory may be private)
  if [ "$(id -u)" = 0 ]; then (cd / && runuser -u postgres -- "$@"); else "$@"; fi
}

install() {
  local need=()
  [ -n "$pg_bin" ] && [ -x "$pg_bin/initdb" ] || need+=(postgresql)
  command -v redis-server >/dev/null || need+=(redis-server)
  ldconfig -p | grep 'libpq\.so\.5 ' >/dev/null || need+=(libpq5)
  ldconfig -p | grep -E 'libhiredis\.so\.(0\.14|1\.)' >/dev/null || need+=(libhiredis0.14)
  [ ${#need[@]} -eq 0 ] && return 0
  echo "== installing ${need[*]} (for the distributed lock's server tests)" >&2
  local sudo=; [ "$(id -u)" = 0 ] || sudo=sudo
  if ! { $sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${need[@]}"; } >/dev/null 2>&1; then
    echo "!! cannot install ${need[*]} with apt: the PostgreSQL and Redis tests will be SKIPPED" >&2
    return 3
  fi
  pg_bin=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)
}

install_etcd() {
  command -v etcd >/dev/null && command -v etcdctl >/dev/null && return 0
  echo "== installing etcd-server etcd-client (for the distributed lock's etcd tests)" >&2
  local sudo=; [ "$(id -u)" = 0 ] || sudo=sudo
  if ! { $sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq etcd-server etcd-client; } >/dev/null 2>&1; then
    echo "!! cannot install etcd-server etcd-client with apt: the etcd tests will be SKIPPED" >&2
    return 3
  fi
}

free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

start_postgres() {
  local dir=$1 port; port=$(free_port)
  mkdir -p "$dir/postgres"
  echo secret > "$dir/postgres.password"
  touch "$dir/postgres.log"
  if [ "$(id -u)" = 0 ]; then chown -R postgres "$dir/postgres" "$dir/postgres.password" "$dir/postgres.log"; fi
  as_postgres "$pg_bin/initdb" -D "$dir/postgres" -U postgres --auth-local=trust --auth-host=scram-sha-256 \
    --pwfile="$dir/postgres.password" >"$dir/postgres.initdb.log" 2>&1
  echo "$port" > "$dir/postgres.port"
  pg_ctl_start "$dir"
  echo "postgresql://postgres:secret@127.0.0.1:$port/postgres" > "$dir/postgres.url"
}

pg_ctl_start() {
  local dir=$1
  as_postgres "$pg_bin/pg_ctl" -D "$dir/postgres" -l "$dir/postgres.log" -w -t 60 start \
    -o "-c listen_addresses=127.0.0.1 -c port=$(cat "$dir/postgres.port") -c unix_socket_directories='' -c fsync=off" >/dev/null
}

start_redis() {
  local dir=$1 port; port=$(free_port)
  mkdir -p "$dir/redis"
  echo "$port" > "$dir/redis.port"
  redis_start "$dir"
  echo "redis://:secret@127.0.0.1:$port" > "$dir/redis.url"
}

redis_start() {
  local dir=$1
  redis-server --bind 127.0.0.1 --port "$(cat "$dir/redis.port")" --requirepass secret --save '' --appendonly no \
    --dir "$dir/redis" --daemonize yes --pidfile "$dir/redis/redis.pid" --logfile "$dir/redis.log" >/dev/null
  for _ in $(seq 200); do
    redis-cli -p "$(cat "$dir/redis.port")" -a secret --no-auth-warning ping 2>/dev/null | grep -q PONG && return 0
    sleep 0.05
  done
  echo "redis-server did not start (see $dir/redis.log)" >&2; return 1
}

start_etcd() {
  local dir=$1
  mkdir -p "$dir/etcd"
  free_port > "$dir/etcd.port"
  free_port > "$dir/etcd.peer-port"
  etcd_start "$dir"
  local endpoint="--endpoints=127.0.0.1:$(cat "$dir/etcd.port")"
  { ETCDCTL_API=3 etcdctl "$endpoint" user add root:secret && ETCDCTL_API=3 etcdctl "$endpoint" auth enable; } \
    >>"$dir/etcd.log" 2>&1 || { echo "etcd: enabling auth failed (see $dir/etcd.log)" >&2; return 1; }
  echo "etcd://root:secret@127.0.0.1:$(cat "$dir/etcd.port")" > "$dir/etcd.url"
}

start_etcd_tls() {
  local dir=$1 tls=$1/tls
  command -v openssl >/dev/null || { echo "etcd TLS: openssl is missing" >&2; return 1; }
  mkdir -p "$dir/etcd" "$tls"
  free_port > "$dir/etcd.port"
  free_port > "$dir/etcd.peer-port"
  # A throwaway CA, and the server's and a client's certificates signed by it (the server's also for
  # client use: etcd's JSON gateway connects to its own gRPC port with it).
  { openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=libsync-test-ca \
      -keyout "$tls/ca-key.pem" -out "$tls/ca.pem" &&
    openssl req -newkey rsa:2048 -nodes -subj /CN=127.0.0.1 -keyout "$tls/server-key.pem" -out "$tls/server.csr" &&
    printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth,clientAuth\n' > "$tls/server.ext" &&
    openssl x509 -req -in "$tls/server.csr" -CA "$tls/ca.pem" -CAkey "$tls/ca-key.pem" -CAcreateserial -days 2 \
      -extfile "$tls/server.ext" -out "$tls/server.pem" &&
    openssl req -newkey rsa:2048 -nodes -subj /CN=libsync-client -keyout "$tls/client-key.pem" -out "$tls/client.csr" &&
    printf 'extendedKeyUsage=clientAuth\n' > "$tls/client.ext" &&
    openssl x509 -req -in "$tls/client.csr" -CA "$tls/ca.pem" -CAkey "$tls/ca-key.pem" -CAcreateserial -days 2 \
      -extfile "$tls/client.ext" -out "$tls/client.pem"; } >>"$dir/etcd.log" 2>&1 \
    || { echo "etcd TLS: openssl could not make the certificates (see $dir/etcd.log)" >&2; return 1; }
  etcd_start "$dir"
  echo "etcds://127.0.0.1:$(cat "$dir/etcd.port")" > "$dir/etcd.url"
}

etcd_start() {
  local dir=$1 port peer scheme=http tls=(); port=$(cat "$dir/etcd.port"); peer=$(cat "$dir/etcd.peer-port")
  if [ -f "$dir/tls/server.pem" ]; then  # start-etcd-tls's: TLS, client certificates required
    scheme=https
    tls=(--cert-file "$dir/tls/server.pem" --key-file "$dir/tls/server-key.pem" --trusted-ca-file "$dir/tls/ca.pem"
         --client-cert-auth)
  fi
  # (setsid: the server outlives this script, in a session of its own)
  setsid etcd --name libsync --data-dir "$dir/etcd/data" "${tls[@]}" \
    --listen-client-urls "$scheme://127.0.0.1:$port" --advertise-client-urls "$scheme://127.0.0.1:$port" \
    --listen-peer-urls "http://127.0.0.1:$peer" --initial-advertise-peer-urls "http://127.0.0.1:$peer" \
    --initial-cluster "libsync=http://127.0.0.1:$peer" >>"$dir/etcd.log" 2>&1 </dev/null &
  echo $! > "$dir/etcd/etcd.pid"
  local client=()
  [ "$scheme" = https ] && client=(--cacert "$dir/tls/ca.pem" --cert "$dir/tls/client.pem" --key "$dir/tls/client-key.pem")
  for _ in $(seq 400); do
    # (before its auth is on, and after: a restart)
    ETCDCTL_API=3 etcdctl --endpoints="127.0.0.1:$port" "${client[@]}" --command-timeout=1s endpoint health >/dev/null 2>&1 && return 0
    ETCDCTL_API=3 etcdctl --endpoints="127.0.0.1:$port" --command-timeout=1s --user root:secret endpoint health >/dev/null 2>&1 && return 0
    kill -0 "$(cat "$dir/etcd/etcd.pid")" 2>/dev/null || break
    sleep 0.05
  done
  echo "etcd did not start (see $dir/etcd.log)" >&2; return 1
}

# Every process of a server: the postmaster and its children, redis-server, or etcd.
processes() {
  local what=$1 dir=$2 pid
  if [ "$what" = postgres ]; then
    [ -f "$dir/postgres/postmaster.pid" ] || return 0
    pid=$(head -1 "$dir/postgres/postmaster.pid")
    echo "$pid" $(pgrep -P "$pid" || true)
  elif [ "$what" = etcd ]; then
    [ -f "$dir/etcd/etcd.pid" ] && cat "$dir/etcd/etcd.pid" || true
  else
    [ -f "$dir/redis/redis.pid" ] && cat "$dir/redis/redis.pid" || true
  fi
}

stop_one() {
  local what=$1 dir=$2 pids
  pids=$(processes "$what" "$dir")
  [ -n "$pids" ] && kill -CONT $pids 2>/dev/null || true
  if [ "$what" = etcd ]; then
    for pid in $pids; do kill -TERM "$pid" 2>/dev/null || true; while kill -0 "$pid" 2>/dev/null; do sleep 0.02; done; done
    rm -f "$dir/etcd/etcd.pid"
  elif [ "$what" = postgres ]; then
    [ -f "$dir/postgres/postmaster.pid" ] && as_postgres "$pg_bin/pg_ctl" -D "$dir/postgres" -m immediate -w stop >/dev/null 2>&1 || true
  else
    redis-cli -p "$(cat "$dir/redis.port" 2>/dev/null || echo 0)" -a secret --no-auth-warning shutdown nosave >/dev/null 2>&1 || true
    for pid in $pids; do while kill -0 "$pid" 2>/dev/null; do sleep 0.02; done; done
    rm -f "$dir/redis/redis.pid"
  fi
}

command=${1:-}
case "$command" in
  install) status=0; install || status=$?; install_etcd || status=$?; exit $status ;;
  start)
    dir=$2; install || exit 3
    mkdir -p "$dir"; chmod 755 "$dir"; dir=$(cd "$dir" && pwd)  # absolute: as_postgres runs from /
    start_postgres "$dir"; start_redis "$dir" ;;
  start-redis)
    dir=$2; install || exit 3
    mkdir -p "$dir"; dir=$(cd "$dir" && pwd)
    start_redis "$dir" ;;
  start-postgres)
    dir=$2; install || exit 3
    mkdir -p "$dir"; chmod 755 "$dir"; dir=$(cd "$dir" && pwd)
    start_postgres "$dir" ;;
  start-etcd)
    dir=$2; install_etcd || exit 3
    mkdir -p "$dir"; dir=$(cd "$dir" && pwd)
    start_etcd "$dir" ;;
  start-etcd-tls)
    dir=$2; install_etcd || exit 3
    mkdir -p "$dir"; dir=$(cd "$dir" && pwd)
    start_etcd_tls "$dir" ;;
  stop) [ -d "$2" ] && { dir=$(cd "$2" && pwd); stop_one postgres "$dir"; stop_one redis "$dir"; stop_one etcd "$dir"; } ;;
  pause|resume|restart|kill)
    what=$2 dir=$(cd "$3" && pwd)
    case "$command" in
      pause) kill -STOP $(processes "$what" "$dir") ;;
      resume) kill -CONT $(processes "$what" "$dir") ;;
      kill) stop_one "$what" "$dir" ;;
      restart)
        stop_one "$what" "$dir"
        case "$what" in postgres) pg_ctl_start "$dir" ;; etcd) etcd_start "$dir" ;; *) redis_start "$dir" ;; esac ;;
    esac ;;
  run)
    shift; [ "${1:-}" = -- ] && shift
    dir=$(mktemp -d /tmp/libsync-servers.XXXXXX)
    trap '"$here/servers.sh" stop "$dir"; rm -rf "$dir"' EXIT
    if "$here/servers.sh" start "$dir"; then export LIBSYNC_TEST_SERVERS=$dir; fi
    "$@" ;;
  *) sed -n '2,29p' "$0" >&2; exit 2 ;;
esac
