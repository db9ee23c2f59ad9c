# shellcheck shell=bash
# The stack's own certificate authority and the certificates its secured listeners present
# (openssl CLI, installed by e2e/setup). Generated once per state directory and reused:
#   ca.crt/ca.key           the CA (TRACEHOUSE_CA_FILE)
#   server.crt/server.key   ClickHouse HTTPS, Kafka's SSL listeners and the OIDC stand-in
#                           (127.0.0.1, localhost; TRACEHOUSE_SERVER_CERT/_KEY)
#   client.crt/client.key   a client certificate for mutual TLS (TRACEHOUSE_CLIENT_CERT/_KEY)
#   other-ca.crt            an unrelated CA, for "unknown CA" tests
# Keys are PKCS#8 PEM without a passphrase (Kafka's PEM key store and rustls read them).

TLS_DIR="$TRACEHOUSE_STATE/tls"

# tls_ensure: create what is missing.
tls_ensure() {
  [[ -s "$TLS_DIR/client.key" && -s "$TLS_DIR/other-ca.crt" ]] && return 0
  command -v openssl >/dev/null || apt_ensure openssl
  mkdir -p "$TLS_DIR"
  (
    umask 077
    cd "$TLS_DIR"
    local days=3650
    openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.crt -days "$days" \
      -subj "/CN=tracehouse local stack CA" \
      -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign"
    openssl req -x509 -newkey rsa:2048 -nodes -keyout other-ca.key -out other-ca.crt -days "$days" \
      -subj "/CN=unrelated CA" \
      -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign"
    # leaf NAME CN EXTENDED_KEY_USAGE [SAN]
    leaf() {
      openssl req -newkey rsa:2048 -nodes -keyout "$1.key" -out "$1.csr" -subj "/CN=$2"
      {
        echo "basicConstraints=CA:FALSE"
        echo "keyUsage=critical,digitalSignature,keyEncipherment"
        echo "extendedKeyUsage=$3"
        [[ -z "${4:-}" ]] || echo "subjectAltName=$4"
      } >"$1.ext"
      openssl x509 -req -in "$1.csr" -CA ca.crt -CAkey ca.key -CAcreateserial -days "$days" \
        -extfile "$1.ext" -out "$1.crt"
      rm -f "$1.csr" "$1.ext"
    }
    leaf server "127.0.0.1" serverAuth "IP:127.0.0.1,DNS:localhost"
    leaf client "tracehouse-client" clientAuth
    # Kafka's PEM key store: the private key and its chain in one file.
    cat server.key server.crt >server.pem
    chmod 644 ca.crt other-ca.crt server.crt client.crt
  ) >"$LOG_DIR/tls.log" 2>&1 || die "tls: certificate generation failed; log: $LOG_DIR/tls.log"
  say "tls: CA and certificates in $TLS_DIR"
}

tls_env() {
  echo "export TRACEHOUSE_CA_FILE=$TLS_DIR/ca.crt"
  echo "export TRACEHOUSE_CLIENT_CERT=$TLS_DIR/client.crt"
  echo "export TRACEHOUSE_CLIENT_KEY=$TLS_DIR/client.key"
  echo "export TRACEHOUSE_OTHER_CA_FILE=$TLS_DIR/other-ca.crt"
  # The listeners' own certificate, for a stand-in served over HTTPS (e2e/oidc).
  echo "export TRACEHOUSE_SERVER_CERT=$TLS_DIR/server.crt"
  echo "export TRACEHOUSE_SERVER_KEY=$TLS_DIR/server.key"
}
