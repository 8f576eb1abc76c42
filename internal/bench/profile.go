package bench

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"runtime/pprof"
	"strings"
	"time"
)

// Profile is a CPU profile taken during a figure and its `go tool pprof
// -top` summary.
type Profile struct {
	Name    string  `json:"name"`    // e.g. "gateway during e2e at 1,000 msg/s"
	Path    string  `json:"path"`    // the profile file
	Seconds float64 `json:"seconds"` // length of the profile
	Top     string  `json:"top"`     // `go tool pprof -top` of it (empty without go)
	TopCum  string  `json:"top_cum"` // the same sorted by cumulative time
	Heap    bool    `json:"heap"`    // a heap profile (in-use bytes), not CPU
}

// profileGateway fetches a CPU profile of seconds from a serve child's
// pprof endpoint into path, in the background.
func profileGateway(ctx context.Context, ctl string, seconds int, path string) <-chan error {
	errc := make(chan error, 1)
	go func() {
		hc := &http.Client{Timeout: time.Duration(seconds+30) * time.Second}
		errc <- fetchToFile(ctx, hc, fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", ctl, seconds), path)
	}()
	return errc
}

// heapProfile fetches the heap profile of a serve child into path.
func heapProfile(ctx context.Context, ctl, path string) error {
	return fetchToFile(ctx, http.DefaultClient, "http://"+ctl+"/debug/pprof/heap?gc=1", path)
}

// fetchToFile writes the body of a 200 answer to GET url into path.
func fetchToFile(ctx context.Context, hc *http.Client, url, path string) error {
	req, err := http.NewRequestWithContext(ctx, "GET", url, nil)
	if err != nil {
		return err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("profile %s: %s", url, resp.Status)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// profileSelf profiles this process (the orchestrator: fanout and kfake)
// for d into path, in the background.
func profileSelf(ctx context.Context, d time.Duration, path string) <-chan error {
	errc := make(chan error, 1)
	f, err := os.Create(path)
	if err != nil {
		errc <- err
		return errc
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		errc <- err
		return errc
	}
	go func() {
		sleepCtx(ctx, d)
		pprof.StopCPUProfile()
		errc <- f.Close()
	}()
	return errc
}

// pprofTop runs `go tool pprof -top` on a profile: the functions with the
// most flat CPU time. Without a go command it returns "".
func pprofTop(ctx context.Context, path string, nodes int, args ...string) string {
	gocmd, err := goTool()
	if err != nil {
		return ""
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	argv := append([]string{"tool", "pprof", "-top", fmt.Sprintf("-nodecount=%d", nodes)}, args...)
	out, err := exec.CommandContext(ctx, gocmd, append(argv, path)...).Output()
	if err != nil {
		return ""
	}
	// Drop the header lines up to the table (file, build id, type, time).
	lines := strings.Split(strings.TrimRight(string(out), "\n"), "\n")
	for i, l := range lines {
		if strings.HasPrefix(l, "Showing nodes") || strings.HasPrefix(l, "Duration:") {
			continue
		}
		if strings.Contains(l, "flat%") {
			return strings.Join(append([]string{}, lines[max(0, i-1):]...), "\n")
		}
	}
	return strings.Join(lines, "\n")
}
