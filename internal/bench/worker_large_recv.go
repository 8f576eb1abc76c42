package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gorilla/websocket"

	"github.com/inboxd/inboxd/gateway"
)

// The receiving side of the large figure: sessions that check, per
// conversation, every seq they are pushed, and time the pushes of bench
// messages into sharded histograms (a million pushes a second must not
// meet on one mutex, nor fit the line protocol as samples).

// largeCounts is a receiver's bench pushes so far, per phase.
type largeCounts struct {
	Large map[int]int64 `json:"large"`
	Small map[int]int64 `json:"small"`
}

// largeRecvResult is a receiver's report: the latency histograms per
// phase and the seq checks.
type largeRecvResult struct {
	Sessions   int              `json:"sessions"`
	Reconnects int64            `json:"reconnects"`
	LargeHist  map[int]*logHist `json:"large_hist"`
	SmallHist  map[int]*logHist `json:"small_hist"`
	Large      seqSummary       `json:"large"` // the large conversation, over the sessions of its members
	Small      seqSummary       `json:"small"` // the small conversations
	// LargeEntries are inbox entries of the large conversation pushed
	// (mentions, armed members): none expected here.
	LargeEntries int64 `json:"large_entries"`
	TooLong      int64 `json:"too_long_frames"`
}

// seqSummary adds up seqTracks.
type seqSummary struct {
	Sessions int   `json:"sessions"`
	Received int64 `json:"received"` // distinct seqs
	Dups     int64 `json:"duplicates"`
	OOO      int64 `json:"out_of_order"`
	Gaps     int64 `json:"gaps"`    // a frame (or a welcome) beyond the last seq + 1
	Missing  int64 `json:"missing"` // seqs up to the final one never pushed (large only)
	Complete int   `json:"complete"`
}

// seqTrack follows one conversation's seqs on one session.
type seqTrack struct {
	base, last int64 // seqs <= base are before the run
	bits       []uint64
	got        int64
	dups, ooo  int64
	gaps       int64
}

func (t *seqTrack) see(seq int64) (isNew bool) {
	if seq <= t.base {
		return false
	}
	i := seq - t.base - 1
	w := int(i / 64)
	if w >= len(t.bits) {
		t.bits = append(t.bits, make([]uint64, w+1-len(t.bits))...)
	}
	if t.bits[w]&(1<<(i%64)) != 0 {
		t.dups++
		return false
	}
	t.bits[w] |= 1 << (i % 64)
	t.got++
	switch {
	case seq < t.last:
		t.ooo++
	case seq > t.last+1:
		t.gaps++
	}
	t.last = max(t.last, seq)
	return true
}

// largeSess is one receiving session. Its frame function runs on its
// follower's goroutine; the reports read the tracks under mu.
type largeSess struct {
	conv  int64 // the large conversation
	shard *histShard
	// pending are the pushes of the frame being read, timed together and
	// recorded under one lock (a frame of the large conversation carries
	// several); scanned is the fast path's buffer, reused frame to frame.
	pending []largePush
	scanned []scannedMsg

	mu           sync.Mutex
	large        *seqTrack // nil until the first welcome lists the large conversation
	small        map[int64]*seqTrack
	largeEntries int64
	tooLong      int64
}

// largePush is one timed push of a bench message.
type largePush struct {
	kind  byte // 'l' (the large conversation) or 's' (a small one)
	phase int
	ms    float64
}

type largeMsg struct {
	ConversationID int64           `json:"conversation_id"`
	Seq            int64           `json:"seq"`
	Body           json.RawMessage `json:"body"`
}

type largeFrame struct {
	Type           string `json:"type"`
	Head           int64  `json:"head"`
	ConversationID int64  `json:"conversation_id"`
	Large          []struct {
		ConversationID int64 `json:"conversation_id"`
		LastSeq        int64 `json:"last_seq"`
	} `json:"large"`
	Messages []largeMsg   `json:"messages"`
	Entries  []largeEntry `json:"entries"`
}

type largeEntry struct {
	InboxSeq int64     `json:"inbox_seq"`
	Message  *largeMsg `json:"message"`
}

