package events

import (
	"encoding/base64"
	"errors"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
)

func attachment() Attachment {
	return Attachment{ID: "9b2f8a1e-1c2d-4e5f-8a9b-0c1d2e3f4a5b", Name: "cat.png", ContentType: "image/png",
		Size: 1234, SHA256: strings.Repeat("ab", 32), Width: 640, Height: 480,
		Key: base64.RawURLEncoding.EncodeToString(NewKey())}
}

func TestAttachmentsOnASend(t *testing.T) {
	e := New(MessageSent, 7, 42)
	e.MsgID = "5f0c6c1e-4a59-4b8e-9a2b-1c0d1f2e3a4b"
	e.Body = Ptr("")
	e.Attachments = []Attachment{attachment()}
	raw, err := Encode(e, 0)
	require.NoError(t, err, "a message with attachments may have no text")
	back, err := Decode(raw, 0)
	require.NoError(t, err)
	require.Equal(t, e.Attachments, back.Attachments)

	// Sealed: only the body key opens them, and only for this message.
	key := NewKey()
	sealed, err := SealAttachments(key, e.MsgID, e.Attachments)
	require.NoError(t, err)
	require.NotContains(t, sealed, "cat.png")
	got, err := OpenAttachments(key, e.MsgID, sealed)
	require.NoError(t, err)
	require.Equal(t, e.Attachments, got)
	_, err = OpenAttachments(NewKey(), e.MsgID, sealed)
	require.ErrorIs(t, err, ErrUnsealable)
	_, err = OpenAttachments(key, "00000000-0000-4000-8000-000000000000", sealed)
	require.ErrorIs(t, err, ErrUnsealable, "another message's")
	sealedBody, err := Seal(key, e.MsgID, "x")
	require.NoError(t, err)
	_, err = OpenAttachments(key, e.MsgID, sealedBody)
	require.ErrorIs(t, err, ErrUnsealable, "the body passed off as attachments")

	bad := map[string]func(*Event){
		"no body and no attachments": func(e *Event) { e.Attachments = nil },
		"both forms":                 func(e *Event) { e.SealedAttachments = sealed },
		"too many": func(e *Event) {
			for range MaxAttachments {
				a := attachment()
				a.ID = uuid.NewString()
				e.Attachments = append(e.Attachments, a)
			}
		},
		"twice":          func(e *Event) { e.Attachments = append(e.Attachments, e.Attachments[0]) },
		"bad id":         func(e *Event) { e.Attachments[0].ID = "x" },
		"empty name":     func(e *Event) { e.Attachments[0].Name = "" },
		"slash in name":  func(e *Event) { e.Attachments[0].Name = "../etc/passwd" },
		"control char":   func(e *Event) { e.Attachments[0].Name = "a\nb" },
		"bad type":       func(e *Event) { e.Attachments[0].ContentType = "image" },
		"type params":    func(e *Event) { e.Attachments[0].ContentType = "text/plain; charset=utf-8" },
		"upper type":     func(e *Event) { e.Attachments[0].ContentType = "Image/PNG" },
		"zero size":      func(e *Event) { e.Attachments[0].Size = 0 },
		"bad sha256":     func(e *Event) { e.Attachments[0].SHA256 = "abc" },
		"negative width": func(e *Event) { e.Attachments[0].Width = -1 },
		"short key":      func(e *Event) { e.Attachments[0].Key = "AAAA" },
		"on an edit": func(e *Event) {
			e.Type, e.Seq, e.ChangeID = MessageEdited, 3, uuid.NewString()
			e.Body = Ptr("x")
		},
	}
	for name, change := range bad {
		t.Run(name, func(t *testing.T) {
			c := *e
			c.Attachments = append([]Attachment(nil), e.Attachments...)
			change(&c)
			_, err := Encode(&c, 0)
			require.Error(t, err)
			require.True(t, errors.Is(err, ErrInvalid), "%v", err)
		})
	}
}
