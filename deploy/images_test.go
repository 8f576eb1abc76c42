package deploy

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"go.yaml.in/yaml/v3"

	"github.com/inboxd/inboxd/internal/pgserver"
)

// How each image of the file runs here. An image is its entrypoint plus the
// files it ships; the test replaces both with their local equivalent and
// nothing else: the service's command, environment and health check are the
// file's, mapped by topology.rewrite.
//
//	image              entrypoint here                       image files here
//	inboxd (build .)   the binary built from this tree       /usr/local/bin/inboxd
//	postgres           internal/pgserver: initdb as the      pg_isready and the rest of
//	                   image's entrypoint does it (POSTGRES_ PostgreSQL's bin dir on PATH,
//	                   USER/PASSWORD/DB, scram on TCP,       PGHOST/PGPORT = the image's
//	                   trust on the socket), then `postgres` defaults (its socket, 5432)
//	                   with the command's arguments
//	apache/kafka       the image's launch script: kafka.docker /opt/kafka/bin/*.sh: scripts
//	                   .KafkaDockerWrapper setup (the same   running the tool's class from
//	                   KAFKA_* -> server.properties rules and the jars, as kafka-run-class.sh
//	                   storage format, from the same jar), does (toolClasses)
//	                   then kafka.Kafka server.properties
//	                   with KAFKA_HEAP_OPTS
//	haproxy            haproxy -W -db <command args> (what   wget for the health check
//	                   the image's entrypoint adds); the     (busybox's in the image)
//	                   config translated by translateHAProxy
//	prom/prometheus    prometheus <command>; the config      wget, as above
//	                   translated by translatePrometheus
//	chrislusf/seaweedfs
//	                   the image's entrypoint for `mini`:    wget, as above (busybox's
//	                   weed -logtostderr=true mini [-dir=    in the image)
//	                   /data] <args> with GODEBUG fips140=on,
//	                   the weed scripts/seaweedfs.sh builds
//	                   (the same release); its port flags
//	                   mapped by translateWeed
//
// Grafana is not packaged for Debian, so it does not run: notRun says so,
// and TestComposeTopology checks its provisioning against the files.
var notRun = map[string]string{
	"grafana/grafana": "no Grafana binary from this machine's package sources; its provisioning is checked against the files instead",
}

// toolClasses are the scripts of the Kafka image's /opt/kafka/bin the file
// runs, with the class each runs (bin/<script> is kafka-run-class.sh <class>).
var toolClasses = map[string]string{
	"kafka-broker-api-versions.sh": "org.apache.kafka.tools.BrokerApiVersionsCommand",
}

// tools are the local programs and files the images are replaced with.
type tools struct {
	inboxd       string
	built        chan struct{} // closed when inboxd is built, or failed to
	buildErr     error
	java         string
	kafkaLibs    string
	kafkaVersion string
	kafkaBin     string // the shims of /opt/kafka/bin
	pgBin        string
	pgVersion    string
	haproxy      string
	prometheus   string
	promtool     string
	weed         string // SeaweedFS
	weedVersion  string
}

// prepare sets up what every instance of the service needs before any
// starts: the image's files, the PATH its health check sees.
func (tp *topology) prepare(tl *tools, in *instance) {
	switch in.svc.repo() {
	case "inboxd":
		in.paths["/usr/local/bin/inboxd"] = tl.inboxd
	case "apache/kafka":
		in.paths["/opt/kafka/bin"] = tl.kafkaBin
	case "postgres":
		in.path = tl.pgBin + ":" + in.path
	}
}

