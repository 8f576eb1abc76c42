package deploy

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sync/errgroup"

	"github.com/inboxd/inboxd/internal/pgserver"
)

// EnvMode selects how TestComposeTopology treats a missing tool: "required"
// fails (make test-compose, CI), "skip" skips the test outright (make test
// and make test-race, which leave it to make test-compose), anything else
// skips with the reason (a plain go test ./...).
const EnvMode = "INBOXD_COMPOSE_TEST"

// The profiles TestComposeTopology runs besides the default services.
var profiles = map[string]bool{"monitoring": true}

// TestComposeTopology runs docker-compose.yml as local processes and checks
// that every command and health check in it works:
//
//   - the file is read as compose reads it (anchors, merge keys, ${VAR}
//     interpolation with a random INBOXD_AUTH_SECRET);
//   - every service of the default set and of the monitoring profile runs at
//     its replica count, each instance with its service's command and
//     environment, its hostnames (and network aliases) and ports mapped to
//     127.0.0.1 (topology_test.go says how, images_test.go how each image
//     runs here): PostgreSQL, the migrate job (which must exit 0), three
//     KRaft brokers of the file's Apache Kafka version, SeaweedFS of the
//     file's release, fanout and gateway, HAProxy with deploy/haproxy.cfg,
//     Prometheus with deploy/prometheus.yml;
//   - services start when their depends_on conditions hold, as compose starts
//     them, and every health check is run as written until it passes (polled
//     every second rather than every interval; the budget is the file's
//     start_period + retries x interval, at least 90 s on a loaded machine);
//   - then messages go both ways between the two gateways (a send on one
//     answers a long-poll held on the other), through the load balancer over
//     HTTP (send, long-poll, a long-poll held for the protocol's longest wait)
//     and over a WebSocket, and the load balancer sees both gateways up;
//   - an attachment goes through the load balancer and SeaweedFS as a client
//     sends one: an upload, the sealed file PUT to the presigned URL, a
//     message attaching it, its download (302 to a presigned GET of the
//     same bytes), on the store's name as the file gives it to clients;
//   - Prometheus scrapes every target up and loaded the alert rules; Grafana's
//     provisioning points at files that exist;
//   - every long-running process must still run at the end; the inboxd
//     services must exit 0 on SIGTERM within their stop_grace_period.
//
// Every process it starts is ended when it ends.
func TestComposeTopology(t *testing.T) {
	runCompose(t, profiles, nil, nil)
}

// TestComposeSharded runs profile "sharded" as TestComposeTopology runs
// the default services (every command and health check, the same
// traffic), with INBOXD_SHARD_DSNS naming postgres-2 as the file's
// comment says: the migrate job adds the second server and places the
// partitions over both, each server's fanout serves its own, and the
// gateways read both; afterwards the catalog holds two servers, each with
// partitions, and inboxd verify checks each server and the crossing.
func TestComposeSharded(t *testing.T) {
	runCompose(t, map[string]bool{"sharded": true},
		map[string]string{"INBOXD_SHARD_DSNS": "postgres://inboxd:inboxd@postgres-2:5432/inboxd?sslmode=disable"},
		checkSharded)
}

