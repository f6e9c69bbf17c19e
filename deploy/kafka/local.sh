#!/usr/bin/env bash
# Local Apache Kafka 4.x (KRaft, combined broker+controller) for development and
# the integration tests.  No docker, no Kafka tarball: the broker's classpath is
# resolved from Maven Central through deploy/kafka/pom.xml
# (org.apache.kafka:kafka_2.13:4.4.0, the newest 4.x on Maven Central when this
# was written, plus the SLF4J -> Log4j2 binding).
#
# Usage: deploy/kafka/local.sh start|stop|status|restart|logs [N]|pids|kill NODE
#
#   start      start every node that is not running, then wait for a round trip
#   stop       stop every node of this run dir (SIGTERM, SIGKILL after 60 s)
#   status     one line per node; exit 0 if all nodes run
#   pids       "NODE PID" per running node (node ids are 1..N)
#   kill NODE  kill -9 one node, as a crash would (fault tests); `start` brings it back
#   logs [N]   last N lines of node 1's server.log (GROUNDSTREAM_KAFKA_NODE=i for another)
#
# Modes (both chosen at the first start of a run dir and recorded in
# RUN_DIR/kafka.mode; a later start must ask for the same mode -- it refuses
# another, because the storage is formatted for the first one; use another
# GROUNDSTREAM_KAFKA_DIR.  stop/status/pids/kill read the mode from the run dir):
#
#   GROUNDSTREAM_KAFKA_NODES=3   three KRaft nodes, each broker+controller, static
#       voters 1@c1,2@c2,3@c3; client ports KAFKA_PORT+0..2, controller ports
#       KAFKA_CONTROLLER_PORT+0..2 (default KAFKA_PORT+3..5); replication factor 3,
#       min.insync.replicas 2 (offsets and transaction logs likewise).  Per node:
#       RUN_DIR/node-<i>/{server.properties,data,logs,kafka.pid}.  Heap 384m each.
#   GROUNDSTREAM_KAFKA_SECURE=1  the cluster users run: a SASL_SSL client listener
#       (SCRAM-SHA-512, SCRAM-SHA-256, PLAIN), an SSL listener that requires a
#       client certificate on KAFKA_SSL_PORT(+i) (default KAFKA_CONTROLLER_PORT+N;
#       the certificate's CN is the principal), the controller listener on
#       SASL_PLAINTEXT/PLAIN (loopback), inter-broker traffic on SASL_SSL as the
#       super user `broker`, StandardAuthorizer with allow.everyone.if.no.acl.found
#       =false and super.users=User:admin;User:broker.  Made on the first start:
#         RUN_DIR/tls/ca.pem                CA certificate clients trust
#         RUN_DIR/tls/client.pem, client.key  a CA-signed client certificate (CN=client)
#         RUN_DIR/users/<name>.password     random password of each user
#       Users (SCRAM credentials created at format time, same passwords for PLAIN):
#       admin (super user), broker (super user, the brokers' own), and
#       GROUNDSTREAM_KAFKA_USERS (default: geometry switch consistency judge rules
#       terminal recorder review dashboard attach client topics).  They get no ACLs: grant them.
#
# Every start writes RUN_DIR/client.env (KEY=VALUE lines, `set -a; . client.env`):
#   GROUNDSTREAM_BOOTSTRAP_SERVERS, GROUNDSTREAM_KAFKA_SECURITY_PROTOCOL, and in
#   secure mode GROUNDSTREAM_KAFKA_SASL_MECHANISM=SCRAM-SHA-512,
#   GROUNDSTREAM_KAFKA_SASL_USERNAME=admin, GROUNDSTREAM_KAFKA_SASL_PASSWORD_FILE,
#   GROUNDSTREAM_KAFKA_SSL_CA_FILE; and RUN_DIR/client.properties, the same for
#   Java clients and the Kafka CLI tools (--command-config).
#
# Environment:
#   KAFKA_PORT                  client listener port (node 1)   (default 9092)
#   KAFKA_CONTROLLER_PORT       KRaft controller port (node 1)  (default 9093; KAFKA_PORT+N if N>1)
#   KAFKA_SSL_PORT              mTLS listener port (node 1, secure mode) (default KAFKA_CONTROLLER_PORT+N)
#   GROUNDSTREAM_KAFKA_DIR      run dir: config, data, logs, pid (default deploy/kafka/run)
#   GROUNDSTREAM_KAFKA_CACHE    classpath cache dir              (default deploy/kafka/.cache)
#   GROUNDSTREAM_KAFKA_VERSION  override kafka_2.13 version from pom.xml (4.x)
#   GROUNDSTREAM_KAFKA_HEAP     heap per node                    (default 512m; 384m if N>1)
#   GROUNDSTREAM_KAFKA_TIMEOUT  seconds to wait for readiness    (default 90; 150 if N>1)
#   GROUNDSTREAM_PYTHON         python with aiokafka for the readiness round trip
#                               (default ~/.cache/groundstream/venv/bin/python, then
#                               python3; if neither imports aiokafka, a small Java
#                               program using kafka-clients does the round trip)
#
# Listeners are bound to 127.0.0.1 only.  "Ready" means a real round trip
# worked: topic __gs_ready (replication factor N) created, one record produced
# with acks=all and consumed back -- in secure mode as `admin` over SASL_SSL.
set -euo pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
POM="$SCRIPT_DIR/pom.xml"

