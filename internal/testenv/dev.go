package testenv

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"
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

// devReady is what inboxd dev prints once its fanout consumes the log.
const devReady = "partitions assigned"

// NewDev starts inboxd dev with args added to its own (gateway flags such
// as --too-long-lag) and stops it at the test's end.
func NewDev(t testing.TB, args ...string) *Dev {
	t.Helper()
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

// StartDev is NewDev for code without a testing.TB (a TestMain): the
// caller calls Stop. It waits until the gateway serves and the fanout has
// its partitions.
func StartDev(args ...string) (*Dev, error) {
	dir, err := os.MkdirTemp("", "inboxd-dev-")
	if err != nil {
		return nil, err
	}
	ports := make([]int, 3)
	for i := range ports {
		if ports[i], err = freePort(); err != nil {
			_ = os.RemoveAll(dir)
			return nil, err
		}
	}
	addr := fmt.Sprintf("127.0.0.1:%d", ports[2])
	all := append([]string{"dev", "--data-dir", filepath.Join(dir, "data"), "--pg-port", fmt.Sprint(ports[0]),
		"--kafka-port", fmt.Sprint(ports[1]), "--http-addr", addr}, args...)
	// Its own PostgreSQL and Kafka, whatever the environment points at.
	p, err := StartProcess([]string{"INBOXD_KAFKA_BROKERS=", "DATABASE_URL="}, all...)
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	d := &Dev{URL: "http://" + addr, Proc: p, dir: dir}
	if err := p.WaitOutput(devReady, 2*time.Minute); err != nil {
		return nil, errors.Join(fmt.Errorf("inboxd dev: %w", err), d.Stop())
	}
	return d, nil
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