// start runs one instance the way its image would.
func (tp *topology) start(ctx context.Context, tl *tools, in *instance, logf func(string, ...any)) (*proc, error) {
	logPath := filepath.Join(in.dir, "output.log")
	switch in.svc.repo() {
	case "inboxd":
		select {
		case <-tl.built:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		if tl.buildErr != nil {
			return nil, tl.buildErr
		}
		args, err := tp.rewriteAll(in.svc.Command, in)
		if err != nil {
			return nil, err
		}
		env, err := tp.env(in)
		if err != nil {
			return nil, err
		}
		return startLimited(in, logPath, env, append([]string{tl.inboxd}, args...)...)
	case "postgres":
		return tp.startPostgres(ctx, tl, in)
	case "apache/kafka":
		return tp.startKafka(ctx, tl, in, logPath)
	case "haproxy":
		return tp.startHAProxy(ctx, tl, in, logPath, logf)
	case "prom/prometheus":
		return tp.startPrometheus(ctx, tl, in, logPath)
	case "chrislusf/seaweedfs":
		return tp.startWeed(tl, in, logPath)
	}
	return nil, fmt.Errorf("service %s: the test does not know how to run image %s", in.svc.name, in.svc.Image)
}

func (tp *topology) startPostgres(ctx context.Context, tl *tools, in *instance) (*proc, error) {
	command := in.svc.Command
	if len(command) == 0 {
		command = []string{"postgres"} // the image's CMD
	}
	if command[0] != "postgres" {
		return nil, fmt.Errorf("service %s: the test runs the image's server only (command postgres ...), not %q", in.svc.name, command[0])
	}
	args, err := tp.rewriteAll(command[1:], in)
	if err != nil {
		return nil, err
	}
	env := in.svc.Environment
	user := env["POSTGRES_USER"]
	if user == "" {
		user = "postgres"
	}
	db := env["POSTGRES_DB"]
	if db == "" {
		db = user
	}
	if env["POSTGRES_PASSWORD"] == "" {
		return nil, fmt.Errorf("service %s: the image refuses to start without POSTGRES_PASSWORD", in.svc.name)
	}
	data := in.paths["/var/lib/postgresql/data"] // the image's PGDATA
	if data == "" {
		data = filepath.Join(in.dir, "data")
	}
	port := in.ports[5432]
	if port == 0 {
		return nil, fmt.Errorf("service %s: 5432 is not in its expose or ports", in.svc.name)
	}
	srv, err := pgserver.Start(ctx, pgserver.Config{Dir: data, Port: port, BinDir: tl.pgBin, User: user,
		Password: env["POSTGRES_PASSWORD"], Args: args, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		return nil, err
	}
	if db != "postgres" {
		c, err := pgx.Connect(ctx, srv.URL)
		if err == nil {
			_, err = c.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{db}.Sanitize())
			c.Close(ctx)
		}
		if err != nil {
			_ = srv.Stop()
			return nil, fmt.Errorf("create database %s as the image does: %w", db, err)
		}
	}
	in.healthEnv = []string{"PGHOST=" + srv.SocketDir(), fmt.Sprintf("PGPORT=%d", port)}
	p := &proc{name: in.name, log: filepath.Join(data, "postgres.log"), done: make(chan struct{})}
	p.stop = func() error {
		err := srv.Stop()
		close(p.done)
		return err
	}
	return p, nil
}

// kafkaLog4j is the broker's logging here (the image's own log4j2.yaml is
// not in the jars): INFO to stdout, as the image logs.
const kafkaLog4j = `status = warn
appender.out.type = Console
appender.out.name = out
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = info
rootLogger.appenderRef.out.ref = out
logger.request.name = kafka.request.logger
logger.request.level = warn
logger.state.name = state.change.logger
logger.state.level = warn
`

func (tp *topology) startKafka(ctx context.Context, tl *tools, in *instance, logPath string) (*proc, error) {
	if len(in.svc.Command) > 0 {
		return nil, fmt.Errorf("service %s: the test translates the image's own launch only, not a command", in.svc.name)
	}
	env, err := tp.env(in)
	if err != nil {
		return nil, err
	}
	if _, ok := in.svc.Environment["CLUSTER_ID"]; !ok {
		return nil, fmt.Errorf("service %s: KRaft mode needs CLUSTER_ID (the image's configure script refuses to start)", in.svc.name)
	}
	// The image's launch: the wrapper writes server.properties from the
	// KAFKA_* variables (with no defaults dir and no mounted configs here,
	// as in a container that mounts none) and formats the log dirs.
	conf := filepath.Join(in.dir, "config")
	for _, d := range []string{"defaults", "mounted", "config"} {
		if err := os.MkdirAll(filepath.Join(in.dir, d), 0o755); err != nil {
			return nil, err
		}
	}
	cp := filepath.Join(tl.kafkaLibs, "*")
	out, err := runOnce(ctx, 2*time.Minute, env, tl.java, "-Xmx256m", "-cp", cp, "kafka.docker.KafkaDockerWrapper", "setup",
		"--default-configs-dir", filepath.Join(in.dir, "defaults"), "--mounted-configs-dir", filepath.Join(in.dir, "mounted"),
		"--final-configs-dir", conf)
	if err != nil && !strings.Contains(strings.ToLower(out), "already formatted") {
		return nil, fmt.Errorf("%s: KafkaDockerWrapper setup: %v\n%s", in.name, err, out)
	}
	_ = os.WriteFile(filepath.Join(in.dir, "setup.log"), []byte(out), 0o644)
	log4j := filepath.Join(in.dir, "log4j2.properties")
	if err := os.WriteFile(log4j, []byte(kafkaLog4j), 0o644); err != nil {
		return nil, err
	}
	// kafka-server-start.sh: KAFKA_HEAP_OPTS, else 1G; kafka-run-class.sh's
	// JVM options.
	heap := strings.Fields(envOf(env, "KAFKA_HEAP_OPTS"))
	if len(heap) == 0 {
		heap = []string{"-Xmx1G", "-Xms1G"}
	}
	argv := append([]string{tl.java}, heap...)
	argv = append(argv, "-server", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20", "-XX:InitiatingHeapOccupancyPercent=35",
		"-XX:+ExplicitGCInvokesConcurrent", "-Djava.awt.headless=true", "-Dlog4j2.configurationFile="+log4j,
		"-cp", cp, "kafka.Kafka", filepath.Join(conf, "server.properties"))
	return startLimited(in, logPath, env, argv...)
}

// startLimited starts the instance's process under its service's ulimits,
// as Docker sets them for the container: prlimit(1) sets them and execs the
// program (the same process). Raising a hard limit needs root, as it needs
// the Docker daemon's privileges.
func startLimited(in *instance, logPath string, env []string, argv ...string) (*proc, error) {
	lims, _, err := in.svc.ulimits()
	if err != nil {
		return nil, err
	}
	if len(lims) > 0 {
		prlimit, err := exec.LookPath("prlimit")
		if err != nil {
			return nil, fmt.Errorf("service %s has ulimits: prlimit (util-linux) not found", in.svc.name)
		}
		argv = append(append(append([]string{prlimit}, lims...), "--"), argv...)
	}
	return startProc(in.name, logPath, env, argv...)
}

// writeKafkaShims writes /opt/kafka/bin's scripts the file uses: each runs
// its class from the jars, with KAFKA_HEAP_OPTS or kafka-run-class.sh's
// default heap.
func writeKafkaShims(tl *tools) error {
	if err := os.MkdirAll(tl.kafkaBin, 0o755); err != nil {
		return err
	}
	for script, class := range toolClasses {
		sh := fmt.Sprintf("#!/bin/sh\n# /opt/kafka/bin/%s of the apache/kafka image: kafka-run-class.sh %s\n"+
			"exec %s ${KAFKA_HEAP_OPTS:--Xmx256M} -cp '%s/*' %s \"$@\"\n", script, class, tl.java, tl.kafkaLibs, class)
		if err := os.WriteFile(filepath.Join(tl.kafkaBin, script), []byte(sh), 0o755); err != nil {
			return err
		}
	}
	return nil
}

func (tp *topology) startHAProxy(ctx context.Context, tl *tools, in *instance, logPath string, logf func(string, ...any)) (*proc, error) {
	command := in.svc.Command
	if len(command) == 0 || command[0] != "haproxy" {
		return nil, fmt.Errorf("service %s: the test runs `haproxy -f <config>` commands only, not %q", in.svc.name, command)
	}
	cfg := flagValue(command, "-f")
	host := in.paths[cfg]
	if host == "" {
		return nil, fmt.Errorf("service %s: its config %q is not a file the service mounts", in.svc.name, cfg)
	}
	translated, notes, err := tp.translateHAProxy(in, host)
	if err != nil {
		return nil, err
	}
	for _, n := range notes {
		logf("%s: %s", in.name, n)
	}
	local := filepath.Join(in.dir, "haproxy.cfg")
	if err := os.WriteFile(local, []byte(translated), 0o644); err != nil {
		return nil, err
	}
	in.paths[cfg] = local
	if out, err := runOnce(ctx, time.Minute, nil, tl.haproxy, "-c", "-f", local); err != nil {
		return nil, fmt.Errorf("haproxy -c -f %s (translated from %s): %v\n%s", local, host, err, out)
	}
	args, err := tp.rewriteAll(command[1:], in)
	if err != nil {
		return nil, err
	}
	env, err := tp.env(in)
	if err != nil {
		return nil, err
	}
	// The image's entrypoint: haproxy -W -db <args> (master-worker, in the
	// foreground).
	return startLimited(in, logPath, env, append([]string{tl.haproxy, "-W", "-db"}, args...)...)
}

// translateHAProxy maps a HAProxy config onto this host: `server-template
// <prefix> <n> <service>:<port> <options>` becomes one `server <prefix><i>
// <replica's address> <options>` per replica of the service (where Docker's
// DNS would fill the template's slots), every other line goes through
// rewrite (bind :8080 -> bind 127.0.0.1:<port>). A global maxconn needs two
// descriptors per connection: when the machine's limit (ulimits) is lower
// than the container's, maxconn is lowered to fit, and notes say so.
func (tp *topology) translateHAProxy(in *instance, path string) (string, []string, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return "", nil, err
	}
	_, notes, err := in.svc.ulimits()
	if err != nil {
		return "", nil, err
	}
	var out []string
	section := ""
	for n, line := range strings.Split(string(raw), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 || strings.HasPrefix(f[0], "#") {
			out = append(out, line)
			continue
		}
		if !strings.HasPrefix(line, " ") && !strings.HasPrefix(line, "\t") {
			section = f[0]
		}
		if section == "global" && f[0] == "maxconn" && len(f) == 2 {
			const reserve = 100 // listeners, checks, logs, the master's pipes
			m, err := strconv.Atoi(f[1])
			if err != nil {
				return "", nil, fmt.Errorf("%s:%d: maxconn %q: %w", path, n+1, f[1], err)
			}
			if fds := in.svc.nofile(); 2*m+reserve > fds {
				fit := (fds - reserve) / 2
				notes = append(notes, fmt.Sprintf("maxconn %d lowered to %d to fit %d descriptors", m, fit, fds))
				line = strings.Replace(line, f[1], strconv.Itoa(fit), 1)
			}
			out = append(out, line)
			continue
		}
		if f[0] != "server-template" {
			r, err := tp.rewrite(line, in)
			if err != nil {
				return "", nil, fmt.Errorf("%s:%d: %w", path, n+1, err)
			}
			out = append(out, r)
			continue
		}
		if len(f) < 4 {
			return "", nil, fmt.Errorf("%s:%d: server-template needs a prefix, a count and an address", path, n+1)
		}
		slots, err := strconv.Atoi(f[2])
		if err != nil {
			return "", nil, fmt.Errorf("%s:%d: server-template count %q: %w", path, n+1, f[2], err)
		}
		svc, portS, _ := strings.Cut(f[3], ":")
		port, _ := strconv.Atoi(portS)
		reps := tp.instances[svc]
		if len(reps) == 0 {
			return "", nil, fmt.Errorf("%s:%d: server-template names %s, not a running service", path, n+1, svc)
		}
		if slots < len(reps) {
			return "", nil, fmt.Errorf("%s:%d: server-template has %d slots for %d replicas of %s", path, n+1, slots, len(reps), svc)
		}
		indent := line[:len(line)-len(strings.TrimLeft(line, " \t"))]
		for i, r := range reps {
			a, err := r.addr(port)
			if err != nil {
				return "", nil, fmt.Errorf("%s:%d: %w", path, n+1, err)
			}
			out = append(out, fmt.Sprintf("%sserver %s%d %s %s", indent, f[1], i+1, a, strings.Join(f[4:], " ")))
		}
	}
	return strings.Join(out, "\n"), notes, nil
}

