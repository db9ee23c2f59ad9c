# shellcheck shell=bash
# The real ClickHouse engine (chdb) behind e2e/chserver, our ClickHouse HTTP interface front.

CHDB_VERSION=26.9.0
VENV="$TRACEHOUSE_CACHE/venv-chdb-$CHDB_VERSION"
CLICKHOUSE_DATA="$TRACEHOUSE_STATE/clickhouse"
CLICKHOUSE_USER_NAME="${TRACEHOUSE_CLICKHOUSE_USER:-tracehouse}"
source "$E2E_DIR/lib/tls.sh"

clickhouse_install() {
  [[ -f "$VENV/.installed" ]] && return 0
  command -v python3 >/dev/null || apt_ensure python3 python3-venv
  say "clickhouse: installing chdb-core $CHDB_VERSION into $VENV"
  python3 -m venv "$VENV" >"$LOG_DIR/clickhouse-install.log" 2>&1 \
    || die "clickhouse: python venv failed; log: $LOG_DIR/clickhouse-install.log"
  "$VENV/bin/pip" install -q -r "$E2E_DIR/chserver/requirements.txt" >>"$LOG_DIR/clickhouse-install.log" 2>&1 \
    || die "clickhouse: pip install failed; log: $LOG_DIR/clickhouse-install.log"
  touch "$VENV/.installed"
}

# The password is generated once per state directory and kept with the data.
clickhouse_password() {
  local f="$CLICKHOUSE_DATA/password"
  if [[ ! -s "$f" ]]; then
    mkdir -p "$CLICKHOUSE_DATA"
    (umask 077; head -c 18 /dev/urandom | base64 | tr -dc 'A-Za-z0-9' >"$f")
  fi
  cat "$f"
}

clickhouse_tls_ping() {
  [[ "$(curl -fsS --cacert "$TLS_DIR/ca.crt" "https://127.0.0.1:$CLICKHOUSE_TLS_PORT/ping" 2>/dev/null)" == "Ok." ]]
}

clickhouse_ping() { [[ "$(curl -fsS "http://127.0.0.1:$CLICKHOUSE_PORT/ping" 2>/dev/null)" == "Ok." ]]; }

clickhouse_up() {
  clickhouse_install
  if pid_alive clickhouse; then say "clickhouse already running"; return 0; fi
  local pw; pw="$(clickhouse_password)"
  mkdir -p "$CLICKHOUSE_DATA/db" "$CLICKHOUSE_DATA/disks"
  # The password reaches the server through a file, never the command line (ps would show it).
  printf '%s:%s\n' "$CLICKHOUSE_USER_NAME" "$pw" >"$CLICKHOUSE_DATA/users"
  chmod 600 "$CLICKHOUSE_DATA/users"
  # HTTPS (and HTTPS with client certificates) beside plain HTTP, certificates from e2e/lib/tls.sh.
  tls_ensure
  port_taken "$CLICKHOUSE_TLS_PORT" && die "clickhouse: port $CLICKHOUSE_TLS_PORT is already taken"
  start_bg clickhouse "$CLICKHOUSE_PORT" "$VENV/bin/python" -u "$E2E_DIR/chserver/chserver.py" \
    --listen "127.0.0.1:$CLICKHOUSE_PORT" --data "$CLICKHOUSE_DATA/db" --users-file "$CLICKHOUSE_DATA/users" \
    --custom-disks-dir "$CLICKHOUSE_DATA/disks" \
    --https-listen "127.0.0.1:$CLICKHOUSE_TLS_PORT" --mtls-listen "127.0.0.1:$CLICKHOUSE_MTLS_PORT" \
    --tls-cert "$TLS_DIR/server.crt" --tls-key "$TLS_DIR/server.key" --tls-ca "$TLS_DIR/ca.crt"
  wait_until clickhouse 120 clickhouse_ping
  wait_until clickhouse 30 clickhouse_tls_ping
}

clickhouse_down() { stop_bg clickhouse 30; }

clickhouse_status() {
  if pid_alive clickhouse; then echo "clickhouse  running  pid $(cat "$PID_DIR/clickhouse.pid")  http://127.0.0.1:$CLICKHOUSE_PORT https://127.0.0.1:$CLICKHOUSE_TLS_PORT (mTLS :$CLICKHOUSE_MTLS_PORT)  log $LOG_DIR/clickhouse.log"
  else echo "clickhouse  stopped"; fi
}

clickhouse_env() {
  echo "export CLICKHOUSE_URL=http://127.0.0.1:$CLICKHOUSE_PORT"
  echo "export CLICKHOUSE_USER=$CLICKHOUSE_USER_NAME"
  echo "export CLICKHOUSE_PASSWORD=$(clickhouse_password)"
  echo "export CLICKHOUSE_TLS_URL=https://127.0.0.1:$CLICKHOUSE_TLS_PORT"
  echo "export CLICKHOUSE_MTLS_URL=https://127.0.0.1:$CLICKHOUSE_MTLS_PORT"
}

# clickhouse_query SQL: run a query as the stack user, print the result.
clickhouse_query() {
  curl -fsS --data-binary "$1" -H "X-ClickHouse-User: $CLICKHOUSE_USER_NAME" \
    -H "X-ClickHouse-Key: $(clickhouse_password)" "http://127.0.0.1:$CLICKHOUSE_PORT/"
}
