package client

import (
	"context"
	"encoding/json"
	"maps"
	"sync"
	"time"
)

// StateFormat is the version of the State layout.
const StateFormat = 1

// State is everything the client must remember between runs of the app:
// the inbox position, what it knows of each conversation, and the sends not
// yet acknowledged. The Store saves it whole.
type State struct {
	Format int `json:"format"`
	// Epoch and Cursor are the position in the inbox: every entry up to
	// Cursor (of Epoch) was handed to the app and its handler returned.
	Epoch  int64 `json:"epoch"`
	Cursor int64 `json:"cursor"`
	// RecordVersion is the highest record version of the conversation
	// list the client read.
	RecordVersion int64 `json:"record_version"`
	// Conversations is what the client knows of each conversation.
	Conversations map[int64]*ConversationState `json:"conversations"`
	// Outbox is the queued sends, oldest first.
	Outbox []OutboxItem `json:"outbox"`
}

// ConversationState is the client's knowledge of one conversation.
type ConversationState struct {
	// LastSeq is the highest message seq known to exist: delivered, or
	// learnt from the conversation list (then the seqs not delivered are
	// in Holes).
	LastSeq int64 `json:"last_seq"`
	// Version is the highest record version seen.
	Version int64 `json:"version"`
	// Holes are the seqs up to LastSeq that were not delivered.
	Holes []Hole `json:"holes,omitempty"`
	// Stale are seqs that were delivered but whose changes (update entries)
	// a too_long jump may have skipped: Backfill reads them again and hands
	// the changed ones to Handler.OnUpdate. Disjoint from Holes.
	Stale []Hole `json:"stale,omitempty"`
	// Versions is, by seq, the highest version of a changed message
	// (version above 1) the app was handed: an update entry is passed to
	// Handler.OnUpdate only when its version is higher. Unchanged messages
	// are not listed (their version is 1).
	Versions map[int64]int64 `json:"versions,omitempty"`
	// Large says the conversation is in read mode (docs/large-conversations.md):
	// the server lists it in the large list of sync answers and the welcome,
	// and the client reads its messages itself (LastSeq is then the last seq
	// delivered) instead of waiting for inbox entries.
	Large bool `json:"large,omitempty"`
	// ChangeCount is the conversation's change count up to which the
	// client read its changes (GET …/messages?changed_after=).
	ChangeCount int64 `json:"change_count,omitempty"`
}

// appliedVersion is the version of message seq the app was handed: 1 for
// a message never seen changed.
func (cs *ConversationState) appliedVersion(seq int64) int64 {
	if v, ok := cs.Versions[seq]; ok {
		return v
	}
	return 1
}

// noteVersion records that the app was handed version v of message seq.
func (cs *ConversationState) noteVersion(seq, v int64) {
	if v <= 1 || v <= cs.Versions[seq] {
		return
	}
	if cs.Versions == nil {
		cs.Versions = map[int64]int64{}
	}
	cs.Versions[seq] = v
}

// clone returns a deep copy of cs.
func (cs *ConversationState) clone() *ConversationState {
	cc := *cs
	cc.Holes = append([]Hole(nil), cs.Holes...)
	cc.Stale = append([]Hole(nil), cs.Stale...)
	cc.Versions = maps.Clone(cs.Versions)
	return &cc
}

// OutboxItem is a queued send. MsgID (a uuid v4 made by the client) is the
// idempotency key of every attempt.
type OutboxItem struct {
	MsgID          string `json:"msg_id"`
	ConversationID int64  `json:"conversation_id"`
	Body           string `json:"body"`
	// ReplyTo is the seq of the message this one answers (SendReply), 0
	// for none.
	ReplyTo int64 `json:"reply_to,omitempty"`
	// Mentions and MentionAll are whom the message mentions (SendWith).
	Mentions   []int64 `json:"mentions,omitempty"`
	MentionAll bool    `json:"mention_all,omitempty"`
	// Attachments are upload ids the message attaches (SendWith).
	Attachments []string  `json:"attachments,omitempty"`
	Queued      time.Time `json:"queued"`
	// Appended is set once the server answered 202 pending: the message is
	// in the log and will get a seq; it no longer holds back later sends.
	Appended bool `json:"appended,omitempty"`
	Attempts int  `json:"attempts,omitempty"`
}

// Clone returns a deep copy of s.
func (s *State) Clone() *State {
	c := *s
	c.Conversations = make(map[int64]*ConversationState, len(s.Conversations))
	for id, cs := range s.Conversations {
		c.Conversations[id] = cs.clone()
	}
	c.Outbox = append([]OutboxItem(nil), s.Outbox...)
	return &c
}

func newState() *State {
	return &State{Format: StateFormat, Conversations: map[int64]*ConversationState{}}
}

// Store keeps the State. The client calls Load once (in New) and Save after
// every change it must not lose: after the app's handler returned for an
// entry (every Config.CommitEvery entries), after a send was queued and after
// it ended, after a too_long and after a backfill. Saves never run
// concurrently with each other; each gets the whole State, which the store
// must not keep or modify after Save returns (copy it).
//
// A store backed by the app's own database can make delivery exactly-once
// across crashes: save the State in the same transaction as the effects of
// the entries (see the package documentation).
type Store interface {
	// Load returns the saved state, or nil when nothing was saved yet.
	Load(ctx context.Context) (*State, error)
	// Save replaces the saved state with s, atomically: after a crash,
	// Load returns either the previous state or s, never a mix.
	Save(ctx context.Context, s *State) error
}

// MemoryStore keeps the State in memory: nothing survives the process. It
// is the default Store, for tests, benchmarks and short-lived tools. It is
// safe for concurrent use.
type MemoryStore struct {
	mu sync.Mutex
	s  *State
}

// NewMemoryStore returns an empty MemoryStore.
func NewMemoryStore() *MemoryStore { return &MemoryStore{} }

// Load implements Store. It returns a copy.
func (m *MemoryStore) Load(context.Context) (*State, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.s == nil {
		return nil, nil
	}
	return m.s.Clone(), nil
}

// Save implements Store. It keeps a copy.
func (m *MemoryStore) Save(_ context.Context, s *State) error {
	c := s.Clone()
	if c.Conversations == nil {
		c.Conversations = map[int64]*ConversationState{}
	}
	m.mu.Lock()
	m.s = c
	m.mu.Unlock()
	return nil
}

func decodeState(raw []byte) (*State, error) {
	s := newState()
	if err := json.Unmarshal(raw, s); err != nil {
		return nil, err
	}
	if s.Conversations == nil {
		s.Conversations = map[int64]*ConversationState{}
	}
	for id, cs := range s.Conversations {
		if cs == nil {
			delete(s.Conversations, id)
		}
	}
	return s, nil
}