func (tp *topology) startPrometheus(ctx context.Context, tl *tools, in *instance, logPath string) (*proc, error) {
	command := in.svc.Command
	cfg := flagValue(command, "--config.file")
	host := in.paths[cfg]
	if host == "" {
		return nil, fmt.Errorf("service %s: its --config.file %q is not a file the service mounts", in.svc.name, cfg)
	}
	translated, err := tp.translatePrometheus(in, host)
	if err != nil {
		return nil, err
	}
	local := filepath.Join(in.dir, "prometheus.yml")
	if err := os.WriteFile(local, translated, 0o644); err != nil {
		return nil, err
	}
	in.paths[cfg] = local
	// promtool checks the config and the rule files it loads.
	if out, err := runOnce(ctx, time.Minute, nil, tl.promtool, "check", "config", local); err != nil {
		return nil, fmt.Errorf("promtool check config %s (translated from %s): %v\n%s", local, host, err, out)
	}
	args, err := tp.rewriteAll(command, in)
	if err != nil {
		return nil, err
	}
	env, err := tp.env(in)
	if err != nil {
		return nil, err
	}
	return startLimited(in, logPath, env, append([]string{tl.prometheus}, args...)...)
}

// translatePrometheus maps a Prometheus config onto this host: the text
// through rewrite first (static targets, rule file paths), then every
// dns_sd_config (type A: one target per address of each name) becomes a
// static_config of the replicas of the service each name is.
func (tp *topology) translatePrometheus(in *instance, path string) ([]byte, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	text, err := tp.rewrite(string(raw), in)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	var doc map[string]any
	if err := yaml.Unmarshal([]byte(text), &doc); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	scs, _ := doc["scrape_configs"].([]any)
	for _, sc := range scs {
		m, _ := sc.(map[string]any)
		dns, ok := m["dns_sd_configs"].([]any)
		if !ok {
			continue
		}
		statics, _ := m["static_configs"].([]any)
		for _, d := range dns {
			dm, _ := d.(map[string]any)
			if t, _ := dm["type"].(string); t != "" && t != "A" {
				return nil, fmt.Errorf("%s: job %v: dns_sd_config of type %s: the test maps type A only", path, m["job_name"], t)
			}
			port, _ := dm["port"].(int)
			names, _ := dm["names"].([]any)
			var targets []any
			for _, n := range names {
				reps := tp.instances[fmt.Sprint(n)]
				if len(reps) == 0 {
					return nil, fmt.Errorf("%s: job %v: %v is not a running service", path, m["job_name"], n)
				}
				for _, r := range reps {
					a, err := r.addr(port)
					if err != nil {
						return nil, fmt.Errorf("%s: job %v: %w", path, m["job_name"], err)
					}
					targets = append(targets, a)
				}
			}
			statics = append(statics, map[string]any{"targets": targets})
		}
		delete(m, "dns_sd_configs")
		m["static_configs"] = statics
	}
	return yaml.Marshal(doc)
}

