package write

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
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

// Sender is the send path, shared by POST .../messages, the WebSocket
// server's send frames and the server API: the check, the append and the
// wait for the projection. It is safe for concurrent use.
type Sender struct {
	srv           *servers.Servers
	hub           *hub.Hub
	inbox         *inbox.Reader
	app           *Appender
	outcomes      *prometheus.CounterVec
	stages        sendStages
	maxBody       int
	ackWait       time.Duration
	draining      <-chan struct{}
	seal          bool
	mentionAllMax int
	checks        []*checkBatcher // by server, when checks are batched
	objects       Objects         // nil: attachments are refused
}

// SenderConfig is what a Sender needs; every field is required (the
// gateway's New fills them from its Config).
type SenderConfig struct {
	Servers *servers.Servers // a message's statements go to its conversation's server
	Hub     *hub.Hub
	Inbox   *inbox.Reader // caches what a send's answer carries
	App     *Appender
	// Outcomes is inboxd_gateway_sends_total by outcome; Stages is
	// inboxd_gateway_send_stage_seconds by stage.
	Outcomes *prometheus.CounterVec
	Stages   *prometheus.HistogramVec
	MaxBody  int           // the largest body, in bytes
	AckWait  time.Duration // how long a send waits for its projection
	Draining <-chan struct{}
	Seal     bool // seal bodies with their message's key (not plain bodies)
	// MentionAllMax is the most members a conversation may have for a
	// send to mention them all.
	MentionAllMax int
	// CheckBatch is the most send checks of a server in one transaction
	// (0 or 1: each alone), CheckRunners how many run at once; each batch's
	// size is observed by CheckBatchSizes when not nil.
	CheckBatch, CheckRunners int
	CheckBatchSizes          prometheus.Observer
	// Objects is the object store of attachments; nil refuses them.
	Objects Objects
}

// NewSender makes the send path of cfg.
func NewSender(cfg SenderConfig) *Sender {
	s := &Sender{srv: cfg.Servers, hub: cfg.Hub, inbox: cfg.Inbox, app: cfg.App, outcomes: cfg.Outcomes,
		stages: newSendStages(cfg.Stages), maxBody: cfg.MaxBody, ackWait: cfg.AckWait, draining: cfg.Draining,
		seal: cfg.Seal, mentionAllMax: cfg.MentionAllMax, objects: cfg.Objects}
	if cfg.CheckBatch > 1 {
		var observe func(int)
		if cfg.CheckBatchSizes != nil {
			observe = func(n int) { cfg.CheckBatchSizes.Observe(float64(n)) }
		}
		for _, pool := range cfg.Servers.Pools {
			s.checks = append(s.checks, newCheckBatcher(pool, cfg.CheckRunners, cfg.CheckBatch, observe))
		}
	}
	return s
}

// SendRequest is a message to send: MsgID of ConversationID. ReplyTo is the
// seq it replies to (0: none); Mentions and MentionAll name who it mentions.
type SendRequest struct {
	ConversationID int64
	MsgID, Body    string
	ReplyTo        int64
	Mentions       []int64
	MentionAll     bool
	// Attachments are upload ids (docs/protocol.md, "Attachments"); with
	// any, Body may be empty.
	Attachments []string
}

// sqlBodyKey returns the body key of a msg_id, made on first use.
const sqlBodyKey = `INSERT INTO body_keys (msg_id, key) VALUES ($1, $2)
ON CONFLICT (msg_id) DO UPDATE SET key = body_keys.key RETURNING key`

