// Package s3server starts a SeaweedFS server (`weed mini`), an
// S3-compatible object store, from the binary scripts/seaweedfs.sh builds
// from the module source and caches (building it on first use): the real
// store of the attachment tests (internal/s3test) and of inboxd-bench.
package s3server

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"time"

	"github.com/inboxd/inboxd/attachments"
)

// Server is a running store's address and credentials.
type Server struct {
	Endpoint             string
	AccessKey, SecretKey string

	cmd    *exec.Cmd
	dir    string
	exited chan struct{} // closed when the process has ended
}

// Start starts a private server on free loopback ports, its data in a
// temporary directory, and waits until it answers signed requests. A port
// found free can be taken by another process before the server binds it
// (test binaries start their servers at once): a server that exits
// before it is ready is started again on other ports, three times at most.
func Start() (*Server, error) {
	bin, err := Binary()
	if err != nil {
		return nil, err
	}
	var last error
	for range 3 {
		s, err := startOnce(bin)
		if err == nil {
			return s, nil
		}
		last = err
	}
	return nil, last
}

func startOnce(bin string) (*Server, error) {
	dir, err := os.MkdirTemp("", "inboxd-s3-")
	if err != nil {
		return nil, err
	}
	ports, err := freePorts(5)
	if err != nil {
		return nil, err
	}
	s := &Server{AccessKey: "inboxd-test", SecretKey: randomHex(20), dir: dir,
		Endpoint: fmt.Sprintf("http://127.0.0.1:%d", ports[3]), exited: make(chan struct{})}
	conf := fmt.Sprintf(`{"identities":[{"name":"inboxd","credentials":[{"accessKey":%q,"secretKey":%q}],"actions":["Admin","Read","Write","List","Tagging"]}]}`,
		s.AccessKey, s.SecretKey)
	if err := os.WriteFile(filepath.Join(dir, "s3.json"), []byte(conf), 0o600); err != nil {
		return nil, err
	}
	if err := os.Mkdir(filepath.Join(dir, "data"), 0o700); err != nil {
		return nil, err
	}
	log, err := os.Create(filepath.Join(dir, "weed.log"))
	if err != nil {
		return nil, err
	}
	defer log.Close()
	// Every port is given (the admin server's too, with its legacy port
	// off), so that no component falls back to a default another server
	// on the machine holds.
	s.cmd = exec.Command(bin, "mini", "-dir="+filepath.Join(dir, "data"), "-ip=127.0.0.1", "-ip.bind=127.0.0.1",
		fmt.Sprintf("-master.port=%d", ports[0]), fmt.Sprintf("-volume.port=%d", ports[1]),
		fmt.Sprintf("-filer.port=%d", ports[2]), fmt.Sprintf("-s3.port=%d", ports[3]),
		fmt.Sprintf("-admin.port=%d", ports[4]), "-admin.port.legacy=0",
		"-s3.port.iceberg=0", "-s3.port.lance=0", "-webdav=false", "-admin.ui=false",
		"-s3.config="+filepath.Join(dir, "s3.json"))
	s.cmd.Stdout, s.cmd.Stderr = log, log
	// Its own process group, and killed with the test binary on Linux.
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if runtime.GOOS == "linux" {
		s.cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	}
	if err := s.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	go func() { _ = s.cmd.Wait(); close(s.exited) }()
	if err := s.waitReady(2 * time.Minute); err != nil {
		tail, _ := os.ReadFile(filepath.Join(dir, "weed.log"))
		s.Stop()
		if len(tail) > 4000 {
			tail = tail[len(tail)-4000:]
		}
		return nil, fmt.Errorf("seaweedfs not ready: %w\n%s", err, tail)
	}
	return s, nil
}

// waitReady waits until the S3 endpoint answers a signed request (a
// bucket can be made and looked up), or the process ends.
func (s *Server) waitReady(limit time.Duration) error {
	deadline := time.Now().Add(limit)
	var last error
	for time.Now().Before(deadline) {
		select {
		case <-s.exited:
			return fmt.Errorf("the server exited (%v)", last)
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		var st *attachments.S3Store
		st, last = attachments.NewS3(ctx, attachments.S3Config{Endpoint: s.Endpoint, Bucket: "ready",
			AccessKey: s.AccessKey, SecretKey: s.SecretKey})
		cancel()
		if last == nil {
			st.Close()
			return nil
		}
		time.Sleep(300 * time.Millisecond)
	}
	return last
}

// Stop ends the server and removes its data.
func (s *Server) Stop() {
	if s.cmd == nil || s.cmd.Process == nil {
		return
	}
	_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-s.exited:
	case <-time.After(10 * time.Second):
		_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
		<-s.exited
	}
	_ = os.RemoveAll(s.dir)
}

// Binary returns the path of the weed binary: INBOXD_WEED when set, else
// the one scripts/seaweedfs.sh caches, built now if it is not there yet
// (the script holds a lock, so concurrent test binaries build it once).
func Binary() (string, error) {
	if b := os.Getenv("INBOXD_WEED"); b != "" {
		return b, nil
	}
	script, err := scriptPath()
	if err != nil {
		return "", err
	}
	if out, err := exec.Command("bash", script, "path").Output(); err == nil {
		return strings.TrimSpace(string(out)), nil
	}
	fmt.Fprintln(os.Stderr, "s3server: building the SeaweedFS binary (scripts/seaweedfs.sh install, about 15 minutes the first time)")
	cmd := exec.Command("bash", script, "install")
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("scripts/seaweedfs.sh install: %w", err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	return lines[len(lines)-1], nil
}

// scriptPath finds scripts/seaweedfs.sh from the working directory up
// (a test runs in its package's directory).
func scriptPath() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		p := filepath.Join(dir, "scripts", "seaweedfs.sh")
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
		up := filepath.Dir(dir)
		if up == dir {
			return "", fmt.Errorf("scripts/seaweedfs.sh not found above the working directory")
		}
		dir = up
	}
}

// freePorts finds n free TCP ports below 22768 whose +10000 (SeaweedFS's
// gRPC port for each) is free too.
func freePorts(n int) ([]int, error) {
	var ports []int
	seen := map[int]bool{}
	for try := 0; len(ports) < n && try < 200; try++ {
		p := 12000 + int(randomByte())*40 + try%40
		if seen[p] || seen[p+10000] || seen[p-10000] || !free(p) || !free(p+10000) {
			continue
		}
		seen[p], seen[p+10000] = true, true
		ports = append(ports, p)
	}
	if len(ports) < n {
		return nil, fmt.Errorf("no %d free port pairs", n)
	}
	return ports, nil
}

func free(port int) bool {
	l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
	if err != nil {
		return false
	}
	l.Close()
	return true
}

func randomByte() byte {
	var b [1]byte
	_, _ = rand.Read(b[:])
	return b[0]
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
