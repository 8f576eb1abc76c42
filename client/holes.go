package client

import "sort"

// Hole is a range of a conversation's seqs, From to To inclusive, that the
// client knows exist on the server but has not delivered: entries skipped
// by a too_long jump, or a message whose seq skipped ahead of the last one
// seen. Some of its seqs may never have been visible to the user (before it
// joined, while it was removed); Backfill finds that out and closes them.
type Hole struct {
	From int64 `json:"from"`
	To   int64 `json:"to"`
}

// Len is the number of seqs in h.
func (h Hole) Len() int64 { return h.To - h.From + 1 }

// holeSet is a sorted list of disjoint, non-adjacent holes.
type holeSet []Hole

func (hs holeSet) contains(seq int64) bool {
	i := sort.Search(len(hs), func(i int) bool { return hs[i].To >= seq })
	return i < len(hs) && hs[i].From <= seq
}

// add returns hs with [from, to] added.
func (hs holeSet) add(from, to int64) holeSet {
	if from > to {
		return hs
	}
	out := make(holeSet, 0, len(hs)+1)
	n := Hole{From: from, To: to}
	placed := false
	for _, h := range hs {
		switch {
		case h.To+1 < n.From:
			out = append(out, h)
		case n.To+1 < h.From:
			if !placed {
				out = append(out, n)
				placed = true
			}
			out = append(out, h)
		default: // overlapping or adjacent: merge into n
			n.From = min(n.From, h.From)
			n.To = max(n.To, h.To)
		}
	}
	if !placed {
		out = append(out, n)
	}
	return out
}

// remove returns hs without [from, to].
func (hs holeSet) remove(from, to int64) holeSet {
	if from > to {
		return hs
	}
	out := make(holeSet, 0, len(hs)+1)
	for _, h := range hs {
		if h.To < from || h.From > to {
			out = append(out, h)
			continue
		}
		if h.From < from {
			out = append(out, Hole{From: h.From, To: from - 1})
		}
		if h.To > to {
			out = append(out, Hole{From: to + 1, To: h.To})
		}
	}
	return out
}

// newest is the hole with the highest seqs.
func (hs holeSet) newest() (Hole, bool) {
	if len(hs) == 0 {
		return Hole{}, false
	}
	return hs[len(hs)-1], true
}