abspath() { # resolve relative to the caller's cwd, without requiring existence
  case "$1" in
    /*) printf '%s\n' "$1" ;;
    *) printf '%s/%s\n' "$PWD" "$1" ;;
  esac
}

log() { printf '[kafka-local] %s\n' "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }
is_uint() { [[ "$1" =~ ^[0-9]+$ ]]; }

RUN_DIR="$(abspath "${GROUNDSTREAM_KAFKA_DIR:-$SCRIPT_DIR/run}")"
CACHE_DIR="$(abspath "${GROUNDSTREAM_KAFKA_CACHE:-$SCRIPT_DIR/.cache}")"
KAFKA_VERSION_OVERRIDE="${GROUNDSTREAM_KAFKA_VERSION:-}"
HOST=127.0.0.1
MODE_FILE="$RUN_DIR/kafka.mode"
CLIENT_ENV="$RUN_DIR/client.env"
CLIENT_PROPS="$RUN_DIR/client.properties"
TLS_DIR="$RUN_DIR/tls"
USERS_DIR="$RUN_DIR/users"
DEFAULT_USERS="geometry switch consistency judge rules terminal recorder review dashboard attach client topics"

# The mode: what the run dir recorded at its first start wins for stop/status/
# pids/kill (so they need no environment); start compares it with the request.
mode_get() { # mode_get KEY -> value recorded in kafka.mode, or nothing
  [[ -f "$MODE_FILE" ]] && sed -n "s/^$1=//p" "$MODE_FILE" | tail -n 1
  return 0
}
if [[ "${1:-}" == start || "${1:-}" == restart ]]; then
  # What is asked for, never what was recorded: a plain `start` on a run dir
  # set up secure must fail loudly, not hand plaintext callers a SASL_SSL port.
  NODES="${GROUNDSTREAM_KAFKA_NODES:-1}"
  SECURE="${GROUNDSTREAM_KAFKA_SECURE:-0}"
else # stop, status, ...: the nodes this run dir has, whatever the environment says
  NODES="$(mode_get nodes)"
  NODES="${NODES:-${GROUNDSTREAM_KAFKA_NODES:-1}}"
  SECURE="$(mode_get secure)"
  SECURE="${SECURE:-${GROUNDSTREAM_KAFKA_SECURE:-0}}"
fi
NODES="${NODES:-1}"
case "${SECURE:-0}" in
  1 | true | yes | on) SECURE=1 ;;
  0 | false | no | off | "") SECURE=0 ;;
  *) die "GROUNDSTREAM_KAFKA_SECURE must be 0 or 1, got '$SECURE'" ;;
esac
USERS="${GROUNDSTREAM_KAFKA_USERS-$DEFAULT_USERS}"
is_uint "$NODES" && ((NODES >= 1 && NODES <= 9)) || die "GROUNDSTREAM_KAFKA_NODES must be 1..9, got '$NODES'"

PORT="${KAFKA_PORT:-9092}"
is_uint "$PORT" || die "KAFKA_PORT must be a number, got '$PORT'"
if ((NODES == 1)); then CPORT_DEFAULT=9093; else CPORT_DEFAULT=$((PORT + NODES)); fi
CPORT="${KAFKA_CONTROLLER_PORT:-$CPORT_DEFAULT}"
is_uint "$CPORT" || die "KAFKA_CONTROLLER_PORT must be a number, got '$CPORT'"
SPORT="${KAFKA_SSL_PORT:-$((CPORT + NODES))}"
is_uint "$SPORT" || die "KAFKA_SSL_PORT must be a number, got '$SPORT'"
if ((NODES == 1)); then HEAP_DEFAULT=512m READY_DEFAULT=90; else HEAP_DEFAULT=384m READY_DEFAULT=150; fi
HEAP="${GROUNDSTREAM_KAFKA_HEAP:-$HEAP_DEFAULT}"
READY_TIMEOUT="${GROUNDSTREAM_KAFKA_TIMEOUT:-$READY_DEFAULT}"

ALL_PORTS=()
for ((i = 0; i < NODES; i++)); do
  ALL_PORTS+=($((PORT + i)) $((CPORT + i)))
  ((SECURE == 1)) && ALL_PORTS+=($((SPORT + i)))
done
[[ "$(printf '%s\n' "${ALL_PORTS[@]}" | sort -u | wc -l)" == "${#ALL_PORTS[@]}" ]] ||
  die "client, controller and SSL ports overlap (KAFKA_PORT=$PORT KAFKA_CONTROLLER_PORT=$CPORT KAFKA_SSL_PORT=$SPORT, $NODES node(s))"
BOOTSTRAP=""
for ((i = 0; i < NODES; i++)); do BOOTSTRAP+="${BOOTSTRAP:+,}$HOST:$((PORT + i))"; done

# ------------------------------------------------------------------ nodes ----

# node_vars I: the paths of node I (1..N).  A single node keeps the run dir's
# top level (RUN_DIR/kafka.pid etc.), as before there were several.
node_vars() {
  N_ID="$1"
  if ((NODES == 1)); then N_DIR="$RUN_DIR"; else N_DIR="$RUN_DIR/node-$1"; fi
  N_PORT=$((PORT + $1 - 1))
  N_CPORT=$((CPORT + $1 - 1))
  N_SPORT=$((SPORT + $1 - 1))
  N_DATA="$N_DIR/data"
  N_LOGS="$N_DIR/logs"
  N_PID_FILE="$N_DIR/kafka.pid"
  N_PORT_FILE="$N_DIR/kafka.port"
  N_PROPS="$N_DIR/server.properties"
  N_LOG4J="$N_DIR/log4j2.xml"
  N_SERVER_LOG="$N_LOGS/server.log"
  N_STDOUT_LOG="$N_LOGS/stdout.log"
}

# ---------------------------------------------------------------- helpers ----

port_open() { # port_open PORT -> 0 if something accepts TCP connections there
  (exec 3<>"/dev/tcp/$HOST/$1") 2>/dev/null
}

# Is PID a live java process running kafka.Kafka with PROPS (default: this node's)?
is_our_broker() {
  local pid="$1" props="${2:-$N_PROPS}" cmd
  is_uint "$pid" || return 1
  [[ -r "/proc/$pid/cmdline" ]] || return 1
  cmd="$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null)" || return 1
  [[ "$cmd" == *java* && "$cmd" == *" kafka.Kafka "* && "$cmd" == *"$props"* ]]
}

# Prints the pid of node N_ID's running broker (from its pid file) or returns 1.
running_pid() {
  local pid
  [[ -f "$N_PID_FILE" ]] || return 1
  pid="$(tr -dc '0-9' <"$N_PID_FILE")"
  is_our_broker "$pid" || return 1
  printf '%s\n' "$pid"
}

log_tail() {
  local f
  for f in "$N_SERVER_LOG" "$N_STDOUT_LOG"; do
    if [[ -s "$f" ]]; then
      log "---- last 40 lines of $f ----"
      tail -n 40 "$f" >&2 || true
    fi
  done
}
# ------------------------------------------------------------- classpath ----

# Resolves (once) the broker's runtime classpath with Maven and caches it,
# keyed by the pom's content and the version override.  The jars stay in
# ~/.m2; the cache is re-resolved if any of them disappeared.
resolve_classpath() {
  command -v mvn >/dev/null || die "mvn (Maven) is required to resolve the Kafka classpath"
  mkdir -p "$CACHE_DIR"
  local key cp_file tmp jar ok=1
  key="$( { cat "$POM"; printf '%s' "$KAFKA_VERSION_OVERRIDE"; } | sha256sum | cut -c1-16)"
  cp_file="$CACHE_DIR/classpath-$key.txt"
  if [[ -s "$cp_file" ]]; then
    local IFS=:
    for jar in $(cat "$cp_file"); do
      [[ -f "$jar" ]] || { ok=0; break; }
    done
    unset IFS
    if [[ $ok == 1 ]]; then
      CLASSPATH_STR="$(cat "$cp_file")"
      return 0
    fi
    log "cached classpath refers to missing jars; resolving again"
  fi
  log "resolving the Kafka classpath with Maven (first run only)..."
  tmp="$cp_file.tmp.$$"
  local -a mvn_args=(-q -B -f "$POM" dependency:build-classpath "-Dmdep.outputFile=$tmp")
  [[ -n "$KAFKA_VERSION_OVERRIDE" ]] && mvn_args+=("-Dkafka.version=$KAFKA_VERSION_OVERRIDE")
  if ! mvn "${mvn_args[@]}" >"$CACHE_DIR/mvn.log" 2>&1; then
    tail -n 40 "$CACHE_DIR/mvn.log" >&2 || true
    rm -f "$tmp"
    die "Maven could not resolve the Kafka classpath (see $CACHE_DIR/mvn.log)"
  fi
  [[ -s "$tmp" ]] || die "Maven produced an empty classpath"
  mv -f "$tmp" "$cp_file"
  CLASSPATH_STR="$(cat "$cp_file")"
}

# --------------------------------------------------------------- security ----

# secret_of NAME -> the user's password (made, random, on first use).
secret_of() {
  local f="$USERS_DIR/$1.password"
  if [[ ! -s "$f" ]]; then
    mkdir -p "$USERS_DIR"
    chmod 700 "$USERS_DIR"
    (umask 077 && openssl rand -hex 24 >"$f.tmp" && mv -f "$f.tmp" "$f")
  fi
  tr -d '\n' <"$f"
}

all_users() { # admin, broker and GROUNDSTREAM_KAFKA_USERS, each once
  printf '%s\n' admin broker $USERS | awk 'NF && !seen[$0]++'
}

check_users() {
  local u
  for u in $USERS; do
    [[ "$u" =~ ^[A-Za-z0-9][A-Za-z0-9._-]*$ ]] ||
      die "user name '$u' in GROUNDSTREAM_KAFKA_USERS: letters, digits, . _ - only"
  done
}

# The CA, the brokers' certificate (SAN IP:127.0.0.1, DNS:localhost) and a
# client certificate, made once with openssl into RUN_DIR/tls.  The broker's
# key store is one PEM file: encrypted PKCS#8 key + certificate + CA (Kafka's
# file-based PEM key store requires ssl.key.password, hence the encryption).
make_tls() {
  [[ -s "$TLS_DIR/broker-keystore.pem" && -s "$TLS_DIR/client.pem" ]] && return 0
  command -v openssl >/dev/null || die "openssl is required for GROUNDSTREAM_KAFKA_SECURE=1"
  log "making a CA and certificates in $TLS_DIR"
  mkdir -p "$TLS_DIR"
  chmod 700 "$TLS_DIR"
  local t="$TLS_DIR" ossl="$TLS_DIR/openssl.log"
  (
    umask 077
    set -e
    : >"$ossl"
    openssl req -x509 -newkey rsa:2048 -nodes -sha256 -days 3650 \
      -keyout "$t/ca.key" -out "$t/ca.pem" -subj "/CN=groundstream local CA" \
      -addext "basicConstraints=critical,CA:TRUE" \
      -addext "keyUsage=critical,keyCertSign,cRLSign" \
      -addext "subjectKeyIdentifier=hash" 2>>"$ossl"
    local who ext
    for who in broker client; do
      if [[ $who == broker ]]; then
        ext="subjectAltName=IP:127.0.0.1,DNS:localhost
extendedKeyUsage=serverAuth,clientAuth"
      else
        ext="extendedKeyUsage=clientAuth"
      fi
      openssl req -newkey rsa:2048 -nodes -sha256 -keyout "$t/$who.key" \
        -out "$t/$who.csr" -subj "/O=groundstream/CN=$who" 2>>"$ossl"
      printf '%s\nbasicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\nsubjectKeyIdentifier=hash\nauthorityKeyIdentifier=keyid\n' \
        "$ext" >"$t/$who.ext"
      openssl x509 -req -in "$t/$who.csr" -CA "$t/ca.pem" -CAkey "$t/ca.key" \
        -CAcreateserial -days 3650 -sha256 -extfile "$t/$who.ext" -out "$t/$who.pem" 2>>"$ossl"
      rm -f "$t/$who.csr" "$t/$who.ext"
    done
    openssl rand -hex 24 >"$t/broker-key.password"
    # PBE-SHA1-3DES: an encryption Java's EncryptedPrivateKeyInfo reads on every JDK
    openssl pkcs8 -topk8 -v1 PBE-SHA1-3DES -in "$t/broker.key" \
      -passout "file:$t/broker-key.password" -out "$t/broker-key.enc.pem" 2>>"$ossl"
    cat "$t/broker-key.enc.pem" "$t/broker.pem" "$t/ca.pem" >"$t/broker-keystore.pem.tmp"
    mv -f "$t/broker-keystore.pem.tmp" "$t/broker-keystore.pem"
    rm -f "$t/broker-key.enc.pem"
    chmod 644 "$t/ca.pem"
  ) || { tail -n 20 "$ossl" >&2 || true; die "openssl failed (see $ossl)"; }
}

# PlainLoginModule's user list: user_NAME="password" for every user.
plain_users_jaas() {
  local u out=""
  for u in $(all_users); do out+=" user_$u=\"$(secret_of "$u")\""; done
  printf '%s' "$out"
}

# --add-scram arguments for StorageTool format: both SCRAM mechanisms, every user.
SCRAM_ARGS=()
scram_args() {
  local u p
  SCRAM_ARGS=()
  for u in $(all_users); do
    p="$(secret_of "$u")"
    SCRAM_ARGS+=(--add-scram "SCRAM-SHA-512=[name=$u,password=$p]")
    SCRAM_ARGS+=(--add-scram "SCRAM-SHA-256=[name=$u,password=$p]")
  done
}

env_value_ok() { [[ "$1" =~ ^[A-Za-z0-9_./:,@+=-]*$ ]]; }

# client.env (for groundstream's settings) and client.properties (Java, Kafka CLI).
write_client_files() {
  local tmp="$CLIENT_ENV.tmp" v
  for v in "$BOOTSTRAP" "$RUN_DIR"; do
    env_value_ok "$v" || die "run dir or bootstrap '$v' has characters client.env cannot carry unquoted"
  done
  {
    echo "GROUNDSTREAM_BOOTSTRAP_SERVERS=$BOOTSTRAP"
    if ((SECURE == 1)); then
      echo "GROUNDSTREAM_KAFKA_SECURITY_PROTOCOL=SASL_SSL"
      echo "GROUNDSTREAM_KAFKA_SASL_MECHANISM=SCRAM-SHA-512"
      echo "GROUNDSTREAM_KAFKA_SASL_USERNAME=admin"
      echo "GROUNDSTREAM_KAFKA_SASL_PASSWORD_FILE=$USERS_DIR/admin.password"
      echo "GROUNDSTREAM_KAFKA_SSL_CA_FILE=$TLS_DIR/ca.pem"
    else
      echo "GROUNDSTREAM_KAFKA_SECURITY_PROTOCOL=PLAINTEXT"
    fi
  } >"$tmp"
  mv -f "$tmp" "$CLIENT_ENV"
  tmp="$CLIENT_PROPS.tmp"
  (
    umask 077
    echo "bootstrap.servers=$BOOTSTRAP"
    if ((SECURE == 1)); then
      echo "security.protocol=SASL_SSL"
      echo "sasl.mechanism=SCRAM-SHA-512"
      echo "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required username=\"admin\" password=\"$(secret_of admin)\";"
      echo "ssl.truststore.type=PEM"
      echo "ssl.truststore.location=$TLS_DIR/ca.pem"
    else
      echo "security.protocol=PLAINTEXT"
    fi
  ) >"$tmp"
  mv -f "$tmp" "$CLIENT_PROPS"
}

# ------------------------------------------------------------ config -------

voters() {
  local i out=""
  for ((i = 1; i <= NODES; i++)); do out+="${out:+,}$i@$HOST:$((CPORT + i - 1))"; done
  printf '%s' "$out"
}

write_config() { # for node N_ID
  mkdir -p "$N_DATA" "$N_LOGS"
  local rf=$NODES isr=1
  ((rf > 3)) && rf=3
  ((NODES > 1)) && isr=2
  {
    cat <<EOC
# Generated by deploy/kafka/local.sh -- edits are overwritten on every start.
process.roles=broker,controller
node.id=$N_ID
# Static quorum: robust to port changes between runs.
controller.quorum.voters=$(voters)
controller.listener.names=CONTROLLER
log.dirs=$N_DATA

num.partitions=1
default.replication.factor=$rf
min.insync.replicas=$isr
auto.create.topics.enable=false
delete.topic.enable=true

offsets.topic.replication.factor=$rf
offsets.topic.num.partitions=1
transaction.state.log.replication.factor=$rf
transaction.state.log.min.isr=$isr
transaction.state.log.num.partitions=1
share.coordinator.state.topic.replication.factor=$rf
share.coordinator.state.topic.min.isr=$isr
group.initial.rebalance.delay.ms=0

# Room for 8 MiB records (plus batch overhead).
message.max.bytes=10485760
replica.fetch.max.bytes=10485760
socket.request.max.bytes=104857600

num.network.threads=2
num.io.threads=4
log.retention.hours=24
log.segment.bytes=268435456
EOC
    if ((NODES > 1)); then
      cat <<EOC

# Several nodes: a node killed with -9 is fenced (and leaves the ISRs) after
# broker.session.timeout.ms, not the default 9 s, so acks=all writes resume sooner.
broker.heartbeat.interval.ms=1000
broker.session.timeout.ms=4000
replica.lag.time.max.ms=10000
EOC
    fi
    if ((SECURE == 0)); then
      cat <<EOC

listeners=PLAINTEXT://$HOST:$N_PORT,CONTROLLER://$HOST:$N_CPORT
advertised.listeners=PLAINTEXT://$HOST:$N_PORT
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT
EOC
    else
      local scram='org.apache.kafka.common.security.scram.ScramLoginModule required'
      local plain='org.apache.kafka.common.security.plain.PlainLoginModule required'
      local bpw
      bpw="$(secret_of broker)"
      cat <<EOC

# ---- secure mode (GROUNDSTREAM_KAFKA_SECURE=1) ----
# Clients: SASL_SSL (SCRAM-SHA-512/256, PLAIN).  mTLS clients: SSL, certificate
# required, principal = the certificate's CN.  Controller: SASL_PLAINTEXT/PLAIN on
# loopback (SCRAM cannot authenticate controller connections: its credentials
# live in the metadata the controllers serve).
listeners=SASL_SSL://$HOST:$N_PORT,CONTROLLER://$HOST:$N_CPORT,SSL://$HOST:$N_SPORT
advertised.listeners=SASL_SSL://$HOST:$N_PORT,SSL://$HOST:$N_SPORT
listener.security.protocol.map=CONTROLLER:SASL_PLAINTEXT,SASL_SSL:SASL_SSL,SSL:SSL
inter.broker.listener.name=SASL_SSL
sasl.mechanism.inter.broker.protocol=SCRAM-SHA-512
sasl.mechanism.controller.protocol=PLAIN
sasl.enabled.mechanisms=SCRAM-SHA-512,SCRAM-SHA-256,PLAIN
listener.name.sasl_ssl.sasl.enabled.mechanisms=SCRAM-SHA-512,SCRAM-SHA-256,PLAIN
listener.name.controller.sasl.enabled.mechanisms=PLAIN
# username/password: what this node logs in as (inter-broker, to the controllers).
listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config=$scram username="broker" password="$bpw";
listener.name.sasl_ssl.scram-sha-256.sasl.jaas.config=$scram;
listener.name.sasl_ssl.plain.sasl.jaas.config=$plain$(plain_users_jaas);
listener.name.controller.plain.sasl.jaas.config=$plain username="broker" password="$bpw" user_broker="$bpw";

ssl.keystore.type=PEM
ssl.keystore.location=$TLS_DIR/broker-keystore.pem
ssl.key.password=$(cat "$TLS_DIR/broker-key.password")
ssl.truststore.type=PEM
ssl.truststore.location=$TLS_DIR/ca.pem
ssl.endpoint.identification.algorithm=https
listener.name.ssl.ssl.client.auth=required
ssl.principal.mapping.rules=RULE:^CN=([^,]+)(,.*)?\$/\$1/,DEFAULT

authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer
allow.everyone.if.no.acl.found=false
super.users=User:admin;User:broker
EOC
    fi
  } >"$N_PROPS.tmp"
  chmod 600 "$N_PROPS.tmp"
  mv -f "$N_PROPS.tmp" "$N_PROPS"
  cat >"$N_LOG4J" <<EOC
<?xml version="1.0" encoding="UTF-8"?>
<!-- Generated by deploy/kafka/local.sh -->
<Configuration status="WARN">
  <Appenders>
    <RollingFile name="server" fileName="$N_SERVER_LOG" filePattern="$N_LOGS/server.log.%i">
      <PatternLayout pattern="[%d] %p %m (%c)%n"/>
      <Policies><SizeBasedTriggeringPolicy size="20 MB"/></Policies>
      <DefaultRolloverStrategy max="3"/>
    </RollingFile>
  </Appenders>
  <Loggers>
    <Logger name="kafka.request.logger" level="WARN"/>
    <Logger name="kafka.log.LogCleaner" level="WARN"/>
    <Logger name="state.change.logger" level="WARN"/>
    <Logger name="org.apache.kafka.controller" level="INFO"/>
    <Root level="INFO"><AppenderRef ref="server"/></Root>
  </Loggers>
</Configuration>
EOC
}

# A Kafka Uuid (base64url of 16 random bytes, no padding), shared by all nodes.
cluster_id() {
  local f="$RUN_DIR/cluster.id" id
  if [[ ! -s "$f" ]]; then
    id="-"
    while [[ "$id" == -* ]]; do
      id="$(head -c 16 /dev/urandom | base64 | tr '+/' '-_' | tr -d '=\n')"
    done
    echo "$id" >"$f"
  fi
  cat "$f"
}

format_storage() { # for node N_ID; skipped once formatted
  [[ -f "$N_DATA/meta.properties" ]] && return 0
  local cid
  cid="$(cluster_id)"
  log "formatting storage of node $N_ID in $N_DATA (cluster id $cid)"
  local -a extra=()
  if ((SECURE == 1)); then
    scram_args
    extra=("${SCRAM_ARGS[@]}")
  fi
  if ! java -Xmx256m -cp "$CLASSPATH_STR" -Dlog4j2.configurationFile="$N_LOG4J" \
      kafka.tools.StorageTool format --config "$N_PROPS" --cluster-id "$cid" \
      --ignore-formatted "${extra[@]}" >>"$N_LOGS/format.log" 2>&1; then
    tail -n 40 "$N_LOGS/format.log" >&2 || true
    die "storage format of node $N_ID failed (see $N_LOGS/format.log)"
  fi
}

# ------------------------------------------------------- readiness probe ----

# Both probes take CLIENT_ENV (the client.env written by this script) and the
# replication factor of the probe topic; security settings come from the file.
PY_ROUND_TRIP='
import asyncio, sys, uuid
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import TopicAlreadyExistsError

ENV = dict(line.rstrip("\n").split("=", 1) for line in open(sys.argv[1]) if "=" in line)
RF, TOPIC = int(sys.argv[2]), "__gs_ready"
BOOT = ENV["GROUNDSTREAM_BOOTSTRAP_SERVERS"]
SEC = {}
if ENV.get("GROUNDSTREAM_KAFKA_SECURITY_PROTOCOL", "PLAINTEXT") != "PLAINTEXT":
    from aiokafka.helpers import create_ssl_context
    SEC = dict(
        security_protocol=ENV["GROUNDSTREAM_KAFKA_SECURITY_PROTOCOL"],
        sasl_mechanism=ENV["GROUNDSTREAM_KAFKA_SASL_MECHANISM"],
        sasl_plain_username=ENV["GROUNDSTREAM_KAFKA_SASL_USERNAME"],
        sasl_plain_password=open(ENV["GROUNDSTREAM_KAFKA_SASL_PASSWORD_FILE"]).read().strip(),
        ssl_context=create_ssl_context(cafile=ENV["GROUNDSTREAM_KAFKA_SSL_CA_FILE"]),
    )

async def main():
    admin = AIOKafkaAdminClient(bootstrap_servers=BOOT, request_timeout_ms=10000, **SEC)
    await admin.start()
    try:
        try:
            # a TOPIC_ALREADY_EXISTS error inside the response is fine too
            await admin.create_topics([NewTopic(TOPIC, 1, RF)])
        except TopicAlreadyExistsError:
            pass
    finally:
        await admin.close()
    token = uuid.uuid4().hex.encode()
    prod = AIOKafkaProducer(bootstrap_servers=BOOT, acks="all", request_timeout_ms=10000, **SEC)
    await prod.start()
    try:
        md = await prod.send_and_wait(TOPIC, token)
    finally:
        await prod.stop()
    cons = AIOKafkaConsumer(bootstrap_servers=BOOT, enable_auto_commit=False,
                            request_timeout_ms=10000, **SEC)
    await cons.start()
    try:
        tp = TopicPartition(TOPIC, md.partition)
        cons.assign([tp])
        cons.seek(tp, md.offset)
        batch = await cons.getmany(tp, timeout_ms=10000)
        vals = [r.value for r in batch.get(tp, [])]
        if token not in vals:
            raise SystemExit("round trip: record not read back")
    finally:
        await cons.stop()

asyncio.run(asyncio.wait_for(main(), 25))
'

JAVA_ROUND_TRIP='
import java.nio.file.*;
import java.time.Duration;
import java.util.*;
import org.apache.kafka.clients.admin.*;
import org.apache.kafka.clients.consumer.*;
import org.apache.kafka.clients.producer.*;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.TopicExistsException;
import org.apache.kafka.common.serialization.*;

public class GsRoundTrip {
  public static void main(String[] a) throws Exception {
    Map<String, String> env = new HashMap<>();
    for (String line : Files.readAllLines(Path.of(a[0]))) {
      int eq = line.indexOf((int) 61);  // "="
      if (eq > 0) env.put(line.substring(0, eq), line.substring(eq + 1));
    }
    short rf = Short.parseShort(a[1]);
    String topic = "__gs_ready";
    Properties p = new Properties();
    p.put("bootstrap.servers", env.get("GROUNDSTREAM_BOOTSTRAP_SERVERS"));
    p.put("request.timeout.ms", "10000");
    p.put("default.api.timeout.ms", "15000");
    String proto = env.getOrDefault("GROUNDSTREAM_KAFKA_SECURITY_PROTOCOL", "PLAINTEXT");
    if (!proto.equals("PLAINTEXT")) {
      String mech = env.get("GROUNDSTREAM_KAFKA_SASL_MECHANISM");
      String pw = Files.readString(Path.of(env.get("GROUNDSTREAM_KAFKA_SASL_PASSWORD_FILE"))).trim();
      String module = mech.startsWith("SCRAM")
          ? "org.apache.kafka.common.security.scram.ScramLoginModule"
          : "org.apache.kafka.common.security.plain.PlainLoginModule";
      p.put("security.protocol", proto);
      p.put("sasl.mechanism", mech);
      p.put("sasl.jaas.config", module + " required username=\"" + env.get("GROUNDSTREAM_KAFKA_SASL_USERNAME")
          + "\" password=\"" + pw + "\";");
      p.put("ssl.truststore.type", "PEM");
      p.put("ssl.truststore.location", env.get("GROUNDSTREAM_KAFKA_SSL_CA_FILE"));
    }
    try (Admin admin = Admin.create(p)) {
      try {
        admin.createTopics(List.of(new NewTopic(topic, 1, rf))).all().get();
      } catch (java.util.concurrent.ExecutionException e) {
        if (!(e.getCause() instanceof TopicExistsException)) throw e;
      }
    }
    String token = UUID.randomUUID().toString();
    RecordMetadata md;
    Properties pp = (Properties) p.clone();
    pp.put("acks", "all");
    pp.put("max.block.ms", "15000");
    try (KafkaProducer<String, String> prod =
        new KafkaProducer<>(pp, new StringSerializer(), new StringSerializer())) {
      md = prod.send(new ProducerRecord<>(topic, token)).get();
    }
    Properties cp = (Properties) p.clone();
    cp.put("enable.auto.commit", "false");
    try (KafkaConsumer<String, String> cons =
        new KafkaConsumer<>(cp, new StringDeserializer(), new StringDeserializer())) {
      TopicPartition tp = new TopicPartition(topic, md.partition());
      cons.assign(List.of(tp));
      cons.seek(tp, md.offset());
      long end = System.currentTimeMillis() + 10000;
      while (System.currentTimeMillis() < end) {
        for (ConsumerRecord<String, String> r : cons.poll(Duration.ofMillis(500))) {
          if (token.equals(r.value())) return;
        }
      }
    }
    System.err.println("round trip: record not read back");
    System.exit(1);
  }
}
'

# Picks the round-trip implementation once: python with aiokafka, else Java.
PROBE_KIND=""
PROBE_PY=""
choose_probe() {
  [[ -n "$PROBE_KIND" ]] && return 0
  local cand
  for cand in "${GROUNDSTREAM_PYTHON:-$HOME/.cache/groundstream/venv/bin/python}" python3; do
    if command -v "$cand" >/dev/null 2>&1 && "$cand" -c 'import aiokafka' >/dev/null 2>&1; then
      PROBE_KIND=python PROBE_PY="$cand"
      return 0
    fi
  done
  PROBE_KIND=java
  mkdir -p "$CACHE_DIR/probe"
  printf '%s' "$JAVA_ROUND_TRIP" >"$CACHE_DIR/probe/GsRoundTrip.java"
  log "no python with aiokafka found; using a Java round trip (kafka-clients)"
}

round_trip() { # round_trip -> 0 if produce+consume through the cluster worked
  choose_probe
  local rf=$NODES
  ((rf > 3)) && rf=3
  if [[ $PROBE_KIND == python ]]; then
    timeout 30 "$PROBE_PY" -c "$PY_ROUND_TRIP" "$CLIENT_ENV" "$rf" >"$RUN_DIR/probe.log" 2>&1
  else
    # Single-file source launch (JEP 330); log4j quiet via a missing-config fallback.
    timeout 45 java -Xmx128m -cp "$CLASSPATH_STR" -Dlog4j2.level=ERROR \
      -Dlog4j2.configurationFile="$CACHE_DIR/probe/none.xml" -Dlog4j2.StatusLogger.level=OFF \
      "$CACHE_DIR/probe/GsRoundTrip.java" "$CLIENT_ENV" "$rf" >"$RUN_DIR/probe.log" 2>&1
  fi
}

all_ports_open() {
  local i
  for ((i = 0; i < NODES; i++)); do port_open $((PORT + i)) || return 1; done
}

# wait_ready: every node alive, every client port open, and a round trip.
wait_ready() {
  local deadline=$((SECONDS + READY_TIMEOUT)) i pid
  while ((SECONDS < deadline)); do
    for ((i = 1; i <= NODES; i++)); do
      node_vars "$i"
      if ! pid="$(running_pid)"; then
        log_tail
        rm -f "$N_PID_FILE"
        die "node $i exited during startup"
      fi
    done
    if all_ports_open && round_trip; then
      return 0
    fi
    sleep 1
  done
  log "last readiness probe output:"
  tail -n 20 "$RUN_DIR/probe.log" >&2 2>/dev/null || true
  for ((i = 1; i <= NODES; i++)); do
    node_vars "$i"
    log_tail
  done
  die "not ready on $BOOTSTRAP after ${READY_TIMEOUT}s; left running (stop with: $0 stop)"
}

# -------------------------------------------------------------- commands ----

mode_line() { # what the storage was formatted for (ports may change between runs)
  printf 'nodes=%s\nsecure=%s\n' "$NODES" "$SECURE"
  ((SECURE == 1)) && printf 'users=%s\n' "$(all_users | tr '\n' ' ' | sed 's/ $//')"
  return 0
}

# The run dir's storage was formatted for one mode (node count, security,
# SCRAM users): refuse to start it in another.
check_mode() {
  local want have
  want="$(mode_line)"
  local formatted=0 f
  for f in "$RUN_DIR/data/meta.properties" "$RUN_DIR"/node-*/data/meta.properties; do
    [[ -f "$f" ]] && formatted=1
  done
  # Only storage holds a run dir to its mode: one whose first start failed before
  # formatting (no openssl, a busy port) may be started in another.
  if [[ -f "$MODE_FILE" ]] && ((formatted == 1)); then
    have="$(cat "$MODE_FILE")"
    [[ "$have" == "$want" ]] && return 0
    die "$RUN_DIR was set up for another mode:
$(cat "$MODE_FILE")
not:
$(mode_line)
use another GROUNDSTREAM_KAFKA_DIR (or remove this one)"
  fi
  # A run dir from before kafka.mode existed: single node, plaintext.
  if [[ -f "$RUN_DIR/data/meta.properties" ]] && ! ((NODES == 1 && SECURE == 0)); then
    die "$RUN_DIR holds a single-node plaintext broker's data; use another GROUNDSTREAM_KAFKA_DIR"
  fi
  mode_line >"$MODE_FILE"
}

