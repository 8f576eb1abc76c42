package deploy

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"go.yaml.in/yaml/v3"
)

// composeFile is the part of the compose file format the test reads. What it
// does not know it does not run: an unknown image fails the test.
type composeFile struct {
	Services map[string]*service `yaml:"services"`
}

type service struct {
	name            string
	Image           string            `yaml:"image"`
	Command         []string          `yaml:"command"`
	Environment     map[string]string `yaml:"environment"`
	Volumes         []string          `yaml:"volumes"`
	Ports           []string          `yaml:"ports"`
	Expose          []string          `yaml:"expose"`
	Profiles        []string          `yaml:"profiles"`
	Restart         string            `yaml:"restart"`
	StopGracePeriod string            `yaml:"stop_grace_period"`
	DependsOn       map[string]struct {
		Condition string `yaml:"condition"`
	} `yaml:"depends_on"`
	Healthcheck *healthcheck   `yaml:"healthcheck"`
	Ulimits     map[string]any `yaml:"ulimits"`
	// Networks is a list of network names or a map of them to their
	// settings, of which the test reads the aliases (aliases).
	Networks yaml.Node `yaml:"networks"`
	Deploy   struct {
		Replicas  *int `yaml:"replicas"`
		Resources struct {
			Limits struct {
				CPUs   string `yaml:"cpus"`
				Memory string `yaml:"memory"`
			} `yaml:"limits"`
		} `yaml:"resources"`
	} `yaml:"deploy"`
}

type healthcheck struct {
	Test        []string `yaml:"test"`
	Interval    string   `yaml:"interval"`
	Timeout     string   `yaml:"timeout"`
	Retries     int      `yaml:"retries"`
	StartPeriod string   `yaml:"start_period"`
}

func (s *service) replicas() int {
	if s.Deploy.Replicas == nil {
		return 1
	}
	return *s.Deploy.Replicas
}

// ulimits are the service's limits as prlimit(1) options ("--nofile=S:H"),
// in a stable order. A limit above the test's own hard limit is lowered to
// it (raising a hard limit needs CAP_SYS_RESOURCE, which Docker's daemon has
// and a test may not): notes says which.
func (s *service) ulimits() (opts, notes []string, err error) {
	names := make([]string, 0, len(s.Ulimits))
	for n := range s.Ulimits {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		var soft, hard int
		switch v := s.Ulimits[n].(type) {
		case int:
			soft, hard = v, v
		case map[string]any:
			soft, _ = v["soft"].(int)
			hard, _ = v["hard"].(int)
		}
		if soft == 0 || hard == 0 {
			return nil, nil, fmt.Errorf("service %s: ulimits.%s: %v", s.name, n, s.Ulimits[n])
		}
		if n == "nofile" {
			var own syscall.Rlimit
			if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &own); err == nil && uint64(hard) > own.Max {
				notes = append(notes, fmt.Sprintf("ulimits.nofile %d lowered to this machine's hard limit %d", hard, own.Max))
				hard = int(own.Max)
				soft = min(soft, hard)
			}
		}
		opts = append(opts, fmt.Sprintf("--%s=%d:%d", n, soft, hard))
	}
	return opts, notes, nil
}

// nofile is the descriptor limit the service's processes get here.
func (s *service) nofile() int {
	opts, _, _ := s.ulimits()
	for _, o := range opts {
		if v, ok := strings.CutPrefix(o, "--nofile="); ok {
			n, _ := strconv.Atoi(strings.Split(v, ":")[0])
			return n
		}
	}
	var own syscall.Rlimit
	_ = syscall.Getrlimit(syscall.RLIMIT_NOFILE, &own)
	return int(own.Cur)
}

// aliases are the other names the service has on its networks: Docker's
// DNS resolves them to its containers, as it does the service's name.
func (s *service) aliases() ([]string, error) {
	if s.Networks.Kind != yaml.MappingNode {
		return nil, nil // none, or a list of network names
	}
	var nets map[string]*struct {
		Aliases []string `yaml:"aliases"`
	}
	if err := s.Networks.Decode(&nets); err != nil {
		return nil, fmt.Errorf("service %s: networks: %w", s.name, err)
	}
	var out []string
	for _, n := range nets {
		if n != nil {
			out = append(out, n.Aliases...)
		}
	}
	return out, nil
}

// repo is the image name without its tag; tag is the tag.
func (s *service) repo() string { r, _, _ := strings.Cut(s.Image, ":"); return r }
func (s *service) tag() string  { _, t, _ := strings.Cut(s.Image, ":"); return t }

