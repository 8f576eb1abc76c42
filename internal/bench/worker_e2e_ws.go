package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/gorilla/websocket"
)

// The transports of the e2e sends.
const (
	transportHTTP = "http" // POST /v1/conversations/{id}/messages, answered 201 once projected
	transportWS   = "ws"   // a send frame on the sender's own WebSocket, answered by send_ack
)

// wsAckTimeout bounds the wait for the answer to a WS send; the gateway
// answers within its AckWait (an error frame "unavailable" past it).
const wsAckTimeout = 30 * time.Second

// wsSock is a user's current WebSocket as its follower reports it; the
// sends of that user write on it one at a time (gorilla/websocket allows one
// writer; the follower only reads once its hello is written).
type wsSock struct {
	mu   sync.Mutex
	conn *websocket.Conn
}

func (s *wsSock) set(c *websocket.Conn) {
	s.mu.Lock()
	s.conn = c
	s.mu.Unlock()
}

// write writes one text frame on the current connection.
func (s *wsSock) write(raw []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.conn == nil {
		return errors.New("no WebSocket connected")
	}
	_ = s.conn.SetWriteDeadline(time.Now().Add(10 * time.Second))
	return s.conn.WriteMessage(websocket.TextMessage, raw)
}

// wsSendFrame is the send frame of docs/websocket.md.
type wsSendFrame struct {
	Type           string `json:"type"`
	ConversationID int64  `json:"conversation_id"`
	MsgID          string `json:"msg_id"`
	Body           string `json:"body"`
}

// answer hands a send_ack or an error frame to the send waiting for it.
func (w *e2eWorker) answer(f wsFrame) {
	if ch, ok := w.acks.Load(f.MsgID); ok {
		select {
		case ch.(chan wsFrame) <- f:
		default: // answered already (a duplicate): the first answer counts
		}
	}
}

// sendWS sends one message as a send frame on the sender's own WebSocket
// and waits for its answer, mapped to the status the HTTP send would have
// had: send_ack is 201, error "unavailable" (appended, not projected
// within the gateway's AckWait) is 202, any other error frame an error.
func (w *e2eWorker) sendWS(ctx context.Context, conv, user int64, body string) (int, error) {
	sock := w.socks[user]
	if sock == nil {
		return 0, fmt.Errorf("no WebSocket of user %d", user)
	}
	id := uuid.NewString()
	ch := make(chan wsFrame, 1)
	w.acks.Store(id, ch)
	defer w.acks.Delete(id)
	raw, _ := json.Marshal(wsSendFrame{Type: "send", ConversationID: conv, MsgID: id, Body: body})
	if err := sock.write(raw); err != nil {
		return 0, fmt.Errorf("write the send frame: %w", err)
	}
	t := time.NewTimer(wsAckTimeout)
	defer t.Stop()
	select {
	case f := <-ch:
		switch {
		case f.Type == "send_ack":
			return http.StatusCreated, nil
		case f.Code == "unavailable":
			return http.StatusAccepted, nil
		default:
			return 0, fmt.Errorf("error frame %q", f.Code)
		}
	case <-t.C:
		return 0, fmt.Errorf("no answer to the send frame within %s", wsAckTimeout)
	case <-ctx.Done():
		return 0, ctx.Err()
	}
}
