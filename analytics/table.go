package analytics

import (
	"context"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
)

// WriteTable writes f as a table for people, in one Write.
func (f Figures) WriteTable(w io.Writer) error {
	var b strings.Builder
	row := func(label, value, note string) {
		line := fmt.Sprintf("  %-24s %10s  %s", label, value, note)
		b.WriteString(strings.TrimRight(line, " "))
		b.WriteByte('\n')
	}
	n := func(v int64) string { return strconv.FormatInt(v, 10) }
	fmt.Fprintf(&b, "inboxd analytics at %s, window %s\n", f.At.UTC().Format(time.RFC3339), f.Window)
	row("messages/minute", strconv.FormatFloat(f.MessagesPerMinute, 'f', 1, 64), fmt.Sprintf("%d in the window", f.WindowMessages))
	row("active conversations", strconv.Itoa(f.ActiveConversations), fmt.Sprintf("of %d tracked", f.Conversations))
	row("messages", n(f.Messages), fmt.Sprintf("%d from non-members, %d muted", f.NonMemberMessages, f.MutedMessages))
	row("records", n(f.Records), fmt.Sprintf("%d invalid, %d replayed", f.Invalid, f.Replayed))
	row("events by type", "", "")
	for _, t := range Types() {
		row("  "+t, n(f.Events[t]), "")
	}
	h := f.FanOut
	mean := 0.0
	if h.Count > 0 {
		mean = float64(h.Sum) / float64(h.Count)
	}
	row("fan-out size", fmt.Sprintf("mean %.1f", mean), fmt.Sprintf("p50 <= %s, p90 <= %s, p99 <= %s",
		bound(h.Quantile(0.5)), bound(h.Quantile(0.9)), bound(h.Quantile(0.99))))
	for i, c := range h.Counts {
		if c == 0 {
			continue
		}
		le := math.Inf(1)
		if i < len(h.Bounds) {
			le = h.Bounds[i]
		}
		row("  <= "+bound(le), strconv.FormatUint(c, 10), "")
	}
	row("top senders", "", "")
	for i, s := range f.TopSenders {
		row(fmt.Sprintf("  %2d. user %d", i+1, s.UserID), n(s.Messages), "")
	}
	if len(f.Positions) > 0 {
		ids := make([]int32, 0, len(f.Positions))
		for id := range f.Positions {
			ids = append(ids, id)
		}
		slices.Sort(ids)
		var pos []string
		for _, id := range ids {
			pos = append(pos, fmt.Sprintf("%d:%d", id, f.Positions[id]))
		}
		row("next offsets", "", strings.Join(pos, " "))
	}
	b.WriteByte('\n')
	if _, err := io.WriteString(w, b.String()); err != nil {
		return fmt.Errorf("write figures: %w", err)
	}
	return nil
}

func bound(b float64) string {
	if math.IsInf(b, 1) {
		return "+Inf"
	}
	return strconv.FormatFloat(b, 'f', -1, 64)
}

// PrintEvery writes a table of the figures to w every interval until ctx
// ends. It returns nil then, or the first write error.
func (a *Analytics) PrintEvery(ctx context.Context, w io.Writer, interval time.Duration) error {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			if err := a.Snapshot().WriteTable(w); err != nil {
				return err
			}
		}
	}
}
