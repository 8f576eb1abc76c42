package importer

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/inboxd/inboxd/events"
)

// The rules of a file, applied line by line in file order: a line is
// refused, with its number, when its event would be refused or dropped by
// the projector (an unknown conversation, a sender who is not a member, a
// duplicate id) or when it breaks the order of its conversation's history.

// conv is what the checker knows of one conversation of the file.
type conv struct {
	ext     string
	id      int64 // the inboxd id; 1 while only checking
	creator int64
	members map[int64]bool
	last    time.Time // the time of its last line: history is in order
	msgs    map[string]struct{}
}

// checker turns lines into events, refusing the lines that break a rule.
// The check pass runs one without ids; the append pass a fresh one with
// the assigned ids, over the same lines, so both see the same state.
type checker struct {
	ns         uuid.UUID
	maxBody    int
	ids        map[string]int64 // nil while only checking
	importedAt time.Time
	now        time.Time // times after it are refused

	convs map[string]*conv
	order []string // external conversation ids in file order

	conversations, members, messages int64
}

func newChecker(source string, maxBody int, ids map[string]int64, importedAt time.Time) *checker {
	return &checker{ns: sourceNS(source), maxBody: maxBody, ids: ids, importedAt: importedAt,
		now: importedAt.Add(time.Minute), convs: map[string]*conv{}}
}

// line checks l and returns the events it becomes.
func (k *checker) line(l *Line) (*events.Event, error) {
	switch l.Kind {
	case KindConversation:
		return k.conversation(l)
	case KindMember:
		return k.member(l)
	case KindMessage:
		return k.message(l)
	case "":
		return nil, errors.New("missing kind")
	}
	return nil, fmt.Errorf("unknown kind %q (conversation, member or message)", l.Kind)
}

// event returns a new imported event of c at t.
func (k *checker) event(typ string, c *conv, actor int64, eventID string, t time.Time) *events.Event {
	at := k.importedAt
	return &events.Event{V: events.Version, Type: typ, EventID: eventID, ConversationID: c.id, ActorID: actor,
		At: t.UTC(), ImportedAt: &at}
}

func (k *checker) conversation(l *Line) (*events.Event, error) {
	if err := checkExternalID("id", l.ID); err != nil {
		return nil, err
	}
	if _, ok := k.convs[l.ID]; ok {
		return nil, fmt.Errorf("conversation %q defined twice", l.ID)
	}
	if err := only(l, "conversation", l.Conversation == "", l.UserID == 0, l.JoinedAt == nil, l.AddedBy == 0,
		l.Sender == 0, l.Body == nil, l.SentAt == nil); err != nil {
		return nil, err
	}
	if len(l.Members) == 0 {
		return nil, errors.New("a conversation needs members")
	}
	creator := l.CreatedBy
	if creator == 0 {
		creator = l.Members[0]
	}
	c := &conv{ext: l.ID, id: 1, creator: creator, members: map[int64]bool{creator: true}, msgs: map[string]struct{}{}}
	for _, m := range l.Members {
		if c.members[m] && m != creator {
			return nil, fmt.Errorf("member %d listed twice", m)
		}
		c.members[m] = true
	}
	if err := k.checkTime(c, "created_at", l.CreatedAt); err != nil {
		return nil, err
	}
	c.last = *l.CreatedAt
	if k.ids != nil {
		c.id = k.ids[l.ID]
	}
	e := k.event(events.ConversationCreated, c, creator, derive(k.ns, "conversation", l.ID), *l.CreatedAt)
	e.Title, e.Members = l.Title, l.Members
	if err := k.valid(e); err != nil {
		return nil, err
	}
	k.convs[l.ID] = c
	k.order = append(k.order, l.ID)
	k.conversations++
	return e, nil
}