// sealBody sets e's body, and its attachments when it has any, sealed
// with key, the key of msgID (read with the check; made here when it is
// nil), unless bodies are plain.
func sealBody(ctx context.Context, pool *pgxpool.Pool, seal bool, e *events.Event, msgID, body string, atts []events.Attachment, key []byte) error {
	if !seal {
		e.Body, e.Attachments = &body, atts
		return nil
	}
	if key == nil {
		if err := pool.QueryRow(ctx, sqlBodyKey, msgID, events.NewKey()).Scan(&key); err != nil {
			return fmt.Errorf("body key of %s: %w", msgID, err)
		}
	}
	sealed, err := events.Seal(key, msgID, body)
	if err != nil {
		return fmt.Errorf("seal the body of %s: %w", msgID, err)
	}
	e.Body, e.SealedBody, e.MsgID = nil, sealed, msgID
	if len(atts) > 0 {
		if e.SealedAttachments, err = events.SealAttachments(key, msgID, atts); err != nil {
			return fmt.Errorf("seal the attachments of %s: %w", msgID, err)
		}
	}
	return nil
}

// Status is how a send ended.
type Status int

const (
	Projected Status = iota // projected within the ack wait: 201
	Duplicate               // the msg_id was already projected: 200, original seq
	Pending                 // appended, not yet projected: 202
)

// Result is the outcome of a send.
type Result struct {
	Status  Status
	Message *protocol.Message // unless Pending
	MsgID   string
}

// sqlSendCheck reads, in one statement, what a send must know before it
// appends: the message already projected under the msg_id (a retry), if
// any, whether the conversation exists and the user is a member, and
// whether the user's own send of this msg_id to this conversation was
// dead-lettered (refused by the projection for good).
// In the same statement it makes the body key of the msg_id ($4, a fresh
// key, or NULL when bodies are plain) unless it has one, and returns it: a
// key of a send that is then refused is never used.
// $1 msg_id, $2 conversation, $3 user, $4 key, $5 the mentioned ids, $6
// mention_all. It reads the user's role and the conversation's frozen and
// slow mode too (docs/protocol.md, "Frozen and slow mode"): only a send to
// a conversation in slow mode pays for a statement more (admitSlow).
//
// The mentioned members are counted one point lookup per id, and the
// members for mention_all come from conversations.member_count: a count
// over member_spans by conversation (what this statement did first) was,
// in its prepared generic plan, a scan of every member of the
// conversation on every send, 100,000 index entries per message in a
// large conversation (docs/decisions.md, "Measured reasons behind
// defaults").
var sqlSendCheck = `WITH k AS (INSERT INTO body_keys (msg_id, key) SELECT $1, $4::bytea WHERE $4::bytea IS NOT NULL
	ON CONFLICT (msg_id) DO NOTHING RETURNING key)
SELECT ` + rows.MessageColsFor("$3") + `,
	EXISTS (SELECT 1 FROM conversations WHERE id = $2),
	(SELECT role FROM member_spans WHERE conversation_id = $2 AND user_id = $3 AND left_seq IS NULL),
	` + sqlMutedNow + `,
	EXISTS (SELECT 1 FROM rejections WHERE msg_id = $1 AND actor_id = $3 AND conversation_id = $2
		AND reason = '` + projection.ReasonDeadLetter + `'),
	COALESCE((SELECT key FROM k), (SELECT key FROM body_keys WHERE msg_id = $1)),
	(SELECT count(DISTINCT u.id) FROM unnest($5::bigint[]) u(id)
		WHERE EXISTS (SELECT 1 FROM member_spans WHERE conversation_id = $2 AND user_id = u.id AND left_seq IS NULL)),
	CASE WHEN $6::boolean THEN COALESCE((SELECT member_count FROM conversations WHERE id = $2), 0) ELSE 0 END,
	COALESCE((SELECT frozen FROM conversations WHERE id = $2), false),
	COALESCE((SELECT slow_mode FROM conversations WHERE id = $2), 0)
FROM (SELECT 1) one LEFT JOIN messages m ON m.msg_id = $1`

// sqlMutedNow says whether $3 is muted in conversation $2 now (one point
// lookup on the primary key of sanctions; docs/protocol.md, "Ban and mute").
const sqlMutedNow = `EXISTS (SELECT 1 FROM sanctions WHERE conversation_id = $2 AND user_id = $3 AND kind = '` +
	projection.SanctionMute + `' AND (until IS NULL OR until > now()))`

// mutedError is the answer to a muted member's send, edit or reaction.
func mutedError(user, cid int64) error {
	return apierr.Forbidden("user %d is muted in conversation %d", user, cid)
}

