# shellcheck shell=bash
# Shared helpers for e2e/stack: paths, logging, process supervision.
# Sourced, never executed. Every component script (lib/*.sh) builds on these.

E2E_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
REPO_DIR="$(cd "$E2E_DIR/.." && pwd)"
# Downloads and builds, reused across checkouts and runs (never inside the work tree).
TRACEHOUSE_CACHE="${TRACEHOUSE_CACHE:-$HOME/.cache/tracehouse}"
# Data, logs, pids and generated credentials of the running stack.
TRACEHOUSE_STATE="${TRACEHOUSE_STATE:-$TRACEHOUSE_CACHE/state}"
LOG_DIR="$TRACEHOUSE_STATE/logs"
PID_DIR="$TRACEHOUSE_STATE/pids"
mkdir -p "$TRACEHOUSE_CACHE" "$LOG_DIR" "$PID_DIR"

# Fixed loopback ports; override with the environment when they clash.
KAFKA_PORT="${TRACEHOUSE_KAFKA_PORT:-19092}"
KAFKA_CONTROLLER_PORT="${TRACEHOUSE_KAFKA_CONTROLLER_PORT:-19093}"
CLICKHOUSE_PORT="${TRACEHOUSE_CLICKHOUSE_PORT:-18123}"
# The secured listeners beside them (e2e/lib/tls.sh makes their certificates).
CLICKHOUSE_TLS_PORT="${TRACEHOUSE_CLICKHOUSE_TLS_PORT:-18443}"
CLICKHOUSE_MTLS_PORT="${TRACEHOUSE_CLICKHOUSE_MTLS_PORT:-18444}"
KAFKA_SASL_SSL_PORT="${TRACEHOUSE_KAFKA_SASL_SSL_PORT:-19094}"
KAFKA_MTLS_PORT="${TRACEHOUSE_KAFKA_MTLS_PORT:-19095}"

say() { printf '[stack] %s\n' "$*" >&2; }
die() { printf '[stack] error: %s\n' "$*" >&2; exit 1; }

# pid_alive NAME: true when the recorded process of NAME is running.
pid_alive() {
  local f="$PID_DIR/$1.pid"
  [[ -f "$f" ]] && kill -0 "$(cat "$f")" 2>/dev/null
}

# port_taken PORT: true when something listens on 127.0.0.1:PORT.
port_taken() {
  (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

# start_bg NAME PORT CMD...: start CMD detached in its own session, log to $LOG_DIR/NAME.log.
# Refuses when PORT is already taken by a process that is not ours.
start_bg() {
  local name="$1" port="$2"; shift 2
  if pid_alive "$name"; then say "$name already running (pid $(cat "$PID_DIR/$name.pid"))"; return 0; fi
  if [[ -n "$port" ]] && port_taken "$port"; then
    die "$name: port $port on 127.0.0.1 is already taken by another process (see: ss -ltnp 'sport = :$port'); log: $LOG_DIR/$name.log"
  fi
  local log="$LOG_DIR/$name.log"
  printf '\n==== %s start %s ====\n' "$name" "$(date -Is)" >>"$log"
  setsid "$@" >>"$log" 2>&1 < /dev/null &
  echo $! >"$PID_DIR/$name.pid"
}

# wait_until NAME TIMEOUT_SECONDS CHECK_CMD...: poll CHECK_CMD until it succeeds.
# Fails naming the component and its log when the process dies or the deadline passes.
wait_until() {
  local name="$1" timeout="$2"; shift 2
  local start=$SECONDS
  until "$@" >/dev/null 2>&1; do
    if ! pid_alive "$name"; then
      tail -n 20 "$LOG_DIR/$name.log" >&2 || true
      die "$name failed to start; log: $LOG_DIR/$name.log"
    fi
    if (( SECONDS - start > timeout )); then
      tail -n 20 "$LOG_DIR/$name.log" >&2 || true
      die "$name did not answer within ${timeout}s; log: $LOG_DIR/$name.log"
    fi
    sleep 0.5
  done
  say "$name ready in $((SECONDS - start))s"
}

# stop_bg NAME [GRACE_SECONDS]: SIGTERM the process group, SIGKILL after the grace period.
stop_bg() {
  local name="$1" grace="${2:-20}" f="$PID_DIR/$1.pid"
  [[ -f "$f" ]] || return 0
  local pid; pid="$(cat "$f")"
  if kill -0 "$pid" 2>/dev/null; then
    kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null || true
    local i
    for ((i = 0; i < grace * 10; i++)); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.1
    done
    if kill -0 "$pid" 2>/dev/null; then
      say "$name did not stop in ${grace}s; killing"
      kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid" 2>/dev/null || true
    fi
  fi
  # Anything left in the process group (children that ignored TERM) goes too.
  kill -KILL -- "-$pid" 2>/dev/null || true
  rm -f "$f"
  say "$name stopped"
}

# apt_ensure PKG...: install Debian packages that are missing (runs apt-get update once).
apt_ensure() {
  local missing=() p
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
  done
  ((${#missing[@]})) || return 0
  say "installing Debian packages: ${missing[*]}"
  local sudo=""; [[ $(id -u) -eq 0 ]] || sudo="sudo"
  $sudo apt-get update -qq >/dev/null
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}
