package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gorilla/websocket"
)

// wsHello is the load generators' hello.
type wsHello struct {
	Type  string `json:"type"`
	After int64  `json:"after"`
	Large bool   `json:"large,omitempty"` // ask for the frames of read-mode conversations
}

// wsFrame is what the load generators read of the server's frames.
type wsFrame struct {
	Type    string    `json:"type"`
	Head    int64     `json:"head"`
	MsgID   string    `json:"msg_id"` // of a send_ack or of an error answering a send
	Code    string    `json:"code"`   // of an error
	Entries []wsEntry `json:"entries"`
}

// wsEntry is what the load generators read of an entry.
type wsEntry struct {
	InboxSeq       int64  `json:"inbox_seq"`
	ConversationID int64  `json:"conversation_id"`
	Kind           string `json:"kind"`
	Message        *struct {
		SenderID int64  `json:"sender_id"`
		Body     wsBody `json:"body"`
	} `json:"message"`
}

// wsBody is a message's body when it is text (a system message's is an
// object: IsText false).
type wsBody struct {
	Text   string
	IsText bool
}

func (b *wsBody) UnmarshalJSON(data []byte) error {
	if len(data) > 0 && data[0] == '"' {
		b.IsText = json.Unmarshal(data, &b.Text) == nil
	}
	return nil
}

// readFrames is a wsFollower's frame function: it decodes each frame,
// shows it to onFrame (when not nil), shows each entry of an entries
// frame to onEntry, and returns the frame's type and the cursor it moves
// the follower to (the highest inbox_seq of its entries, else its head).
func readFrames(onFrame func(f *wsFrame), onEntry func(e *wsEntry, now int64)) func(data []byte, now int64) (string, int64) {
	return func(data []byte, now int64) (string, int64) {
		var f wsFrame
		if json.Unmarshal(data, &f) != nil {
			return "", 0
		}
		if onFrame != nil {
			onFrame(&f)
		}
		if f.Type != "entries" {
			return f.Type, f.Head
		}
		var cursor int64
		for i := range f.Entries {
			e := &f.Entries[i]
			cursor = max(cursor, e.InboxSeq)
			onEntry(e, now)
		}
		return f.Type, cursor
	}
}

// wsFollower keeps one user's WebSocket up, reconnecting with its cursor,
// and hands every frame to the worker's frame function, which decodes it
// its own way and returns its type and the highest inbox_seq (or, for a
// too_long, the head) it carried.
type wsFollower struct {
	dialer  *websocket.Dialer
	addr    string
	tok     string // the user's bearer token
	reconns *atomic.Int64
	large   bool  // say "large": true in the hello
	start   int64 // the cursor of the first hello (the user's head when known)
	// frame must not keep data past its return (the buffer is reused).
	frame func(data []byte, now int64) (typ string, cursor int64)
	// conn, when set, is told of each connection once its hello is
	// written, and of nil before it is closed: a load generator that sends
	// on the follower's socket writes through it (the follower itself
	// writes nothing after the hello).
	conn func(c *websocket.Conn)
}

// followAll keeps the WebSocket of every follower up until ctx ends or
// stop is called, with at most parallel handshakes in flight (a load
// generator that dials thousands at once sees refused connects, not the
// gateway's cost), and returns once each has been welcomed: the load
// starts on sockets that are all up. stop ends the followers and waits
// for them.
func followAll(ctx context.Context, fs []*wsFollower, parallel int) (stop func(), err error) {
	var welcomed, running sync.WaitGroup
	welcomed.Add(len(fs))
	rctx, cancel := context.WithCancel(ctx)
	sem := make(chan struct{}, parallel)
	for _, f := range fs {
		running.Go(func() { f.follow(rctx, sem, welcomed.Done) })
	}
	stop = func() { cancel(); running.Wait() }
	if err := waitGroupCtx(ctx, &welcomed); err != nil {
		stop()
		return nil, fmt.Errorf("connect %d WebSockets: %w", len(fs), err)
	}
	return stop, nil
}

