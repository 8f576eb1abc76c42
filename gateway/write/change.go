package write

import (
	"context"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/inboxd/inboxd/events"
	"github.com/inboxd/inboxd/gateway/hub"
	"github.com/inboxd/inboxd/gateway/inbox"
	"github.com/inboxd/inboxd/gateway/internal/apierr"
	"github.com/inboxd/inboxd/gateway/internal/input"
	"github.com/inboxd/inboxd/gateway/internal/rows"
	"github.com/inboxd/inboxd/gateway/internal/servers"
	"github.com/inboxd/inboxd/projection"
	"github.com/inboxd/inboxd/protocol"
)

// Changer is the path of a change of a message (edit, delete, reaction),
// shared by its HTTP routes and the WebSocket's change frames: the check,
// the append and the wait for the projection, as for a send. It is safe
// for concurrent use.
type Changer struct {
	srv      *servers.Servers
	hub      *hub.Hub
	inbox    *inbox.Reader
	app      *Appender
	outcomes *prometheus.CounterVec
	maxBody  int
	ackWait  time.Duration
	draining <-chan struct{}
	seal     bool
}

// ChangerConfig is what a Changer needs; every field is required.
type ChangerConfig struct {
	Servers *servers.Servers // a message's statements go to its conversation's server
	Hub     *hub.Hub
	Inbox   *inbox.Reader // caches the state a change's answer read, for the members' pushes
	App     *Appender
	// Outcomes is inboxd_gateway_changes_total by type and outcome.
	Outcomes *prometheus.CounterVec
	MaxBody  int           // the largest edited body, in bytes
	AckWait  time.Duration // how long a change waits for its projection
	Draining <-chan struct{}
	Seal     bool // seal edited bodies (not plain bodies)
}

