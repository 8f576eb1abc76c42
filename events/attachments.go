package events

import (
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/google/uuid"
)

// Attachments of a message.sent (docs/protocol.md, "Attachments"): files
// uploaded to the object store, sealed there with a key of their own
// (protocol/sealed). The event describes each, key included: in the
// clear (Attachments) where bodies are plain, else sealed with the
// message's body key (SealedAttachments), so that deleting the message
// erases the keys from the log with the body, and with them every stored
// copy of the files.

// MaxAttachments bounds the attachments of one message.
const MaxAttachments = 10

// Attachment describes one attached file.
type Attachment struct {
	// ID is the upload's id (a uuid).
	ID string `json:"id"`
	// Name is the file's name as the sender gave it (1..255 bytes of text,
	// no slash or control character).
	Name string `json:"name"`
	// ContentType is its media type, e.g. image/png.
	ContentType string `json:"content_type"`
	// Size is the file's size in bytes (not its sealed size).
	Size int64 `json:"size"`
	// SHA256 is the hex SHA-256 of the file, when the sender declared it.
	SHA256 string `json:"sha256,omitempty"`
	// Width and Height are an image's, when the sender declared them.
	Width  int `json:"width,omitempty"`
	Height int `json:"height,omitempty"`
	// Key opens the sealed object: base64url, unpadded, KeySize bytes.
	Key string `json:"key"`
	// Thumbnail is set by message.thumbnailed on an image's attachment
	// (never by the send): its thumbnail's object is sealed with a key
	// derived from Key (sealed.ThumbnailKey).
	Thumbnail *Thumbnail `json:"thumbnail,omitempty"`
}

// Thumbnail describes the thumbnail of an attached image: a JPEG.
type Thumbnail struct {
	ContentType string `json:"content_type"`
	Size        int64  `json:"size"`
	Width       int    `json:"width"`
	Height      int    `json:"height"`
}

// ThumbnailOf is a message.thumbnailed's thumbnail and the attachment it
// is of.
type ThumbnailOf struct {
	AttachmentID string `json:"attachment_id"`
	Thumbnail
}

func (t *ThumbnailOf) validate() error {
	switch {
	case t == nil:
		return invalid("message.thumbnailed without thumbnail")
	case len(t.AttachmentID) != 36 || uuid.Validate(t.AttachmentID) != nil:
		return invalid("thumbnail attachment_id is not a uuid")
	case t.ContentType != "image/jpeg":
		return invalid("a thumbnail is an image/jpeg")
	case t.Size <= 0 || t.Width < 1 || t.Height < 1 || t.Width > 1<<16 || t.Height > 1<<16:
		return invalid("a thumbnail's size, width and height must be positive")
	}
	return nil
}

// Validate checks a's fields.
func (a *Attachment) Validate() error {
	if _, err := uuid.Parse(a.ID); err != nil || len(a.ID) != 36 {
		return invalid("attachment id is not a uuid")
	}
	if err := ValidFileName(a.Name); err != nil {
		return err
	}
	if err := ValidContentType(a.ContentType); err != nil {
		return err
	}
	if a.Size <= 0 {
		return invalid("attachment size must be positive")
	}
	if a.SHA256 != "" && !ValidSHA256(a.SHA256) {
		return invalid("attachment sha256 is not 64 lowercase hex digits")
	}
	if !ValidDimensions(a.Width, a.Height) {
		return invalid("attachment width and height must be 0..65536")
	}
	if a.Thumbnail != nil {
		return invalid("a send's attachment has no thumbnail yet")
	}
	if k, err := base64.RawURLEncoding.DecodeString(a.Key); err != nil || len(k) != KeySize {
		return invalid("attachment key is not %d bytes of unpadded base64url", KeySize)
	}
	return nil
}

// ValidSHA256 says whether s is a SHA-256 as attachments carry it: 64
// lowercase hex digits.
func ValidSHA256(s string) bool {
	b, err := hex.DecodeString(s)
	return err == nil && len(b) == 32 && strings.ToLower(s) == s
}

