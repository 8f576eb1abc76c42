#!/usr/bin/env bash
# kafka-local.sh: a single-node Apache Kafka (KRaft, combined broker and
# controller) on loopback, for the integration tests against a real broker.
#
# The broker's jars come from Maven Central through Maven only
# (dependency:copy-dependencies of org.apache.kafka:kafka_2.13, plus the
# kafka-tools jar alone for the command-line tools the compose health checks
# run, such as BrokerApiVersionsCommand) and are kept in a cache directory
# reused across runs. Needs java (17+) and mvn.
#
#   scripts/kafka-local.sh install   resolve the jars into the cache (no-op when cached)
#   scripts/kafka-local.sh start     install, DELETE the log dir of any previous run and format a
#                                    fresh, empty one, start, wait until ready (a throwaway broker:
#                                    every topic and record of the previous run is gone)
#   scripts/kafka-local.sh stop      SIGTERM, wait, then SIGKILL
#   scripts/kafka-local.sh status    running or not, and where
#   scripts/kafka-local.sh restart   stop, then start: the same fresh, EMPTY broker (data deleted)
#   scripts/kafka-local.sh env       print the exports for the binaries (INBOXD_KAFKA_BROKERS)
#                                    and for the tests (INBOXD_TEST_KAFKA_BROKERS)
#   scripts/kafka-local.sh version   print the Kafka version (of the running broker, else of the jars)
#   scripts/kafka-local.sh log       print the broker's log
#
# Environment (all optional):
#   INBOXD_KAFKA_VERSION          Kafka release (default 4.1.1)
#   INBOXD_KAFKA_CACHE            jar cache (default ~/.cache/inboxd/kafka-<version>)
#   INBOXD_KAFKA_RUN_DIR          config, data, log and pid (default /tmp/inboxd-kafka)
#   INBOXD_KAFKA_PORT             client listener (default 19092, or the next free
#                                 pair of ports after it when it is taken)
#   INBOXD_KAFKA_CONTROLLER_PORT  controller listener (default client port + 1)
#   INBOXD_KAFKA_HEAP             JVM heap (default 512m)
#   INBOXD_KAFKA_READY_TIMEOUT    how long start waits (default 120s)
#   INBOXD_KAFKA_MVN_ARGS         extra arguments for mvn (e.g. -o, -s settings.xml)
set -euo pipefail

VERSION="${INBOXD_KAFKA_VERSION:-4.1.1}"
SCALA="2.13"
# log4j-slf4j-impl binds Kafka's slf4j 1.7 logging to the log4j2 the broker
# already depends on (the release tarball ships the same binding).
LOG4J_VERSION="${INBOXD_KAFKA_LOG4J_VERSION:-2.24.3}"
CACHE="${INBOXD_KAFKA_CACHE:-${HOME:-/root}/.cache/inboxd/kafka-${VERSION}}"
LIBS="$CACHE/libs"
RUN="${INBOXD_KAFKA_RUN_DIR:-${TMPDIR:-/tmp}/inboxd-kafka}"
PIDFILE="$RUN/kafka.pid"
LOGFILE="$RUN/kafka.log"
PORTFILE="$RUN/brokers"
HEAP="${INBOXD_KAFKA_HEAP:-512m}"
READY_TIMEOUT="${INBOXD_KAFKA_READY_TIMEOUT:-120s}"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

log() { echo "kafka-local: $*" >&2; }
die() { log "$*"; exit 1; }

need() { command -v "$1" >/dev/null 2>&1 || die "$1 not found on PATH ($2)"; }

java_cp() { java -Xmx256m -cp "$LIBS/*" "$@"; }

