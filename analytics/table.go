package analytics

import (
	"context"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"text/tabwriter"
	"time"
)

// WriteTable writes f as a table for people.
func (f Figures) WriteTable(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	p := func(format string, args ...any) { fmt.Fprintf(tw, format, args...) }
	p("inboxd analytics\t%s\twindow %s\n", f.At.UTC().Format(time.RFC3339), f.Window)
	p("  messages/minute\t%.1f\t(%d in the window)\n", f.MessagesPerMinute, f.WindowMessages)
	p("  active conversations\t%d\t(of %d tracked)\n", f.ActiveConversations, f.Conversations)
	p("  messages\t%d\t(%d from non-members)\n", f.Messages, f.NonMemberMessages)
	p("  records\t%d\t(%d invalid, %d replayed)\n", f.Records, f.Invalid, f.Replayed)
	p("  events by type\t\t\n")
	for _, t := range Types() {
		p("    %s\t%d\t\n", t, f.Events[t])
	}
	h := f.FanOut
	mean := 0.0
	if h.Count > 0 {
		mean = float64(h.Sum) / float64(h.Count)
	}
	p("  fan-out size\tmean %.1f\tp50 <= %s  p90 <= %s  p99 <= %s\n", mean,
		bound(h.Quantile(0.5)), bound(h.Quantile(0.9)), bound(h.Quantile(0.99)))
	for i, c := range h.Counts {
		if c == 0 {
			continue
		}
		le := math.Inf(1)
		if i < len(h.Bounds) {
			le = h.Bounds[i]
		}
		p("    <= %s\t%d\t\n", bound(le), c)
	}
	p("  top senders\t\t\n")
	for i, s := range f.TopSenders {
		p("    %2d. user %d\t%d\t\n", i+1, s.UserID, s.Messages)
	}
	if len(f.Positions) > 0 {
		ids := make([]int32, 0, len(f.Positions))
		for id := range f.Positions {
			ids = append(ids, id)
		}
		slices.Sort(ids)
		p("  next offsets\t")
		for _, id := range ids {
			p("%d:%d ", id, f.Positions[id])
		}
		p("\t\n")
	}
	if err := tw.Flush(); err != nil {
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