// sqlSendOutcome says whether msg_id is projected (the message) or the event
// was refused (its reason), whichever happened.
const sqlSendOutcome = `SELECT ` + rows.MessageCols + `,
	(SELECT reason FROM rejections WHERE event_id = $2)
FROM (SELECT 1) one LEFT JOIN messages m ON m.msg_id = $1`

// sameMessage answers a msg_id that is already projected: the original for
// the same sender and conversation, else a 400 (the id is taken).
func sameMessage(m *protocol.Message, user, cid int64) error {
	if m.SenderID != user || m.ConversationID != cid || m.Kind != protocol.MessageText {
		return apierr.BadRequest("msg_id %s is already used by another message", m.MsgID)
	}
	return nil
}

// deadLetteredSend is the answer to a send whose event the projection
// refused for good (it went to the DLQ): permanent, so a 400, and the same
// for every retry of the msg_id.
func deadLetteredSend(msgID string) *apierr.Error {
	return apierr.BadRequest("message %s was refused by the projection (dead-lettered) and will not be delivered; do not retry it", msgID)
}

// Send appends a message.sent and waits up to the ack wait for its
// projection. It is shared by POST .../messages and the WebSocket send. The order
// matters: subscribe (so that a notification after the check wakes us),
// look the msg_id up (a retry answers with the original) and check
// membership in one statement, append, then wait for the notification of
// the event: projected (it carries the seq: the answer is built here, from
// what was sent, with no read), a duplicate of a taken msg_id, or a
// rejection of the msg_id; those two read the outcome, as does the end of
// the wait.
func (s *Sender) Send(ctx context.Context, user int64, req SendRequest) (*Result, error) {
	return s.SendAs(ctx, user, req, nil)
}

// SendAs is Send for the server API: stamp, when set, marks the event as
// a service's (Service, and SenderName with user 0: a named system
// sender, no member) before it is checked and appended.
func (s *Sender) SendAs(ctx context.Context, user int64, req SendRequest, stamp func(*events.Event)) (*Result, error) {
	cid, msgID, body, replyTo := req.ConversationID, req.MsgID, req.Body, req.ReplyTo
	if len(body) > s.maxBody {
		return nil, apierr.TooLarge("body is %d bytes, over the limit of %d", len(body), s.maxBody)
	}
	if body == "" && len(req.Attachments) == 0 {
		return nil, apierr.BadRequest("body must not be empty")
	}
	if err := input.CheckText("body", body); err != nil {
		return nil, err
	}
	e := events.New(events.MessageSent, cid, user)
	// PostgreSQL keeps microseconds: the answer built from e must be the
	// message as it will be read.
	e.At = e.At.Truncate(time.Microsecond)
	if replyTo < 0 {
		return nil, apierr.BadRequest("reply_to must be a seq")
	}
	e.MsgID, e.ReplyTo = msgID, replyTo
	mentions, err := checkMentions(req.Mentions, user)
	if err != nil {
		return nil, err
	}
	e.Mentions, e.MentionAll = mentions, req.MentionAll
	if stamp != nil {
		stamp(e)
	}
	// The message as it will be projected, but for its seq: put into the
	// message cache as the notification of its projection is dispatched,
	// before it wakes the members' sessions, whose pushes then find it.
	// A send with attachments is not: the projection keeps of them those
	// still claimed when it runs, which its answer then reads.
	tmpl := projectedMessage(e, body)
	withFiles := len(req.Attachments) > 0
	ack := s.hub.SubscribeEventThen(e.EventID, func(seq int64) {
		if !withFiles {
			s.cacheProjected(tmpl, seq)
		}
	})
	defer ack.Close()
	rej := s.hub.SubscribeRejection(msgID)
	defer rej.Close()

	t0 := time.Now()
	res, key, err := s.checkSend(ctx, user, e)
	if res != nil || err != nil {
		return res, err
	}
	atts, err := s.claimAttachments(ctx, user, cid, msgID, req.Attachments)
	if err != nil {
		return nil, err
	}
	t1 := time.Now()
	s.stages.check.Observe(t1.Sub(t0).Seconds())
	if err := sealBody(ctx, s.srv.Conv(e.ConversationID), s.seal, e, msgID, body, atts, key); err != nil {
		return nil, err
	}
	if err := s.app.Append(ctx, e); err != nil {
		return nil, err
	}
	t2 := time.Now()
	s.stages.append.Observe(t2.Sub(t1).Seconds())
	res, err = s.awaitSend(ctx, e, body, !withFiles, ack, rej)
	if err == nil && res.Status != Pending {
		s.stages.projection.Observe(time.Since(t2).Seconds())
	}
	return res, err
}

