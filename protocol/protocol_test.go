package protocol

import (
	"encoding/json"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

var (
	at   = time.Date(2026, 11, 30, 10, 0, 0, 123456000, time.UTC)
	page = "p2"
	yes  = true
	no   = false
	n17  = int64(17)
	n0   = int64(0)
	text = "hello <&> \u2028"
)

func sampleMessage() *Message {
	return &Message{ConversationID: 4, Seq: 17, MsgID: "0f8fad5b-d9cb-469f-a165-70867728950e", SenderID: 7,
		Kind: MessageText, Body: json.RawMessage(`"hello <&>"`), CreatedAt: at}
}

func sampleSystem() *Message {
	return &Message{ConversationID: 4, Seq: 1, MsgID: "0f8fad5b-d9cb-469f-a165-70867728950f", SenderID: 1,
		Kind: MessageSystem, Body: json.RawMessage(`{"event":"conversation.created","by":1,"title":"t","members":[1,2]}`), CreatedAt: at}
}

func sampleRecord() *Record {
	return &Record{ConversationID: 4, Title: "team", Pinned: true, Muted: false, ReadSeq: 12, LastSeq: 17,
		LastMessage: sampleMessage(), Version: 31, Removed: false}
}

func sampleEntries() []Entry {
	return []Entry{
		{InboxSeq: 102, ConversationID: 4, Kind: KindMessage, Message: sampleMessage()},
		{InboxSeq: 103, ConversationID: 4, Kind: KindRecord, Record: sampleRecord()},
		{InboxSeq: 104, ConversationID: 5, Kind: KindRecord, Record: &Record{ConversationID: 5, Removed: true}},
		{InboxSeq: 105, ConversationID: 4, Kind: KindMessage, Message: sampleSystem()},
	}
}

// every is one value of every type of the package, populated (and, where
// nullability matters, also empty).
func every() []any {
	return []any{
		sampleMessage(), sampleSystem(), &Message{Body: json.RawMessage(`""`)},
		sampleRecord(), &Record{},
		&sampleEntries()[0], &sampleEntries()[1], &Entry{InboxSeq: 1, ConversationID: 2, Kind: KindMessage},
		&Polling{NextIntervalMS: 1000},
		&SyncPage{Epoch: 1, Head: 105, Entries: sampleEntries(), HasMore: true, Polling: Polling{NextIntervalMS: 1000}},
		&SyncPage{Epoch: 1, Head: 0, Entries: []Entry{}},
		&TooLong{TooLong: true, Epoch: 2, Head: 900, RecordVersion: 31, Conversations: []Record{*sampleRecord()}, NextPage: &page, Polling: Polling{NextIntervalMS: 5000}},
		&TooLong{TooLong: true, Conversations: []Record{}},
		&SyncAnswer{Epoch: 1, Head: 105, Entries: sampleEntries(), HasMore: true, Polling: &Polling{NextIntervalMS: 1000}},
		&ConversationList{Epoch: 1, InboxHead: 105, RecordVersion: 31, Conversations: []Record{*sampleRecord()}, NextPage: &page},
		&ConversationList{Conversations: []Record{}},
		&History{Messages: []Message{*sampleSystem(), *sampleMessage()}, HasMore: true},
		&CreateConversation{Title: "team", Members: []int64{2, 3}},
		&ConversationCreated{ConversationID: 4},
		&AddMember{UserID: 7},
		&SetRecord{Pinned: &yes, Muted: &no}, &SetRecord{},
		&MarkRead{Seq: &n17}, &MarkRead{Seq: &n0},
		&SendMessage{MsgID: "0f8fad5b-d9cb-469f-a165-70867728950e", Body: text},
		&SendPending{MsgID: "0f8fad5b-d9cb-469f-a165-70867728950e", Status: StatusPending},
		&Accepted{Status: StatusAccepted},
		&DevTokenRequest{UserID: 42},
		&DevToken{Token: "t.o.k", UserID: 42, ExpiresAt: at},
		&ErrorBody{Error: ErrorDetail{Code: CodeNotMember, Message: "user 9 is not a member of conversation 4"}},
		&Hello{Type: FrameHello, After: 5, Epoch: &n0}, &Hello{Type: FrameHello},
		&Send{Type: FrameSend, ConversationID: 4, MsgID: "0f8fad5b-d9cb-469f-a165-70867728950e", Body: text},
		&Ping{Type: FramePing},
		&ClientFrame{Type: FrameSend, After: &n17, Epoch: &n0, ConversationID: 4, MsgID: "m", Body: &text},
		&Welcome{Type: FrameWelcome, Epoch: 1, Head: 105, HeartbeatMS: 20000},
		&EntriesFrame{Type: FrameEntries, Entries: sampleEntries(), Head: 110},
		&TooLongFrame{Type: FrameTooLong, TooLong: &TooLong{TooLong: true, Epoch: 2, Head: 900, Conversations: []Record{*sampleRecord()}}},
		&Heartbeat{Type: FrameHeartbeat, Head: 105},
		&SendAck{Type: FrameSendAck, MsgID: "m", ConversationID: 4, Seq: 17},
		&ErrorFrame{Type: FrameError, Code: CodeRateLimited, Message: "slow down", Retryable: true, MsgID: "m", RetryAfterMS: 500},
		&ErrorFrame{Type: FrameError, Code: CodeBadRequest, Message: "bad"},
		&Pong{Type: FramePong},
		&ServerFrame{Type: FrameError, Code: CodeUnavailable, Message: json.RawMessage(`"x"`), Retryable: true, RetryAfterMS: 1000, MsgID: "m",
			Entries: sampleEntries(), Conversations: []Record{}, NextPage: &page, Polling: &Polling{NextIntervalMS: 1}},
	}
}

// TestRoundTrip: every type decodes from its own encoding to an equal value
// and encodes again to the same bytes.
func TestRoundTrip(t *testing.T) {
	for _, v := range every() {
		name := reflect.TypeOf(v).Elem().Name()
		b, err := Marshal(v)
		require.NoError(t, err, name)
		back := reflect.New(reflect.TypeOf(v).Elem()).Interface()
		require.NoError(t, json.Unmarshal(b, back), "%s: %s", name, b)
		require.Equal(t, v, back, "%s: %s", name, b)
		again, err := Marshal(back)
		require.NoError(t, err)
		require.Equal(t, string(b), string(again), name)
	}
}

// TestWireForm pins the bytes: field order, nulls and omissions are the
// contract (the gateway's answers must stay byte-identical).
func TestWireForm(t *testing.T) {
	cases := []struct {
		v    any
		want string
	}{
		{sampleMessage(), `{"conversation_id":4,"seq":17,"msg_id":"0f8fad5b-d9cb-469f-a165-70867728950e","sender_id":7,"kind":"text","body":"hello <&>","created_at":"2026-11-30T10:00:00.123456Z"}`},
		{&Record{ConversationID: 5, Removed: true}, `{"conversation_id":5,"title":"","pinned":false,"muted":false,"read_seq":0,"last_seq":0,"last_message":null,"version":0,"removed":true,"unread_count":0,"mention_count":0,"frozen":false,"slow_mode":0}`},
		{&Entry{InboxSeq: 1, ConversationID: 2, Kind: KindRecord}, `{"inbox_seq":1,"conversation_id":2,"kind":"record"}`},
		{&SyncPage{Epoch: 1, Entries: []Entry{}}, `{"epoch":1,"head":0,"entries":[],"has_more":false,"unread_total":0,"mention_total":0,"_polling":{"next_interval_ms":0}}`},
		{&TooLong{TooLong: true, Epoch: 1, Head: 9, Conversations: []Record{}}, `{"too_long":true,"epoch":1,"head":9,"record_version":0,"conversations":[],"next_page":null,"unread_total":0,"mention_total":0,"_polling":{"next_interval_ms":0}}`},
		{&TooLongFrame{Type: FrameTooLong, TooLong: &TooLong{TooLong: true, Head: 9}}, `{"type":"too_long","too_long":true,"epoch":0,"head":9,"record_version":0,"conversations":null,"next_page":null,"unread_total":0,"mention_total":0,"_polling":{"next_interval_ms":0}}`},
		{&ConversationList{Conversations: []Record{}}, `{"epoch":0,"inbox_head":0,"record_version":0,"conversations":[],"next_page":null}`},
		{&ErrorBody{Error: ErrorDetail{Code: CodeInternal, Message: "internal error", Retryable: true}}, `{"error":{"code":"internal","message":"internal error","retryable":true}}`},
		{&ErrorFrame{Type: FrameError, Code: CodeNotMember, Message: "no"}, `{"type":"error","code":"not_member","message":"no","retryable":false}`},
		{&Hello{Type: FrameHello, After: 3}, `{"type":"hello","after":3}`},
		{&Welcome{Type: FrameWelcome, Epoch: 1, Head: 2, HeartbeatMS: 3}, `{"type":"welcome","epoch":1,"head":2,"heartbeat_ms":3,"unread_total":0,"mention_total":0}`},
		{&SendPending{MsgID: "m", Status: StatusPending}, `{"msg_id":"m","status":"pending"}`},
	}
	for _, c := range cases {
		b, err := Marshal(c.v)
		require.NoError(t, err)
		require.Equal(t, c.want, string(b))
	}
}

// TestAppenders: the hand-written encoders write exactly Marshal's bytes,
// for random entries (messages, records, absent items).
func TestAppenders(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for range 200 {
		entries := make([]Entry, rng.IntN(6))
		for i := range entries {
			e := Entry{InboxSeq: rng.Int64(), ConversationID: rng.Int64N(1000) - 10, Kind: KindMessage}
			switch rng.IntN(3) {
			case 0:
				m := *sampleMessage()
				m.Seq = rng.Int64()
				e.Message = &m
			case 1:
				e.Kind, e.Record = KindRecord, sampleRecord()
			default:
				if rng.IntN(2) == 0 {
					e.Kind = KindRecord
				}
			}
			entries[i] = e
		}
		appendAll := func(b []byte) []byte {
			b = append(b, '[')
			for i, e := range entries {
				if i > 0 {
					b = append(b, ',')
				}
				var item []byte
				var err error
				switch {
				case e.Message != nil:
					item, err = Marshal(e.Message)
				case e.Record != nil:
					item, err = Marshal(e.Record)
				}
				require.NoError(t, err)
				b = AppendEntry(b, e.InboxSeq, e.ConversationID, e.Kind, item)
			}
			return append(b, ']')
		}
		sp := SyncPage{Epoch: rng.Int64N(5), Head: rng.Int64(), Entries: entries, HasMore: rng.IntN(2) == 0,
			Counts:  Counts{UnreadTotal: rng.Int64N(1000), MentionTotal: rng.Int64N(10)},
			Polling: Polling{NextIntervalMS: rng.Int64N(5000)}}
		if rng.IntN(2) == 0 {
			sp.Polling.Reconnect = &Reconnect{AfterMS: rng.Int64N(10000), WindowMS: rng.Int64N(10000)}
		}
		for range rng.IntN(3) {
			sp.Large = append(sp.Large, LargeConv{ConversationID: rng.Int64(), LastSeq: rng.Int64N(1e6), ChangeCount: rng.Int64N(100)})
		}
		want, err := Marshal(sp)
		require.NoError(t, err)
		require.Equal(t, string(want), string(AppendSyncPage(nil, sp.Epoch, sp.Head, sp.HasMore, sp.Counts, sp.Polling, sp.Large, appendAll)))
		ef := EntriesFrame{Type: FrameEntries, Entries: entries, Head: sp.Head}
		want, err = Marshal(ef)
		require.NoError(t, err)
		require.Equal(t, string(want), string(AppendEntriesFrame(nil, ef.Head, appendAll)))
	}
}

// TestUnions: every server frame decodes into ServerFrame, every client
// frame into ClientFrame, and both 200 answers of sync into SyncAnswer,
// without losing a field.
func TestUnions(t *testing.T) {
	decode := func(v any, into any) {
		b, err := Marshal(v)
		require.NoError(t, err)
		require.NoError(t, json.Unmarshal(b, into), "%s", b)
	}
	var f ServerFrame
	decode(Welcome{Type: FrameWelcome, Epoch: 1, Head: 2, HeartbeatMS: 3}, &f)
	require.Equal(t, ServerFrame{Type: FrameWelcome, Epoch: 1, Head: 2, HeartbeatMS: 3}, f)
	f = ServerFrame{}
	decode(EntriesFrame{Type: FrameEntries, Entries: sampleEntries(), Head: 9}, &f)
	require.Equal(t, ServerFrame{Type: FrameEntries, Entries: sampleEntries(), Head: 9}, f)
	f = ServerFrame{}
	tl := &TooLong{TooLong: true, Epoch: 2, Head: 900, RecordVersion: 3, Conversations: []Record{*sampleRecord()}, NextPage: &page, Polling: Polling{NextIntervalMS: 7}}
	decode(TooLongFrame{Type: FrameTooLong, TooLong: tl}, &f)
	require.Equal(t, ServerFrame{Type: FrameTooLong, TooLong: true, Epoch: 2, Head: 900, RecordVersion: 3,
		Conversations: tl.Conversations, NextPage: &page, Polling: &Polling{NextIntervalMS: 7}}, f)
	f = ServerFrame{}
	decode(Heartbeat{Type: FrameHeartbeat, Head: 4}, &f)
	require.Equal(t, ServerFrame{Type: FrameHeartbeat, Head: 4}, f)
	f = ServerFrame{}
	decode(SendAck{Type: FrameSendAck, MsgID: "m", ConversationID: 4, Seq: 17}, &f)
	require.Equal(t, ServerFrame{Type: FrameSendAck, MsgID: "m", ConversationID: 4, Seq: 17}, f)
	f = ServerFrame{}
	decode(ErrorFrame{Type: FrameError, Code: CodeRateLimited, Message: "m", Retryable: true, MsgID: "x", RetryAfterMS: 5}, &f)
	require.Equal(t, ServerFrame{Type: FrameError, Code: CodeRateLimited, Message: json.RawMessage(`"m"`), Retryable: true, MsgID: "x", RetryAfterMS: 5}, f)
	require.Equal(t, "m", f.ErrorMessage())
	f = ServerFrame{}
	decode(Pong{Type: FramePong}, &f)
	require.Equal(t, ServerFrame{Type: FramePong}, f)

	var c ClientFrame
	decode(Hello{Type: FrameHello, After: 5, Epoch: &n17}, &c)
	require.Equal(t, ClientFrame{Type: FrameHello, After: ptr(int64(5)), Epoch: &n17}, c)
	c = ClientFrame{}
	decode(Hello{Type: FrameHello}, &c)
	require.Equal(t, ClientFrame{Type: FrameHello, After: ptr(int64(0))}, c, "no epoch: absent, not 0")
	c = ClientFrame{}
	decode(Send{Type: FrameSend, ConversationID: 4, MsgID: "m", Body: text}, &c)
	require.Equal(t, ClientFrame{Type: FrameSend, ConversationID: 4, MsgID: "m", Body: &text}, c)
	c = ClientFrame{}
	decode(Ping{Type: FramePing}, &c)
	require.Equal(t, ClientFrame{Type: FramePing}, c)

	var a SyncAnswer
	decode(SyncPage{Epoch: 1, Head: 9, Entries: sampleEntries(), HasMore: true, Polling: Polling{NextIntervalMS: 3}}, &a)
	require.Equal(t, SyncAnswer{Epoch: 1, Head: 9, Entries: sampleEntries(), HasMore: true, Polling: &Polling{NextIntervalMS: 3}}, a)
	a = SyncAnswer{}
	decode(tl, &a)
	require.Equal(t, SyncAnswer{TooLong: true, Epoch: 2, Head: 900, RecordVersion: 3, Conversations: tl.Conversations,
		NextPage: &page, Polling: &Polling{NextIntervalMS: 7}}, a)
}

// TestUnknownFieldsIgnored: what clients decode tolerates fields a later
// server adds, in objects and frames alike.
func TestUnknownFieldsIgnored(t *testing.T) {
	var f ServerFrame
	require.NoError(t, json.Unmarshal([]byte(`{"type":"entries","new":{"x":[1]},"head":3,"entries":[{"inbox_seq":3,"conversation_id":1,"kind":"message","reactions":[],"message":{"seq":1,"body":"hi","edited_at":null}}]}`), &f))
	require.Equal(t, int64(3), f.Head)
	require.Equal(t, "hi", f.Entries[0].Message.Text())
	f = ServerFrame{}
	require.NoError(t, json.Unmarshal([]byte(`{"type":"send_ack","msg_id":"m","seq":4,"message":{"seq":4}}`), &f))
	require.Equal(t, int64(4), f.Seq)
	require.Equal(t, `{"seq":4}`, f.ErrorMessage())
	var a SyncAnswer
	require.NoError(t, json.Unmarshal([]byte(`{"epoch":1,"head":2,"entries":[],"has_more":false,"_polling":{"next_interval_ms":1,"jitter":2},"extra":true}`), &a))
	require.Equal(t, int64(1), a.Polling.NextIntervalMS)
}

func TestMessageText(t *testing.T) {
	require.Equal(t, "hello <&>", sampleMessage().Text())
	require.Equal(t, string(sampleSystem().Body), sampleSystem().Text())
}

func ptr[T any](v T) *T { return &v }