// ValidDimensions says whether an image's declared width and height are
// 0 (not given) to 65536.
func ValidDimensions(w, h int) bool { return w >= 0 && h >= 0 && w <= 1<<16 && h <= 1<<16 }

// ValidFileName checks an attachment's name: 1..255 bytes of storable
// text without a slash, a backslash or a control character.
func ValidFileName(s string) error {
	if s == "" || len(s) > 255 {
		return invalid("attachment name must be 1..255 bytes")
	}
	if err := storableText("name", s); err != nil {
		return err
	}
	for _, r := range s {
		if r < 0x20 || r == 0x7f || r == '/' || r == '\\' {
			return invalid("attachment name contains a slash or a control character")
		}
	}
	return nil
}

// ValidContentType checks a media type: type/subtype in lowercase
// token characters, at most 127 bytes, no parameters.
func ValidContentType(s string) error {
	typ, sub, ok := strings.Cut(s, "/")
	if !ok || typ == "" || sub == "" || len(s) > 127 {
		return invalid("content_type must be a media type such as image/png")
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || strings.ContainsRune("/!#$&^_.+-", r)) {
			return invalid("content_type must be a lowercase media type without parameters")
		}
	}
	if strings.Count(s, "/") != 1 {
		return invalid("content_type must be a media type such as image/png")
	}
	return nil
}

// sealedAttachmentsAD is the additional data of a message's sealed
// attachments: its msg_id and a suffix, so that they cannot pass for its
// body or for another message's.
func sealedAttachmentsAD(msgID string) string { return msgID + "/attachments" }

// SealAttachments returns the sealed form of as under the body key of
// message msgID.
func SealAttachments(key []byte, msgID string, as []Attachment) (string, error) {
	raw, err := json.Marshal(as)
	if err != nil {
		return "", err
	}
	return Seal(key, sealedAttachmentsAD(msgID), string(raw))
}

// OpenAttachments returns the attachments sealed by SealAttachments, each
// validated; ErrUnsealable when they do not open with key.
func OpenAttachments(key []byte, msgID, sealed string) ([]Attachment, error) {
	raw, err := Open(key, sealedAttachmentsAD(msgID), sealed)
	if err != nil {
		return nil, err
	}
	var as []Attachment
	if err := json.Unmarshal([]byte(raw), &as); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrUnsealable, err)
	}
	if err := validateAttachments(as); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrUnsealable, err)
	}
	return as, nil
}

// validateAttachments checks a list: at most MaxAttachments, each valid,
// no id twice.
func validateAttachments(as []Attachment) error {
	if len(as) > MaxAttachments {
		return invalid("over %d attachments", MaxAttachments)
	}
	seen := map[string]bool{}
	for i := range as {
		if err := as[i].Validate(); err != nil {
			return err
		}
		if seen[as[i].ID] {
			return invalid("attachment %s twice", as[i].ID)
		}
		seen[as[i].ID] = true
	}
	return nil
}

// sealedAttachmentsLen bounds the encoded length of sealed attachments.
func sealedAttachmentsLen() int {
	// A generous bound on the JSON of MaxAttachments at their longest.
	return sealedLen(MaxAttachments * 1024)
}

// HasAttachments says whether e carries attachments, plain or sealed.
func (e *Event) HasAttachments() bool { return len(e.Attachments) > 0 || e.SealedAttachments != "" }

// validateAttachmentFields checks a message.sent's attachment fields.
func (e *Event) validateAttachmentFields() error {
	if e.SealedAttachments != "" {
		if len(e.Attachments) > 0 {
			return invalid("both attachments and sealed_attachments")
		}
		if len(e.SealedAttachments) > sealedAttachmentsLen() {
			return invalid("sealed_attachments over %d bytes", sealedAttachmentsLen())
		}
		return nil
	}
	return validateAttachments(e.Attachments)
}
