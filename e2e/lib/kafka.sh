# shellcheck shell=bash
# Apache Kafka 4.1.1, single-node KRaft, from Maven Central jars (e2e/kafka/pom.xml).

KAFKA_VERSION=4.1.1
KAFKA_HOME="$TRACEHOUSE_CACHE/kafka-$KAFKA_VERSION"
KAFKA_DATA="$TRACEHOUSE_STATE/kafka"
# The SCRAM-SHA-512 user of the SASL_SSL listener; its password is generated once per state
# directory (like ClickHouse's) and reaches the broker through ConfigCommand on the plaintext
# listener, from a private file rather than the command line.
KAFKA_SCRAM_USER_NAME="${TRACEHOUSE_KAFKA_SCRAM_USER:-tracehouse}"
# OAUTHBEARER on the same SASL_SSL listener, validated as a production broker does it
# (OAuthBearerValidatorCallbackHandler: RS256 signature, issuer, audience, expiry) against the
# JWKS of a key generated once per state directory; the tests' token endpoint, the stand-in
# e2e/oidc/oidc.py, signs with that key (KAFKA_OAUTH_SIGNING_KEY). Issuer and audience are the
# stand-in's.
KAFKA_OAUTH_DIR="$KAFKA_DATA/oauth"
KAFKA_OAUTH_JWKS_URL="file://$KAFKA_OAUTH_DIR/jwks.json"
source "$E2E_DIR/lib/tls.sh"

kafka_install() {
  [[ -f "$KAFKA_HOME/.installed" ]] && return 0
  command -v java >/dev/null || apt_ensure openjdk-17-jre-headless
  command -v mvn >/dev/null || apt_ensure maven
  say "kafka: fetching $KAFKA_VERSION jars from Maven Central into $KAFKA_HOME/lib"
  mkdir -p "$KAFKA_HOME/lib"
  (cd "$E2E_DIR/kafka" && mvn -q -B dependency:copy-dependencies -DoutputDirectory="$KAFKA_HOME/lib") \
    >"$LOG_DIR/kafka-install.log" 2>&1 || die "kafka: jar download failed; log: $LOG_DIR/kafka-install.log"
  touch "$KAFKA_HOME/.installed"
}

# The signing key and the JWKS the broker reads, made once per state directory.
kafka_oauth_keys() {
  [[ -s "$KAFKA_OAUTH_DIR/jwks.json" ]] && return 0
  mkdir -p "$KAFKA_OAUTH_DIR"
  (umask 077; openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 \
    -out "$KAFKA_OAUTH_DIR/signing.key" >>"$LOG_DIR/tls.log" 2>&1) \
    || die "kafka: generating the OAUTHBEARER signing key failed; log: $LOG_DIR/tls.log"
  python3 "$E2E_DIR/oidc/oidc.py" jwks --key "$KAFKA_OAUTH_DIR/signing.key" >"$KAFKA_OAUTH_DIR/jwks.json.new" \
    && mv "$KAFKA_OAUTH_DIR/jwks.json.new" "$KAFKA_OAUTH_DIR/jwks.json" \
    || die "kafka: writing the OAUTHBEARER JWKS failed (e2e/oidc/oidc.py jwks)"
}

kafka_java() {
  java -Xms256m -Xmx1g -Dlog4j.configuration="file:$KAFKA_DATA/log4j.properties" \
    -cp "$KAFKA_HOME/lib/*" "$@"
}