// benchStamp parses a body "<kind>:<phase>:<send unix ns>" (a JSON string).
func benchStamp(body []byte) (kind byte, phase int, t0 int64, ok bool) {
	if len(body) < 6 || body[0] != '"' || body[2] != 'b' || body[3] != ':' {
		return 0, 0, 0, false
	}
	rest := body[4 : len(body)-1]
	ps, ts, found := bytes.Cut(rest, []byte(":"))
	if !found {
		return 0, 0, 0, false
	}
	p, err1 := strconv.Atoi(string(ps))
	t, err2 := strconv.ParseInt(string(ts), 10, 64)
	if err1 != nil || err2 != nil {
		return 0, 0, 0, false
	}
	return body[1], p, t, true
}

// histShard holds the histograms of some sessions.
type histShard struct {
	mu     sync.Mutex
	large  map[int]*logHist
	small  map[int]*logHist
	counts [2]map[int]int64
}

const histShards = 64

// record adds the pushes of one frame.
func (sh *histShard) record(ps []largePush) {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	for _, p := range ps {
		m, k := sh.large, 0
		if p.kind == 's' {
			m, k = sh.small, 1
		}
		h := m[p.phase]
		if h == nil {
			h = newLogHist()
			m[p.phase] = h
		}
		h.add(p.ms)
		sh.counts[k][p.phase]++
	}
}

func runLargeRecv(ctx context.Context, cio *childIO, cfg largeWorkerConfig) error {
	if cfg.Parallel == 0 {
		cfg.Parallel = 32
	}
	dialer := &websocket.Dialer{NetDialContext: sourceDialer(cfg.SrcIPs, 15*time.Second), HandshakeTimeout: 30 * time.Second,
		ReadBufferSize: 4096, WriteBufferSize: 512}
	var shards [histShards]histShard
	for i := range shards {
		shards[i].large, shards[i].small = map[int]*logHist{}, map[int]*logHist{}
		shards[i].counts = [2]map[int]int64{{}, {}}
	}
	sessions := make([]*largeSess, len(cfg.Users))
	fs := make([]*wsFollower, len(cfg.Users))
	var reconns atomic.Int64
	for i, u := range cfg.Users {
		tok, err := gateway.IssueToken([]byte(cfg.Secret), u, 2*time.Hour)
		if err != nil {
			return err
		}
		var head int64
		if i < len(cfg.Heads) {
			head = cfg.Heads[i]
		}
		s := &largeSess{conv: cfg.LargeConv, shard: &shards[i%histShards], small: map[int64]*seqTrack{}}
		sessions[i] = s
		fs[i] = &wsFollower{dialer: dialer, addr: cfg.Addr, tok: tok, reconns: &reconns, large: true, start: head, frame: s.frame}
	}
	t0 := time.Now()
	stop, err := followAll(ctx, fs, cfg.Parallel)
	if err != nil {
		return err
	}
	defer stop()
	// Failed hellos while the sessions come up are not reconnects of the run.
	reconns0 := reconns.Load()
	cio.emit("ready", map[string]any{"connections": len(cfg.Users), "seconds": time.Since(t0).Seconds(), "retries": reconns0})
	for {
		line, ok := cio.next(ctx)
		if !ok || line == "quit" {
			return nil
		}
		cmd, arg, _ := bytes.Cut([]byte(line), []byte(" "))
		switch string(cmd) {
		case "count":
			cio.emit("count", largeCountsOf(shards[:]))
		case "report":
			// arg: the large conversation's last seq at the end.
			final, _ := strconv.ParseInt(string(arg), 10, 64)
			res := largeReport(shards[:], sessions, final)
			res.Reconnects = reconns.Load() - reconns0
			cio.emit("result", res)
		default:
			return fmt.Errorf("large worker: unknown command %q", line)
		}
	}
}