// startWeed runs the image's entrypoint for `mini`: weed -logtostderr=true
// mini, with -dir=/data unless the command gives a -dir, and the FIPS
// 140-3 mode the entrypoint turns on. (It also drops root for the user
// seaweed, which has no counterpart here.)
func (tp *topology) startWeed(tl *tools, in *instance, logPath string) (*proc, error) {
	command := in.svc.Command
	if len(command) == 0 || command[0] != "mini" {
		return nil, fmt.Errorf("service %s: the test runs the image's `mini` only (all in one process), not %q", in.svc.name, command)
	}
	args := command[1:]
	if flagValue(args, "-dir") == "" && flagValue(args, "--dir") == "" {
		args = append([]string{"-dir=/data"}, args...)
	}
	args, err := tp.rewriteAll(args, in)
	if err != nil {
		return nil, err
	}
	if args, err = translateWeed(in, args); err != nil {
		return nil, err
	}
	env, err := tp.env(in)
	if err != nil {
		return nil, err
	}
	godebug := "fips140=on"
	if v := envOf(env, "GODEBUG"); v != "" {
		godebug = v + "," + godebug
	}
	env = append(env, "GODEBUG="+godebug)
	return startLimited(in, logPath, env, append([]string{tl.weed, "-logtostderr=true", "mini"}, args...)...)
}

