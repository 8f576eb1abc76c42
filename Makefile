# inboxd: the two commands are `make run` and `make test`.
GO ?= go
GOTESTFLAGS ?=

.PHONY: run check test test-race test-kafka test-compose test-sharded test-short test-ts fuzz build vet bench clean

run: ## build bin/inboxd and start inboxd dev on its embedded Kafka and PostgreSQL (Ctrl-C stops it; exit 0)
	$(GO) build -o bin/inboxd ./cmd/inboxd
	@# On a terminal, inboxd runs as its own foreground job (bash job control):
	@# Ctrl-C reaches inboxd alone, it stops cleanly and make exits 0 instead
	@# of dying of the signal. Without a terminal it simply runs.
	@if [ -t 0 ]; then bash -c 'set -m; bin/inboxd dev $(ARGS) & fg %1 >/dev/null'; else exec bin/inboxd dev $(ARGS); fi

build:
	$(GO) build -o bin/inboxd ./cmd/inboxd
	$(GO) build -o bin/inboxd-bench ./cmd/inboxd-bench

check: ## the quick loop (about a minute cold, seconds warm): vet, build, and every test that needs no PostgreSQL and no inboxd process (see CONTRIBUTING.md)
	$(GO) vet ./...
	$(GO) build ./...
	INBOXD_TEST_UNIT=1 INBOXD_COMPOSE_TEST=skip $(GO) test -count=1 -short -run '^(Test|Fuzz)' $(GOTESTFLAGS) ./...

# make test and make test-race leave the compose topology to make test-compose.
test: ## every test, against a real PostgreSQL, kfake and SeaweedFS (S3) started by the tests; then the TypeScript SDK's (test-ts)
	scripts/seaweedfs.sh install >/dev/null
	$(GO) vet ./...
	INBOXD_COMPOSE_TEST=skip $(GO) test -count=1 -timeout 40m $(GOTESTFLAGS) ./...
	$(MAKE) test-ts

test-race: ## every test under the race detector (the inboxd binaries the tests start too)
	INBOXD_COMPOSE_TEST=skip $(GO) test -race -count=1 -timeout 40m $(GOTESTFLAGS) ./...

test-sharded: ## the pipeline's suites again on two PostgreSQL servers (INBOXD_TEST_PG_SERVERS=2: a placement of two databases, each server's stages and notifier): fanout, replay, gateway, client, notifier
	INBOXD_TEST_PG_SERVERS=2 INBOXD_COMPOSE_TEST=skip $(GO) test -count=1 -timeout 30m $(GOTESTFLAGS) ./fanout/ ./replay/ ./gateway/... ./client/ ./notifier/

test-kafka: ## the integration tests against a real Apache Kafka 4.1.1 (KRaft, jars from Maven Central; needs java 17+, mvn)
	GOTESTFLAGS="$(GOTESTFLAGS)" scripts/test-kafka.sh

test-compose: ## docker-compose.yml run as local processes (deploy/compose_test.go): every command and health check, traffic through both gateways and HAProxy, attachments through SeaweedFS, Prometheus; then profile sharded (two PostgreSQL servers); needs java, mvn, haproxy, prometheus, wget; a missing one fails
	scripts/kafka-local.sh install
	scripts/seaweedfs.sh install >/dev/null
	INBOXD_COMPOSE_TEST=required $(GO) test -count=1 -v -timeout 20m -run 'TestCompose(Topology|Sharded)$$' $(GOTESTFLAGS) ./deploy/

fuzz: ## schemathesis (pinned in scripts/fuzz/requirements.txt) against /openapi.yaml of inboxd dev for 3 minutes; then checks the pipeline still projects
	scripts/fuzz-api.sh

test-short:
	$(GO) test -count=1 -short ./...

test-ts: ## the TypeScript SDK (clients/typescript): npm ci, the build, eslint, the typedoc check, unit tests, then integration tests against an inboxd dev it builds (needs node 20+, go)
	cd clients/typescript && npm ci && npm test

bench: ## the figures of docs/benchmarks.md's generated block (about 4 minutes on 2 cores); regenerates its tables and charts
	$(GO) run ./cmd/inboxd-bench all

clean:
	rm -rf bin data
