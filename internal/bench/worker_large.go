package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/gorilla/websocket"

	"github.com/inboxd/inboxd/gateway"
)

// largeWorkerConfig configures a load generator of the large figure. Role
// "recv" holds a WebSocket for each of Users (hello with "large": true),
// tracks per conversation the seqs it is pushed and times the pushes of
// bench messages; role "send" sends them over HTTP at the rates of each
// phase: into LargeConv from LargeSenders, and into the Small
// conversations from their first member.
type largeWorkerConfig struct {
	Role         string
	Addr         string
	Secret       string
	Users        []int64 // recv
	Heads        []int64 // recv: each user's inbox head, the after of its first hello
	LargeConv    int64
	LargeSenders []int64   // send
	Small        []e2eConv // send: Members[0] sends
	SrcIPs       []string
	Parallel     int // recv: handshakes in flight [32]
	MaxInflight  int // send: sends in flight, past it a send is dropped [500]
	Nice         int // recv: the process's scheduling priority (setpriority)
	Deadline     time.Duration
}

// largePhaseCmd is a phase of the sender: LargeRate messages/s into the
// large conversation and SmallRate into the small ones, for Seconds.
type largePhaseCmd struct {
	Idx       int     `json:"idx"`
	LargeRate float64 `json:"large_rate"`
	SmallRate float64 `json:"small_rate"`
	Seconds   float64 `json:"seconds"`
}

// largeSendResult is the sender's outcome of a phase.
type largeSendResult struct {
	Seconds    float64 `json:"seconds"`
	LargeSent  int64   `json:"large_sent"`
	LargeOK    int64   `json:"large_ok"`
	SmallSent  int64   `json:"small_sent"`
	SmallOK    int64   `json:"small_ok"`
	Errors     int64   `json:"errors"`
	Dropped    int64   `json:"dropped"`
	FirstErr   string  `json:"first_error,omitempty"`
	LargeSend  Dist    `json:"large_send"` // HTTP round trip of a send
	SmallSend  Dist    `json:"small_send"`
	SmallPushN int64   `json:"small_pushes_expected"` // accepted small sends x their connected members
}

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