install() {
	# A cache made before kafka-tools was added lacks it: resolve again.
	if [[ -f "$CACHE/.complete" && -f "$LIBS/kafka-tools-${VERSION}.jar" ]]; then
		log "Kafka $VERSION jars cached in $LIBS"
		return 0
	fi
	need java "install a JDK 17+"
	need mvn "install Maven 3.8+"
	mkdir -p "$CACHE"
	local work="$CACHE/resolve.$$"
	rm -rf "$work" && mkdir -p "$work"
	cat >"$work/pom.xml" <<EOF
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>local.inboxd</groupId>
  <artifactId>kafka-runtime</artifactId>
  <version>1</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency>
      <groupId>org.apache.kafka</groupId>
      <artifactId>kafka_${SCALA}</artifactId>
      <version>${VERSION}</version>
    </dependency>
    <!-- The tools (kafka-broker-api-versions.sh and the like) without their
         own dependencies (Connect's runtime, Jetty, Jersey): the ones they
         use are the broker's. -->
    <dependency>
      <groupId>org.apache.kafka</groupId>
      <artifactId>kafka-tools</artifactId>
      <version>${VERSION}</version>
      <exclusions>
        <exclusion>
          <groupId>*</groupId>
          <artifactId>*</artifactId>
        </exclusion>
      </exclusions>
    </dependency>
    <dependency>
      <groupId>org.apache.logging.log4j</groupId>
      <artifactId>log4j-slf4j-impl</artifactId>
      <version>${LOG4J_VERSION}</version>
    </dependency>
  </dependencies>
</project>
EOF
	log "resolving org.apache.kafka:kafka_${SCALA}:${VERSION} and its runtime dependencies with Maven"
	local t0=$SECONDS
	# shellcheck disable=SC2086
	if ! mvn -B -q -f "$work/pom.xml" ${INBOXD_KAFKA_MVN_ARGS:-} \
		dependency:copy-dependencies -DincludeScope=runtime -DoutputDirectory="$work/libs" >"$work/mvn.log" 2>&1; then
		cat "$work/mvn.log" >&2
		die "mvn dependency:copy-dependencies failed (log above)"
	fi
	[[ -f "$work/libs/kafka_${SCALA}-${VERSION}.jar" ]] || die "no kafka_${SCALA}-${VERSION}.jar after mvn"
	[[ -f "$work/libs/kafka-tools-${VERSION}.jar" ]] || die "no kafka-tools-${VERSION}.jar after mvn"
	rm -rf "$LIBS"
	mv "$work/libs" "$LIBS"
	cp "$work/pom.xml" "$CACHE/pom.xml"
	rm -rf "$work"
	touch "$CACHE/.complete"
	local jars=("$LIBS"/*.jar)
	log "Kafka $VERSION: ${#jars[@]} jars in $LIBS ($((SECONDS - t0))s)"
}

version() {
	local v
	if running_pid >/dev/null && v="$(running_version)" && [[ -n "$v" ]]; then
		echo "$v"
		return 0
	fi
	install
	# kafka.Kafka --version prints the version of the jars (AppInfoParser).
	java_cp kafka.Kafka --version 2>/dev/null | tail -n1
}

running_pid() {
	[[ -f "$PIDFILE" ]] || return 1
	local pid
	pid="$(cat "$PIDFILE")"
	[[ -n "$pid" ]] && kill -0 "$pid" 2>/dev/null || return 1
	# Not a recycled pid of something else.
	grep -q 'kafka.Kafka' "/proc/$pid/cmdline" 2>/dev/null || return 1
	echo "$pid"
}

port_taken() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

pick_ports() {
	if [[ -n "${INBOXD_KAFKA_PORT:-}" ]]; then
		PORT="$INBOXD_KAFKA_PORT"
		CPORT="${INBOXD_KAFKA_CONTROLLER_PORT:-$((PORT + 1))}"
		! port_taken "$PORT" || die "port $PORT is taken (INBOXD_KAFKA_PORT)"
		! port_taken "$CPORT" || die "port $CPORT is taken (controller)"
		return 0
	fi
	PORT=19092
	while port_taken "$PORT" || port_taken "$((PORT + 1))"; do
		PORT=$((PORT + 2))
		((PORT < 19192)) || die "no free pair of ports in 19092-19191; set INBOXD_KAFKA_PORT"
	done
	CPORT=$((PORT + 1))
}

write_config() {
	cat >"$RUN/server.properties" <<EOF
# Written by scripts/kafka-local.sh: one node, KRaft, broker and controller.
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:${CPORT}
listeners=PLAINTEXT://127.0.0.1:${PORT},CONTROLLER://127.0.0.1:${CPORT}
advertised.listeners=PLAINTEXT://127.0.0.1:${PORT}
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
log.dirs=${RUN}/data
# Topics are created explicitly (producer.EnsureTopics), as in production:
# a client writing to a topic nobody created must fail, not invent it.
auto.create.topics.enable=false
num.partitions=1
default.replication.factor=1
min.insync.replicas=1
offsets.topic.replication.factor=1
offsets.topic.num.partitions=4
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
transaction.state.log.num.partitions=4
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
# Tests form groups all the time; don't wait 3s for more members.
group.initial.rebalance.delay.ms=0
# Our fanout tests use a 6s session timeout (Kafka's minimum by default).
group.min.session.timeout.ms=6000
delete.topic.enable=true
num.network.threads=2
num.io.threads=4
log.retention.hours=-1
log.segment.bytes=67108864
EOF
	cat >"$RUN/log4j2.properties" <<EOF
status = warn
appender.out.type = Console
appender.out.name = out
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = info
rootLogger.appenderRef.out.ref = out
logger.kafka.name = kafka
logger.kafka.level = info
logger.request.name = kafka.request.logger
logger.request.level = warn
logger.state.name = state.change.logger
logger.state.level = warn
logger.apache.name = org.apache.kafka
logger.apache.level = info
EOF
}

start() {
	local pid
	if pid="$(running_pid)"; then
		log "already running (pid $pid) on $(cat "$PORTFILE")"
		ready "$(cat "$PORTFILE")"
		return 0
	fi
	need java "install a JDK 17+"
	install
	pick_ports
	if [[ -d "$RUN/data" ]] && [[ -n "$(ls -A "$RUN/data" 2>/dev/null)" ]]; then
		log "deleting $RUN/data: the previous run's topics and records are gone (this broker is for tests)"
	fi
	rm -rf "$RUN/data"
	mkdir -p "$RUN/data"
	write_config
	local cid t0=$SECONDS
	# A cluster id as kafka-storage random-uuid makes it (16 random bytes,
	# URL-safe base64, not starting with '-'), without starting a JVM.
	cid=-
	while [[ "$cid" == -* ]]; do
		cid="$(head -c 16 /dev/urandom | base64 | tr '+/' '-_' | tr -d '=')"
	done
	if ! java_cp -Dlog4j2.configurationFile="$RUN/log4j2.properties" kafka.tools.StorageTool format \
		-t "$cid" -c "$RUN/server.properties" >"$RUN/format.log" 2>&1; then
		cat "$RUN/format.log" >&2
		die "formatting $RUN/data failed"
	fi
	log "formatted $RUN/data (cluster $cid, $((SECONDS - t0))s)"
	echo "127.0.0.1:$PORT" >"$PORTFILE"
	# setsid: the broker outlives this script and is not hit by a Ctrl-C
	# aimed at the caller; stop ends it by its pid.
	setsid java -Xms"$HEAP" -Xmx"$HEAP" -XX:+UseG1GC -XX:MaxGCPauseMillis=20 -Djava.awt.headless=true \
		-Dlog4j2.configurationFile="$RUN/log4j2.properties" \
		-cp "$LIBS/*" kafka.Kafka "$RUN/server.properties" >"$LOGFILE" 2>&1 </dev/null &
	echo $! >"$PIDFILE"
	log "started Kafka $VERSION (pid $!) on 127.0.0.1:$PORT, controller 127.0.0.1:$CPORT, log $LOGFILE"
	if ! ready "127.0.0.1:$PORT"; then
		tail -n 60 "$LOGFILE" >&2 || true
		stop
		die "broker not ready"
	fi
	log "broker says: Kafka version $(running_version) (commit $(sed -n 's/.*Kafka commitId: \([^ ]*\).*/\1/p' "$LOGFILE" | head -n1))"
}

# running_version is the version the running broker logged at startup.
running_version() { sed -n 's/.*INFO Kafka version: \([^ ]*\).*/\1/p' "$LOGFILE" 2>/dev/null | head -n1; }

ready() {
	local brokers="$1" t0=$SECONDS
	# Build the probe once; go run would rebuild into a temp dir each time.
	local bin="$RUN/kafkaready"
	(cd "$ROOT" && go build -o "$bin" ./scripts/kafkaready) || die "go build ./scripts/kafkaready failed"
	local pid
	pid="$(cat "$PIDFILE")"
	# Stop waiting as soon as the JVM dies (bad config, port clash).
	"$bin" -brokers "$brokers" -timeout "$READY_TIMEOUT" &
	local probe=$!
	while kill -0 "$probe" 2>/dev/null; do
		if ! kill -0 "$pid" 2>/dev/null; then
			kill "$probe" 2>/dev/null || true
			wait "$probe" 2>/dev/null || true
			log "the broker exited during startup"
			return 1
		fi
		sleep 0.2
	done
	wait "$probe" || return 1
	log "ready in $((SECONDS - t0))s"
}

stop() {
	local pid
	if ! pid="$(running_pid)"; then
		log "not running"
		rm -f "$PIDFILE"
		return 0
	fi
	kill -TERM "$pid" 2>/dev/null || true
	local i
	for ((i = 0; i < 150; i++)); do
		kill -0 "$pid" 2>/dev/null || break
		sleep 0.2
	done
	if kill -0 "$pid" 2>/dev/null; then
		log "no exit 30s after SIGTERM: SIGKILL"
		kill -KILL "$pid" 2>/dev/null || true
		sleep 0.5
	fi
	rm -f "$PIDFILE"
	log "stopped (pid $pid)"
}

status() {
	local pid
	if pid="$(running_pid)"; then
		echo "running: pid $pid, brokers $(cat "$PORTFILE"), log $LOGFILE"
	else
		echo "not running"
		return 1
	fi
}

env_cmd() {
	running_pid >/dev/null || die "not running (scripts/kafka-local.sh start)"
	echo "export INBOXD_KAFKA_BROKERS=$(cat "$PORTFILE")"
	echo "export INBOXD_TEST_KAFKA_BROKERS=$(cat "$PORTFILE")"
}

mkdir -p "$RUN"
case "${1:-}" in
install) install ;;
start) start ;;
stop) stop ;;
restart) stop && start ;;
status) status ;;
env) env_cmd ;;
version) version ;;
log) cat "$LOGFILE" ;;
*)
	sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//' >&2
	exit 2
	;;
esac