// containerPorts are the ports the service's containers listen on, as the
// file declares them: `expose`, and the container side of `ports`.
func (s *service) containerPorts() ([]int, error) {
	var out []int
	add := func(spec string) error {
		spec, _, _ = strings.Cut(spec, "/") // 9092/tcp
		p, err := strconv.Atoi(spec)
		if err != nil {
			return fmt.Errorf("service %s: port %q: %w", s.name, spec, err)
		}
		out = append(out, p)
		return nil
	}
	for _, e := range s.Expose {
		if err := add(e); err != nil {
			return nil, err
		}
	}
	for _, p := range s.Ports {
		// [host_ip:][host_port[-range]:]container_port
		parts := strings.Split(p, ":")
		if err := add(parts[len(parts)-1]); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// published are the container ports the service publishes on the host, in
// the file's order.
func (s *service) published() ([]int, error) {
	var out []int
	for _, p := range s.Ports {
		parts := strings.Split(p, ":")
		n, err := strconv.Atoi(strings.Split(parts[len(parts)-1], "/")[0])
		if err != nil {
			return nil, fmt.Errorf("service %s: port %q: %w", s.name, p, err)
		}
		out = append(out, n)
	}
	return out, nil
}

// loadCompose reads the compose file as `docker compose` would for the
// forms it uses: YAML anchors and merge keys, then ${VAR}, ${VAR:-default},
// ${VAR:?error} and $$ in every string, from vars only (not the test's
// environment, so a run does not depend on the shell).
func loadCompose(path string, vars map[string]string) (*composeFile, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var root yaml.Node
	if err := yaml.Unmarshal(raw, &root); err != nil {
		return nil, fmt.Errorf("parse %s: %w", path, err)
	}
	var ierr error
	seen := map[*yaml.Node]bool{}
	var walk func(n *yaml.Node)
	walk = func(n *yaml.Node) {
		if n == nil || seen[n] {
			return // an anchored node is interpolated once, not per alias
		}
		seen[n] = true
		if n.Kind == yaml.ScalarNode && n.Tag == "!!str" {
			v, err := interpolate(n.Value, vars)
			if err != nil && ierr == nil {
				ierr = fmt.Errorf("%s line %d: %w", path, n.Line, err)
			}
			n.Value = v
		}
		walk(n.Alias)
		for _, c := range n.Content {
			walk(c)
		}
	}
	walk(&root)
	if ierr != nil {
		return nil, ierr
	}
	var cf composeFile
	if err := root.Decode(&cf); err != nil {
		return nil, fmt.Errorf("decode %s: %w", path, err)
	}
	for name, s := range cf.Services {
		s.name = name
	}
	return &cf, nil
}

var interpolation = regexp.MustCompile(`\$\$|\$\{([A-Za-z_][A-Za-z0-9_]*)(?:(:?[-?])([^}]*))?\}|\$([A-Za-z_][A-Za-z0-9_]*)`)

func interpolate(s string, vars map[string]string) (string, error) {
	var err error
	out := interpolation.ReplaceAllStringFunc(s, func(m string) string {
		if m == "$$" {
			return "$"
		}
		sm := interpolation.FindStringSubmatch(m)
		name, op, arg := sm[1], sm[2], sm[3]
		if name == "" {
			name = sm[4]
		}
		v, set := vars[name]
		empty := !set || (strings.HasPrefix(op, ":") && v == "")
		switch strings.TrimPrefix(op, ":") {
		case "-":
			if empty {
				return arg
			}
		case "?":
			if empty && err == nil {
				err = fmt.Errorf("required variable %s: %s", name, arg)
			}
		}
		return v
	})
	return out, err
}

// instance is one container of a service: replica i (0-based) of it, named
// as compose names its containers' logs (gateway-1, gateway-2).
type instance struct {
	svc     *service
	replica int
	name    string
	dir     string      // the instance's files: configs, logs
	ports   map[int]int // container port -> port on 127.0.0.1
	// paths maps a path inside the container (a volume's or bind mount's
	// target, or a file of the image) to the local file or directory.
	paths map[string]string
	// healthEnv is added to the service's environment for its health check
	// (what the container gives a command implicitly, e.g. PGHOST).
	healthEnv []string
	// path is the PATH the health check's commands are looked up in.
	path string
}

// topology is the compose file mapped onto one host.
type topology struct {
	file      *composeFile
	dir       string // the compose file's directory, for bind mounts
	run       string // where the instances' files go
	instances map[string][]*instance
	// names maps every name Docker's DNS would resolve to a service's
	// containers (its name, its aliases) to the service.
	names map[string]string
}

// selfHosts name the container itself: a listener on them, or a health
// check probing them, is the instance's own mapped port.
var selfHosts = map[string]bool{"": true, "*": true, "localhost": true, "127.0.0.1": true, "0.0.0.0": true, "[::]": true}

// hostPort finds host:port in any text (URLs, listener lists, quorum voters,
// bind lines, flags): a host is a name, an IPv4 address, * or nothing
// (":9092"), not preceded by a character of a name.
var hostPort = regexp.MustCompile(`(^|[^A-Za-z0-9_.\-])([A-Za-z0-9_.\-]*|\*|\[::\]):(\d{1,5})\b`)

// serviceNames maps every name Docker's DNS resolves to a service's
// containers, its name and its network aliases, to the service.
func serviceNames(cf *composeFile) (map[string]string, error) {
	names := map[string]string{}
	for name := range cf.Services {
		names[name] = name
	}
	for name, s := range cf.Services {
		aliases, err := s.aliases()
		if err != nil {
			return nil, err
		}
		for _, a := range aliases {
			if other, ok := names[a]; ok && other != name {
				return nil, fmt.Errorf("service %s: alias %s also names service %s", name, a, other)
			}
			names[a] = name
		}
	}
	return names, nil
}

// newTopology gives every instance of the services to run free ports on
// 127.0.0.1 for the ports its service declares, and a directory.
func newTopology(cf *composeFile, dir, run string, running []*service) (*topology, error) {
	names, err := serviceNames(cf)
	if err != nil {
		return nil, err
	}
	tp := &topology{file: cf, dir: dir, run: run, instances: map[string][]*instance{}, names: names}
	picked := map[int]bool{}
	for _, s := range running {
		ports, err := s.containerPorts()
		if err != nil {
			return nil, err
		}
		for i := 0; i < s.replicas(); i++ {
			name := s.name
			if s.replicas() > 1 {
				name = fmt.Sprintf("%s-%d", s.name, i+1)
			}
			in := &instance{svc: s, replica: i, name: name, dir: filepath.Join(run, name),
				ports: map[int]int{}, paths: map[string]string{}, path: "/usr/local/bin:/usr/bin:/bin"}
			if err := os.MkdirAll(in.dir, 0o755); err != nil {
				return nil, err
			}
			for _, p := range ports {
				lp, err := freePort(picked)
				if err != nil {
					return nil, err
				}
				in.ports[p] = lp
			}
			if err := tp.mount(in); err != nil {
				return nil, err
			}
			tp.instances[s.name] = append(tp.instances[s.name], in)
		}
	}
	return tp, nil
}

// mount maps the service's volumes: a named volume to a directory of the
// run (shared by the replicas, as a named volume is), a bind mount to the
// file or directory beside the compose file.
func (tp *topology) mount(in *instance) error {
	for _, v := range in.svc.Volumes {
		parts := strings.Split(v, ":")
		if len(parts) < 2 {
			return fmt.Errorf("service %s: volume %q has no target", in.svc.name, v)
		}
		src, target := parts[0], parts[1]
		if strings.HasPrefix(src, ".") || strings.HasPrefix(src, "/") {
			host := src
			if !filepath.IsAbs(host) {
				host = filepath.Join(tp.dir, src)
			}
			if _, err := os.Stat(host); err != nil {
				return fmt.Errorf("service %s mounts %s, which does not exist: %w", in.svc.name, src, err)
			}
			in.paths[target] = host
			continue
		}
		host := filepath.Join(tp.run, "volumes", src)
		if err := os.MkdirAll(host, 0o777); err != nil {
			return err
		}
		in.paths[target] = host
	}
	return nil
}

// addr is the local address of a service's container port, for a service of
// one replica (a name of a scaled service is Docker's DNS round robin: the
// file uses it only where the test expands it, server-template and
// dns_sd_configs).
func (tp *topology) addr(svc string, port int) (string, error) {
	ins := tp.instances[svc]
	if len(ins) == 0 {
		return "", fmt.Errorf("%s:%d: no such service running", svc, port)
	}
	if len(ins) > 1 {
		return "", fmt.Errorf("%s:%d names %d replicas: only a server-template or a dns_sd_config can address them", svc, port, len(ins))
	}
	return ins[0].addr(port)
}

func (in *instance) addr(port int) (string, error) {
	lp, ok := in.ports[port]
	if !ok {
		return "", fmt.Errorf("port %d of %s: not in the service's expose or ports", port, in.svc.name)
	}
	return fmt.Sprintf("127.0.0.1:%d", lp), nil
}

// rewrite maps one string of the instance's configuration (an argument, an
// environment value, a health check, a line of a config file) from the
// container's view to the host's: the container's paths to the local
// files, then host:port to 127.0.0.1 and the mapped port. A service's
// name or network alias is that service, the container's own names
// (localhost, 0.0.0.0, an empty host) are the instance itself; other
// hosts (Docker's DNS at 127.0.0.11) are left alone.
func (tp *topology) rewrite(s string, self *instance) (string, error) {
	s = rewritePaths(s, self.paths)
	var err error
	out := hostPort.ReplaceAllStringFunc(s, func(m string) string {
		sm := hostPort.FindStringSubmatch(m)
		pre, host, portS := sm[1], sm[2], sm[3]
		port, _ := strconv.Atoi(portS)
		var a string
		var e error
		switch {
		case selfHosts[host]:
			a, e = self.addr(port)
		case tp.names[host] != "":
			a, e = tp.addr(tp.names[host], port)
		default:
			return m
		}
		if e != nil && err == nil {
			err = fmt.Errorf("%s: %q: %w", self.name, m, e)
		}
		return pre + a
	})
	return out, err
}

func (tp *topology) rewriteAll(ss []string, self *instance) ([]string, error) {
	out := make([]string, len(ss))
	for i, s := range ss {
		r, err := tp.rewrite(s, self)
		if err != nil {
			return nil, err
		}
		out[i] = r
	}
	return out, nil
}

// env is the instance's environment as its process gets it: the service's
// environment mapped, and the PATH (a container has its image's, nothing of
// the test's).
func (tp *topology) env(in *instance) ([]string, error) {
	keys := make([]string, 0, len(in.svc.Environment))
	for k := range in.svc.Environment {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	out := []string{"PATH=" + in.path, "HOME=" + in.dir}
	for _, k := range keys {
		v, err := tp.rewrite(in.svc.Environment[k], in)
		if err != nil {
			return nil, fmt.Errorf("%s=%s: %w", k, in.svc.Environment[k], err)
		}
		out = append(out, k+"="+v)
	}
	return out, nil
}

// rewritePaths replaces container paths by their local counterparts, the
// longest first, only where a path starts (so /prometheus does not match
// inside /etc/prometheus/prometheus.yml).
func rewritePaths(s string, paths map[string]string) string {
	targets := make([]string, 0, len(paths))
	for t := range paths {
		targets = append(targets, t)
	}
	sort.Slice(targets, func(i, j int) bool { return len(targets[i]) > len(targets[j]) })
	for _, t := range targets {
		re := regexp.MustCompile(`(^|[^A-Za-z0-9_./\-])` + regexp.QuoteMeta(t) + `(/|$|[^A-Za-z0-9_.\-])`)
		s = re.ReplaceAllStringFunc(s, func(m string) string {
			sm := re.FindStringSubmatch(m)
			return sm[1] + paths[t] + sm[2]
		})
	}
	return s
}

// duration parses a compose duration ("10s", "1m30s"); empty is def.
func duration(s string, def time.Duration) (time.Duration, error) {
	if s == "" {
		return def, nil
	}
	return time.ParseDuration(s)
}

// bytesOf parses the sizes of the file and of the programs it configures:
// compose's "2g"/"512m", Go's "900MiB", the JVM's "1g", PostgreSQL's "1GB".
func bytesOf(s string) (int64, error) {
	s = strings.TrimSpace(strings.ToLower(s))
	mult := map[string]int64{"k": 1 << 10, "m": 1 << 20, "g": 1 << 30}
	num := strings.TrimRight(s, "kmgibt")
	unit := strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(s[len(num):], "b"), "i"), "b")
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("size %q: %w", s, err)
	}
	if unit == "" {
		return n, nil
	}
	m, ok := mult[unit]
	if !ok {
		return 0, fmt.Errorf("size %q: unit %q", s, unit)
	}
	return n * m, nil
}

// freePort picks a free port not in picked, and adds it there: the
// kernel may hand out a port it just released again (a run once gave
// kafka3 and lb the same one, and lb could not bind it).
func freePort(picked map[int]bool) (int, error) {
	for {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, err
		}
		port := l.Addr().(*net.TCPAddr).Port
		l.Close()
		if !picked[port] {
			picked[port] = true
			return port, nil
		}
	}
}
