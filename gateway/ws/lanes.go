package ws

import (
	"context"
	"time"
)

// The read-mode frames leave through lanes, spread over the pacing
// interval. A paced push queues one frame to every aware session at the
// same instant: 1,000 sessions are 1,000 writer goroutines made runnable at
// once, and every other frame of the gateway (the small conversations'
// entries, heartbeats, replies) waits behind them, a few milliseconds of
// both cores every interval (docs/decisions.md, "Measured reasons behind
// defaults"). Each session belongs to one of
// largeLanes lanes (by its id); lane i queues its part of a push i/largeLanes
// of the interval later, so the writes of one push are spread evenly over
// it. A lane hands its work over in order, and every read-mode frame of a
// session (messages and large frames alike) goes through its lane, so a
// session's frames keep the order the index decided them in (a removal's
// large frame after the messages before it).

// largeLanes is the number of lanes.
const largeLanes = 16

// laneJob is the part of one push (or one list change) a lane delivers, at
// (or after) at.
type laneJob struct {
	at     time.Time
	to     []*session
	frames [][]byte // frames[i] for to[i]
	kind   string
}

// laneSet holds the lanes' queues.
type laneSet struct {
	q [largeLanes]chan laneJob
}

func newLaneSet() *laneSet {
	var l laneSet
	for i := range l.q {
		l.q[i] = make(chan laneJob, 256)
	}
	return &l
}

// run delivers each lane's jobs, in order, until ctx ends.
func (l *laneSet) run(ctx context.Context) {
	done := make(chan struct{})
	for i := range l.q {
		go func(q chan laneJob) {
			defer func() { done <- struct{}{} }()
			for {
				select {
				case <-ctx.Done():
					return
				case j := <-q:
					if d := time.Until(j.at); d > 0 {
						t := time.NewTimer(d)
						select {
						case <-ctx.Done():
							t.Stop()
							return
						case <-t.C:
						}
					}
					for k, s := range j.to {
						s.pushLarge(j.frames[k], j.kind)
					}
				}
			}
		}(l.q[i])
	}
	for range l.q {
		<-done
	}
}

// laneOf is the lane of a session.
func laneOf(s *session) int { return int(s.id % largeLanes) }

// send spreads frames (frames[i] for to[i]) over the lanes: lane i's part
// is delivered i/largeLanes of spread from now. It blocks while a lane's
// queue is full (the index's work waits; the sessions' own queues bound
// what a slow client holds).
func (l *laneSet) send(ctx context.Context, to []*session, frames [][]byte, kind string, spread time.Duration) {
	var parts [largeLanes]laneJob
	for i, s := range to {
		p := &parts[laneOf(s)]
		p.to, p.frames = append(p.to, s), append(p.frames, frames[i])
	}
	now := time.Now()
	for i := range parts {
		if len(parts[i].to) == 0 {
			continue
		}
		parts[i].at, parts[i].kind = now.Add(spread*time.Duration(i)/largeLanes), kind
		select {
		case l.q[i] <- parts[i]:
		case <-ctx.Done():
			return
		}
	}
}