// runCompose is TestComposeTopology with the given profiles and variables
// (beside INBOXD_AUTH_SECRET); more runs after the traffic.
func runCompose(t *testing.T, profiles map[string]bool, extraVars map[string]string,
	more func(t *testing.T, ctx context.Context, tp *topology, logf func(string, ...any))) {
	mode := os.Getenv(EnvMode)
	if mode == "skip" {
		t.Skipf("%s=skip: make test-compose runs this test", EnvMode)
	}
	need := func(format string, args ...any) {
		t.Helper()
		if mode == "required" {
			t.Fatalf("%s=required: "+format, append([]any{EnvMode}, args...)...)
		}
		t.Skipf(format+" (.ci/run installs it; make test-compose requires it)", args...)
	}
	if testing.Short() {
		need("-short: the topology takes minutes")
	}

	start := time.Now()
	logf := func(format string, args ...any) {
		t.Helper()
		t.Logf("[%5.1fs] "+format, append([]any{time.Since(start).Seconds()}, args...)...)
	}

	secret := make([]byte, 32)
	_, _ = rand.Read(secret)
	vars := map[string]string{"INBOXD_AUTH_SECRET": hex.EncodeToString(secret)}
	maps.Copy(vars, extraVars)
	composeDir, err := filepath.Abs("..")
	require.NoError(t, err)
	cf, err := loadCompose(filepath.Join(composeDir, "docker-compose.yml"), vars)
	require.NoError(t, err)

	checkLimits(t, cf)
	checkStoreEndpoint(t, cf)
	kafkaVersion := checkKafkaVersion(t, cf, composeDir)

	// The tools that stand in for the images.
	tl := &tools{kafkaVersion: kafkaVersion}
	for _, x := range []struct {
		dst  *string
		name string
		pkg  string
	}{{&tl.java, "java", "a JDK 17+ (Debian default-jre-headless)"}, {&tl.haproxy, "haproxy", "Debian haproxy"},
		{&tl.prometheus, "prometheus", "Debian prometheus"}, {&tl.promtool, "promtool", "Debian prometheus"},
		{new(string), "wget", "Debian wget (busybox's is in the images' health checks)"}} {
		p, err := exec.LookPath(x.name)
		if err != nil {
			need("%s not found: install %s", x.name, x.pkg)
		}
		*x.dst = p
	}
	tl.pgBin, err = pgserver.FindBinDir()
	if err != nil {
		need("%v", err)
	}
	tl.pgVersion = versionOf(filepath.Join(tl.pgBin, "postgres"), "--version")
	cache := os.Getenv("INBOXD_KAFKA_CACHE")
	if cache == "" {
		home, _ := os.UserHomeDir()
		cache = filepath.Join(home, ".cache", "inboxd", "kafka-"+kafkaVersion)
	}
	tl.kafkaLibs = filepath.Join(cache, "libs")
	for _, jar := range []string{"kafka_2.13-" + kafkaVersion + ".jar", "kafka-tools-" + kafkaVersion + ".jar"} {
		if _, err := os.Stat(filepath.Join(tl.kafkaLibs, jar)); err != nil {
			need("no %s in %s: run INBOXD_KAFKA_VERSION=%s scripts/kafka-local.sh install", jar, tl.kafkaLibs, kafkaVersion)
		}
	}
	// SeaweedFS as the attachment tests run it: INBOXD_WEED, else the
	// binary scripts/seaweedfs.sh builds and caches (make test does).
	if tl.weed = os.Getenv("INBOXD_WEED"); tl.weed == "" {
		out, err := exec.Command("bash", filepath.Join(composeDir, "scripts", "seaweedfs.sh"), "path").Output()
		if err != nil {
			need("no SeaweedFS binary: run scripts/seaweedfs.sh install")
		}
		tl.weed = strings.TrimSpace(string(out))
	}
	tl.weedVersion = weedVersion(tl.weed)
	checkImageVersions(t, cf, tl, logf)

	run, err := os.MkdirTemp("", "inboxd-compose-")
	require.NoError(t, err)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("kept the run's configs and logs in %s", run)
			return
		}
		_ = os.RemoveAll(run)
	})
	tl.kafkaBin = filepath.Join(run, "opt-kafka-bin")
	require.NoError(t, writeKafkaShims(tl))
	// Built while PostgreSQL and Kafka start; the inboxd instances wait.
	tl.inboxd = filepath.Join(run, "inboxd")
	tl.built = make(chan struct{})
	go func() {
		defer close(tl.built)
		t0 := time.Now()
		build := exec.Command("go", "build", "-o", tl.inboxd, "./cmd/inboxd")
		build.Dir = composeDir
		if out, err := build.CombinedOutput(); err != nil {
			tl.buildErr = fmt.Errorf("go build ./cmd/inboxd: %v\n%s", err, out)
			return
		}
		logf("built inboxd (%.1fs)", time.Since(t0).Seconds())
	}()
	logf("PostgreSQL %s, Apache Kafka %s, HAProxy %s, Prometheus %s, SeaweedFS %s", tl.pgVersion, kafkaVersion,
		versionOf(tl.haproxy, "-v"), versionOf(tl.prometheus, "--version"), tl.weedVersion)

	var running []*service
	names := make([]string, 0, len(cf.Services))
	for n := range cf.Services {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		s := cf.Services[n]
		if len(s.Profiles) > 0 && !anyOf(s.Profiles, profiles) {
			logf("%s: not run (profiles %v)", n, s.Profiles)
			continue
		}
		if why, ok := notRun[s.repo()]; ok {
			logf("%s (%s): not run: %s", n, s.Image, why)
			continue
		}
		running = append(running, s)
	}
	tp, err := newTopology(cf, composeDir, run, running)
	require.NoError(t, err)
	for _, s := range running {
		for _, in := range tp.instances[s.name] {
			tp.prepare(tl, in)
			ports := []string{}
			for cp, lp := range in.ports {
				ports = append(ports, fmt.Sprintf("%d->%d", cp, lp))
			}
			sort.Strings(ports)
			logf("%s: ports %s", in.name, strings.Join(ports, " "))
		}
	}

	ps := &procs{}
	t.Cleanup(func() { <-tl.built }) // before the run directory goes
	ctx, cancel := context.WithCancelCause(context.Background())
	t.Cleanup(func() { cancel(errors.New("test over")) })
	t.Cleanup(func() {
		// However the test ends: every process ends, the inboxd ones by
		// SIGTERM within their stop_grace_period and with status 0.
		stopAll(t, tp, ps, logf)
	})

	up := tp.startAll(ctx, t, tl, ps, cancel, logf)
	err = up.Wait()
	if err == nil {
		err = context.Cause(ctx) // a process that exited while others waited
	}
	if err != nil {
		dumpTails(t, ps)
		t.Fatalf("compose up: %v", err)
	}
	logf("every service is up and every health check passed")

	checkPostgresCommand(t, ctx, tp, logf)
	heldPoll := checkTraffic(t, ctx, tp, vars["INBOXD_AUTH_SECRET"], logf)
	checkAttachments(t, ctx, tp, vars["INBOXD_AUTH_SECRET"], logf)
	if profiles["monitoring"] {
		checkMonitoring(t, ctx, tp, composeDir, logf)
	}
	if more != nil {
		more(t, ctx, tp, logf)
	}
	heldPoll()

	if err := context.Cause(ctx); err != nil {
		dumpTails(t, ps)
		t.Fatalf("during the test: %v", err)
	}
	for _, p := range ps.all() {
		if p.exited() && !oneShot(tp, p) {
			t.Errorf("%s exited during the test: %v\n%s", p.name, p.err, p.tail(30))
		}
	}
	logf("checks done")
}