// sendStages are the observers of inboxd_gateway_send_stage_seconds.
type sendStages struct{ check, append, projection prometheus.Observer }

func newSendStages(v *prometheus.HistogramVec) sendStages {
	return sendStages{check: v.WithLabelValues("check"), append: v.WithLabelValues("append"),
		projection: v.WithLabelValues("projection")}
}

// checkSend runs sqlSendCheck before the append: a result or an error ends
// the send there (a retry, a refused send, no conversation, no member, a
// taken msg_id); neither means append.
func (s *Sender) checkSend(ctx context.Context, user int64, e *events.Event) (*Result, []byte, error) {
	cid, msgID := e.ConversationID, e.MsgID
	var ms rows.MessageScan
	var exists, muted, deadLettered, frozen bool
	var role *string
	var mentioned, members int64
	var slow int32
	var key, fresh []byte
	if s.seal {
		fresh = events.NewKey()
	}
	args := []any{msgID, cid, user, fresh, e.Mentions, e.MentionAll}
	dest := append(ms.Targets(), &exists, &role, &muted, &deadLettered, &key, &mentioned, &members, &frozen, &slow)
	var err error
	if s.checks != nil {
		err = s.checks[s.srv.OfConv(cid)].queryRow(ctx, sqlSendCheck, args, dest)
	} else {
		err = s.srv.Conv(cid).QueryRow(ctx, sqlSendCheck, args...).Scan(dest...)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("check the send of msg_id %s: %w", msgID, err)
	}
	// The sender's own earlier send of this msg_id answers first: a retry
	// gets its original even if the sender has left since, and a send the
	// projection refused for good is not appended again. Anything about
	// someone else's msg_id comes only after the membership check, so that
	// a non-member learns nothing of what exists in a conversation.
	m := ms.Message()
	if m != nil && sameMessage(m, user, cid) == nil {
		s.outcomes.WithLabelValues("duplicate").Inc()
		return &Result{Status: Duplicate, Message: m, MsgID: msgID}, nil, nil
	}
	if deadLettered {
		s.outcomes.WithLabelValues("rejected").Inc()
		return nil, nil, deadLetteredSend(msgID)
	}
	if !exists {
		return nil, nil, apierr.NotFound("conversation %d does not exist", cid)
	}
	member := role != nil
	if !member && user != 0 { // user 0: a service's system sender, no member
		return nil, nil, apierr.NotMember("user %d is not a member of conversation %d", user, cid)
	}
	if m != nil {
		return nil, nil, sameMessage(m, user, cid)
	}
	if muted && user != 0 {
		return nil, nil, mutedError(user, cid)
	}
	var rank string
	if role != nil {
		rank = *role
	}
	if frozen && user != 0 && !projection.WritesWhileFrozen(rank) {
		return nil, nil, FrozenError(cid)
	}
	if m, err := s.takenElsewhere(ctx, msgID, user, cid); err != nil {
		return nil, nil, err
	} else if m != nil {
		s.outcomes.WithLabelValues("duplicate").Inc()
		return &Result{Status: Duplicate, Message: m, MsgID: msgID}, nil, nil
	}
	if mentioned != int64(len(e.Mentions)) {
		return nil, nil, apierr.BadRequest("mentions name %d users who are not members of conversation %d",
			int64(len(e.Mentions))-mentioned, cid)
	}
	if e.MentionAll && members > int64(s.mentionAllMax) {
		return nil, nil, apierr.BadRequest("mention_all is for conversations of at most %d members; this one has %d",
			s.mentionAllMax, members)
	}
	// Last: a send refused for another reason spends no slow-mode turn.
	if slowModeApplies(user, rank, int(slow)) {
		if err := s.admitSlow(ctx, user, cid, msgID, int(slow)); err != nil {
			return nil, nil, err
		}
	}
	return nil, key, nil
}