func (k *checker) member(l *Line) (*events.Event, error) {
	c, err := k.conv(l)
	if err != nil {
		return nil, err
	}
	if err := only(l, "member", l.ID == "", l.Title == "", l.Members == nil, l.CreatedAt == nil, l.CreatedBy == 0,
		l.Sender == 0, l.Body == nil, l.SentAt == nil); err != nil {
		return nil, err
	}
	if l.UserID <= 0 {
		return nil, errors.New("user_id must be a positive user id")
	}
	if c.members[l.UserID] {
		return nil, fmt.Errorf("user %d is already a member of %q", l.UserID, c.ext)
	}
	by := l.AddedBy
	if by == 0 {
		by = c.creator
	}
	if !c.members[by] {
		return nil, fmt.Errorf("added_by %d is not a member of %q", by, c.ext)
	}
	if err := k.checkTime(c, "joined_at", l.JoinedAt); err != nil {
		return nil, err
	}
	e := k.event(events.MemberAdded, c, by, derive(k.ns, "member", c.ext, strconv.FormatInt(l.UserID, 10)), *l.JoinedAt)
	e.UserID = l.UserID
	if err := k.valid(e); err != nil {
		return nil, err
	}
	c.members[l.UserID], c.last = true, *l.JoinedAt
	k.members++
	return e, nil
}

func (k *checker) message(l *Line) (*events.Event, error) {
	c, err := k.conv(l)
	if err != nil {
		return nil, err
	}
	if err := only(l, "message", l.Title == "", l.Members == nil, l.CreatedAt == nil, l.CreatedBy == 0,
		l.UserID == 0, l.JoinedAt == nil, l.AddedBy == 0); err != nil {
		return nil, err
	}
	if err := checkExternalID("id", l.ID); err != nil {
		return nil, err
	}
	if _, ok := c.msgs[l.ID]; ok {
		return nil, fmt.Errorf("message %q of %q appears twice", l.ID, c.ext)
	}
	if !c.members[l.Sender] {
		return nil, fmt.Errorf("sender %d is not a member of %q at this line", l.Sender, c.ext)
	}
	if l.Body == nil {
		return nil, errors.New("missing body")
	}
	if err := k.checkTime(c, "sent_at", l.SentAt); err != nil {
		return nil, err
	}
	e := k.event(events.MessageSent, c, l.Sender, derive(k.ns, "message.sent", c.ext, l.ID), *l.SentAt)
	e.MsgID, e.Body = derive(k.ns, "message", c.ext, l.ID), l.Body
	if err := k.valid(e); err != nil {
		return nil, err
	}
	c.msgs[l.ID], c.last = struct{}{}, *l.SentAt
	k.messages++
	return e, nil
}

// conv returns the conversation l names, defined on an earlier line.
func (k *checker) conv(l *Line) (*conv, error) {
	if l.Conversation == "" {
		return nil, errors.New("missing conversation")
	}
	c, ok := k.convs[l.Conversation]
	if !ok {
		return nil, fmt.Errorf("conversation %q is not defined on an earlier line", l.Conversation)
	}
	return c, nil
}

// checkTime checks a line's time: present, not in the future, and not
// before the conversation's previous line (its history is in order). A
// refused line changes nothing of the checker's state.
func (k *checker) checkTime(c *conv, field string, t *time.Time) error {
	switch {
	case t == nil || t.IsZero():
		return fmt.Errorf("missing %s", field)
	case t.After(k.now):
		return fmt.Errorf("%s %s is in the future", field, t.Format(time.RFC3339Nano))
	case t.Before(c.last):
		return fmt.Errorf("%s %s is before the previous line of %q (%s): history must be in order", field,
			t.Format(time.RFC3339Nano), c.ext, c.last.Format(time.RFC3339Nano))
	}
	return nil
}

// valid applies the event rules (body length, text PostgreSQL can store).
func (k *checker) valid(e *events.Event) error {
	if err := e.Validate(k.maxBody); err != nil {
		var inv *events.InvalidError
		if errors.As(err, &inv) {
			return errors.New(inv.Reason)
		}
		return err
	}
	return nil
}

// only refuses a line carrying fields of another kind: each ok says one
// such field is absent.
func only(l *Line, kind string, ok ...bool) error {
	for _, o := range ok {
		if !o {
			return fmt.Errorf("a %s line carries fields of another kind", kind)
		}
	}
	return nil
}

// checkExternalID refuses an empty, long or unstorable external id.
func checkExternalID(field, id string) error {
	switch {
	case id == "":
		return fmt.Errorf("missing %s", field)
	case len(id) > MaxExternalID:
		return fmt.Errorf("%s over %d bytes", field, MaxExternalID)
	case !utf8.ValidString(id) || strings.IndexByte(id, 0) >= 0:
		return fmt.Errorf("%s is not text (invalid UTF-8 or NUL)", field)
	}
	return nil
}