// startAll starts the services as compose up does: each once its
// depends_on conditions hold, its replicas together, then waits for its
// health checks (or, for a job others wait to complete, its exit 0).
func (tp *topology) startAll(ctx context.Context, t *testing.T, tl *tools, ps *procs, fail context.CancelCauseFunc, logf func(string, ...any)) *errgroup.Group {
	type state struct{ started, healthy, completed chan struct{} }
	states := map[string]*state{}
	for name := range tp.instances {
		states[name] = &state{make(chan struct{}), make(chan struct{}), make(chan struct{})}
	}
	g, gctx := errgroup.WithContext(ctx)
	for name := range tp.instances {
		svc := tp.file.Services[name]
		st := states[name]
		g.Go(func() error {
			for dep, c := range svc.DependsOn {
				ds := states[dep]
				if ds == nil {
					return fmt.Errorf("%s depends on %s, which does not run", name, dep)
				}
				var ch chan struct{}
				switch c.Condition {
				case "", "service_started":
					ch = ds.started
				case "service_healthy":
					if tp.file.Services[dep].Healthcheck == nil {
						return fmt.Errorf("%s waits for %s to be healthy, which has no health check", name, dep)
					}
					ch = ds.healthy
				case "service_completed_successfully":
					ch = ds.completed
				default:
					return fmt.Errorf("%s: depends_on condition %q", name, c.Condition)
				}
				select {
				case <-ch:
				case <-gctx.Done():
					return nil
				}
			}
			instances := tp.instances[name]
			started := make([]*proc, len(instances))
			for i, in := range instances {
				p, err := tp.start(gctx, tl, in, logf)
				if err != nil {
					return fmt.Errorf("start %s: %w", in.name, err)
				}
				p.svc = svc
				ps.add(p)
				started[i] = p
				logf("started %s (%s), log %s", in.name, svc.Image, p.log)
				if p.cmd != nil {
					go func() {
						<-p.done
						if !p.stopping.Load() && !oneShot(tp, p) {
							fail(fmt.Errorf("%s exited: %v\n%s", p.name, p.err, p.tail(30)))
						}
					}()
				}
			}
			close(st.started)
			if oneShot(tp, started[0]) {
				for _, p := range started {
					select {
					case <-p.done:
					case <-gctx.Done():
						return nil
					}
					if p.err != nil {
						return fmt.Errorf("%s (%v) failed: %v\n%s", p.name, svc.Command, p.err, p.tail(30))
					}
					logf("%s completed successfully", p.name)
				}
				close(st.completed)
			}
			if svc.Healthcheck == nil {
				return nil
			}
			hg, hctx := errgroup.WithContext(gctx)
			for _, in := range instances {
				hg.Go(func() error { return tp.waitHealthy(hctx, in, logf) })
			}
			if err := hg.Wait(); err != nil {
				return err
			}
			close(st.healthy)
			return nil
		})
	}
	return g
}