// weedPortFlag is a weed flag naming a port of its own: -master.port=9333,
// -s3.port.grpc=18333.
var weedPortFlag = regexp.MustCompile(`^(--?[A-Za-z0-9.]*port(?:\.[A-Za-z]+)?)=(\d+)$`)

// translateWeed maps weed's flags onto this host: a port flag names a bare
// port, which is the instance's mapped one (0 turns a component off and
// stays); -ip.bind=0.0.0.0, every interface of the container, is the
// loopback here, as `bind :8080` is for HAProxy. A component whose port
// the command leaves to weed's default would listen on that port of this
// machine, and an S3, master, volume or filer without its gRPC port would
// take the mapped port + 10000: the command must name them all.
func translateWeed(in *instance, args []string) ([]string, error) {
	out := make([]string, len(args))
	named := map[string]bool{}
	for i, a := range args {
		out[i] = a
		if m := weedPortFlag.FindStringSubmatch(a); m != nil {
			port, _ := strconv.Atoi(m[2])
			named[strings.TrimLeft(m[1], "-")] = true
			if port == 0 {
				continue
			}
			lp, ok := in.ports[port]
			if !ok {
				return nil, fmt.Errorf("service %s: %s: port %d is not in its expose or ports", in.svc.name, a, port)
			}
			out[i] = fmt.Sprintf("%s=%d", m[1], lp)
			continue
		}
		if v, ok := strings.CutPrefix(strings.TrimLeft(a, "-"), "ip.bind="); ok && selfHosts[v] {
			out[i] = "-ip.bind=127.0.0.1"
		}
	}
	for _, c := range []string{"master", "volume", "filer", "s3", "admin"} {
		for _, f := range []string{c + ".port", c + ".port.grpc"} {
			if !named[f] {
				return nil, fmt.Errorf("service %s: the command leaves -%s to weed's default; name it (and list it in expose)", in.svc.name, f)
			}
		}
	}
	return out, nil
}

