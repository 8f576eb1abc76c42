package projector

import (
	"encoding/json"

	"github.com/jackc/pgx/v5"

	"github.com/inboxd/inboxd/events"
	"github.com/inboxd/inboxd/projection"
)

// Attachments (docs/protocol.md, "Attachments"). A send's check claims
// its uploads (public.uploads.msg_id) before the append; the projection
// keeps of the attachments a message.sent describes those whose upload
// is still claimed by the message and alive, so that no message points
// at an object the sweeper has removed (an upload expired before the
// message was projected: the sweeper locks the row and looks for the
// message, the projection locks it here, and whichever is first wins).
// It stores them in messages.attachments and marks their uploads
// attached (their key now lives in the message). A delete erases them:
// the column, the uploads' keys, and (through the body key) what the
// log holds; the sweeper removes the objects.

// sqlLoadClaims reads, locked, the live uploads the batch's sends with
// attachments claimed.
const sqlLoadClaims = `SELECT msg_id::text, id::text FROM public.uploads
WHERE msg_id = ANY($1::uuid[]) AND state IN ('open', 'attached') ORDER BY id FOR UPDATE`

// queueLoadClaims reads the uploads claimed by the sends msgIDs.
func queueLoadClaims(bt *pgx.Batch, b *batch, msgIDs []string) {
	bt.Queue(sqlLoadClaims, msgIDs).Query(func(rows pgx.Rows) error {
		for rows.Next() {
			var msgID, id string
			if err := rows.Scan(&msgID, &id); err != nil {
				return err
			}
			if b.claims == nil {
				b.claims = map[string]map[string]bool{}
			}
			if b.claims[msgID] == nil {
				b.claims[msgID] = map[string]bool{}
			}
			b.claims[msgID][id] = true
		}
		return rows.Err()
	})
}

// attachments returns the attachments of send r that its message keeps.
// A send whose body key is gone (erased: deleted before this projection,
// in a replay) keeps none; sealed attachments that do not open refuse
// the send (ok false).
func (b *batch) attachments(r Record, erased bool) (kept []events.Attachment, ok bool) {
	e := r.Event
	if !e.HasAttachments() || erased {
		return nil, true
	}
	all := e.Attachments
	if e.SealedAttachments != "" {
		key, found := b.bodyKeys[e.MsgID]
		if !found {
			return nil, true
		}
		var err error
		if all, err = events.OpenAttachments(key, e.MsgID, e.SealedAttachments); err != nil {
			b.reject(r, projection.ReasonUnsealable)
			return nil, false
		}
	}
	for _, a := range all {
		if b.claims[e.MsgID][a.ID] {
			kept = append(kept, a)
			b.attach = append(b.attach, a.ID)
		}
	}
	return kept, true
}

// attachmentsJSON is the column value of a message's attachments: NULL
// when it has none or is deleted.
func attachmentsJSON(m *msgState) (*string, error) {
	if len(m.attachments) == 0 || m.deleted {
		return nil, nil
	}
	raw, err := json.Marshal(m.attachments)
	if err != nil {
		return nil, err
	}
	s := string(raw)
	return &s, nil
}

// queueUploads marks the uploads of the batch's messages attached, and
// those of its deleted messages erased (their keys go: the message's
// column, and the log through the body key, are the only other copies).
func (b *batch) queueUploads(bt *pgx.Batch) {
	if len(b.attach) > 0 {
		bt.Queue(`UPDATE public.uploads SET state = 'attached', key = NULL,
	thumbnail = CASE WHEN content_type IN ('image/jpeg', 'image/png', 'image/gif', 'image/webp') THEN 'wanted' END
WHERE id = ANY($1::uuid[]) AND state = 'open'`, b.attach)
	}
	if len(b.erase) > 0 {
		bt.Queue(`UPDATE public.uploads SET state = 'erased', key = NULL
WHERE msg_id = ANY($1::uuid[]) AND state IN ('open', 'attached')`, b.erase)
	}
}

// messageThumbnailed adds the thumbnail a gateway made of one of the
// message's images: a change of the sender's message (no edit window, and
// made by the server: the sender need not be a member any more), an update
// entry for its members. A thumbnail already there changes nothing; one
// of a file the message does not keep is refused.
func (b *batch) messageThumbnailed(r Record, c *convState) {
	e := r.Event
	if b.knownChanges.has(e.ChangeID) {
		b.dups = append(b.dups, e.EventID)
		return
	}
	if !c.exists {
		b.reject(r, projection.ReasonNoConversation)
		return
	}
	m := b.msgFor(c.id, e.Seq)
	switch {
	case !m.found || m.kind != "text":
		b.reject(r, projection.ReasonNoMessage)
		return
	case m.sender != e.ActorID:
		b.reject(r, projection.ReasonNotSender)
		return
	case m.deleted:
		b.reject(r, projection.ReasonDeleted)
		return
	}
	for i := range m.attachments {
		a := &m.attachments[i]
		if a.ID != e.Thumbnail.AttachmentID {
			continue
		}
		if a.Thumbnail != nil {
			b.applied(e, m)
			return
		}
		// A fresh copy: a loaded message's slice may be shared.
		atts := append([]events.Attachment(nil), m.attachments...)
		t := e.Thumbnail.Thumbnail
		atts[i].Thumbnail = &t
		m.attachments, m.attChanged = atts, true
		b.changed(e, c, m)
		return
	}
	b.reject(r, projection.ReasonNoAttachment)
}
