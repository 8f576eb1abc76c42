package bench

import (
	"bytes"
	"context"
	"net/http"
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

// wsFollower keeps one user's WebSocket up, reconnecting with its cursor,
// and hands every frame to the worker's frame function, which decodes it
// its own way and returns its type and the highest inbox_seq (or, for a
// too_long, the head) it carried.
type wsFollower struct {
	dialer  *websocket.Dialer
	addr    string
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

// follow runs until ctx ends; sem bounds the connects in flight, welcomed
// is called after the first welcome.
func (f *wsFollower) follow(ctx context.Context, tok string, sem chan struct{}, welcomed func()) {
	hdr := http.Header{"Authorization": {"Bearer " + tok}}
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
			// One buffer per follower, reused frame to frame (ReadMessage
			// allocates each frame anew: hundreds of MB/s of garbage in
			// the large figure). No frame function keeps data.
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
