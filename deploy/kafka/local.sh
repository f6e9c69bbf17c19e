#!/usr/bin/env bash
# Local single-node Apache Kafka 4.x (KRaft, combined broker+controller) for
# development and the integration tests.  No docker, no Kafka tarball: the
# broker's classpath is resolved from Maven Central through deploy/kafka/pom.xml
# (org.apache.kafka:kafka_2.13:4.4.0, the newest 4.x on Maven Central when this
# was written, plus the SLF4J -> Log4j2 binding).
#
# Usage: deploy/kafka/local.sh start|stop|status|restart|logs
#
# Environment:
#   KAFKA_PORT                  client listener port            (default 9092)
#   KAFKA_CONTROLLER_PORT       KRaft controller listener port  (default 9093)
#   GROUNDSTREAM_KAFKA_DIR      run dir: config, data, logs, pid (default deploy/kafka/run)
#   GROUNDSTREAM_KAFKA_CACHE    classpath cache dir              (default deploy/kafka/.cache)
#   GROUNDSTREAM_KAFKA_VERSION  override kafka_2.13 version from pom.xml (4.x)
#   GROUNDSTREAM_KAFKA_HEAP     broker heap                      (default 512m)
#   GROUNDSTREAM_KAFKA_TIMEOUT  seconds to wait for readiness    (default 90)
#   GROUNDSTREAM_PYTHON         python with aiokafka for the readiness round trip
#                               (default ~/.cache/groundstream/venv/bin/python, then
#                               python3; if neither imports aiokafka, a small Java
#                               program using kafka-clients does the round trip)
#
# Listeners are bound to 127.0.0.1 only.  "Ready" means a real round trip
# worked: topic __gs_ready created, one record produced and consumed back.
set -euo pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
POM="$SCRIPT_DIR/pom.xml"

