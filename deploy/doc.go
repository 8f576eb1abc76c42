// Package deploy holds the deployment files docker-compose.yml refers to
// (haproxy.cfg, prometheus.yml, grafana/ provisioning) and the test that
// runs docker-compose.yml as local processes: the same commands, environment
// and health checks, with every hostname and port mapped to 127.0.0.1
// (compose_test.go; `make test-compose`). It has no code of its own: nothing
// imports it, and it must not grow a second copy of the topology, which is
// the compose file's alone.
package deploy