type largeSess struct {
	mu           sync.Mutex
	welcomed     bool
	large        *seqTrack // nil until the first welcome lists the large conversation
	small        map[int64]*seqTrack
	largeEntries int64
	tooLong      int64
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
	Messages []largeMsg `json:"messages"`
	Entries  []struct {
		InboxSeq int64     `json:"inbox_seq"`
		Message  *largeMsg `json:"message"`
	} `json:"entries"`
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

// histShard holds the histograms of some sessions (sharded: a million
// pushes a second must not meet on one mutex).
type histShard struct {
	mu     sync.Mutex
	large  map[int]*logHist
	small  map[int]*logHist
	counts [2]map[int]int64
}

const histShards = 64

func runLargeWorker(ctx context.Context, cio *childIO, raw []byte) error {
	var cfg largeWorkerConfig
	if err := json.Unmarshal(raw, &cfg); err != nil {
		return err
	}
	if cfg.Nice != 0 {
		_ = syscall.Setpriority(syscall.PRIO_PROCESS, 0, cfg.Nice)
	}
	ctx, cancel := withDeadline(ctx, cfg.Deadline)
	defer cancel()
	switch cfg.Role {
	case "recv":
		return runLargeRecv(ctx, cio, cfg)
	case "send":
		return runLargeSend(ctx, cio, cfg)
	}
	return fmt.Errorf("large worker: unknown role %q", cfg.Role)
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
	var reconns atomic.Int64
	var welcomed sync.WaitGroup
	welcomed.Add(len(cfg.Users))
	rctx, stopReceivers := context.WithCancel(ctx)
	var receivers sync.WaitGroup
	sem := make(chan struct{}, cfg.Parallel)
	for i, u := range cfg.Users {
		tok, err := gateway.IssueToken([]byte(cfg.Secret), u, 2*time.Hour)
		if err != nil {
			stopReceivers()
			return err
		}
		s := &largeSess{small: map[int64]*seqTrack{}}
		sessions[i] = s
		sh := &shards[i%histShards]
		// A frame's pushes are timed together, then recorded under one
		// lock (a frame of the large conversation carries several).
		type push struct {
			kind  byte
			phase int
			ms    float64
		}
		var pending []push
		var scanned []scannedMsg // the fast path's, reused frame to frame
		record := func(kind byte, phase int, ms float64) {
			pending = append(pending, push{kind, phase, ms})
		}
		flush := func() {
			if len(pending) == 0 {
				return
			}
			sh.mu.Lock()
			for _, p := range pending {
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
			sh.mu.Unlock()
			pending = pending[:0]
		}
		var head int64
		if i < len(cfg.Heads) {
			head = cfg.Heads[i]
		}
		f := &wsFollower{dialer: dialer, addr: cfg.Addr, reconns: &reconns, large: true, start: head,
			frame: func(data []byte, now int64) (string, int64) {
				if conv, msgs, ok := scanMessagesFrame(data, scanned[:0]); ok {
					scanned = msgs
					s.mu.Lock()
					defer s.mu.Unlock()
					defer flush()
					if conv == cfg.LargeConv && s.large != nil {
						for _, m := range msgs {
							if s.large.see(m.seq) {
								if k, p, t0, ok := benchStamp(m.body); ok {
									record(k, p, float64(now-t0)/1e6)
								}
							}
						}
					}
					return "messages", 0
				}
				var fr largeFrame
				if json.Unmarshal(data, &fr) != nil {
					return "", 0
				}
				s.mu.Lock()
				defer s.mu.Unlock()
				defer flush()
				switch fr.Type {
				case "welcome", "too_long", "large":
					// The first list starts the track; a later one (a
					// reconnect's welcome, a too_long) moves nothing: what
					// it announces beyond the last seq pushed shows as a
					// gap when the next frame comes.
					if fr.Type == "too_long" {
						s.tooLong++
					}
					for _, l := range fr.Large {
						if l.ConversationID == cfg.LargeConv && s.large == nil {
							s.large = &seqTrack{base: l.LastSeq, last: l.LastSeq}
						}
					}
				case "messages":
					if fr.ConversationID == cfg.LargeConv && s.large != nil {
						for _, m := range fr.Messages {
							if s.large.see(m.Seq) {
								if k, p, t0, ok := benchStamp(m.Body); ok {
									record(k, p, float64(now-t0)/1e6)
								}
							}
						}
					}
				case "entries":
					cursor := int64(0)
					for _, e := range fr.Entries {
						cursor = max(cursor, e.InboxSeq)
						m := e.Message
						if m == nil {
							continue
						}
						if m.ConversationID == cfg.LargeConv {
							s.largeEntries++
							continue
						}
						t := s.small[m.ConversationID]
						if t == nil {
							// The hello was at the head: the first entry
							// pushed starts the conversation's track (the
							// counts of pushes say whether one was lost).
							t = &seqTrack{base: m.Seq - 1, last: m.Seq - 1}
							s.small[m.ConversationID] = t
						}
						if t.see(m.Seq) {
							if k, p, t0, ok := benchStamp(m.Body); ok {
								record(k, p, float64(now-t0)/1e6)
							}
						}
					}
					return fr.Type, cursor
				}
				return fr.Type, fr.Head
			}}
		receivers.Add(1)
		go func() {
			defer receivers.Done()
			f.follow(rctx, tok, sem, welcomed.Done)
		}()
	}
	defer func() { stopReceivers(); receivers.Wait() }()
	t0 := time.Now()
	if err := waitGroupCtx(ctx, &welcomed); err != nil {
		return fmt.Errorf("connect %d WebSockets: %w", len(cfg.Users), err)
	}
	// Failed hellos while the sessions come up are not reconnects of the run.
	reconns0 := reconns.Load()
	cio.emit("ready", map[string]any{"connections": len(cfg.Users), "seconds": time.Since(t0).Seconds(), "retries": reconns0})
	counts := func() largeCounts {
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
	for {
		line, ok := cio.next(ctx)
		if !ok || line == "quit" {
			return nil
		}
		cmd, arg, _ := bytes.Cut([]byte(line), []byte(" "))
		switch string(cmd) {
		case "count":
			cio.emit("count", counts())
		case "report":
			// arg: the large conversation's last seq at the end.
			final, _ := strconv.ParseInt(string(arg), 10, 64)
			res := largeRecvResult{Sessions: len(sessions), Reconnects: reconns.Load() - reconns0,
				LargeHist: map[int]*logHist{}, SmallHist: map[int]*logHist{}}
			for i := range shards {
				sh := &shards[i]
				sh.mu.Lock()
				for p, h := range sh.large {
					if res.LargeHist[p] == nil {
						res.LargeHist[p] = newLogHist()
					}
					res.LargeHist[p].merge(h)
				}
				for p, h := range sh.small {
					if res.SmallHist[p] == nil {
						res.SmallHist[p] = newLogHist()
					}
					res.SmallHist[p].merge(h)
				}
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
			cio.emit("result", res)
		default:
			return fmt.Errorf("large worker: unknown command %q", line)
		}
	}
}

func addTrack(s *seqSummary, t *seqTrack) {
	s.Sessions++
	s.Received += t.got
	s.Dups += t.dups
	s.OOO += t.ooo
	s.Gaps += t.gaps
}

func runLargeSend(ctx context.Context, cio *childIO, cfg largeWorkerConfig) error {
	if cfg.MaxInflight == 0 {
		// Each send in flight is a connection of the gateway, which holds
		// the WebSockets too under one open-files limit.
		cfg.MaxInflight = 500
	}
	dial := sourceDialer(cfg.SrcIPs, 10*time.Second)
	sw := &e2eWorker{cfg: e2eWorkerConfig{Addr: cfg.Addr}, sendConns: make(chan *rawConn, 4096), dial: dial}
	tokens := map[int64]string{}
	tok := func(u int64) (string, error) {
		if t, ok := tokens[u]; ok {
			return t, nil
		}
		t, err := gateway.IssueToken([]byte(cfg.Secret), u, 2*time.Hour)
		tokens[u] = t
		return t, err
	}
	for _, u := range cfg.LargeSenders {
		if _, err := tok(u); err != nil {
			return err
		}
	}
	for _, c := range cfg.Small {
		if _, err := tok(c.Members[0]); err != nil {
			return err
		}
	}
	cio.emit("ready", nil)
	for {
		cmd, ok, err := nextPhase[largePhaseCmd](ctx, cio, "large")
		if !ok {
			return err
		}
		cio.emit("result", largeSendPhase(ctx, sw, cfg, tokens, cmd))
	}
}

func largeSendPhase(ctx context.Context, sw *e2eWorker, cfg largeWorkerConfig, tokens map[int64]string, cmd largePhaseCmd) largeSendResult {
	var (
		res                largeSendResult
		largeSent, largeOK atomic.Int64
		smallSent, smallOK atomic.Int64
		smallPushes        atomic.Int64
		errs, dropped      atomic.Int64
		inflight           atomic.Int64
		firstErr           atomic.Value
		mu                 sync.Mutex
		largeLat, smallLat []float32
		sends              sync.WaitGroup
		loops              sync.WaitGroup
	)
	start := time.Now()
	end := start.Add(time.Duration(cmd.Seconds * float64(time.Second)))
	send := func(conv int64, sender int64, kind byte, sent, okc *atomic.Int64, lat *[]float32, pushes int64) {
		if inflight.Load() >= int64(cfg.MaxInflight) {
			dropped.Add(1)
			return
		}
		inflight.Add(1)
		sends.Add(1)
		go func() {
			defer sends.Done()
			defer inflight.Add(-1)
			sent.Add(1)
			t0 := time.Now()
			code, err := sw.send(ctx, conv, tokens[sender], fmt.Sprintf("%cb:%d:%d", kind, cmd.Idx, t0.UnixNano()))
			d := float32(float64(time.Since(t0).Microseconds()) / 1000)
			if err == nil && (code == http.StatusCreated || code == http.StatusOK || code == http.StatusAccepted) {
				okc.Add(1)
				smallPushes.Add(pushes)
				mu.Lock()
				*lat = append(*lat, d)
				mu.Unlock()
				return
			}
			errs.Add(1)
			if err == nil {
				err = fmt.Errorf("HTTP %d", code)
			}
			firstErr.CompareAndSwap(nil, fmt.Sprintf("%c send: %v", kind, err))
		}()
	}
	loop := func(rate float64, one func(i int)) {
		if rate <= 0 {
			return
		}
		loops.Add(1)
		go func() {
			defer loops.Done()
			interval := time.Duration(float64(time.Second) / rate)
			for i := 0; ; i++ {
				at := start.Add(time.Duration(i) * interval)
				if !at.Before(end) || ctx.Err() != nil {
					return
				}
				if d := time.Until(at); d > 0 {
					time.Sleep(d)
				}
				one(i)
			}
		}()
	}
	if len(cfg.LargeSenders) > 0 {
		loop(cmd.LargeRate, func(i int) {
			send(cfg.LargeConv, cfg.LargeSenders[i%len(cfg.LargeSenders)], 'l', &largeSent, &largeOK, &largeLat, 0)
		})
	}
	if len(cfg.Small) > 0 {
		loop(cmd.SmallRate, func(i int) {
			c := cfg.Small[i%len(cfg.Small)]
			send(c.ID, c.Members[0], 's', &smallSent, &smallOK, &smallLat, int64(len(c.Members)-1))
		})
	}
	loops.Wait()
	res.Seconds = time.Since(start).Seconds()
	sends.Wait()
	res.LargeSent, res.LargeOK = largeSent.Load(), largeOK.Load()
	res.SmallSent, res.SmallOK = smallSent.Load(), smallOK.Load()
	res.Errors, res.Dropped, res.SmallPushN = errs.Load(), dropped.Load(), smallPushes.Load()
	if v, ok := firstErr.Load().(string); ok {
		res.FirstErr = v
	}
	res.LargeSend = newDist(f32to64(largeLat))
	res.SmallSend = newDist(f32to64(smallLat))
	return res
}
