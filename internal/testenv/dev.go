package testenv

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/inboxd/inboxd/internal/pgtest"
)

// Dev is an `inboxd dev` process (gateway and fanout on its embedded
// PostgreSQL and Kafka) on free loopback ports, with a data directory of
// its own: the dev gateway an app developer runs, for the SDK's examples and
// the example programs' tests.
type Dev struct {
	// URL is the gateway's base URL, http://127.0.0.1:port.
	URL  string
	Proc *Proc
	dir  string
}

// devReady is what inboxd dev prints once its fanout consumes the log,
// devListening once its gateway serves.
const (
	devReady     = "partitions assigned"
	devListening = "gateway listening"
)

// NewDev starts inboxd dev with args added to its own (gateway flags such
// as --too-long-lag) and stops it at the test's end.
func NewDev(t testing.TB, args ...string) *Dev {
	t.Helper()
	pgtest.SkipIfUnit(t)
	d, err := StartDev(args...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := d.Stop(); err != nil {
			t.Error(err)
		}
	})
	return d
}

// DevSetup is where an `inboxd dev` lives: a data directory and three
// loopback ports that were free when it was made.
type DevSetup struct {
	Dir                         string // removed by the caller; the data dir is Dir/data
	PGPort, KafkaPort, HTTPPort int
}

// NewDevSetup makes a temporary directory and picks free ports.
func NewDevSetup() (DevSetup, error) {
	dir, err := os.MkdirTemp("", "inboxd-dev-")
	if err != nil {
		return DevSetup{}, err
	}
	s := DevSetup{Dir: dir}
	// Three distinct ports: each listener stays open until all are picked
	// (one at a time, the kernel may hand out the same port twice).
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	for _, p := range []*int{&s.PGPort, &s.KafkaPort, &s.HTTPPort} {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			_ = os.RemoveAll(dir)
			return DevSetup{}, err
		}
		ls = append(ls, l)
		*p = l.Addr().(*net.TCPAddr).Port
	}
	return s, nil
}

// DataDir is dev's --data-dir.
func (s DevSetup) DataDir() string { return filepath.Join(s.Dir, "data") }

// Addr is the gateway's address, 127.0.0.1:port.
func (s DevSetup) Addr() string { return fmt.Sprintf("127.0.0.1:%d", s.HTTPPort) }

// Args are the arguments of `inboxd dev` on this setup, then extra.
func (s DevSetup) Args(extra ...string) []string {
	return append([]string{"dev", "--data-dir", s.DataDir(), "--pg-port", fmt.Sprint(s.PGPort),
		"--kafka-port", fmt.Sprint(s.KafkaPort), "--http-addr", s.Addr()}, extra...)
}

// DevEnv keeps the environment's PostgreSQL and Kafka from reaching dev:
// it starts its own.
var DevEnv = []string{"INBOXD_KAFKA_BROKERS=", "DATABASE_URL="}

// StartDev is NewDev for code without a testing.TB (a TestMain): the
// caller calls Stop. It waits until the gateway serves and the fanout has
// its partitions.
//
// A port picked free can be taken before dev listens on it (by another
// test's server, or as the local port of an outgoing connection: both come
// from the same range); dev then refuses to start, naming the port, and
// StartDev tries again on fresh ports.
func StartDev(args ...string) (*Dev, error) {
	for attempt := 0; ; attempt++ {
		s, err := NewDevSetup()
		if err != nil {
			return nil, err
		}
		p, err := StartProcess(DevEnv, s.Args(args...)...)
		if err != nil {
			_ = os.RemoveAll(s.Dir)
			return nil, err
		}
		d := &Dev{URL: "http://" + s.Addr(), Proc: p, dir: s.Dir}
		err = p.WaitOutput(devReady, 2*time.Minute)
		if err == nil {
			// The fanout can have its partitions before the gateway
			// listens: wait for both.
			err = p.WaitOutput(devListening, 2*time.Minute)
		}
		if err == nil {
			return d, nil
		}
		taken := PortTaken(p.Output())
		stopErr := d.Stop()
		if taken && attempt < 3 {
			continue
		}
		return nil, errors.Join(fmt.Errorf("inboxd dev: %w", err), stopErr)
	}
}

// Stop ends the process (SIGTERM: it stops its PostgreSQL), removes its
// data, and reports a race the detector found in it.
func (d *Dev) Stop() error {
	err := d.Proc.Stop(30 * time.Second)
	if err != nil {
		err = fmt.Errorf("inboxd dev: stop: %w", err)
	}
	_ = os.RemoveAll(d.dir)
	return errors.Join(err, d.Proc.RaceReport())
}

// PortTaken reports whether a dev's output says a port it was given is in
// use: dev's own check ("is taken"), Go's listener ("address already in
// use") or its PostgreSQL's ("Address already in use").
func PortTaken(output string) bool {
	out := strings.ToLower(output)
	return strings.Contains(out, "is taken") || strings.Contains(out, "address already in use")
}