// oneShot: a service others wait for with service_completed_successfully is
// a job that exits (migrate); every other process must keep running.
func oneShot(tp *topology, p *proc) bool {
	for _, s := range tp.file.Services {
		if c, ok := s.DependsOn[p.svc.name]; ok && c.Condition == "service_completed_successfully" {
			return true
		}
	}
	return false
}

// waitHealthy runs the instance's health check until it passes.
func (tp *topology) waitHealthy(ctx context.Context, in *instance, logf func(string, ...any)) error {
	hc := in.svc.Healthcheck
	interval, err := duration(hc.Interval, 30*time.Second)
	if err != nil {
		return err
	}
	startPeriod, err := duration(hc.StartPeriod, 0)
	if err != nil {
		return err
	}
	retries := hc.Retries
	if retries == 0 {
		retries = 3
	}
	budget := startPeriod + time.Duration(retries)*interval
	if budget < 90*time.Second {
		budget = 90 * time.Second
	}
	t0 := time.Now()
	lastLog := t0
	var out string
	for attempt := 1; ; attempt++ {
		out, err = tp.healthOnce(ctx, in)
		if err != nil && time.Since(lastLog) > 20*time.Second {
			lastLog = time.Now()
			logf("health check of %s still failing (attempt %d, %.0fs of %v): %v %s", in.name, attempt, time.Since(t0).Seconds(), budget, err, strings.TrimSpace(out))
		}
		if err == nil {
			logf("health check of %s passed (attempt %d, %.1fs): %s", in.name, attempt, time.Since(t0).Seconds(), strings.Join(hc.Test, " "))
			return nil
		}
		if ctx.Err() != nil {
			return nil
		}
		if time.Since(t0) > budget {
			return fmt.Errorf("health check of %s (%s) still failing after %v: %v\n%s", in.name, strings.Join(hc.Test, " "), budget, err, out)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(time.Second):
		}
	}
}

// stopAll stops the topology as compose down does: a service after the
// services that depend on it, independent ones and the replicas of one
// together.
func stopAll(t *testing.T, tp *topology, ps *procs, logf func(string, ...any)) {
	byService := map[string][]*proc{}
	for _, p := range ps.all() {
		byService[p.svc.name] = append(byService[p.svc.name], p)
	}
	// level: 0 for a service without dependencies, else one more than the
	// highest of its dependencies; stopped from the highest level down.
	level := map[string]int{}
	var levelOf func(name string) int
	levelOf = func(name string) int {
		if l, ok := level[name]; ok {
			return l
		}
		level[name] = 0
		l := 0
		for dep := range tp.file.Services[name].DependsOn {
			l = max(l, levelOf(dep)+1)
		}
		level[name] = l
		return l
	}
	top := 0
	for name := range byService {
		top = max(top, levelOf(name))
	}
	for l := top; l >= 0; l-- {
		var wg sync.WaitGroup
		for name, list := range byService {
			if level[name] != l {
				continue
			}
			svc := tp.file.Services[name]
			grace, err := duration(svc.StopGracePeriod, 10*time.Second)
			if err != nil {
				t.Errorf("%s: stop_grace_period: %v", name, err)
			}
			for _, p := range list {
				if p.exited() {
					continue
				}
				wg.Add(1)
				go func() {
					defer wg.Done()
					t0 := time.Now()
					err, killed := p.terminate(grace)
					took := time.Since(t0).Round(10 * time.Millisecond)
					switch {
					case svc.repo() != "inboxd":
						logf("stopped %s (%v)", p.name, took)
					case killed:
						t.Errorf("%s did not exit within its stop_grace_period %v after SIGTERM:\n%s", p.name, grace, p.tail(20))
					case err != nil && !t.Failed():
						t.Errorf("%s exited with %v after SIGTERM:\n%s", p.name, err, p.tail(20))
					default:
						logf("stopped %s: exit 0 %v after SIGTERM", p.name, took)
					}
				}()
			}
		}
		wg.Wait()
	}
}

func dumpTails(t *testing.T, ps *procs) {
	for _, p := range ps.all() {
		t.Logf("--- %s (%s) ---\n%s", p.name, p.log, p.tail(12))
	}
}