launch_node() { # starts node N_ID in the background; sets LAUNCHED_PID
  log "starting node $N_ID on $HOST:$N_PORT (controller $HOST:$N_CPORT$( ((SECURE == 1)) && printf ', mTLS %s:%s' "$HOST" "$N_SPORT"), dir $N_DIR)"
  # setsid: own session, so a Ctrl-C in the caller's terminal or the exit of
  # the calling process does not take the broker down.  setsid execs (no fork)
  # because a background child of a non-interactive shell is not a group leader,
  # so $! is the JVM's pid; verified below anyway.
  (
    cd "$N_DIR"
    exec 9>&- # do not let the broker inherit (and hold) the start lock
    exec setsid java \
      "-Xmx$HEAP" \
      -XX:+UseG1GC -XX:MaxGCPauseMillis=20 -XX:InitiatingHeapOccupancyPercent=35 \
      -XX:+ExplicitGCInvokesConcurrent -XX:MaxInlineLevel=15 \
      -Djava.awt.headless=true \
      -Dlog4j2.configurationFile="$N_LOG4J" \
      -Dkafka.logs.dir="$N_LOGS" \
      -cp "$CLASSPATH_STR" \
      kafka.Kafka "$N_PROPS"
  ) </dev/null >"$N_STDOUT_LOG" 2>&1 &
  LAUNCHED_PID=$!
}