kafka_configure() {
  mkdir -p "$KAFKA_DATA/logs"
  cat >"$KAFKA_DATA/server.properties" <<PROPS
process.roles=broker,controller
node.id=1
controller.quorum.bootstrap.servers=127.0.0.1:$KAFKA_CONTROLLER_PORT
listeners=PLAINTEXT://127.0.0.1:$KAFKA_PORT,CONTROLLER://127.0.0.1:$KAFKA_CONTROLLER_PORT,SASL_SSL://127.0.0.1:$KAFKA_SASL_SSL_PORT,MTLS://127.0.0.1:$KAFKA_MTLS_PORT
advertised.listeners=PLAINTEXT://127.0.0.1:$KAFKA_PORT,SASL_SSL://127.0.0.1:$KAFKA_SASL_SSL_PORT,MTLS://127.0.0.1:$KAFKA_MTLS_PORT
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT,SASL_SSL:SASL_SSL,MTLS:SSL
# Secured listeners (certificates from e2e/lib/tls.sh): SCRAM-SHA-512 and OAUTHBEARER over
# TLS, and mutual TLS.
ssl.keystore.type=PEM
ssl.keystore.location=$TLS_DIR/server.pem
ssl.truststore.type=PEM
ssl.truststore.location=$TLS_DIR/ca.crt
sasl.enabled.mechanisms=SCRAM-SHA-512,OAUTHBEARER
listener.name.sasl_ssl.sasl.enabled.mechanisms=SCRAM-SHA-512,OAUTHBEARER
listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
listener.name.sasl_ssl.oauthbearer.sasl.jaas.config=org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required;
listener.name.sasl_ssl.oauthbearer.sasl.server.callback.handler.class=org.apache.kafka.common.security.oauthbearer.OAuthBearerValidatorCallbackHandler
# The validator named: Kafka 4.1.1's OAuthBearerValidatorCallbackHandler makes its default,
# DefaultJwtValidator, without a key resolver, which then delegates to ClientJwtValidator and
# checks no signature whatever the JWKS URL (a token signed with any key passed;
# operator/tests/kafka_oauth.rs proves this one refuses it). Unprefixed: the handler reads the
# class with no listener or mechanism prefix.
sasl.oauthbearer.jwt.validator.class=org.apache.kafka.common.security.oauthbearer.BrokerJwtValidator
sasl.oauthbearer.jwks.endpoint.url=$KAFKA_OAUTH_JWKS_URL
sasl.oauthbearer.expected.issuer=https://oidc.tracehouse.local
sasl.oauthbearer.expected.audience=kafka
listener.name.mtls.ssl.client.auth=required
log.dirs=$KAFKA_DATA/logs
num.partitions=8
offsets.topic.replication.factor=1
offsets.topic.num.partitions=8
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
group.initial.rebalance.delay.ms=0
auto.create.topics.enable=true
message.max.bytes=16777216
log.retention.hours=24
PROPS
  cat >"$KAFKA_DATA/log4j.properties" <<'PROPS'
log4j.rootLogger=WARN, stdout
log4j.appender.stdout=org.apache.log4j.ConsoleAppender
log4j.appender.stdout.layout=org.apache.log4j.PatternLayout
log4j.appender.stdout.layout.ConversionPattern=[%d] %p %m (%c)%n
log4j.logger.kafka.server.KafkaRaftServer=INFO
log4j.logger.kafka.server.BrokerServer=INFO
PROPS
  if [[ ! -f "$KAFKA_DATA/logs/meta.properties" ]]; then
    local id; id="$(kafka_java kafka.tools.StorageTool random-uuid 2>/dev/null | tail -n 1)"
    kafka_java kafka.tools.StorageTool format -t "$id" -c "$KAFKA_DATA/server.properties" --standalone \
      >>"$LOG_DIR/kafka.log" 2>&1 || die "kafka: storage format failed; log: $LOG_DIR/kafka.log"
  fi
}

kafka_ready() {
  kafka_java org.apache.kafka.tools.TopicCommand --bootstrap-server "127.0.0.1:$KAFKA_PORT" --list \
    >/dev/null 2>&1
}

# The SCRAM user's password, generated once per state directory.
kafka_scram_password() {
  local f="$KAFKA_DATA/scram-password"
  if [[ ! -s "$f" ]]; then
    mkdir -p "$KAFKA_DATA"
    (umask 077; head -c 18 /dev/urandom | base64 | tr -dc 'A-Za-z0-9' >"$f")
  fi
  cat "$f"
}

# Create (or reset) the SCRAM-SHA-512 user through the plaintext listener. The password goes
# through a properties file read by the tool, not the command line (ps would show it).
kafka_scram_user() {
  local f="$KAFKA_DATA/scram-user.properties"
  (umask 077; printf 'SCRAM-SHA-512=iterations=4096,password=%s\n' "$(kafka_scram_password)" >"$f")
  # The tool's errors can echo the password: they are not logged, only the verdict is.
  if ! kafka_java kafka.admin.ConfigCommand --bootstrap-server "127.0.0.1:$KAFKA_PORT" --alter \
    --entity-type users --entity-name "$KAFKA_SCRAM_USER_NAME" --add-config-file "$f" >/dev/null 2>&1; then
    rm -f "$f"
    die "kafka: creating the SCRAM user $KAFKA_SCRAM_USER_NAME failed (kafka.admin.ConfigCommand --alter --entity-type users)"
  fi
  rm -f "$f"
}