func anyOf(have []string, want map[string]bool) bool {
	for _, h := range have {
		if want[h] {
			return true
		}
	}
	return false
}

// checkLimits: every service of the file has CPU and memory limits, and
// what its program sizes itself by stays inside them.
func checkLimits(t *testing.T, cf *composeFile) {
	t.Helper()
	for name, s := range cf.Services {
		l := s.Deploy.Resources.Limits
		require.NotEmpty(t, l.CPUs, "service %s has a CPU limit (deploy.resources.limits.cpus)", name)
		require.NotEmpty(t, l.Memory, "service %s has a memory limit (deploy.resources.limits.memory)", name)
		limit, err := bytesOf(l.Memory)
		require.NoError(t, err, name)
		within := func(what, size string) {
			n, err := bytesOf(size)
			require.NoError(t, err, "%s: %s", name, what)
			require.Less(t, n, limit, "service %s: %s %s within its memory limit %s", name, what, size, l.Memory)
		}
		if v := s.Environment["GOMEMLIMIT"]; v != "" {
			within("GOMEMLIMIT", v)
		}
		for _, f := range strings.Fields(s.Environment["KAFKA_HEAP_OPTS"]) {
			if v, ok := strings.CutPrefix(f, "-Xmx"); ok {
				within("the JVM heap", v)
			}
		}
		for i, a := range s.Command {
			if v, ok := strings.CutPrefix(a, "shared_buffers="); ok && i > 0 && s.Command[i-1] == "-c" {
				within("shared_buffers", v)
			}
		}
	}
}

var kafkaLocalVersion = regexp.MustCompile(`VERSION="\$\{INBOXD_KAFKA_VERSION:-([^}]+)\}"`)

// checkKafkaVersion: the brokers run the Apache Kafka version make
// test-kafka tests (scripts/kafka-local.sh's default), the same on all.
func checkKafkaVersion(t *testing.T, cf *composeFile, root string) string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(root, "scripts", "kafka-local.sh"))
	require.NoError(t, err)
	m := kafkaLocalVersion.FindSubmatch(raw)
	require.NotNil(t, m, "scripts/kafka-local.sh names its default Kafka version")
	tested := string(m[1])
	n := 0
	for name, s := range cf.Services {
		if s.repo() == "apache/kafka" {
			n++
			require.Equal(t, tested, s.tag(), "service %s runs the Kafka version the tests use", name)
		}
	}
	require.Equal(t, 3, n, "three brokers")
	return tested
}

// checkImageVersions: the images are the versions that run here (HAProxy's
// major.minor, Prometheus' major, SeaweedFS's release); PostgreSQL's major
// may differ (Debian ships one), and the test says so.
func checkImageVersions(t *testing.T, cf *composeFile, tl *tools, logf func(string, ...any)) {
	t.Helper()
	for name, s := range cf.Services {
		switch s.repo() {
		case "haproxy":
			local := versionOf(tl.haproxy, "-v")
			mm := strings.Join(strings.SplitN(local, ".", 3)[:2], ".")
			require.True(t, strings.HasPrefix(s.tag(), mm), "service %s: image %s is the HAProxy %s that runs here", name, s.Image, mm)
		case "prom/prometheus":
			local := versionOf(tl.prometheus, "--version")
			major, _, _ := strings.Cut(local, ".")
			require.True(t, strings.HasPrefix(s.tag(), "v"+major+"."), "service %s: image %s is the Prometheus %s.x that runs here", name, s.Image, major)
		case "chrislusf/seaweedfs":
			require.Equal(t, tl.weedVersion, s.tag(), "service %s: image %s is the SeaweedFS release that runs here (scripts/seaweedfs.sh's)", name, s.Image)
		case "postgres":
			major, _, _ := strings.Cut(tl.pgVersion, ".")
			if !strings.HasPrefix(s.tag(), major) {
				logf("%s: the file runs %s; PostgreSQL %s runs here (the newest of this machine's packages)", name, s.Image, tl.pgVersion)
			}
		}
	}
}

// weedVersion is the release of a weed binary: "4.53" of `weed version`'s
// "version 30GB 4.53 linux amd64" (the size limit it was built with comes
// first).
func weedVersion(bin string) string {
	out, _ := exec.Command(bin, "version").Output()
	f := strings.Fields(string(out))
	if len(f) < 3 || f[0] != "version" {
		return ""
	}
	return f[2]
}
