package gateway

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"time"

	"github.com/inboxd/inboxd/events"
	"github.com/inboxd/inboxd/gateway/hub"
	"github.com/inboxd/inboxd/gateway/internal/apierr"
	"github.com/inboxd/inboxd/gateway/internal/input"
	"github.com/inboxd/inboxd/projection"
	"github.com/inboxd/inboxd/protocol"
)

// sendStatus is how a send ended.
type sendStatus int

const (
	sendProjected sendStatus = iota // projected within the ack wait: 201
	sendDuplicate                   // the msg_id was already projected: 200, original seq
	sendPending                     // appended, not yet projected: 202
)

// sendResult is the outcome of send.
type sendResult struct {
	status  sendStatus
	message *protocol.Message // unless pending
	msgID   string
}

// sqlSendCheck reads, in one statement, what a send must know before it
// appends: the message already projected under the msg_id (a retry), if
// any, whether the conversation exists and the user is a member, and
// whether the user's own send of this msg_id to this conversation was
// dead-lettered (refused by the projection for good).
// $1 msg_id, $2 conversation, $3 user.
const sqlSendCheck = `SELECT ` + sqlMessageCols + `,
	EXISTS (SELECT 1 FROM conversations WHERE id = $2),
	EXISTS (SELECT 1 FROM member_spans WHERE conversation_id = $2 AND user_id = $3 AND left_seq IS NULL),
	EXISTS (SELECT 1 FROM rejections WHERE msg_id = $1 AND actor_id = $3 AND conversation_id = $2
		AND reason = '` + projection.ReasonDeadLetter + `')
FROM (SELECT 1) one LEFT JOIN messages m ON m.msg_id = $1`

// sqlSendOutcome says whether msg_id is projected (the message) or the event
// was refused (its reason), whichever happened.
const sqlSendOutcome = `SELECT ` + sqlMessageCols + `,
	(SELECT reason FROM rejections WHERE event_id = $2)
FROM (SELECT 1) one LEFT JOIN messages m ON m.msg_id = $1`

const sqlMembership = `SELECT EXISTS (SELECT 1 FROM conversations WHERE id = $1),
	EXISTS (SELECT 1 FROM member_spans WHERE conversation_id = $1 AND user_id = $2 AND left_seq IS NULL)`

// requireMember fails unless conversation cid exists (404) and user is a
// current member of it (403).
func (g *Gateway) requireMember(ctx context.Context, user, cid int64) error {
	var exists, member bool
	if err := g.pool.QueryRow(ctx, sqlMembership, cid, user).Scan(&exists, &member); err != nil {
		return fmt.Errorf("membership of user %d in %d: %w", user, cid, err)
	}
	if !exists {
		return apierr.NotFound("conversation %d does not exist", cid)
	}
	if !member {
		return apierr.NotMember("user %d is not a member of conversation %d", user, cid)
	}
	return nil
}

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
func deadLetteredSend(msgID string) *Error {
	return apierr.BadRequest("message %s was refused by the projection (dead-lettered) and will not be delivered; do not retry it", msgID)
}

// send appends a message.sent and waits up to AckWait for its projection.
// It is shared by POST .../messages and the WebSocket send. The order
// matters: subscribe (so that a notification after the check wakes us),
// look the msg_id up (a retry answers with the original) and check
// membership in one statement, append, then wait for the notification of
// the event: projected (it carries the seq: the answer is built here, from
// what was sent, with no read), a duplicate of a taken msg_id, or a
// rejection of the msg_id; those two read the outcome, as does the end of
// the wait.
func (g *Gateway) send(ctx context.Context, user, cid int64, msgID, body string) (*sendResult, error) {
	if len(body) > g.cfg.MaxBody {
		return nil, apierr.TooLarge("body is %d bytes, over the limit of %d", len(body), g.cfg.MaxBody)
	}
	if body == "" {
		return nil, apierr.BadRequest("body must not be empty")
	}
	if err := input.CheckText("body", body); err != nil {
		return nil, err
	}
	e := events.New(events.MessageSent, cid, user)
	// PostgreSQL keeps microseconds: the answer built from e must be the
	// message as it will be read.
	e.At = e.At.Truncate(time.Microsecond)
	e.MsgID, e.Body = msgID, &body
	ack := g.hub.SubscribeEvent(e.EventID)
	defer ack.Close()
	rej := g.hub.SubscribeRejection(msgID)
	defer rej.Close()

	if res, err := g.checkSend(ctx, user, cid, msgID); res != nil || err != nil {
		return res, err
	}
	if err := g.appendEvent(ctx, e); err != nil {
		return nil, err
	}
	return g.awaitSend(ctx, e, ack, rej)
}

