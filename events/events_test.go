package events

import (
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestDecodeRejects(t *testing.T) {
	good := New(MessageSent, 7, 42)
	good.MsgID = "5f0c6c1e-4a59-4b8e-9a2b-1c0d1f2e3a4b"
	good.Body = Ptr("hi")
	raw, err := Encode(good, 0)
	require.NoError(t, err)
	back, err := Decode(raw, 0)
	require.NoError(t, err)
	require.Equal(t, *good.Body, *back.Body)

	cases := map[string]string{
		"not json":     `hello`,
		"wrong v":      strings.Replace(string(raw), `"v":1`, `"v":2`, 1),
		"unknown type": strings.Replace(string(raw), `message.sent`, `message.exploded`, 1),
		"no msg_id":    strings.Replace(string(raw), good.MsgID, "", 1),
		"empty body":   strings.Replace(string(raw), `"body":"hi"`, `"body":""`, 1),
		"big body":     strings.Replace(string(raw), `"body":"hi"`, `"body":"`+strings.Repeat("x", 5000)+`"`, 1),
		"bad utf8":     strings.Replace(string(raw), `"body":"hi"`, "\"body\":\"\xff\"", 1),
		"no conv":      strings.Replace(string(raw), `"conversation_id":7`, `"conversation_id":0`, 1),
		"trailing":     string(raw) + `{}`,
	}
	for name, in := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := Decode([]byte(in), 0)
			require.Error(t, err)
			require.True(t, errors.Is(err, ErrInvalid), "%v", err)
		})
	}
}

