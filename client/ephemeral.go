package client

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/inboxd/inboxd/protocol"
)

// Typing, presence and the user's settings (docs/client.md, "Typing and
// presence"). Typing goes over the WebSocket only; presence and settings
// are HTTP calls; the live typing and presence frames of other users come
// to Handler.OnTyping and Handler.OnPresence.

// ErrNotConnected is returned by SendTyping when no WebSocket session is
// up (before the welcome, while reconnecting, or long-polling): typing is
// ephemeral, so it is not queued. Ignore it, or send again later.
var ErrNotConnected = errors.New("client: no WebSocket session up")

// TypingEvent is another member typing in a conversation. Show it until
// ExpiresIn has passed since it arrived, unless a newer event of the same
// user and conversation comes first; Stop says they no longer type.
type TypingEvent struct {
	ConversationID int64
	UserID         int64
	Stop           bool
	ExpiresIn      time.Duration // 0 with Stop
}

// PresenceEvent is a user's presence as the caller may see it: online, or
// offline since LastSeen (nil when unknown or hidden).
type PresenceEvent = protocol.Presence

// Presence is a user's presence as Presence answers it.
type Presence = protocol.Presence

// Settings are the user's own settings.
type Settings = protocol.Settings

// SettingsChange changes the settings whose fields are set (nil keeps).
type SettingsChange = protocol.SettingsPatch

// SendTyping tells the other members of a conversation, over the
// WebSocket, that the user types (stop false) or stopped (stop true). Call
// it as the user types; the server passes at most one frame per user and
// conversation every couple of seconds and drops the rest silently, and
// the others show it for a few seconds. It returns ErrNotConnected when no
// WebSocket session is up; a refusal (not a member) comes later as an
// error frame and is only logged.
func (c *Client) SendTyping(ctx context.Context, conversationID int64, stop bool) error {
	if conversationID <= 0 {
		return errors.New("client: SendTyping: conversation id must be positive")
	}
	c.mu.Lock()
	s := c.sess
	c.mu.Unlock()
	if s == nil {
		return ErrNotConnected
	}
	f := protocol.Typing{Type: protocol.FrameTyping, ConversationID: conversationID}
	if stop {
		f.State = protocol.TypingStop
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	return s.write(f)
}

// ephemeralFrame hands a typing or presence frame to its handler.
func (c *Client) ephemeralFrame(f *protocol.ServerFrame) {
	h := c.cfg.Handler
	switch f.Type {
	case protocol.FrameTyping:
		if h.OnTyping != nil && f.ConversationID > 0 && f.UserID > 0 {
			h.OnTyping(TypingEvent{ConversationID: f.ConversationID, UserID: f.UserID, Stop: f.State == protocol.TypingStop,
				ExpiresIn: time.Duration(f.ExpiresInMS) * time.Millisecond})
		}
	case protocol.FramePresence:
		if h.OnPresence != nil && f.UserID > 0 {
			h.OnPresence(PresenceEvent{UserID: f.UserID, Online: f.Online, LastSeen: f.LastSeen})
		}
	}
}

// Presence reads the presence of users (1..100 ids): those who share a
// current conversation with the caller, and the caller; the others are
// left out of the answer.
func (c *Client) Presence(ctx context.Context, userIDs ...int64) ([]Presence, error) {
	q := url.Values{}
	for _, id := range userIDs {
		q.Add("user_id", strconv.FormatInt(id, 10))
	}
	var out protocol.PresenceList
	if _, _, err := c.api.do(ctx, http.MethodGet, "/v1/presence", q, nil, nil, &out, 0); err != nil {
		return nil, err
	}
	return out.Presence, nil
}

// Settings reads the user's settings.
func (c *Client) Settings(ctx context.Context) (Settings, error) {
	var out Settings
	_, _, err := c.api.do(ctx, http.MethodGet, "/v1/settings", nil, nil, nil, &out, 0)
	return out, err
}

// SetSettings changes the user's settings (at least one field of ch) and
// returns them after the change. Hiding presence makes the user offline,
// without a last seen, to everyone else at once.
func (c *Client) SetSettings(ctx context.Context, ch SettingsChange) (Settings, error) {
	var out Settings
	_, _, err := c.api.do(ctx, http.MethodPatch, "/v1/settings", nil, ch, nil, &out, 0)
	return out, err
}