// checkSend runs sqlSendCheck before the append: a result or an error ends
// the send there (a retry, a refused send, no conversation, no member, a
// taken msg_id); neither means append.
func (g *Gateway) checkSend(ctx context.Context, user, cid int64, msgID string) (*sendResult, error) {
	var ms msgScan
	var exists, member, deadLettered bool
	if err := g.pool.QueryRow(ctx, sqlSendCheck, msgID, cid, user).Scan(append(ms.targets(), &exists, &member, &deadLettered)...); err != nil {
		return nil, fmt.Errorf("check the send of msg_id %s: %w", msgID, err)
	}
	// The sender's own earlier send of this msg_id answers first: a retry
	// gets its original even if the sender has left since, and a send the
	// projection refused for good is not appended again. Anything about
	// someone else's msg_id comes only after the membership check, so that
	// a non-member learns nothing of what exists in a conversation.
	m := ms.message()
	if m != nil && sameMessage(m, user, cid) == nil {
		g.metrics.sends.WithLabelValues("duplicate").Inc()
		return &sendResult{status: sendDuplicate, message: m, msgID: msgID}, nil
	}
	if deadLettered {
		g.metrics.sends.WithLabelValues("rejected").Inc()
		return nil, deadLetteredSend(msgID)
	}
	if !exists {
		return nil, apierr.NotFound("conversation %d does not exist", cid)
	}
	if !member {
		return nil, apierr.NotMember("user %d is not a member of conversation %d", user, cid)
	}
	if m != nil {
		return nil, sameMessage(m, user, cid)
	}
	return nil, nil
}

// awaitSend waits up to AckWait for the projection of e, the appended
// send: its ack carries the seq (the answer is built from e, with no read);
// a duplicate, a rejection, the end of the wait or a drain read the
// outcome. The result is pending when the wait ends without one.
func (g *Gateway) awaitSend(ctx context.Context, e *events.Event, ack, rej *hub.Subscription) (*sendResult, error) {
	timer := time.NewTimer(g.cfg.AckWait)
	defer timer.Stop()
	for {
		last := false
		select {
		case <-ack.C():
		case <-rej.C():
		case <-timer.C:
			last = true
		case <-g.draining:
			last = true
		case <-ctx.Done():
			return nil, apierr.ErrClientGone
		}
		if seq := ack.Seq(); seq > 0 {
			return g.projectedSend(e, seq), nil
		}
		res, err := g.sendOutcome(ctx, e, ack)
		if res != nil || err != nil {
			return res, err
		}
		if last {
			g.metrics.sends.WithLabelValues("pending").Inc()
			return &sendResult{status: sendPending, msgID: e.MsgID}, nil
		}
	}
}

// projectedSend is the answer to a send whose ack carried seq: the
// message, built from e, and cached for the members' pushes.
func (g *Gateway) projectedSend(e *events.Event, seq int64) *sendResult {
	cid, user, msgID, body := e.ConversationID, e.ActorID, e.MsgID, *e.Body
	m := &protocol.Message{ConversationID: cid, Seq: seq, MsgID: msgID, SenderID: user, Kind: protocol.MessageText,
		Body: messageBody(protocol.MessageText, body), CreatedAt: e.At.UTC()}
	// The members' pushes read it next: from the cache.
	if epoch := g.hub.Heads().CurrentEpoch(); epoch != 0 {
		g.msgs.put(msgKey{epoch: epoch, conv: cid, seq: seq}, marshalWire(m))
	}
	g.metrics.sends.WithLabelValues("projected").Inc()
	return &sendResult{status: sendProjected, message: m, msgID: msgID}
}

// sendOutcome reads what became of the send e (sqlSendOutcome): projected
// (a duplicate when the ack says so), refused, or, with neither result
// nor error, not known yet.
func (g *Gateway) sendOutcome(ctx context.Context, e *events.Event, ack *hub.Subscription) (*sendResult, error) {
	cid, user, msgID := e.ConversationID, e.ActorID, e.MsgID
	var reason *string
	var out msgScan
	if err := g.pool.QueryRow(ctx, sqlSendOutcome, msgID, e.EventID).Scan(append(out.targets(), &reason)...); err != nil {
		return nil, fmt.Errorf("outcome of msg_id %s: %w", msgID, err)
	}
	if m := out.message(); m != nil {
		if err := sameMessage(m, user, cid); err != nil {
			return nil, err
		}
		outcome, status := "projected", sendProjected
		if ack.Dup() {
			outcome, status = "duplicate", sendDuplicate
		}
		g.metrics.sends.WithLabelValues(outcome).Inc()
		return &sendResult{status: status, message: m, msgID: msgID}, nil
	}
	if reason == nil {
		return nil, nil
	}
	g.metrics.sends.WithLabelValues("rejected").Inc()
	switch *reason {
	case projection.ReasonNoConversation:
		return nil, apierr.NotFound("conversation %d does not exist", cid)
	case projection.ReasonDeadLetter:
		return nil, deadLetteredSend(msgID)
	}
	return nil, apierr.NotMember("user %d is not a member of conversation %d at the message's log position", user, cid)
}