func FuzzDecode(f *testing.F) {
	f.Add([]byte(`{"v":1,"type":"message.sent","event_id":"5f0c6c1e-4a59-4b8e-9a2b-1c0d1f2e3a4b","conversation_id":1,"actor_id":2,"at":"2026-01-01T00:00:00Z","msg_id":"5f0c6c1e-4a59-4b8e-9a2b-1c0d1f2e3a4c","body":"x"}`))
	f.Add([]byte(`{"v":1,"type":"conversation.created","members":[1,2]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		e, err := Decode(b, 0)
		if err != nil {
			require.ErrorIs(t, err, ErrInvalid)
			return
		}
		// Whatever decodes must encode and decode again to the same event.
		raw, err := Encode(e, 0)
		require.NoError(t, err)
		e2, err := Decode(raw, 0)
		require.NoError(t, err)
		require.Equal(t, e.EventID, e2.EventID)
		require.Equal(t, e.Type, e2.Type)
	})
}

// TestValidateRefusesUnstorableText: NUL and invalid UTF-8 in any text
// field are refused by Validate (so by Encode, which the producer calls,
// and by Decode); U+FFFD and other valid text pass.
func TestValidateRefusesUnstorableText(t *testing.T) {
	msg := func(body string) *Event {
		e := New(MessageSent, 7, 42)
		e.MsgID, e.Body = "5f0c6c1e-4a59-4b8e-9a2b-1c0d1f2e3a4b", Ptr(body)
		return e
	}
	created := func(title string) *Event {
		e := New(ConversationCreated, 7, 42)
		e.Title = title
		return e
	}
	for name, c := range map[string]struct {
		e  *Event
		ok bool
	}{
		"body NUL":           {msg("a\x00b"), false},
		"body only NUL":      {msg("\x00"), false},
		"body invalid UTF-8": {msg("a\xffb"), false},
		"body surrogate":     {msg("a\xed\xa0\x80b"), false}, // U+D800 encoded as if it were a character
		"title NUL":          {created("t\x00"), false},
		"title invalid":      {created("\xc3"), false},
		"body U+FFFD":        {msg("a\uFFFDb"), true},
		"title U+FFFD":       {created("\uFFFD"), true},
		"body emoji":         {msg("ok 👍"), true},
		"title empty":        {created(""), true},
	} {
		t.Run(name, func(t *testing.T) {
			err := c.e.Validate(0)
			if c.ok {
				require.NoError(t, err)
				raw, err := Encode(c.e, 0)
				require.NoError(t, err)
				_, err = Decode(raw, 0)
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, ErrInvalid)
			_, err = Encode(c.e, 0)
			require.ErrorIs(t, err, ErrInvalid)
		})
	}
	// A record written by another writer with a NUL escape is refused at
	// decode time (the fanout dead-letters it).
	good, err := Encode(msg("hi"), 0)
	require.NoError(t, err)
	for _, bad := range []string{`"body":"nul \u0000 here"`, `"body":"\u0000"`} {
		_, err = Decode([]byte(strings.Replace(string(good), `"body":"hi"`, bad, 1)), 0)
		require.ErrorIs(t, err, ErrInvalid, bad)
	}
	_, err = Decode([]byte(strings.Replace(string(good), `"body":"hi"`, `"body":"\ufffd"`, 1)), 0)
	require.NoError(t, err)
}

// TestServiceEvents: a service may act as itself (actor 0) on the four
// types that allow it, with sender_name exactly on its own message.sent.
func TestServiceEvents(t *testing.T) {
	ev := func(typ string, actor int64, service, name string) *Event {
		e := New(typ, 7, actor)
		e.Service, e.SenderName = service, name
		switch typ {
		case MessageSent:
			e.MsgID, e.Body = "5f0c6c1e-4a59-4b8e-9a2b-1c0d1f2e3a4b", Ptr("hi")
		case MemberAdded, MemberRemoved:
			e.UserID = 3
		case RecordUpdated:
			e.Pinned = Ptr(true)
		}
		return e
	}
	for _, c := range []struct {
		name string
		e    *Event
		ok   bool
	}{
		{"created by a service", ev(ConversationCreated, 0, "1:svc", ""), true},
		{"added by a service", ev(MemberAdded, 0, "1:svc", ""), true},
		{"removed by a service", ev(MemberRemoved, 0, "1:svc", ""), true},
		{"system sender", ev(MessageSent, 0, "1:svc", "Support"), true},
		{"sent for a user", ev(MessageSent, 5, "1:svc", ""), true},
		{"record for a user", ev(RecordUpdated, 5, "1:svc", ""), true},
		{"actor 0 without service", ev(MemberAdded, 0, "", ""), false},
		{"system sender without name", ev(MessageSent, 0, "1:svc", ""), false},
		{"sender name on a user's message", ev(MessageSent, 5, "1:svc", "Support"), false},
		{"sender name too long", ev(MessageSent, 0, "1:svc", strings.Repeat("x", MaxSenderName+1)), false},
		{"record of actor 0", ev(RecordUpdated, 0, "1:svc", ""), false},
		{"service too long", ev(MemberAdded, 0, strings.Repeat("x", MaxService+1), ""), false},
		{"negative actor", ev(MemberAdded, -1, "1:svc", ""), false},
	} {
		t.Run(c.name, func(t *testing.T) {
			raw, err := Encode(c.e, 0)
			if !c.ok {
				require.ErrorIs(t, err, ErrInvalid)
				return
			}
			require.NoError(t, err)
			back, err := Decode(raw, 0)
			require.NoError(t, err)
			require.Equal(t, c.e.Service, back.Service)
			require.Equal(t, c.e.SenderName, back.SenderName)
		})
	}
}

// TestUserLevelEvents: a block names no conversation, is keyed by its
// blocker, and is refused with a conversation, without a user, by a
// service or against the blocker itself.
func TestUserLevelEvents(t *testing.T) {
	good := New(UserBlocked, 0, 42)
	good.UserID = 7
	raw, err := Encode(good, 0)
	require.NoError(t, err)
	back, err := Decode(raw, 0)
	require.NoError(t, err)
	require.Equal(t, int64(7), back.UserID)
	require.Equal(t, int64(42), back.PartitionKey(), "keyed by the blocker")
	require.Equal(t, int64(9), New(MessageSent, 9, 42).PartitionKey(), "keyed by the conversation")

	bad := map[string]func(e *Event){
		"a conversation": func(e *Event) { e.ConversationID = 3 },
		"no user":        func(e *Event) { e.UserID = 0 },
		"itself":         func(e *Event) { e.UserID = e.ActorID },
		"a service":      func(e *Event) { e.ActorID, e.Service = 0, "svc" },
		"an until":       func(e *Event) { e.Until = Ptr(e.At) },
	}
	for _, typ := range []string{UserBlocked, UserUnblocked} {
		for name, spoil := range bad {
			t.Run(typ+" "+name, func(t *testing.T) {
				e := New(typ, 0, 42)
				e.UserID = 7
				require.NoError(t, e.Validate(0))
				spoil(e)
				require.ErrorIs(t, e.Validate(0), ErrInvalid)
			})
		}
	}
}

// TestValidateConversationUpdated: a conversation.updated carries at
// least one setting, each within its limits, and no other type carries
// frozen or slow_mode.
func TestValidateConversationUpdated(t *testing.T) {
	up := func(title string, frozen *bool, slow *int) *Event {
		e := New(ConversationUpdated, 7, 42)
		e.Title, e.Frozen, e.SlowMode = title, frozen, slow
		return e
	}
	sent := New(MessageSent, 7, 42)
	sent.MsgID, sent.Body, sent.Frozen = "5f0c6c1e-4a59-4b8e-9a2b-1c0d1f2e3a4b", Ptr("hi"), Ptr(true)
	service := up("", Ptr(true), nil)
	service.ActorID, service.Service = 0, "k1:bot"
	for name, c := range map[string]struct {
		e  *Event
		ok bool
	}{
		"rename":             {up("team", nil, nil), true},
		"freeze":             {up("", Ptr(true), nil), true},
		"unfreeze":           {up("", Ptr(false), nil), true},
		"slow mode off":      {up("", nil, Ptr(0)), true},
		"all three":          {up("x", Ptr(true), Ptr(MaxSlowMode)), true},
		"a service's":        {service, true},
		"nothing":            {up("", nil, nil), false},
		"slow mode negative": {up("", nil, Ptr(-1)), false},
		"slow mode too long": {up("", nil, Ptr(MaxSlowMode+1)), false},
		"title too long":     {up(strings.Repeat("x", MaxTitle+1), nil, nil), false},
		"title NUL":          {up("a\x00", nil, nil), false},
		"frozen on a send":   {sent, false},
	} {
		t.Run(name, func(t *testing.T) {
			raw, err := Encode(c.e, 0)
			if !c.ok {
				require.ErrorIs(t, err, ErrInvalid)
				return
			}
			require.NoError(t, err)
			back, err := Decode(raw, 0)
			require.NoError(t, err)
			require.Equal(t, c.e.Frozen, back.Frozen)
			require.Equal(t, c.e.SlowMode, back.SlowMode)
			require.Equal(t, c.e.Title, back.Title)
		})
	}
}