// sqlMsgIDElsewhere is the message of msg_id $1, as $2 reads it.
var sqlMsgIDElsewhere = `SELECT ` + rows.MessageColsFor("$2") + ` FROM messages m WHERE m.msg_id = $1`

// takenElsewhere looks msg_id up on the servers other than the
// conversation's (one server: sqlSendCheck saw every message). A message
// of this sender and conversation there is this send's (its conversation
// moved, and this gateway still reads the old placement): a duplicate,
// answered with it. Another message there refuses the msg_id, as on one
// server. Each server's projection keeps msg_ids unique among its own
// conversations only, so two sends of one msg_id to conversations on two
// servers at the same instant can both be projected; a msg_id reused later
// is refused here (docs/decisions.md, "Placement of state on several
// PostgreSQL servers").
func (s *Sender) takenElsewhere(ctx context.Context, msgID string, user, cid int64) (*protocol.Message, error) {
	if !s.srv.Sharded() {
		return nil, nil
	}
	own := s.srv.OfConv(cid)
	for i, pool := range s.srv.Pools {
		if i == own {
			continue
		}
		var ms rows.MessageScan
		err := pool.QueryRow(ctx, sqlMsgIDElsewhere, msgID, user).Scan(ms.Targets()...)
		if errors.Is(err, pgx.ErrNoRows) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("look msg_id %s up on server %d: %w", msgID, i+1, err)
		}
		m := ms.Message()
		if err := sameMessage(m, user, cid); err != nil {
			return nil, err
		}
		return m, nil
	}
	return nil, nil
}

// checkMentions checks a send's mentions (distinct positive user ids, at
// most events.MaxMentions) and drops the sender's own: one does not
// mention oneself.
func checkMentions(ids []int64, sender int64) ([]int64, error) {
	if len(ids) > events.MaxMentions {
		return nil, apierr.BadRequest("at most %d mentions, not %d", events.MaxMentions, len(ids))
	}
	seen := make(map[int64]bool, len(ids))
	out := make([]int64, 0, len(ids))
	for _, id := range ids {
		if id <= 0 {
			return nil, apierr.BadRequest("mentions must be positive user ids")
		}
		if seen[id] {
			return nil, apierr.BadRequest("user %d is mentioned twice", id)
		}
		seen[id] = true
		if id != sender {
			out = append(out, id)
		}
	}
	if len(out) == 0 {
		return nil, nil
	}
	return out, nil
}

// awaitSend waits up to the ack wait for the projection of e, the appended
// send: its ack carries the seq (the answer is built from e, with no read);
// a duplicate, a rejection, the end of the wait or a drain read the
// outcome. The result is pending when the wait ends without one.
func (s *Sender) awaitSend(ctx context.Context, e *events.Event, body string, fromSent bool, ack, rej *hub.Subscription) (*Result, error) {
	var res *Result
	err := awaitProjection(ctx, s.ackWait, s.draining, ack, rej, func(last bool) (bool, error) {
		if seq := ack.Seq(); seq > 0 && fromSent {
			res = s.projectedSend(e, body, seq)
			return true, nil
		}
		r, err := s.sendOutcome(ctx, e, ack)
		if r != nil || err != nil {
			res = r
			return true, err
		}
		if last {
			s.outcomes.WithLabelValues("pending").Inc()
			res = &Result{Status: Pending, MsgID: e.MsgID}
			return true, nil
		}
		return false, nil
	})
	return res, err
}

