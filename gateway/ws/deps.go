package ws

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"time"

	"github.com/inboxd/inboxd/gateway/hub"
	"github.com/inboxd/inboxd/gateway/inbox"
	"github.com/inboxd/inboxd/gateway/internal/ratelimit"
	"github.com/inboxd/inboxd/protocol"
)

// Deps are what a Server needs of the gateway it serves beside: the
// packages it reads through (the inbox reader, the hub, the rate limits),
// and small interfaces for what the gateway's root owns (authentication,
// the send path, the conversation list of a too-long answer). A Server
// holds no reference to the gateway itself. All are required but Logger.
type Deps struct {
	// Inbox reads the hello's first page (Sync, with GET /v1/sync's rules)
	// and the pushes (Read, Resolve).
	Inbox *inbox.Reader

	// Hub wakes a session when its user's inbox moves; a session
	// subscribes before its hello is read.
	Hub *hub.Hub

	// Auth resolves the user of an upgrade request.
	Auth Authenticator

	// Sender sends a send frame's message as POST .../messages does.
	Sender Sender

	// Changer makes the change of an edit, delete or react frame as the
	// routes of a message's changes do.
	Changer Changer

	// Rebaser builds the too_long answer of a hello or a push that cannot
	// continue the client's stream.
	Rebaser Rebaser

	// ConnectLimits is spent once per connection (the gateway's read
	// bucket: reconnect storms are rate limited); SendLimits once per send
	// frame (its write bucket).
	ConnectLimits, SendLimits *ratelimit.Limiters

	// Ephemeral is typing and presence: every session joins it, typing
	// frames go to it. Nil: typing frames are ignored and no typing or
	// presence frame is pushed.
	Ephemeral Ephemeral

	// Blocks reads the users a session's user blocks (docs/protocol.md,
	// "Blocks"): the entries of their messages are pushed marked and
	// emptied, in their places. Nil: nobody blocks anybody.
	Blocks Blocks

	// Draining is closed when the gateway drains: every session is closed
	// with 1012 and new connections are told the same. Nil never closes.
	Draining <-chan struct{}

	// Admission admits new sessions and gives the reconnect hints
	// (docs/protocol.md, "Reconnect hints"). Nil: every session is
	// admitted, a drain closes with a bare 1012 and the welcome has no
	// reconnect hint.
	Admission Admission

	// Logger. Default slog.Default().
	Logger *slog.Logger
}

// Admission is the gateway's admission of new sessions and its reconnect
// hints. Safe for concurrent use.
type Admission interface {
	// Admit decides on a new session: false and when to come back if it
	// must wait.
	Admit() (ok bool, retryAfter time.Duration)
	// Spread returns the reconnect delays of n sessions closed by a drain,
	// spread so that they come back at the rate a gateway admits.
	Spread(n int) []time.Duration
	// Hint is the welcome's hint for a connection lost without a close
	// frame, n being the sessions of this gateway.
	Hint(n int) *protocol.Reconnect
}

func (d *Deps) validate() error {
	if d.Inbox == nil || d.Hub == nil || d.Auth == nil || d.Sender == nil || d.Changer == nil || d.Rebaser == nil ||
		d.ConnectLimits == nil || d.SendLimits == nil {
		return errors.New("gateway: WebSocket: Deps incomplete")
	}
	return nil
}

// Authenticator resolves the user of a connection.
type Authenticator interface {
	// Authenticate returns the user of r's bearer token, from the
	// Authorization header or, for browsers, the access_token query
	// parameter; an error is what the client is told (unauthorized,
	// closed 4001; a retryable one, such as the identity provider's keys
	// not loaded yet, closes 1013 instead).
	Authenticate(r *http.Request) (Identity, error)
}

// Identity is who a session's token says it is: the user, and what of the
// token a revocation names (its id, jti, and when it was issued, iat; each
// zero when the token carries none). Server.CloseRevoked checks sessions
// against it.
type Identity struct {
	User     int64
	TokenID  string
	IssuedAt time.Time
}

// Sender is the gateway's send path, the one of POST .../messages.
type Sender interface {
	// Send appends the message msgID of user to conversation cid and waits
	// for its projection: seq once projected (or already projected under
	// msgID), pending when it was appended but not projected in time. An
	// error is the client's (an *apierr.Error or what apierr.From maps);
	// apierr.ErrClientGone when ctx ended.
	Send(ctx context.Context, user int64, req SendRequest) (SendAnswer, error)
}

// SendAnswer is how a send ended: projected (or already projected) at
// Seq with the Attachments its message kept, or Pending.
type SendAnswer struct {
	Seq         int64
	Pending     bool
	Attachments []protocol.Attachment
}

// SendRequest is a message to send: MsgID of ConversationID. ReplyTo is the
// seq the message answers (0: none); Mentions and MentionAll are whom it
// mentions; Attachments are upload ids.
type SendRequest struct {
	ConversationID int64
	MsgID, Body    string
	ReplyTo        int64
	Mentions       []int64
	MentionAll     bool
	Attachments    []string
}

// ChangeRequest is a change of a message: Type is the event type
// (events.MessageEdited, MessageDeleted, ReactionAdded or ReactionRemoved);
// Body is an edit's, Emoji a reaction's.
type ChangeRequest struct {
	Type                string
	ChangeID            string
	ConversationID, Seq int64
	Body, Emoji         string
}

// Changer is the gateway's path of a message's changes.
type Changer interface {
	// Change validates, checks, appends and waits for the projection of
	// req by user: the message after it, or pending when it was appended
	// but not projected in time. Errors as Sender's.
	Change(ctx context.Context, user int64, req ChangeRequest) (m *protocol.Message, pending bool, err error)
}

// Rebaser builds too-long answers.
type Rebaser interface {
	// Rebase is the too_long answer that moves user's client to at's head
	// (its epoch, head and record version): the first page of the
	// conversation list, read after at.
	Rebase(ctx context.Context, user int64, at *inbox.Result) (*protocol.TooLong, error)
}

// Blocks is the gateway's blocks between users.
type Blocks interface {
	// Of returns the users user blocks (nil: none); it may read a
	// database. An error fails the push, which is retried.
	Of(ctx context.Context, user int64) (inbox.Blocked, error)
}

// Ephemeral is the gateway's typing and presence (gateway/ephemeral).
type Ephemeral interface {
	// Join registers a session of user: deliver queues a typing or
	// presence frame for it (kind is the frame type; frame is shared, not
	// to be modified) and reports whether it did; it must not block. It
	// also counts the session for the user's presence. leave is called
	// once, when the session ends.
	Join(user int64, deliver func(kind string, frame []byte) bool) (leave func())

	// Typing broadcasts a typing frame of user in conversation cid (stop:
	// typing ended) and returns its outcome; frames dropped by the rate
	// limits are no error. Errors are the client's (apierr).
	Typing(ctx context.Context, user, cid int64, stop bool) (outcome string, err error)
}
