package write

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/inboxd/inboxd/attachments"
	"github.com/inboxd/inboxd/events"
	"github.com/inboxd/inboxd/gateway/internal/apierr"
	"github.com/inboxd/inboxd/protocol/sealed"
)

// Objects is what a send needs of the object store: the size of an
// uploaded object (attachments.ErrNotFound when there is none).
type Objects interface {
	Stat(ctx context.Context, key string) (int64, error)
}

// sqlClaimable reads the uploads a send attaches.
const sqlClaimable = `SELECT id::text, user_id, conversation_id, name, content_type, size, COALESCE(sha256, ''),
	COALESCE(width, 0), COALESCE(height, 0), key, object_key, state, COALESCE(msg_id::text, '')
FROM uploads WHERE id = ANY($1::uuid[])`

// sqlClaim ties the uploads to the message: from then on the sweeper
// leaves them to the projection, which keeps them (attached) or not.
// The claim also gives the uploads a day more (at least) before the
// sweeper may take them: a message sent just before its upload's expiry
// keeps its file however far behind the projection is, within that day.
const sqlClaim = `UPDATE uploads SET msg_id = $1, expires_at = greatest(expires_at, now() + interval '1 day')
WHERE id = ANY($2::uuid[]) AND state = 'open' AND (msg_id IS NULL OR msg_id = $1)`

// claimAttachments checks the uploads ids a send of msgID by user to cid
// attaches and claims them for it: each must be the user's own in this
// conversation, uploaded whole (the store holds its sealed size), and
// attached to no other message. It returns their descriptions, keys
// included, in the order of ids. The claim is a write of its own,
// before the append: a send that fails after it leaves its uploads
// claimed by a msg_id no message has, which a retry of the same msg_id
// claims again and the sweeper removes at their expiry.
func (s *Sender) claimAttachments(ctx context.Context, user, cid int64, msgID string, ids []string) ([]events.Attachment, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	if s.objects == nil {
		return nil, apierr.BadRequest("attachments are not enabled on this server")
	}
	if len(ids) > events.MaxAttachments {
		return nil, apierr.BadRequest("a message attaches at most %d files", events.MaxAttachments)
	}
	seen := map[string]bool{}
	for i, id := range ids {
		u, err := uuid.Parse(id)
		if err != nil || len(id) != 36 {
			return nil, apierr.BadRequest("attachments[%d] is not an upload id", i)
		}
		ids[i] = u.String()
		if seen[ids[i]] {
			return nil, apierr.BadRequest("upload %s is attached twice", ids[i])
		}
		seen[ids[i]] = true
	}
	pool := s.srv.Conv(cid)
	rs, err := pool.Query(ctx, sqlClaimable, ids)
	if err != nil {
		return nil, fmt.Errorf("read uploads of msg_id %s: %w", msgID, err)
	}
	type upload struct {
		a          events.Attachment
		owner, cid int64
		key        []byte
		object     string
		state      string
		claimedBy  string
	}
	found := map[string]*upload{}
	for rs.Next() {
		u := &upload{}
		if err := rs.Scan(&u.a.ID, &u.owner, &u.cid, &u.a.Name, &u.a.ContentType, &u.a.Size, &u.a.SHA256,
			&u.a.Width, &u.a.Height, &u.key, &u.object, &u.state, &u.claimedBy); err != nil {
			rs.Close()
			return nil, fmt.Errorf("read uploads of msg_id %s: %w", msgID, err)
		}
		found[u.a.ID] = u
	}
	if err := rs.Err(); err != nil {
		return nil, fmt.Errorf("read uploads of msg_id %s: %w", msgID, err)
	}
	out := make([]events.Attachment, 0, len(ids))
	for _, id := range ids {
		u := found[id]
		switch {
		case u == nil || u.owner != user || u.cid != cid:
			// Another user's upload, or another conversation's, is as
			// unknown as one that does not exist.
			return nil, apierr.BadRequest("upload %s is not one of yours in conversation %d", id, cid)
		case u.state != "open" || u.key == nil || u.claimedBy != "" && u.claimedBy != msgID:
			return nil, apierr.BadRequest("upload %s is attached to another message or has expired", id)
		}
		size, err := s.objects.Stat(ctx, u.object)
		if errors.Is(err, attachments.ErrNotFound) {
			return nil, apierr.BadRequest("upload %s has not been uploaded yet (or, in parts, not completed)", id)
		}
		if err != nil {
			return nil, apierr.Unavailable("the object store could not be reached", time.Second, err)
		}
		if want := sealed.Size(u.a.Size); size != want {
			return nil, apierr.BadRequest("upload %s holds %d bytes; a sealed file of %d bytes is %d", id, size, u.a.Size, want)
		}
		u.a.Key = base64.RawURLEncoding.EncodeToString(u.key)
		out = append(out, u.a)
	}
	tag, err := pool.Exec(ctx, sqlClaim, msgID, ids)
	if err != nil {
		return nil, fmt.Errorf("claim uploads for msg_id %s: %w", msgID, err)
	}
	if tag.RowsAffected() != int64(len(ids)) {
		// Another send claimed one meanwhile, or it expired.
		return nil, apierr.BadRequest("an upload of msg_id %s was attached to another message meanwhile", msgID)
	}
	return out, nil
}
