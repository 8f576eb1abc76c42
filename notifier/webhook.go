package notifier

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"time"
)

// Webhook is the JSON body of one notification of messages
// (docs/notifications.md): Type is TypeMessage. ID is the idempotency key: the same for every attempt of this
// notification (also in the Idempotency-Key header). Seq is the newest
// message of the burst, FirstSeq its first, Count how many messages it
// stands for; InboxSeq is the user's inbox_seq of the newest one (sync up to
// it). Badge is the user's unread_total when the notification was sent;
// Reason is "mention" when any message of the burst mentions the user, else
// "message".
type Webhook struct {
	Type           string    `json:"type"`
	ID             string    `json:"id"`
	UserID         int64     `json:"user_id"`
	ConversationID int64     `json:"conversation_id"`
	Seq            int64     `json:"seq"`
	FirstSeq       int64     `json:"first_seq"`
	Count          int       `json:"count"`
	InboxSeq       int64     `json:"inbox_seq"`
	SenderID       int64     `json:"sender_id"`
	Preview        string    `json:"preview"`
	Badge          int64     `json:"badge"`
	Mentions       int64     `json:"mentions"`
	Reason         string    `json:"reason"`
	CreatedAt      time.Time `json:"created_at"`
}

// Types of webhook bodies (their "type" field): a receiver tells them
// apart by it and answers 2xx to a type it does not handle.
const (
	TypeMessage = "message"
	TypeReport  = "message.reported"
)

// ReportWebhook is the JSON body of a report of a message
// (docs/notifications.md, "Reports"): Type is TypeReport, ID the report's
// id (the idempotency key: one body per report, the same in every
// attempt). SenderID is the reported message's sender (0: a service's
// system sender); the message's text is not in it (read it through the
// server API's GET /v1/server/reports while the message is not deleted).
type ReportWebhook struct {
	Type           string    `json:"type"`
	ID             string    `json:"id"`
	ConversationID int64     `json:"conversation_id"`
	Seq            int64     `json:"seq"`
	MsgID          string    `json:"msg_id"`
	SenderID       int64     `json:"sender_id"`
	ReporterID     int64     `json:"reporter_id"`
	Reason         string    `json:"reason"`
	Note           string    `json:"note"`
	CreatedAt      time.Time `json:"created_at"`
}

// Reasons of Webhook.Reason.
const (
	ReasonMessage = "message"
	ReasonMention = "mention"
)

// Header names of a delivery.
const (
	HeaderSignature   = "X-Inboxd-Signature"
	HeaderIdempotency = "Idempotency-Key"
)

// Sign returns the X-Inboxd-Signature value of body sent at t:
// "t=<unix seconds>,v1=<hex of HMAC-SHA256(secret, "<unix seconds>.<body>")>".
func Sign(secret []byte, t time.Time, body []byte) string {
	ts := strconv.FormatInt(t.Unix(), 10)
	mac := hmac.New(sha256.New, secret)
	mac.Write([]byte(ts))
	mac.Write([]byte("."))
	mac.Write(body)
	return "t=" + ts + ",v1=" + hex.EncodeToString(mac.Sum(nil))
}
