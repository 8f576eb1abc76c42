// Package pgserver starts and stops a private PostgreSQL server from the
// binaries installed on the machine (Debian's /usr/lib/postgresql/N/bin). It
// backs `inboxd dev` and the tests when no DATABASE_URL is given. As root it
// runs initdb and the server as the "postgres" user, since both refuse root.
// It must not be used for production databases.
package pgserver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// Config says where and how to run the server.
type Config struct {
	// Dir holds the cluster (Dir/pgdata) and its socket and log. Required.
	Dir string
	// Port to listen on at 127.0.0.1. Zero picks a free port.
	Port int
	// BinDir holds initdb and postgres. Default: the newest
	// /usr/lib/postgresql/*/bin, else the directory of initdb on PATH.
	BinDir string
	// Fast turns off fsync and synchronous commit: for tests only, where a
	// crash of the machine may lose the database.
	Fast bool
	// Logger receives start/stop lines. Default: slog.Default().
	Logger *slog.Logger
	// User is the superuser initdb creates. Default "postgres".
	User string
	// Password, when set, is the superuser's password, required on TCP
	// connections (scram-sha-256) while the Unix socket trusts, as the
	// postgres container image sets a cluster up. Default: none, and every
	// connection is trusted.
	Password string
	// Args are more server arguments, after the defaults (so a "-c" here
	// wins over the default of the same setting). Default none.
	Args []string
}

// Server is a running PostgreSQL.
type Server struct {
	cfg  Config
	cmd  *exec.Cmd
	done chan error
	// URL connects as the superuser (Config.User, with its password) over
	// TCP to database "postgres".
	URL  string
	Port int
}

// FindBinDir returns the directory holding initdb and postgres.
func FindBinDir() (string, error) {
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool { return versionOf(dirs[i]) > versionOf(dirs[j]) })
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, "initdb")); err == nil {
			return d, nil
		}
	}
	if p, err := exec.LookPath("initdb"); err == nil {
		return filepath.Dir(p), nil
	}
	return "", errors.New("no PostgreSQL binaries found (looked in /usr/lib/postgresql/*/bin and PATH); install postgresql or set DATABASE_URL")
}

func versionOf(binDir string) int {
	v, _ := strconv.Atoi(filepath.Base(filepath.Dir(binDir)))
	return v
}