// frame is the session's wsFollower frame function. A messages frame
// takes the fast path (scanMessagesFrame); anything else is decoded.
func (s *largeSess) frame(data []byte, now int64) (string, int64) {
	if conv, msgs, ok := scanMessagesFrame(data, s.scanned[:0]); ok {
		s.scanned = msgs
		s.mu.Lock()
		defer s.mu.Unlock()
		if conv == s.conv && s.large != nil {
			for _, m := range msgs {
				s.push(s.large, m.seq, m.body, now)
			}
		}
		s.flush()
		return "messages", 0
	}
	var fr largeFrame
	if json.Unmarshal(data, &fr) != nil {
		return "", 0
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	defer s.flush()
	switch fr.Type {
	case "welcome", "too_long", "large":
		// The first list starts the track; a later one (a reconnect's
		// welcome, a too_long) moves nothing: what it announces beyond
		// the last seq pushed shows as a gap when the next frame comes.
		if fr.Type == "too_long" {
			s.tooLong++
		}
		for _, l := range fr.Large {
			if l.ConversationID == s.conv && s.large == nil {
				s.large = &seqTrack{base: l.LastSeq, last: l.LastSeq}
			}
		}
	case "messages":
		if fr.ConversationID == s.conv && s.large != nil {
			for _, m := range fr.Messages {
				s.push(s.large, m.Seq, m.Body, now)
			}
		}
	case "entries":
		return fr.Type, s.entries(fr.Entries, now)
	}
	return fr.Type, fr.Head
}

// entries tracks the entries of the small conversations (an entry of the
// large one is counted: none is expected) and returns the highest
// inbox_seq.
func (s *largeSess) entries(es []largeEntry, now int64) (cursor int64) {
	for _, e := range es {
		cursor = max(cursor, e.InboxSeq)
		m := e.Message
		if m == nil {
			continue
		}
		if m.ConversationID == s.conv {
			s.largeEntries++
			continue
		}
		t := s.small[m.ConversationID]
		if t == nil {
			// The hello was at the head: the first entry pushed starts
			// the conversation's track (the counts of pushes say whether
			// one was lost).
			t = &seqTrack{base: m.Seq - 1, last: m.Seq - 1}
			s.small[m.ConversationID] = t
		}
		s.push(t, m.Seq, m.Body, now)
	}
	return cursor
}

// push checks seq on t and, when it is new there, times a bench message.
func (s *largeSess) push(t *seqTrack, seq int64, body []byte, now int64) {
	if !t.see(seq) {
		return
	}
	if k, p, t0, ok := benchStamp(body); ok {
		s.pending = append(s.pending, largePush{kind: k, phase: p, ms: float64(now-t0) / 1e6})
	}
}

// flush records the frame's pushes in the session's shard.
func (s *largeSess) flush() {
	if len(s.pending) == 0 {
		return
	}
	s.shard.record(s.pending)
	s.pending = s.pending[:0]
}

// largeCountsOf adds up the pushes of every shard so far.
func largeCountsOf(shards []histShard) largeCounts {
	c := largeCounts{Large: map[int]int64{}, Small: map[int]int64{}}
	for i := range shards {
		sh := &shards[i]
		sh.mu.Lock()
		for p, n := range sh.counts[0] {
			c.Large[p] += n
		}
		for p, n := range sh.counts[1] {
			c.Small[p] += n
		}
		sh.mu.Unlock()
	}
	return c
}

// largeReport merges the shards' histograms and the sessions' seq
// checks; final is the large conversation's last seq.
func largeReport(shards []histShard, sessions []*largeSess, final int64) largeRecvResult {
	res := largeRecvResult{Sessions: len(sessions), LargeHist: map[int]*logHist{}, SmallHist: map[int]*logHist{}}
	for i := range shards {
		sh := &shards[i]
		sh.mu.Lock()
		mergeHists(res.LargeHist, sh.large)
		mergeHists(res.SmallHist, sh.small)
		sh.mu.Unlock()
	}
	for _, s := range sessions {
		s.mu.Lock()
		res.LargeEntries += s.largeEntries
		res.TooLong += s.tooLong
		if t := s.large; t != nil {
			addTrack(&res.Large, t)
			want := max(0, final-t.base)
			res.Large.Missing += want - t.got
			if t.got == want && t.dups == 0 && t.ooo == 0 && t.gaps == 0 {
				res.Large.Complete++
			}
		}
		for _, t := range s.small {
			addTrack(&res.Small, t)
			if t.dups == 0 && t.ooo == 0 && t.gaps == 0 {
				res.Small.Complete++
			}
		}
		s.mu.Unlock()
	}
	return res
}

// mergeHists merges the histograms of src into dst, phase by phase.
func mergeHists(dst, src map[int]*logHist) {
	for p, h := range src {
		if dst[p] == nil {
			dst[p] = newLogHist()
		}
		dst[p].merge(h)
	}
}

func addTrack(s *seqSummary, t *seqTrack) {
	s.Sessions++
	s.Received += t.got
	s.Dups += t.dups
	s.OOO += t.ooo
	s.Gaps += t.gaps
}