func waitGroupCtx(ctx context.Context, wg *sync.WaitGroup) error {
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// follow runs until ctx ends; sem bounds the connects in flight, welcomed
// is called after the first welcome.
func (f *wsFollower) follow(ctx context.Context, sem chan struct{}, welcomed func()) {
	hdr := http.Header{"Authorization": {"Bearer " + f.tok}}
	after := f.start
	first := true
	var buf bytes.Buffer
	for ctx.Err() == nil {
		sem <- struct{}{}
		conn, _, err := f.dialer.DialContext(ctx, "ws://"+f.addr+"/v1/ws", hdr)
		if err == nil {
			err = conn.WriteJSON(wsHello{Type: "hello", After: after, Large: f.large})
		}
		<-sem
		if err != nil {
			if conn != nil {
				conn.Close()
			}
			sleepCtx(ctx, 200*time.Millisecond)
			continue
		}
		stop := context.AfterFunc(ctx, func() { conn.Close() })
		if f.conn != nil {
			f.conn(conn)
		}
		for {
			// One buffer per follower, reused frame to frame: ReadMessage
			// allocates each frame anew, and at the large figure's rates
			// that garbage was the receivers' main cost. No frame function
			// keeps data.
			_, r, err := conn.NextReader()
			if err == nil {
				buf.Reset()
				_, err = buf.ReadFrom(r)
			}
			if err != nil {
				break
			}
			switch typ, cursor := f.frame(buf.Bytes(), time.Now().UnixNano()); typ {
			case "welcome":
				if first {
					first = false
					welcomed()
				}
			case "too_long":
				after = cursor
			case "entries":
				after = max(after, cursor)
			}
		}
		if f.conn != nil {
			f.conn(nil)
		}
		stop()
		conn.Close()
		if ctx.Err() == nil {
			f.reconns.Add(1)
		}
	}
}

// benchBody is the body of a timed message, "bench:<phase>:<unix ns of
// the request>": the receivers time its push from the request without a
// clock shared with the sender but the machine's.
func benchBody(phase int, t0 time.Time) string {
	return "bench:" + strconv.Itoa(phase) + ":" + strconv.FormatInt(t0.UnixNano(), 10)
}

// parseBenchBody reads a body written by benchBody.
func parseBenchBody(body string) (phase int, t0 int64, ok bool) {
	rest, ok := strings.CutPrefix(body, "bench:")
	if !ok {
		return 0, 0, false
	}
	ps, ts, ok := strings.Cut(rest, ":")
	if !ok {
		return 0, 0, false
	}
	p, err1 := strconv.Atoi(ps)
	t, err2 := strconv.ParseInt(ts, 10, 64)
	if err1 != nil || err2 != nil {
		return 0, 0, false
	}
	return p, t, true
}

// pushTimes are the push latencies a load generator's receivers timed in
// one phase, ms. Safe for concurrent use.
type pushTimes struct {
	mu       sync.Mutex
	push     []float32
	received atomic.Int64
}

func (p *pushTimes) add(ms ...float32) {
	p.mu.Lock()
	p.push = append(p.push, ms...)
	p.mu.Unlock()
	p.received.Add(int64(len(ms)))
}

// drain waits up to secs for the received pushes to reach want: the last
// sends' pushes are still on their way when the schedule ends.
func (p *pushTimes) drain(ctx context.Context, want int64, secs float64) {
	end := time.Now().Add(time.Duration(secs * float64(time.Second)))
	for p.received.Load() < want && time.Now().Before(end) && ctx.Err() == nil {
		time.Sleep(20 * time.Millisecond)
	}
}

func (p *pushTimes) dist() Dist {
	p.mu.Lock()
	defer p.mu.Unlock()
	return newDist(f32to64(p.push))
}

// phaseRecs are a load generator's records of its phases in progress, by
// index. A phase is ended before its result is read: a push of it that
// arrives later finds no record and is not counted.
type phaseRecs[R any] struct {
	mu sync.Mutex
	m  map[int]*R
}

func (p *phaseRecs[R]) start(idx int, r *R) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.m == nil {
		p.m = map[int]*R{}
	}
	p.m[idx] = r
}

func (p *phaseRecs[R]) end(idx int) {
	p.mu.Lock()
	delete(p.m, idx)
	p.mu.Unlock()
}

// get is the record of a phase in progress, nil after its end.
func (p *phaseRecs[R]) get(idx int) *R {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.m[idx]
}
