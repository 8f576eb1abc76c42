package bench

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// pace calls tick(i) at start + i/rate for i = 0, 1, ... while that time
// is before end and ctx lasts. The schedule is fixed in advance (open
// loop): a tick that comes late runs at once and the next ones keep
// their times, so a server that slows down meets the load it was offered
// rather than a load that backs off with it. tick must not wait for an
// answer; offerLoad starts each request in a goroutine of its own.
func pace(ctx context.Context, start, end time.Time, rate float64, tick func(i int)) {
	interval := time.Duration(float64(time.Second) / rate)
	for i := 0; ; i++ {
		at := start.Add(time.Duration(i) * interval)
		if !at.Before(end) || ctx.Err() != nil {
			return
		}
		if d := time.Until(at); d > 0 {
			time.Sleep(d)
		}
		tick(i)
	}
}

// inflightCap bounds the requests of one or more open loops in flight.
// Past it a request is dropped and counted, not queued: a queue would
// close the loop, and a dropped request says plainly that the load was
// not sustained.
type inflightCap struct {
	max int64
	n   atomic.Int64
}

func newInflightCap(max int) *inflightCap { return &inflightCap{max: int64(max)} }

// answer is how one request of an open loop went: its HTTP status (a
// WebSocket send's answer mapped to the status the HTTP send would have
// had), its round trip, and the pushes it causes once accepted.
type answer struct {
	Code   int
	Ms     float32
	Pushes int64
	Err    error
}

// offered is what an open loop of requests did.
type offered struct {
	Seconds float64 // from the first scheduled request to the last
	Sent    int64
	Applied int64 // answered 201 or 200
	Pending int64 // answered 202: appended, not yet projected
	Errors  int64
	Dropped int64 // not sent: the cap was reached
	// Pushes are those the accepted requests cause, and RoundTrips
	// their round trips (ms).
	Pushes     int64
	RoundTrips []float32
	FirstErr   string
}

// offerLoad offers rate requests a second for seconds (pace), each run by
// request(i) in a goroutine of its own under limit, and returns once
// every request sent has been answered.
func offerLoad(ctx context.Context, rate, seconds float64, limit *inflightCap, request func(i int) answer) offered {
	var (
		sent, applied, pending, errs, dropped, pushes atomic.Int64
		firstErr                                      atomic.Value
		mu                                            sync.Mutex
		lat                                           []float32
		wg                                            sync.WaitGroup
	)
	start := time.Now()
	pace(ctx, start, start.Add(time.Duration(seconds*float64(time.Second))), rate, func(i int) {
		if limit.n.Load() >= limit.max {
			dropped.Add(1)
			return
		}
		limit.n.Add(1)
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer limit.n.Add(-1)
			sent.Add(1)
			a := request(i)
			switch {
			case a.Err == nil && (a.Code == http.StatusCreated || a.Code == http.StatusOK):
				applied.Add(1)
			case a.Err == nil && a.Code == http.StatusAccepted:
				pending.Add(1)
			default:
				errs.Add(1)
				if a.Err == nil {
					a.Err = fmt.Errorf("HTTP %d", a.Code)
				}
				firstErr.CompareAndSwap(nil, a.Err.Error())
				return
			}
			pushes.Add(a.Pushes)
			mu.Lock()
			lat = append(lat, a.Ms)
			mu.Unlock()
		}()
	})
	o := offered{Seconds: time.Since(start).Seconds()}
	wg.Wait()
	o.Sent, o.Applied, o.Pending, o.Errors, o.Dropped = sent.Load(), applied.Load(), pending.Load(), errs.Load(), dropped.Load()
	o.Pushes, o.RoundTrips = pushes.Load(), lat
	if v, ok := firstErr.Load().(string); ok {
		o.FirstErr = v
	}
	return o
}

// msSince is the time since t0 in milliseconds, as the load generators
// keep their samples.
func msSince(t0 time.Time) float32 {
	return float32(float64(time.Since(t0).Microseconds()) / 1000)
}