// handleSend is POST /v1/conversations/{cid}/messages.
func (g *Gateway) handleSend(w http.ResponseWriter, r *http.Request) error {
	cid, err := pathID(r, "cid")
	if err != nil {
		return err
	}
	var req protocol.SendMessage
	if err := g.decodeBody(w, r, &req); err != nil {
		return err
	}
	msgID := req.MsgID
	if key := r.Header.Get("Idempotency-Key"); key != "" {
		k, err := input.ParseMsgID(key)
		if err != nil {
			return apierr.BadRequest("Idempotency-Key must be a uuid")
		}
		if msgID != "" {
			m, err := input.ParseMsgID(msgID)
			if err != nil {
				return err
			}
			if m != k {
				return apierr.BadRequest("msg_id and Idempotency-Key differ")
			}
		}
		msgID = k
	}
	if msgID == "" {
		return apierr.BadRequest("msg_id (or the Idempotency-Key header) is required")
	}
	if msgID, err = input.ParseMsgID(msgID); err != nil {
		return err
	}
	res, err := g.send(r.Context(), userFrom(r.Context()), cid, msgID, req.Body)
	if err != nil {
		return err
	}
	switch res.status {
	case sendProjected:
		apierr.WriteJSON(w, http.StatusCreated, res.message)
	case sendDuplicate:
		apierr.WriteJSON(w, http.StatusOK, res.message)
	default:
		apierr.WriteJSON(w, http.StatusAccepted, protocol.SendPending{MsgID: res.msgID, Status: protocol.StatusPending})
	}
	return nil
}

// sqlHistory reads the messages before a seq that the user may see: those
// within one of its membership spans (joined_seq..left_seq inclusive),
// newest first, one index range per span.
const sqlHistory = `SELECT ` + sqlMessageCols + `
FROM member_spans s
CROSS JOIN LATERAL (
	SELECT * FROM messages m
	WHERE m.conversation_id = s.conversation_id AND m.seq >= s.joined_seq
		AND m.seq <= COALESCE(s.left_seq, 9223372036854775807) AND m.seq < $3
	ORDER BY m.seq DESC LIMIT $4
) m
WHERE s.conversation_id = $1 AND s.user_id = $2
ORDER BY m.seq DESC
LIMIT $4`

const sqlEverMember = `SELECT EXISTS (SELECT 1 FROM conversations WHERE id = $1),
	EXISTS (SELECT 1 FROM member_spans WHERE conversation_id = $1 AND user_id = $2)`

// history returns up to limit messages of cid with seq < before visible to
// user, ascending, and whether older visible ones exist.
func (g *Gateway) history(ctx context.Context, user, cid, before int64, limit int) ([]protocol.Message, bool, error) {
	var exists, member bool
	if err := g.pool.QueryRow(ctx, sqlEverMember, cid, user).Scan(&exists, &member); err != nil {
		return nil, false, fmt.Errorf("membership of user %d in %d: %w", user, cid, err)
	}
	if !exists {
		return nil, false, apierr.NotFound("conversation %d does not exist", cid)
	}
	if !member {
		return nil, false, apierr.NotMember("user %d was never a member of conversation %d", user, cid)
	}
	rows, err := g.pool.Query(ctx, sqlHistory, cid, user, before, limit+1)
	if err != nil {
		return nil, false, fmt.Errorf("history of %d for user %d: %w", cid, user, err)
	}
	defer rows.Close()
	var msgs []protocol.Message
	for rows.Next() {
		var s msgScan
		if err := rows.Scan(s.targets()...); err != nil {
			return nil, false, fmt.Errorf("history of %d: %w", cid, err)
		}
		msgs = append(msgs, *s.message())
	}
	if err := rows.Err(); err != nil {
		return nil, false, fmt.Errorf("history of %d: %w", cid, err)
	}
	more := len(msgs) > limit
	if more {
		msgs = msgs[:limit]
	}
	out := make([]protocol.Message, len(msgs))
	for i, m := range msgs {
		out[len(msgs)-1-i] = m
	}
	return out, more, nil
}

// handleHistory is GET /v1/conversations/{cid}/messages.
func (g *Gateway) handleHistory(w http.ResponseWriter, r *http.Request) error {
	cid, err := pathID(r, "cid")
	if err != nil {
		return err
	}
	q := r.URL.Query()
	before, err := queryInt(q, "before", math.MaxInt64, 1, math.MaxInt64)
	if err != nil {
		return err
	}
	limit, err := queryInt(q, "limit", int64(g.cfg.PageDefault), 1, int64(g.cfg.PageMax))
	if err != nil {
		return err
	}
	msgs, more, err := g.history(r.Context(), userFrom(r.Context()), cid, before, int(limit))
	if err != nil {
		return err
	}
	apierr.WriteJSON(w, http.StatusOK, protocol.History{Messages: msgs, HasMore: more})
	return nil
}
