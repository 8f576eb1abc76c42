package ws

import (
	"bufio"
	"errors"
	"net"
	"net/http"
	"sync"
	"time"
)

// stallConn is the network connection under a session's websocket.Conn.
//
// A write to a client that has stopped reading blocks once the socket
// buffers are full. On the write's deadline gorilla gives the connection
// up with a frame cut in half, after which nothing, not even a close frame,
// can follow: the client would see 1006. Once armed (after the upgrade), a
// stallConn instead keeps the bytes that a timed-out write could not send,
// and those of any write after it, and reports success. The byte stream
// stays whole; the session sees stalled() and closes with 4008 (too slow):
// its close frame is kept after the rest, and flush sends all of it with a
// deadline of its own. A client that reads again within that deadline gets
// every frame whole and then the 4008; one that does not is dropped.
//
// kick makes a write in progress (or the next one) stall at once, so that
// a close decided elsewhere (a full reply queue, a drain) does not wait for
// a blocked write to time out.
//
// gorilla serialises its writes; the reader's automatic replies (pong,
// close) are writes too, so they are kept in order with the rest.
type stallConn struct {
	net.Conn

	mu      sync.Mutex
	armed   bool
	kicked  bool
	stalled bool
	kept    []byte
	extra   int // bytes kept by writes after the stall
}

// maxStallExtra bounds what is kept after the stall (the close frame, a
// few automatic pongs); a client that pings on regardless is dropped.
const maxStallExtra = 64 << 10

var errStallOverflow = errors.New("gateway: client not reading; too much kept for it")

// pastDeadline is a write deadline that has passed: the write fails at once.
var pastDeadline = time.Unix(1, 0)

func (c *stallConn) arm() {
	c.mu.Lock()
	c.armed = true
	c.mu.Unlock()
}

func (c *stallConn) isStalled() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.stalled
}

// kick stalls the write in progress, if any, and every later one.
func (c *stallConn) kick() {
	c.mu.Lock()
	armed := c.armed
	c.kicked = armed
	c.mu.Unlock()
	if armed {
		_ = c.Conn.SetWriteDeadline(pastDeadline)
	}
}

func (c *stallConn) SetWriteDeadline(t time.Time) error {
	c.mu.Lock()
	if c.kicked {
		t = pastDeadline
	}
	c.mu.Unlock()
	return c.Conn.SetWriteDeadline(t)
}

func (c *stallConn) Write(b []byte) (int, error) {
	c.mu.Lock()
	if c.stalled {
		if c.extra+len(b) > maxStallExtra {
			c.mu.Unlock()
			return 0, errStallOverflow
		}
		c.kept = append(c.kept, b...)
		c.extra += len(b)
		c.mu.Unlock()
		return len(b), nil
	}
	armed := c.armed
	c.mu.Unlock()
	n, err := c.Conn.Write(b)
	var ne net.Error
	if err == nil || !armed || !errors.As(err, &ne) || !ne.Timeout() {
		return n, err
	}
	c.mu.Lock()
	c.stalled = true
	c.kept = append(c.kept, b[n:]...)
	c.mu.Unlock()
	return len(b), nil
}

// flush sends what a stall kept, by deadline. Nothing is written after it
// (the close frame is the last thing kept).
func (c *stallConn) flush(deadline time.Time) error {
	c.mu.Lock()
	b := c.kept
	c.kept = nil
	c.mu.Unlock()
	if len(b) == 0 {
		return nil
	}
	_ = c.Conn.SetWriteDeadline(deadline)
	_, err := c.Conn.Write(b)
	return err
}

// stallHijacker hands gorilla's Upgrade the hijacked connection wrapped in
// a stallConn.
type stallHijacker struct {
	http.ResponseWriter
	nc *stallConn
}

func (h *stallHijacker) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	c, brw, err := http.NewResponseController(h.ResponseWriter).Hijack()
	if err != nil {
		return nil, nil, err
	}
	h.nc = &stallConn{Conn: c}
	return h.nc, brw, nil
}