confirm_launched() { # the JVM of node N_ID is up: write its pid file
  local pid="$LAUNCHED_PID" p
  if ! is_our_broker "$pid"; then
    # fall back to finding the JVM by its command line (setsid forked)
    for p in $(pgrep -f "kafka.Kafka $N_PROPS" || true); do
      is_our_broker "$p" && pid="$p" && break
    done
  fi
  is_our_broker "$pid" || { log_tail; die "node $N_ID failed to start"; }
  echo "$pid" >"$N_PID_FILE"
  echo "$N_PORT" >"$N_PORT_FILE"
}

cmd_start() {
  mkdir -p "$RUN_DIR"
  exec 9>"$RUN_DIR/.lock"
  if command -v flock >/dev/null; then
    flock -w 180 9 || die "another local.sh holds $RUN_DIR/.lock"
  fi
  ((SECURE == 1)) && check_users
  check_mode

  local i pid running=0 p
  local -a todo=()
  for ((i = 1; i <= NODES; i++)); do
    node_vars "$i"
    if pid="$(running_pid)"; then
      p="$(cat "$N_PORT_FILE" 2>/dev/null || echo "?")"
      [[ "$p" == "$N_PORT" ]] ||
        die "node $i (pid $pid) already runs from $N_DIR on port $p, not $N_PORT; stop it first or use another GROUNDSTREAM_KAFKA_DIR"
      running=$((running + 1))
    else
      rm -f "$N_PID_FILE"
      todo+=("$i")
    fi
  done

  resolve_classpath
  if ((SECURE == 1)); then
    make_tls
    all_users >/dev/null
    local u
    for u in $(all_users); do secret_of "$u" >/dev/null; done
  fi
  write_client_files

  if ((${#todo[@]} == 0)); then
    if round_trip; then
      log "already running and healthy ($NODES node(s)) on $BOOTSTRAP"
      return 0
    fi
    log "running but not ready yet; waiting"
    wait_ready
    log "ready on $BOOTSTRAP"
    return 0
  fi

  command -v java >/dev/null || die "java (17+) is required"
  for i in "${todo[@]}"; do
    node_vars "$i"
    port_open "$N_PORT" && die "port $HOST:$N_PORT (node $i) is already in use by another process (not our broker)"
    port_open "$N_CPORT" && die "controller port $HOST:$N_CPORT (node $i) is already in use by another process"
    if ((SECURE == 1)) && port_open "$N_SPORT"; then
      die "SSL port $HOST:$N_SPORT (node $i) is already in use by another process"
    fi
  done
  # Format in parallel: one JVM start each, the slow part on two cores.
  local -a fpids=()
  for i in "${todo[@]}"; do
    node_vars "$i"
    write_config
    format_storage &
    fpids+=($!)
  done
  for p in "${fpids[@]}"; do wait "$p" || die "formatting failed"; done

  local -a launched=()
  for i in "${todo[@]}"; do
    node_vars "$i"
    launch_node
    launched+=("$i:$LAUNCHED_PID")
  done
  sleep 0.5
  local entry
  for entry in "${launched[@]}"; do
    node_vars "${entry%%:*}"
    LAUNCHED_PID="${entry#*:}"
    confirm_launched
  done

  wait_ready
  if ((SECURE == 1)); then
    log "ready on $BOOTSTRAP (SASL_SSL; CA $TLS_DIR/ca.pem; client settings $CLIENT_ENV)"
  else
    log "ready on $BOOTSTRAP"
  fi
  echo "$CLIENT_ENV"
}

# stop_nodes SIGNAL WAIT_TENTHS: signal every running node at once (a cluster
# stopped one node at a time would leave the last ones without a quorum for
# their controlled shutdown), then wait for them.
cmd_stop() {
  local i pid any=0
  local -a pids=() names=()
  for ((i = 1; i <= NODES; i++)); do
    node_vars "$i"
    if pid="$(running_pid)"; then
      pids+=("$pid") names+=("$N_PROPS")
      log "stopping node $i (pid $pid)"
      kill -TERM "$pid" 2>/dev/null || true
      any=1
    elif [[ -f "$N_PID_FILE" ]]; then
      log "node $i: stale pid file (not running); removing it"
      rm -f "$N_PID_FILE" "$N_PORT_FILE"
    fi
  done
  if ((any == 0)); then
    log "not running"
    return 0
  fi
  local t k alive
  for t in 600 100; do # up to 60 s for a controlled shutdown, then 10 s after SIGKILL
    for ((k = 0; k < t; k++)); do
      alive=0
      for i in "${!pids[@]}"; do is_our_broker "${pids[$i]}" "${names[$i]}" && alive=1; done
      ((alive == 0)) && break
      sleep 0.1
    done
    ((alive == 0)) && break
    if ((t == 600)); then
      for i in "${!pids[@]}"; do
        if is_our_broker "${pids[$i]}" "${names[$i]}"; then
          log "pid ${pids[$i]} did not exit after 60s; sending SIGKILL"
          kill -KILL "${pids[$i]}" 2>/dev/null || true
        fi
      done
    fi
  done
  ((alive == 0)) || die "could not stop: ${pids[*]}"
  for ((i = 1; i <= NODES; i++)); do
    node_vars "$i"
    running_pid >/dev/null || rm -f "$N_PID_FILE" "$N_PORT_FILE"
  done
  log "stopped"
}

cmd_status() {
  local i pid p up=0
  for ((i = 1; i <= NODES; i++)); do
    node_vars "$i"
    local tag=""
    ((NODES > 1)) && tag="node $i: "
    if pid="$(running_pid)"; then
      p="$(cat "$N_PORT_FILE" 2>/dev/null || echo "$N_PORT")"
      if port_open "$p"; then
        echo "${tag}running (pid $pid, $HOST:$p, run dir $N_DIR)"
      else
        echo "${tag}running (pid $pid, $HOST:$p not accepting connections yet, run dir $N_DIR)"
      fi
      up=$((up + 1))
    else
      echo "${tag}stopped"
    fi
  done
  ((up == NODES))
}

cmd_pids() {
  local i pid
  for ((i = 1; i <= NODES; i++)); do
    node_vars "$i"
    pid="$(running_pid)" && echo "$i $pid"
  done
  return 0
}

cmd_kill() {
  local n="${1:-}" pid k
  is_uint "$n" && ((n >= 1 && n <= NODES)) || die "usage: $0 kill NODE (1..$NODES)"
  node_vars "$n"
  pid="$(running_pid)" || die "node $n is not running"
  log "kill -9 node $n (pid $pid)"
  kill -KILL "$pid"
  for ((k = 0; k < 100; k++)); do
    is_our_broker "$pid" || break
    sleep 0.1
  done
  is_our_broker "$pid" && die "pid $pid still alive after SIGKILL"
  echo "$pid"
}

node_vars 1
case "${1:-}" in
  start) cmd_start ;;
  stop) cmd_stop ;;
  status) cmd_status ;;
  restart) cmd_stop && cmd_start ;;
  pids) cmd_pids ;;
  kill) cmd_kill "${2:-}" ;;
  logs)
    node_vars "${GROUNDSTREAM_KAFKA_NODE:-1}"
    tail -n "${2:-100}" "$N_SERVER_LOG"
    ;;
  *)
    echo "usage: $0 start|stop|status|restart|logs [N]|pids|kill NODE" >&2
    exit 2
    ;;
esac