// Start initialises the cluster if Dir has none, starts the server and waits
// until it accepts connections.
func Start(ctx context.Context, cfg Config) (*Server, error) {
	if cfg.Dir == "" {
		return nil, errors.New("pgserver: Dir is required")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.User == "" {
		cfg.User = "postgres"
	}
	if cfg.BinDir == "" {
		d, err := FindBinDir()
		if err != nil {
			return nil, err
		}
		cfg.BinDir = d
	}
	dir, err := filepath.Abs(cfg.Dir)
	if err != nil {
		return nil, err
	}
	cfg.Dir = dir
	if cfg.Port == 0 {
		p, err := freePort()
		if err != nil {
			return nil, err
		}
		cfg.Port = p
	}
	if err := portFree(cfg.Port); err != nil {
		return nil, err
	}
	cred, err := credential()
	if err != nil {
		return nil, err
	}
	if err := prepareDir(dir, cred); err != nil {
		return nil, err
	}
	pgdata := filepath.Join(dir, "pgdata")
	if err := initCluster(ctx, cfg, pgdata, cred); err != nil {
		return nil, err
	}
	args := []string{"-D", pgdata, "-p", strconv.Itoa(cfg.Port), "-k", dir,
		"-c", "listen_addresses=127.0.0.1", "-c", "max_connections=500",
		"-c", "shared_buffers=256MB", "-c", "max_wal_size=2GB"}
	if cfg.Fast {
		args = append(args, "-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off")
	}
	args = append(args, cfg.Args...)
	logf, err := os.OpenFile(filepath.Join(dir, "postgres.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(filepath.Join(cfg.BinDir, "postgres"), args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Setpgid: true, Pdeathsig: syscall.SIGTERM}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("start postgres: %w", err)
	}
	userinfo := url.User(cfg.User)
	if cfg.Password != "" {
		userinfo = url.UserPassword(cfg.User, cfg.Password)
	}
	s := &Server{cfg: cfg, cmd: cmd, done: make(chan error, 1), Port: cfg.Port,
		URL: fmt.Sprintf("postgres://%s@127.0.0.1:%d/postgres?sslmode=disable", userinfo, cfg.Port)}
	go func() { s.done <- cmd.Wait(); logf.Close() }()
	if err := s.waitReady(ctx); err != nil {
		_ = s.Stop()
		return nil, err
	}
	if err := s.checkOwn(ctx, pgdata); err != nil {
		_ = s.Stop()
		return nil, err
	}
	cfg.Logger.Info("PostgreSQL started", "port", cfg.Port, "dir", pgdata)
	return s, nil
}

// initCluster runs initdb unless pgdata holds a cluster already.
func initCluster(ctx context.Context, cfg Config, pgdata string, cred *syscall.Credential) error {
	if _, err := os.Stat(filepath.Join(pgdata, "PG_VERSION")); err == nil {
		return nil
	}
	cfg.Logger.Info("initialising PostgreSQL cluster", "dir", pgdata)
	args := []string{"-D", pgdata, "-U", cfg.User, "-E", "UTF8", "--locale=C", "--no-sync"}
	if cfg.Password != "" {
		pwfile := filepath.Join(cfg.Dir, "pwfile")
		if err := writeOwned(pwfile, cfg.Password+"\n", cred); err != nil {
			return err
		}
		defer os.Remove(pwfile)
		args = append(args, "--pwfile="+pwfile, "--auth-local=trust", "--auth-host=scram-sha-256")
	} else {
		args = append(args, "--auth=trust")
	}
	cmd := exec.CommandContext(ctx, filepath.Join(cfg.BinDir, "initdb"), args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("initdb %s: %w\n%s", pgdata, err, out)
	}
	return nil
}

// checkOwn makes sure the server answering on the port is the one just
// started: alive, and serving this data directory. Another PostgreSQL that
// already held the port would otherwise answer in its place while ours
// failed to bind.
func (s *Server) checkOwn(ctx context.Context, pgdata string) error {
	select {
	case err := <-s.done:
		s.done <- err
		return fmt.Errorf("postgres exited during start-up (%v); another server answers on port %d: %s", err, s.cfg.Port, s.logTail())
	default:
	}
	c, err := pgx.Connect(ctx, s.URL)
	if err != nil {
		return err
	}
	defer c.Close(ctx)
	var dir string
	if err := c.QueryRow(ctx, "SHOW data_directory").Scan(&dir); err != nil {
		return fmt.Errorf("port %d: ask the server for its data directory: %w", s.cfg.Port, err)
	}
	if !sameDir(dir, pgdata) {
		return fmt.Errorf("port %d is taken by another PostgreSQL (serving %s, not %s)", s.cfg.Port, dir, pgdata)
	}
	return nil
}

func sameDir(a, b string) bool {
	if ra, err := filepath.EvalSymlinks(a); err == nil {
		a = ra
	}
	if rb, err := filepath.EvalSymlinks(b); err == nil {
		b = rb
	}
	return filepath.Clean(a) == filepath.Clean(b)
}

func (s *Server) logTail() string {
	log, _ := os.ReadFile(filepath.Join(s.cfg.Dir, "postgres.log"))
	if len(log) > 2000 {
		log = log[len(log)-2000:]
	}
	return string(log)
}

func (s *Server) waitReady(ctx context.Context) error {
	deadline := time.Now().Add(60 * time.Second)
	for {
		c, err := pgx.Connect(ctx, s.URL)
		if err == nil {
			c.Close(ctx)
			return nil
		}
		select {
		case err := <-s.done:
			s.done <- err
			return fmt.Errorf("postgres exited during start-up: %v\n%s", err, s.logTail())
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("postgres on port %d not ready after 60s: %w", s.cfg.Port, err)
		}
	}
}

// SocketDir is the directory of the server's Unix socket (Config.Dir), for
// PGHOST.
func (s *Server) SocketDir() string { return s.cfg.Dir }

// Stop shuts the server down (fast mode) and waits for it.
func (s *Server) Stop() error {
	if s.cmd.Process == nil {
		return nil
	}
	_ = s.cmd.Process.Signal(syscall.SIGINT)
	select {
	case <-s.done:
	case <-time.After(30 * time.Second):
		_ = s.cmd.Process.Kill()
		<-s.done
	}
	s.done <- nil // later Stops return at once
	return nil
}

// Restart starts a stopped server again on the same port and directory.
func (s *Server) Restart(ctx context.Context) (*Server, error) {
	return Start(ctx, s.cfg)
}

// portFree says whether nothing listens on port at 127.0.0.1 now.
func portFree(port int) error {
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		return fmt.Errorf("port %d is taken: %w", port, err)
	}
	return l.Close()
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// credential returns the postgres user's ids when running as root, else nil.
func credential() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("running as root needs a postgres user to run PostgreSQL as: %w", err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}

// prepareDir creates dir, owned by the server's user, with every parent
// traversable by it.
func prepareDir(dir string, cred *syscall.Credential) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if cred == nil {
		return nil
	}
	if err := os.Chown(dir, int(cred.Uid), int(cred.Gid)); err != nil {
		return err
	}
	// Temporary directories are 0700; the postgres user must be able to
	// walk through them to its own.
	for p := filepath.Dir(dir); p != "/" && p != "."; p = filepath.Dir(p) {
		st, err := os.Stat(p)
		if err != nil {
			return err
		}
		if st.Mode().Perm()&0o001 == 0 {
			if err := os.Chmod(p, st.Mode().Perm()|0o011); err != nil {
				return err
			}
		}
	}
	return nil
}

// writeOwned writes a file only the server's user can read.
func writeOwned(path, content string, cred *syscall.Credential) error {
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		return err
	}
	if cred == nil {
		return nil
	}
	return os.Chown(path, int(cred.Uid), int(cred.Gid))
}