// NewChanger makes the change path of cfg.
func NewChanger(cfg ChangerConfig) *Changer {
	return &Changer{srv: cfg.Servers, hub: cfg.Hub, inbox: cfg.Inbox, app: cfg.App, outcomes: cfg.Outcomes,
		maxBody: cfg.MaxBody, ackWait: cfg.AckWait, draining: cfg.Draining, seal: cfg.Seal}
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

// sqlChangeCheck reads what a change must know before it appends: the
// message (with the user's reaction), whether the conversation exists, its
// creator, the user's current span start, whether this change_id was applied
// for the user, and the reason it was refused if it was.
// $1 conversation, $2 seq, $3 user, $4 change_id.
var sqlChangeCheck = `SELECT ` + rows.MessageColsFor("$3") + `,
	EXISTS (SELECT 1 FROM conversations WHERE id = $1),
	(SELECT created_by FROM conversations WHERE id = $1),
	COALESCE((SELECT roles FROM conversations WHERE id = $1), false),
	(SELECT joined_seq FROM member_spans WHERE conversation_id = $1 AND user_id = $3 AND left_seq IS NULL),
	COALESCE((SELECT role FROM member_spans WHERE conversation_id = $1 AND user_id = $3 AND left_seq IS NULL), ''),
	EXISTS (SELECT 1 FROM sanctions WHERE conversation_id = $1 AND user_id = $3 AND kind = '` + projection.SanctionMute + `'
		AND (until IS NULL OR until > now())),
	COALESCE((SELECT frozen FROM conversations WHERE id = $1), false),
	EXISTS (SELECT 1 FROM changes WHERE change_id = $4 AND actor_id = $3 AND conversation_id = $1 AND seq = $2),
	EXISTS (SELECT 1 FROM changes WHERE change_id = $4),
	(SELECT reason FROM rejections WHERE msg_id = $4 AND actor_id = $3 LIMIT 1),
	m.created_at,
	(SELECT key FROM body_keys WHERE msg_id = m.msg_id)
FROM (SELECT 1) one LEFT JOIN messages m ON m.conversation_id = $1 AND m.seq = $2`

// sqlChangeOutcome reads the message after a change and the reason the
// change was refused, if it was, by the change's keys (change_id: its
// primary key; the rejection's event id). $1 conversation, $2 seq, $3 user,
// $4 event, $5 change_id.
var sqlChangeOutcome = `SELECT ` + rows.MessageColsFor("$3") + `,
	EXISTS (SELECT 1 FROM changes WHERE change_id = $5),
	(SELECT reason FROM rejections WHERE event_id = $4)
FROM (SELECT 1) one LEFT JOIN messages m ON m.conversation_id = $1 AND m.seq = $2`

// changeCheck is what sqlChangeCheck read.
type changeCheck struct {
	msg      *protocol.Message
	at       *time.Time
	exists   bool
	creator  *int64
	enforced bool // the conversation has roles (events.Event.Roles)
	joined   *int64
	role     string // the user's role, "" when no member
	muted    bool   // the user is muted in the conversation now
	frozen   bool   // the conversation is frozen
	applied  bool   // this change_id was applied, by this user, to this message
	taken    bool   // this change_id was applied, to whatever
	refusal  *string
	distinct int
	key      []byte // the message's body key, nil when none
}

// Change validates req, checks it against the projections, appends its
// event and waits up to the ack wait for its projection: the message after the
// change, or pending (true) when the wait ended first.
func (c *Changer) Change(ctx context.Context, user int64, req ChangeRequest) (*protocol.Message, bool, error) {
	e, err := c.event(user, req)
	if err != nil {
		return nil, false, err
	}
	ack := c.hub.SubscribeEvent(e.EventID)
	defer ack.Close()
	rej := c.hub.SubscribeRejection(e.ChangeID)
	defer rej.Close()
	m, msgID, key, err := c.check(ctx, user, e)
	if m != nil || err != nil {
		return m, false, err
	}
	if e.Type == events.MessageEdited {
		// Sealed with its message's key: deleting the message erases the
		// edits too.
		if err := sealBody(ctx, c.srv.Conv(e.ConversationID), c.seal, e, msgID, *e.Body, nil, key); err != nil {
			return nil, false, err
		}
	}
	if err := c.app.Append(ctx, e); err != nil {
		return nil, false, err
	}
	m = nil
	pending := false
	err = awaitProjection(ctx, c.ackWait, c.draining, ack, rej, func(last bool) (bool, error) {
		var done bool
		var err error
		if m, done, err = c.outcome(ctx, user, e); done || err != nil {
			return true, err
		}
		if last {
			c.outcomes.WithLabelValues(e.Type, "pending").Inc()
			pending = true
		}
		return last, nil
	})
	if err != nil {
		return nil, false, err
	}
	return m, pending, nil
}

// event validates req and makes its event.
func (c *Changer) event(user int64, req ChangeRequest) (*events.Event, error) {
	if req.ConversationID <= 0 || req.Seq <= 0 {
		return nil, apierr.BadRequest("conversation and seq must be positive integers")
	}
	if req.ChangeID == "" {
		return nil, apierr.BadRequest("change_id (or the Idempotency-Key header) is required")
	}
	id, err := input.ParseMsgID(req.ChangeID)
	if err != nil {
		return nil, apierr.BadRequest("change_id must be a uuid")
	}
	e := events.New(req.Type, req.ConversationID, user)
	e.ChangeID, e.Seq = id, req.Seq
	switch req.Type {
	case events.MessageEdited:
		if len(req.Body) > c.maxBody {
			return nil, apierr.TooLarge("body is %d bytes, over the limit of %d", len(req.Body), c.maxBody)
		}
		if req.Body == "" {
			return nil, apierr.BadRequest("body must not be empty")
		}
		if err := input.CheckText("body", req.Body); err != nil {
			return nil, err
		}
		body := req.Body
		e.Body = &body
	case events.ReactionAdded:
		if err := input.CheckText("emoji", req.Emoji); err != nil {
			return nil, err
		}
		if err := events.ValidEmoji(req.Emoji); err != nil {
			return nil, apierr.BadRequest("emoji must be 1..%d bytes without whitespace or control characters", events.MaxEmoji)
		}
		e.Emoji = req.Emoji
	}
	return e, nil
}

// check refuses what the projections already refuse and answers a
// change_id already applied (the message as it is) or one that changes
// nothing; no message and no error means append (msgID is the message's).
func (c *Changer) check(ctx context.Context, user int64, e *events.Event) (*protocol.Message, string, []byte, error) {
	var ms rows.MessageScan
	var ck changeCheck
	err := c.srv.Conv(e.ConversationID).QueryRow(ctx, sqlChangeCheck, e.ConversationID, e.Seq, user, e.ChangeID).Scan(
		append(ms.Targets(), &ck.exists, &ck.creator, &ck.enforced, &ck.joined, &ck.role, &ck.muted, &ck.frozen, &ck.applied, &ck.taken, &ck.refusal, &ck.at, &ck.key)...)
	if err != nil {
		return nil, "", nil, fmt.Errorf("check the change %s: %w", e.ChangeID, err)
	}
	ck.msg = ms.Message()
	switch {
	case !ck.exists:
		return nil, "", nil, apierr.NotFound("conversation %d does not exist", e.ConversationID)
	case ck.joined == nil:
		return nil, "", nil, apierr.NotMember("user %d is not a member of conversation %d", user, e.ConversationID)
	case ck.applied && ck.msg != nil:
		c.outcomes.WithLabelValues(e.Type, "duplicate").Inc()
		return ck.msg, "", nil, nil
	case ck.taken:
		// Like a msg_id: a change_id names one change of one message.
		return nil, "", nil, apierr.BadRequest("change_id %s is already used by another change", e.ChangeID)
	case ck.refusal != nil:
		return nil, "", nil, refusal(*ck.refusal, e)
	case ck.msg == nil || e.Seq < *ck.joined:
		return nil, "", nil, apierr.NotFound("conversation %d has no message %d you can see", e.ConversationID, e.Seq)
	case ck.msg.Kind != protocol.MessageText:
		return nil, "", nil, refusal(projection.ReasonSystemMessage, e)
	case ck.muted && (e.Type == events.MessageEdited || e.Type == events.ReactionAdded):
		return nil, "", nil, refusal(projection.ReasonMuted, e)
	case ck.frozen && e.Type != events.MessageReported && !projection.WritesWhileFrozen(ck.role):
		return nil, "", nil, refusal(projection.ReasonFrozen, e)
	}
	m := ck.msg
	mine := ""
	for _, r := range m.Reactions {
		if r.Me {
			mine = r.Emoji
		}
	}
	switch e.Type {
	case events.MessageEdited:
		switch {
		case m.SenderID != user:
			return nil, "", nil, refusal(projection.ReasonNotSender, e)
		case m.Deleted:
			return nil, "", nil, refusal(projection.ReasonDeleted, e)
		case ck.at != nil && e.At.Sub(*ck.at) > projection.EditWindow:
			return nil, "", nil, refusal(projection.ReasonEditWindow, e)
		}
	case events.MessageDeleted:
		switch {
		case m.SenderID != user && !projection.MayDeleteOthers(ck.role) && (ck.enforced || ck.creator == nil || *ck.creator != user):
			// The projection's rule (projector/changes.go): a moderator
			// and above; before roles, also the creator.
			return nil, "", nil, refusal(projection.ReasonNotSender, e)
		case m.Deleted:
			return m, "", nil, nil // nothing to change
		}
	case events.ReactionAdded:
		switch {
		case m.Deleted:
			return nil, "", nil, refusal(projection.ReasonDeleted, e)
		case mine == e.Emoji:
			return m, "", nil, nil
		case !hasEmoji(m, e.Emoji) && len(m.Reactions) >= projection.MaxDistinctReactions && !soleReaction(m, mine):
			return nil, "", nil, refusal(projection.ReasonTooManyEmoji, e)
		}
	case events.ReactionRemoved:
		if mine == "" {
			return m, "", nil, nil
		}
	}
	if m.MsgID == "" {
		return nil, "", nil, fmt.Errorf("message %d of conversation %d read without its msg_id", e.Seq, e.ConversationID)
	}
	return nil, m.MsgID, ck.key, nil
}

func hasEmoji(m *protocol.Message, emoji string) bool {
	for _, r := range m.Reactions {
		if r.Emoji == emoji {
			return true
		}
	}
	return false
}

// soleReaction says whether the user's reaction mine is the only one of its
// emoji (replacing it frees a place among the distinct ones).
func soleReaction(m *protocol.Message, mine string) bool {
	for _, r := range m.Reactions {
		if r.Emoji == mine {
			return r.Count == 1
		}
	}
	return false
}

// outcome reads what became of the change e: applied (the message as it
// is now), refused (the error), or neither yet (done false).
func (c *Changer) outcome(ctx context.Context, user int64, e *events.Event) (*protocol.Message, bool, error) {
	var ms rows.MessageScan
	var applied bool
	var reason *string
	if err := c.srv.Conv(e.ConversationID).QueryRow(ctx, sqlChangeOutcome, e.ConversationID, e.Seq, user, e.EventID, e.ChangeID).Scan(
		append(ms.Targets(), &applied, &reason)...); err != nil {
		return nil, false, fmt.Errorf("outcome of the change %s: %w", e.ChangeID, err)
	}
	if reason != nil {
		c.outcomes.WithLabelValues(e.Type, "rejected").Inc()
		return nil, true, refusal(*reason, e)
	}
	if !applied {
		return nil, false, nil
	}
	c.outcomes.WithLabelValues(e.Type, "projected").Inc()
	m := ms.Message()
	if m != nil && len(m.Reactions) == 0 {
		// The members' pushes read it next: from the cache.
		if epoch := c.hub.HeadsOfServer(c.srv.OfConv(m.ConversationID)).CurrentEpoch(); epoch != 0 {
			c.inbox.CacheMessage(epoch, m)
		}
	}
	return m, true, nil
}

// refusal is the client's error for a change refused for reason (by the
// projection, or by the check that foresees it).
func refusal(reason string, e *events.Event) error {
	switch reason {
	case projection.ReasonNoConversation:
		return apierr.NotFound("conversation %d does not exist", e.ConversationID)
	case projection.ReasonNoMessage:
		return apierr.NotFound("conversation %d has no message %d you can see", e.ConversationID, e.Seq)
	case projection.ReasonNotMember:
		return apierr.NotMember("user %d is not a member of conversation %d", e.ActorID, e.ConversationID)
	case projection.ReasonNotSender:
		return apierr.Forbidden("message %d of conversation %d is not yours to change", e.Seq, e.ConversationID)
	case projection.ReasonMuted:
		return mutedError(e.ActorID, e.ConversationID)
	case projection.ReasonFrozen:
		return FrozenError(e.ConversationID)
	case projection.ReasonDeleted:
		return apierr.BadRequest("message %d of conversation %d is deleted", e.Seq, e.ConversationID)
	case projection.ReasonEditWindow:
		return apierr.BadRequest("message %d can no longer be edited (%v after its send)", e.Seq, projection.EditWindow)
	case projection.ReasonSystemMessage:
		if e.Type == events.MessageReported {
			return apierr.BadRequest("message %d is a system message; it cannot be reported", e.Seq)
		}
		return apierr.BadRequest("message %d is a system message; it cannot change", e.Seq)
	case projection.ReasonTooManyEmoji:
		return apierr.BadRequest("message %d has %d distinct reactions already", e.Seq, projection.MaxDistinctReactions)
	case projection.ReasonOwnMessage:
		return apierr.BadRequest("message %d of conversation %d is your own: it cannot be reported", e.Seq, e.ConversationID)
	case projection.ReasonNoReport:
		return apierr.NotFound("conversation %d has no report %s", e.ConversationID, e.ReportID)
	}
	if e.ReportID != "" {
		return apierr.BadRequest("the report %s was refused by the projection (%s)", e.ReportID, reason)
	}
	return apierr.BadRequest("the change %s was refused by the projection (%s)", e.ChangeID, reason)
}