// healthOnce runs the service's health check once, as Docker runs it in the
// container: CMD as an argument list, CMD-SHELL with /bin/sh -c, in the
// container's environment, within the check's timeout.
func (tp *topology) healthOnce(ctx context.Context, in *instance) (string, error) {
	hc := in.svc.Healthcheck
	env, err := tp.env(in)
	if err != nil {
		return "", err
	}
	env = append(env, in.healthEnv...)
	timeout, err := duration(hc.Timeout, 30*time.Second)
	if err != nil {
		return "", err
	}
	var argv []string
	switch hc.Test[0] {
	case "CMD":
		argv, err = tp.rewriteAll(hc.Test[1:], in)
		if err != nil {
			return "", err
		}
		if argv[0], err = lookIn(in.path, argv[0]); err != nil {
			return "", err
		}
	case "CMD-SHELL":
		sh, err := tp.rewrite(strings.Join(hc.Test[1:], " "), in)
		if err != nil {
			return "", err
		}
		argv = []string{"/bin/sh", "-c", sh}
	default:
		return "", fmt.Errorf("health check %q: the test runs CMD and CMD-SHELL", hc.Test)
	}
	return runOnce(ctx, timeout, env, argv...)
}

// lookIn finds a command as the container would, on its PATH.
func lookIn(path, name string) (string, error) {
	if strings.Contains(name, "/") {
		if _, err := os.Stat(name); err != nil {
			return "", fmt.Errorf("%s: no such file here (is it an image file the test does not map?)", name)
		}
		return name, nil
	}
	for _, d := range filepath.SplitList(path) {
		p := filepath.Join(d, name)
		if st, err := os.Stat(p); err == nil && !st.IsDir() && st.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s: not found on %s", name, path)
}

// flagValue is the value of a flag in an argument list: "-f x", "--f=x".
func flagValue(args []string, name string) string {
	for i, a := range args {
		if a == name && i+1 < len(args) {
			return args[i+1]
		}
		if v, ok := strings.CutPrefix(a, name+"="); ok {
			return v
		}
	}
	return ""
}

func envOf(env []string, key string) string {
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, key+"="); ok {
			return v
		}
	}
	return ""
}

var leadingVersion = regexp.MustCompile(`\d+(\.\d+)*`)

// versionOf is the first dotted number of a program's --version output.
func versionOf(argv ...string) string {
	out, _ := exec.Command(argv[0], argv[1:]...).CombinedOutput()
	return leadingVersion.FindString(string(out))
}
