package importer

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
)

// Line kinds of the NDJSON file.
const (
	KindConversation = "conversation"
	KindMember       = "member"
	KindMessage      = "message"
)

// Line is one line of an import file. Which fields apply depends on Kind:
//
//	{"kind":"conversation","id":"c1","title":"Team","members":[1,2],"created_at":"…","created_by":1}
//	{"kind":"member","conversation":"c1","user_id":3,"joined_at":"…","added_by":1}
//	{"kind":"message","conversation":"c1","id":"m1","sender":2,"body":"hi","sent_at":"…"}
//
// created_by (default: the first member) and added_by (default: the
// conversation's creator) are optional; the rest is required.
type Line struct {
	Kind string `json:"kind"`
	// ID is the external id of a conversation or of a message (unique
	// within its conversation).
	ID           string     `json:"id,omitempty"`
	Conversation string     `json:"conversation,omitempty"`
	Title        string     `json:"title,omitempty"`
	Members      []int64    `json:"members,omitempty"`
	CreatedAt    *time.Time `json:"created_at,omitempty"`
	CreatedBy    int64      `json:"created_by,omitempty"`
	UserID       int64      `json:"user_id,omitempty"`
	JoinedAt     *time.Time `json:"joined_at,omitempty"`
	AddedBy      int64      `json:"added_by,omitempty"`
	Sender       int64      `json:"sender,omitempty"`
	Body         *string    `json:"body,omitempty"`
	SentAt       *time.Time `json:"sent_at,omitempty"`
}

// MaxExternalID bounds an external id in bytes.
const MaxExternalID = 256

// LineError is a refused line: its number (from 1) and why.
type LineError struct {
	Line   int64
	Reason string
}

func (e *LineError) Error() string { return fmt.Sprintf("line %d: %s", e.Line, e.Reason) }

// ErrRefused is wrapped by the error of a file with refused lines.
var ErrRefused = errors.New("import file refused")

// RefusedError lists the refused lines of a file (up to the configured
// maximum; More counts the others). Nothing was written.
type RefusedError struct {
	Lines []*LineError
	More  int64
}

func (e *RefusedError) Error() string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "%d line(s) refused, nothing imported:", int64(len(e.Lines))+e.More)
	for _, l := range e.Lines {
		sb.WriteString("\n  ")
		sb.WriteString(l.Error())
	}
	if e.More > 0 {
		fmt.Fprintf(&sb, "\n  and %d more", e.More)
	}
	return sb.String()
}

// Unwrap makes errors.Is(err, ErrRefused) true.
func (e *RefusedError) Unwrap() error { return ErrRefused }

// parseLine decodes one line strictly: unknown fields and trailing data are
// refused (a misspelt field must not be dropped silently).
func parseLine(raw []byte) (*Line, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	var l Line
	if err := dec.Decode(&l); err != nil {
		return nil, fmt.Errorf("not a JSON line of the format: %v", err)
	}
	if dec.More() {
		return nil, errors.New("trailing data after the JSON object")
	}
	return &l, nil
}
