#!/usr/bin/env bash
# test-kafka.sh: the integration tests against a real Apache Kafka broker
# (single-node KRaft, started by scripts/kafka-local.sh) instead of kfake.
#
# It starts a private broker (own run dir, first free port pair from 19092),
# exports INBOXD_TEST_KAFKA_BROKERS, runs go test on every package whose
# tests build an environment with testenv.New*, prints the Kafka version and
# go test's summary, always stops the broker, and exits with go test's status.
#
# Environment: GOTESTFLAGS (extra go test flags), INBOXD_TEST_KAFKA_PACKAGES
# (packages to test instead of the grep), INBOXD_TEST_KAFKA_LOG (go test
# output, default /tmp/inboxd-test-kafka.log), and those of kafka-local.sh.
set -euo pipefail
cd "$(dirname "$0")/.."

t_all=$SECONDS
export INBOXD_KAFKA_RUN_DIR="${INBOXD_KAFKA_RUN_DIR:-${TMPDIR:-/tmp}/inboxd-kafka-test.$$}"
LOG="${INBOXD_TEST_KAFKA_LOG:-/tmp/inboxd-test-kafka.log}"

# shellcheck disable=SC2317 # called by the traps
cleanup() {
	scripts/kafka-local.sh stop || true
	if [[ -f "$INBOXD_KAFKA_RUN_DIR/kafka.log" ]]; then
		cp "$INBOXD_KAFKA_RUN_DIR/kafka.log" "${LOG%.log}-broker.log" 2>/dev/null || true
	fi
	rm -rf "$INBOXD_KAFKA_RUN_DIR"
}
gopid=""
# shellcheck disable=SC2317 # called by the traps
interrupted() {
	# go test and the test binaries it runs are one process group.
	[[ -z "$gopid" ]] || kill -TERM -- "-$gopid" 2>/dev/null || true
	exit "$1"
}
trap cleanup EXIT
trap 'interrupted 130' INT
trap 'interrupted 143' TERM

t0=$SECONDS
scripts/kafka-local.sh install
t_install=$((SECONDS - t0))
t0=$SECONDS
scripts/kafka-local.sh start
t_start=$((SECONDS - t0))
KAFKA_VERSION="$(scripts/kafka-local.sh version 2>/dev/null)"
# Only the tests' variable: INBOXD_KAFKA_BROKERS would point the binaries the
# tests start (inboxd dev) away from their embedded broker.
eval "$(scripts/kafka-local.sh env | grep INBOXD_TEST_KAFKA_BROKERS)"
export INBOXD_TEST_KAFKA_BROKERS

if [[ -n "${INBOXD_TEST_KAFKA_PACKAGES:-}" ]]; then
	read -r -a pkgs <<<"$INBOXD_TEST_KAFKA_PACKAGES"
else
	# The packages whose tests take their Kafka from testenv.New*, which is
	# what honours INBOXD_TEST_KAFKA_BROKERS.
	mapfile -t pkgs < <(grep -rl --include='*_test.go' -E 'testenv\.New' . | xargs -n1 dirname | sort -u)
fi
((${#pkgs[@]} > 0)) || { echo "test-kafka: no package uses testenv.New" >&2; exit 1; }

echo "== go test against Apache Kafka $KAFKA_VERSION at $INBOXD_TEST_KAFKA_BROKERS: ${pkgs[*]} =="
t0=$SECONDS
# In the background (its own process group: set -m) and waited for, so that
# a TERM or INT reaches the trap (which ends the tests and stops the broker)
# at once, not when go test is done.
set -m
# shellcheck disable=SC2086
go test -count=1 -timeout 30m ${GOTESTFLAGS:-} "${pkgs[@]}" > >(tee "$LOG") 2>&1 &
gopid=$!
set +m
status=0
wait "$gopid" || status=$?
gopid=""
t_test=$((SECONDS - t0))

echo "== test-kafka summary: Apache Kafka $KAFKA_VERSION (KRaft, single node) =="
grep -E '^(ok|FAIL|--- FAIL|panic)' "$LOG" || true
echo "test-kafka: install ${t_install}s, broker start ${t_start}s, go test ${t_test}s, total $((SECONDS - t_all))s; go test exit status $status"
exit "$status"