kafka_up() {
  kafka_install
  tls_ensure
  if pid_alive kafka; then say "kafka already running"; return 0; fi
  local p; for p in "$KAFKA_SASL_SSL_PORT" "$KAFKA_MTLS_PORT"; do
    port_taken "$p" && die "kafka: port $p on 127.0.0.1 is already taken by another process"
  done
  kafka_oauth_keys
  kafka_configure
  # Kafka 4 reads a JWKS (or token) URL only when this property lists it.
  start_bg kafka "$KAFKA_PORT" java -Xms256m -Xmx1g -XX:+UseG1GC \
    -Dlog4j.configuration="file:$KAFKA_DATA/log4j.properties" \
    -Dorg.apache.kafka.sasl.oauthbearer.allowed.urls="$KAFKA_OAUTH_JWKS_URL" \
    -cp "$KAFKA_HOME/lib/*" kafka.Kafka "$KAFKA_DATA/server.properties"
  wait_until kafka 120 port_taken "$KAFKA_PORT"
  wait_until kafka 120 kafka_ready
  kafka_scram_user
}

kafka_down() { stop_bg kafka 30; }

kafka_status() {
  if pid_alive kafka; then echo "kafka       running  pid $(cat "$PID_DIR/kafka.pid")  127.0.0.1:$KAFKA_PORT (SASL_SSL :$KAFKA_SASL_SSL_PORT, mTLS :$KAFKA_MTLS_PORT)  log $LOG_DIR/kafka.log"
  else echo "kafka       stopped"; fi
}

kafka_env() {
  echo "export KAFKA_BROKERS=127.0.0.1:$KAFKA_PORT"
  echo "export KAFKA_SASL_SSL_BROKERS=127.0.0.1:$KAFKA_SASL_SSL_PORT"
  echo "export KAFKA_SCRAM_USER=$KAFKA_SCRAM_USER_NAME"
  echo "export KAFKA_SCRAM_PASSWORD=$(kafka_scram_password)"
  echo "export KAFKA_MTLS_BROKERS=127.0.0.1:$KAFKA_MTLS_PORT"
  # Only once the running broker takes OAUTHBEARER (a broker started before it was added needs
  # `e2e/stack restart kafka`): the tests that need it then say what is missing.
  if [[ -s "$KAFKA_OAUTH_DIR/signing.key" ]] && grep -q '^sasl.enabled.mechanisms=.*OAUTHBEARER' "$KAFKA_DATA/server.properties" 2>/dev/null; then
    echo "export KAFKA_OAUTH_SIGNING_KEY=$KAFKA_OAUTH_DIR/signing.key"
  fi
}

# kafka_topic NAME PARTITIONS: create the topic if it does not exist.
kafka_topic() {
  kafka_java org.apache.kafka.tools.TopicCommand --bootstrap-server "127.0.0.1:$KAFKA_PORT" \
    --create --if-not-exists --topic "$1" --partitions "$2" --replication-factor 1 >/dev/null
}

# kafka2: a second, independent Kafka cluster beside the first — its own KRaft quorum (its
# own cluster id), ports and state — so tests can carry a topic of the same name from two
# clusters into one table (issue 41). The same scripts as `kafka`, run with their own state
# directory and ports; the tests find it through KAFKA2_BROKERS.
KAFKA2_PORT="${TRACEHOUSE_KAFKA2_PORT:-19192}"
kafka2_run() {
  env TRACEHOUSE_STATE="$TRACEHOUSE_STATE/kafka2" TRACEHOUSE_KAFKA_PORT="$KAFKA2_PORT" \
    TRACEHOUSE_KAFKA_CONTROLLER_PORT="$((KAFKA2_PORT + 1))" \
    TRACEHOUSE_KAFKA_SASL_SSL_PORT="$((KAFKA2_PORT + 2))" \
    TRACEHOUSE_KAFKA_MTLS_PORT="$((KAFKA2_PORT + 3))" "$E2E_DIR/stack" "$@"
}
kafka2_up() { kafka2_run up kafka >/dev/null; }
kafka2_down() { kafka2_run down kafka; }
kafka2_status() { kafka2_run status kafka | sed 's/^kafka /kafka2/'; }
kafka2_env() { echo "export KAFKA2_BROKERS=127.0.0.1:$KAFKA2_PORT"; }