// awaitProjection waits up to ackWait for the projection of an appended
// event (a send, a change): at every wake-up (its ack, its rejection, the
// end of the wait, a drain) it asks outcome, with last set once the wait is
// over, until outcome is done or fails. It never polls.
func awaitProjection(ctx context.Context, ackWait time.Duration, draining <-chan struct{}, ack, rej *hub.Subscription,
	outcome func(last bool) (done bool, err error)) error {
	timer := time.NewTimer(ackWait)
	defer timer.Stop()
	for {
		last := false
		select {
		case <-ack.C():
		case <-rej.C():
		case <-timer.C:
			last = true
		case <-draining:
			last = true
		case <-ctx.Done():
			return apierr.ErrClientGone
		}
		if done, err := outcome(last); done || err != nil {
			return err
		}
	}
}

// projectedSend is the answer to a send whose ack carried seq: the
// message, built from e, and cached for the members' pushes.
func (s *Sender) projectedSend(e *events.Event, body string, seq int64) *Result {
	m := projectedMessage(e, body)
	m.Seq = seq
	s.outcomes.WithLabelValues("projected").Inc()
	return &Result{Status: Projected, Message: &m, MsgID: e.MsgID}
}

// projectedMessage is the message e (a message.sent, with its text body)
// will be projected as, but for its seq.
func projectedMessage(e *events.Event, body string) protocol.Message {
	return protocol.Message{ConversationID: e.ConversationID, MsgID: e.MsgID, SenderID: e.ActorID, Kind: protocol.MessageText,
		Body: rows.MessageBody(protocol.MessageText, body), CreatedAt: e.At.UTC(), ReplyTo: e.ReplyTo,
		Mentions: e.Mentions, MentionAll: e.MentionAll, SenderName: e.SenderName}
}

// cacheProjected puts tmpl, projected at seq, into the message cache (on
// the hub's goroutine, before the members' sessions are woken).
func (s *Sender) cacheProjected(tmpl protocol.Message, seq int64) {
	// The message is of its conversation's server, at that server's epoch.
	if epoch := s.hub.HeadsOfServer(s.srv.OfConv(tmpl.ConversationID)).CurrentEpoch(); epoch != 0 {
		tmpl.Seq = seq
		s.inbox.CacheMessage(epoch, &tmpl)
	}
}

// sendOutcome reads what became of the send e (sqlSendOutcome): projected
// (a duplicate when the ack says so), refused, or, with neither result
// nor error, not known yet.
func (s *Sender) sendOutcome(ctx context.Context, e *events.Event, ack *hub.Subscription) (*Result, error) {
	cid, user, msgID := e.ConversationID, e.ActorID, e.MsgID
	var reason *string
	var out rows.MessageScan
	if err := s.srv.Conv(cid).QueryRow(ctx, sqlSendOutcome, msgID, e.EventID).Scan(append(out.Targets(), &reason)...); err != nil {
		return nil, fmt.Errorf("outcome of msg_id %s: %w", msgID, err)
	}
	if m := out.Message(); m != nil {
		if err := sameMessage(m, user, cid); err != nil {
			return nil, err
		}
		outcome, status := "projected", Projected
		if ack.Dup() {
			outcome, status = "duplicate", Duplicate
		}
		s.outcomes.WithLabelValues(outcome).Inc()
		return &Result{Status: status, Message: m, MsgID: msgID}, nil
	}
	if reason == nil {
		return nil, nil
	}
	s.outcomes.WithLabelValues("rejected").Inc()
	switch *reason {
	case projection.ReasonNoConversation:
		return nil, apierr.NotFound("conversation %d does not exist", cid)
	case projection.ReasonDeadLetter:
		return nil, deadLetteredSend(msgID)
	case projection.ReasonNoMessage:
		return nil, apierr.BadRequest("reply_to %d names no message you can see in conversation %d", e.ReplyTo, cid)
	case projection.ReasonMuted:
		return nil, mutedError(user, cid)
	case projection.ReasonFrozen:
		return nil, FrozenError(cid)
	}
	return nil, apierr.NotMember("user %d is not a member of conversation %d at the message's log position", user, cid)
}