abspath() { # resolve relative to the caller's cwd, without requiring existence
  case "$1" in
    /*) printf '%s\n' "$1" ;;
    *) printf '%s/%s\n' "$PWD" "$1" ;;
  esac
}

PORT="${KAFKA_PORT:-9092}"
CPORT="${KAFKA_CONTROLLER_PORT:-9093}"
RUN_DIR="$(abspath "${GROUNDSTREAM_KAFKA_DIR:-$SCRIPT_DIR/run}")"
CACHE_DIR="$(abspath "${GROUNDSTREAM_KAFKA_CACHE:-$SCRIPT_DIR/.cache}")"
KAFKA_VERSION_OVERRIDE="${GROUNDSTREAM_KAFKA_VERSION:-}"
HEAP="${GROUNDSTREAM_KAFKA_HEAP:-512m}"
READY_TIMEOUT="${GROUNDSTREAM_KAFKA_TIMEOUT:-90}"
HOST=127.0.0.1
BOOTSTRAP="$HOST:$PORT"

DATA_DIR="$RUN_DIR/data"
LOG_DIR="$RUN_DIR/logs"
PID_FILE="$RUN_DIR/kafka.pid"
PORT_FILE="$RUN_DIR/kafka.port"
PROPS="$RUN_DIR/server.properties"
LOG4J="$RUN_DIR/log4j2.xml"
SERVER_LOG="$LOG_DIR/server.log"
STDOUT_LOG="$LOG_DIR/stdout.log"

log() { printf '[kafka-local] %s\n' "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

is_uint() { [[ "$1" =~ ^[0-9]+$ ]]; }
is_uint "$PORT" || die "KAFKA_PORT must be a number, got '$PORT'"
is_uint "$CPORT" || die "KAFKA_CONTROLLER_PORT must be a number, got '$CPORT'"
[[ "$PORT" != "$CPORT" ]] || die "KAFKA_PORT and KAFKA_CONTROLLER_PORT must differ"

# ---------------------------------------------------------------- helpers ----

port_open() { # port_open PORT -> 0 if something accepts TCP connections there
  (exec 3<>"/dev/tcp/$HOST/$1") 2>/dev/null
}

# Is PID a live java process running kafka.Kafka with our server.properties?
is_our_broker() {
  local pid="$1" cmd
  is_uint "$pid" || return 1
  [[ -r "/proc/$pid/cmdline" ]] || return 1
  cmd="$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null)" || return 1
  [[ "$cmd" == *java* && "$cmd" == *" kafka.Kafka "* && "$cmd" == *"$PROPS"* ]]
}

# Prints the pid of our running broker (from the pid file) or returns 1.
running_pid() {
  local pid
  [[ -f "$PID_FILE" ]] || return 1
  pid="$(tr -dc '0-9' <"$PID_FILE")"
  is_our_broker "$pid" || return 1
  printf '%s\n' "$pid"
}

log_tail() {
  local f
  for f in "$SERVER_LOG" "$STDOUT_LOG"; do
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

# ------------------------------------------------------------ config -------

write_config() {
  mkdir -p "$DATA_DIR" "$LOG_DIR"
  cat >"$PROPS" <<EOF
# Generated by deploy/kafka/local.sh -- edits are overwritten on every start.
process.roles=broker,controller
node.id=1
# Static single-voter quorum: robust to port changes between runs.
controller.quorum.voters=1@$HOST:$CPORT
listeners=PLAINTEXT://$HOST:$PORT,CONTROLLER://$HOST:$CPORT
advertised.listeners=PLAINTEXT://$HOST:$PORT
inter.broker.listener.name=PLAINTEXT
controller.listener.names=CONTROLLER
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT
log.dirs=$DATA_DIR

num.partitions=1
default.replication.factor=1
min.insync.replicas=1
auto.create.topics.enable=false
delete.topic.enable=true

offsets.topic.replication.factor=1
offsets.topic.num.partitions=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
transaction.state.log.num.partitions=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
group.initial.rebalance.delay.ms=0

# Room for 8 MiB records (plus batch overhead).
message.max.bytes=10485760
replica.fetch.max.bytes=10485760
socket.request.max.bytes=104857600

num.network.threads=2
num.io.threads=4
log.retention.hours=24
log.segment.bytes=268435456
EOF
  cat >"$LOG4J" <<EOF
<?xml version="1.0" encoding="UTF-8"?>
<!-- Generated by deploy/kafka/local.sh -->
<Configuration status="WARN">
  <Appenders>
    <RollingFile name="server" fileName="$SERVER_LOG" filePattern="$LOG_DIR/server.log.%i">
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
EOF
}

format_storage() {
  if [[ -f "$DATA_DIR/meta.properties" ]]; then
    return 0
  fi
  local cluster_id
  cluster_id="$(java -cp "$CLASSPATH_STR" -Dlog4j2.configurationFile="$LOG4J" \
    kafka.tools.StorageTool random-uuid 2>>"$LOG_DIR/format.log" | tail -n 1)"
  [[ -n "$cluster_id" ]] || die "could not generate a cluster id (see $LOG_DIR/format.log)"
  log "formatting storage in $DATA_DIR (cluster id $cluster_id)"
  if ! java -cp "$CLASSPATH_STR" -Dlog4j2.configurationFile="$LOG4J" \
      kafka.tools.StorageTool format --config "$PROPS" --cluster-id "$cluster_id" \
      --ignore-formatted >>"$LOG_DIR/format.log" 2>&1; then
    tail -n 40 "$LOG_DIR/format.log" >&2 || true
    die "storage format failed (see $LOG_DIR/format.log)"
  fi
}

# ------------------------------------------------------- readiness probe ----

PY_ROUND_TRIP='
import asyncio, sys, uuid
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import TopicAlreadyExistsError

BOOT, TOPIC = sys.argv[1], "__gs_ready"

async def main():
    admin = AIOKafkaAdminClient(bootstrap_servers=BOOT, request_timeout_ms=10000)
    await admin.start()
    try:
        try:
            # a TOPIC_ALREADY_EXISTS error inside the response is fine too
            await admin.create_topics([NewTopic(TOPIC, 1, 1)])
        except TopicAlreadyExistsError:
            pass
    finally:
        await admin.close()
    token = uuid.uuid4().hex.encode()
    prod = AIOKafkaProducer(bootstrap_servers=BOOT, acks="all", request_timeout_ms=10000)
    await prod.start()
    try:
        md = await prod.send_and_wait(TOPIC, token)
    finally:
        await prod.stop()
    cons = AIOKafkaConsumer(bootstrap_servers=BOOT, enable_auto_commit=False,
                            request_timeout_ms=10000)
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
    String boot = a[0], topic = "__gs_ready";
    Properties p = new Properties();
    p.put("bootstrap.servers", boot);
    p.put("request.timeout.ms", "10000");
    p.put("default.api.timeout.ms", "15000");
    try (Admin admin = Admin.create(p)) {
      try {
        admin.createTopics(List.of(new NewTopic(topic, 1, (short) 1))).all().get();
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

round_trip() { # round_trip -> 0 if produce+consume through the broker worked
  choose_probe
  if [[ $PROBE_KIND == python ]]; then
    timeout 30 "$PROBE_PY" -c "$PY_ROUND_TRIP" "$BOOTSTRAP" >"$RUN_DIR/probe.log" 2>&1
  else
    # Single-file source launch (JEP 330); log4j quiet via a missing-config fallback.
    timeout 45 java -Xmx128m -cp "$CLASSPATH_STR" -Dlog4j2.level=ERROR \
      -Dlog4j2.configurationFile="$CACHE_DIR/probe/none.xml" -Dlog4j2.StatusLogger.level=OFF \
      "$CACHE_DIR/probe/GsRoundTrip.java" "$BOOTSTRAP" >"$RUN_DIR/probe.log" 2>&1
  fi
}

wait_ready() {
  local pid="$1" deadline=$((SECONDS + READY_TIMEOUT))
  while ((SECONDS < deadline)); do
    if ! is_our_broker "$pid"; then
      log_tail
      rm -f "$PID_FILE"
      die "the broker (pid $pid) exited during startup"
    fi
    if port_open "$PORT" && round_trip; then
      return 0
    fi
    sleep 1
  done
  log "last readiness probe output:"
  tail -n 20 "$RUN_DIR/probe.log" >&2 2>/dev/null || true
  log_tail
  die "broker (pid $pid) not ready on $BOOTSTRAP after ${READY_TIMEOUT}s; it is left running (stop it with: $0 stop)"
}

# -------------------------------------------------------------- commands ----

cmd_start() {
  mkdir -p "$RUN_DIR"
  exec 9>"$RUN_DIR/.lock"
  if command -v flock >/dev/null; then
    flock -w 180 9 || die "another local.sh holds $RUN_DIR/.lock"
  fi

  local pid
  if pid="$(running_pid)"; then
    local running_port
    running_port="$(cat "$PORT_FILE" 2>/dev/null || echo "?")"
    [[ "$running_port" == "$PORT" ]] ||
      die "our broker (pid $pid) already runs from $RUN_DIR on port $running_port, not $PORT; stop it first or use another GROUNDSTREAM_KAFKA_DIR"
    resolve_classpath
    if round_trip; then
      log "already running and healthy (pid $pid) on $BOOTSTRAP"
      return 0
    fi
    log "broker (pid $pid) is running but not ready yet; waiting"
    wait_ready "$pid"
    log "ready on $BOOTSTRAP (pid $pid)"
    return 0
  fi
  rm -f "$PID_FILE"

  port_open "$PORT" && die "port $HOST:$PORT is already in use by another process (not our broker)"
  port_open "$CPORT" && die "controller port $HOST:$CPORT is already in use by another process"
  command -v java >/dev/null || die "java (17+) is required"

  resolve_classpath
  write_config
  format_storage

  log "starting Kafka on $BOOTSTRAP (controller $HOST:$CPORT, run dir $RUN_DIR)"
  # setsid: own session, so a Ctrl-C in the caller's terminal or the exit of
  # the calling process does not take the broker down.  setsid execs (no fork)
  # because a background child of a non-interactive shell is not a group leader,
  # so $! is the JVM's pid; verified below anyway.
  (
    cd "$RUN_DIR"
    exec 9>&- # do not let the broker inherit (and hold) the start lock
    exec setsid java \
      "-Xmx$HEAP" \
      -XX:+UseG1GC -XX:MaxGCPauseMillis=20 -XX:InitiatingHeapOccupancyPercent=35 \
      -XX:+ExplicitGCInvokesConcurrent -XX:MaxInlineLevel=15 \
      -Djava.awt.headless=true \
      -Dlog4j2.configurationFile="$LOG4J" \
      -Dkafka.logs.dir="$LOG_DIR" \
      -cp "$CLASSPATH_STR" \
      kafka.Kafka "$PROPS"
  ) </dev/null >"$STDOUT_LOG" 2>&1 &
  pid=$!
  sleep 0.5
  if ! is_our_broker "$pid"; then
    # fall back to finding the JVM by its command line (setsid forked)
    local p
    for p in $(pgrep -f "kafka.Kafka $PROPS" || true); do
      is_our_broker "$p" && pid="$p" && break
    done
  fi
  is_our_broker "$pid" || { log_tail; die "the broker failed to start"; }
  echo "$pid" >"$PID_FILE"
  echo "$PORT" >"$PORT_FILE"

  wait_ready "$pid"
  log "ready on $BOOTSTRAP (pid $pid)"
}

cmd_stop() {
  local pid
  if ! pid="$(running_pid)"; then
    if [[ -f "$PID_FILE" ]]; then
      log "stale pid file (no broker of ours running); removing it"
      rm -f "$PID_FILE" "$PORT_FILE"
    else
      log "not running"
    fi
    return 0
  fi
  log "stopping broker (pid $pid)"
  kill -TERM "$pid" 2>/dev/null || true
  local i
  for ((i = 0; i < 600; i++)); do # up to 60 s for a controlled shutdown
    is_our_broker "$pid" || break
    sleep 0.1
  done
  if is_our_broker "$pid"; then
    log "broker did not exit after 60s; sending SIGKILL"
    kill -KILL "$pid" 2>/dev/null || true
    for ((i = 0; i < 100; i++)); do
      is_our_broker "$pid" || break
      sleep 0.1
    done
  fi
  is_our_broker "$pid" && die "could not stop pid $pid"
  rm -f "$PID_FILE" "$PORT_FILE"
  log "stopped"
}

cmd_status() {
  local pid
  if pid="$(running_pid)"; then
    local p
    p="$(cat "$PORT_FILE" 2>/dev/null || echo "$PORT")"
    if port_open "$p"; then
      echo "running (pid $pid, $HOST:$p, run dir $RUN_DIR)"
    else
      echo "running (pid $pid, $HOST:$p not accepting connections yet, run dir $RUN_DIR)"
    fi
    return 0
  fi
  echo "stopped"
  return 1
}

case "${1:-}" in
  start) cmd_start ;;
  stop) cmd_stop ;;
  status) cmd_status ;;
  restart) cmd_stop && cmd_start ;;
  logs) tail -n "${2:-100}" "$SERVER_LOG" ;;
  *)
    echo "usage: $0 start|stop|status|restart|logs [N]" >&2
    exit 2
    ;;
esac
