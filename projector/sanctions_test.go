package projector

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/inboxd/inboxd/events"
	"github.com/inboxd/inboxd/projection"
)

func sanctioned(typ, id string, c, actor, user int64, until *time.Time) *events.Event {
	e := ev(typ, id, c, actor)
	e.UserID, e.Until = user, until
	return e
}

// later is an event e moved to at + d.
func later(e *events.Event, d time.Duration) *events.Event {
	e.At = at.Add(d)
	return e
}

// sanctionSummary is what the batch leaves of the bans and mutes of
// conversation c ("user:kind[@until]" in order, and the members), and the
// reasons of its rejections in order.
func sanctionSummary(b *batch, c int64) (string, []string) {
	var ss []string
	for k, s := range b.sanctions {
		if k.conv != c {
			continue
		}
		v := fmt.Sprintf("%d:%s", k.user, k.kind)
		if s.until != nil {
			v += "@" + s.until.Sub(at).String()
		}
		ss = append(ss, v)
	}
	slices.Sort(ss)
	var ms []int64
	for u := range b.convs[c].members {
		ms = append(ms, u)
	}
	slices.Sort(ms)
	var reasons []string
	for _, r := range b.rejects {
		reasons = append(reasons, r.eventID+" "+r.reason)
	}
	return fmt.Sprintf("sanctions=%v members=%v", ss, ms), reasons
}

// TestSanctionAuthorization is who may ban and mute whom: owner 10,
// admin 11, moderator 12, member 13 and an outsider 99, on the member 14
// and on the moderator 12, in a conversation with roles enforced and in
// one without: the same rules in both.
func TestSanctionAuthorization(t *testing.T) {
	const owner, admin, mod, member, outsider = 10, 11, 12, 13, 99
	for _, enforced := range []bool{true, false} {
		for _, tc := range []struct {
			name string
			make func(actor int64) *events.Event
			want map[int64]string // rejection reason per actor ("" applied)
		}{
			{"ban a member", func(a int64) *events.Event { return sanctioned(events.MemberBanned, "e", 1, a, 14, nil) },
				map[int64]string{member: projection.ReasonRole, outsider: projection.ReasonNotMember}},
			{"mute a member", func(a int64) *events.Event { return sanctioned(events.MemberMuted, "e", 1, a, 14, nil) },
				map[int64]string{member: projection.ReasonRole, outsider: projection.ReasonNotMember}},
			{"ban the moderator", func(a int64) *events.Event { return sanctioned(events.MemberBanned, "e", 1, a, mod, nil) },
				map[int64]string{mod: projection.ReasonRole, member: projection.ReasonRole, outsider: projection.ReasonNotMember}},
			{"mute the admin", func(a int64) *events.Event { return sanctioned(events.MemberMuted, "e", 1, a, admin, nil) },
				map[int64]string{admin: projection.ReasonRole, mod: projection.ReasonRole, member: projection.ReasonRole,
					outsider: projection.ReasonNotMember}},
			{"ban the owner", func(a int64) *events.Event { return sanctioned(events.MemberBanned, "e", 1, a, owner, nil) },
				map[int64]string{owner: projection.ReasonRole, admin: projection.ReasonRole, mod: projection.ReasonRole,
					member: projection.ReasonRole, outsider: projection.ReasonNotMember}},
		} {
			for _, a := range []int64{owner, admin, mod, member, outsider} {
				t.Run(fmt.Sprintf("enforced %v/%s/by %d", enforced, tc.name, a), func(t *testing.T) {
					st := staff()
					c := st.convs[1]
					c.enforced = enforced
					st.convs[1] = c
					e := tc.make(a)
					b := runRules(t, st, []any{e})
					_, reasons := sanctionSummary(b, 1)
					if want := tc.want[a]; want != "" {
						require.Equal(t, []string{e.EventID + " " + want}, reasons)
						require.Equal(t, int64(6), b.convs[1].lastSeq, "a refusal changes nothing")
						require.Empty(t, b.sanctionsChanged)
						return
					}
					require.Empty(t, reasons)
					require.Equal(t, int64(7), b.convs[1].lastSeq, "a system message")
				})
			}
		}
	}
}

func TestSanctionRules(t *testing.T) {
	hour := time.Hour
	in := func(d time.Duration) *time.Time { u := at.Add(d); return &u }
	banned := func(st state, user int64, until *time.Time) state {
		st.sanctions = map[sanctionKey]sanction{{1, user, projection.SanctionBan}: {until: until, by: 12, at: at}}
		return st
	}
	muted := func(st state, user int64, until *time.Time) state {
		st.sanctions = map[sanctionKey]sanction{{1, user, projection.SanctionMute}: {until: until, by: 12, at: at}}
		return st
	}
	for _, tc := range []struct {
		name    string
		state   state
		inputs  []any
		want    string
		rejects []string
	}{
		{
			name:   "a ban removes the member; adding it again is refused, by anyone",
			state:  staff(),
			inputs: []any{sanctioned(events.MemberBanned, "e1", 1, 12, 14, nil), added("e2", 1, 10, 14), added("e3", 1, 0, 14)},
			want:   "sanctions=[14:ban] members=[10 11 12 13]", rejects: []string{"e2 banned", "e3 banned"},
		},
		{
			name:   "an unban lets the user be added again",
			state:  banned(staff(), 20, nil),
			inputs: []any{added("e1", 1, 10, 20), sanctioned(events.MemberUnbanned, "e2", 1, 12, 20, nil), added("e3", 1, 10, 20)},
			want:   "sanctions=[] members=[10 11 12 13 14 20]", rejects: []string{"e1 banned"},
		},
		{
			name:   "a ban lapses at its until",
			state:  banned(staff(), 20, in(hour)),
			inputs: []any{later(added("e1", 1, 10, 20), hour-time.Second), later(added("e2", 1, 10, 20), hour)},
			want:   "sanctions=[20:ban@1h0m0s] members=[10 11 12 13 14 20]", rejects: []string{"e1 banned"},
		},
		{
			name:   "a user who is no member is banned in advance",
			state:  staff(),
			inputs: []any{sanctioned(events.MemberBanned, "e1", 1, 11, 30, in(hour)), added("e2", 1, 10, 30)},
			want:   "sanctions=[30:ban@1h0m0s] members=[10 11 12 13 14]", rejects: []string{"e2 banned"},
		},
		{
			name:   "banning again until the same time changes nothing; another until replaces it",
			state:  banned(staff(), 20, nil),
			inputs: []any{sanctioned(events.MemberBanned, "e1", 1, 12, 20, nil), sanctioned(events.MemberBanned, "e2", 1, 12, 20, in(hour))},
			want:   "sanctions=[20:ban@1h0m0s] members=[10 11 12 13 14]",
		},
		{
			name:  "a mute refuses sends, edits and reactions; deletes and unreactions pass; an unmute lifts it",
			state: muted(staff(), 13, nil),
			inputs: []any{sent("e1", "m1", 1, 13, "hi"), edited("e2", "e2", 1, 13, 5, "x"), reacted("e3", "e3", 1, 13, 6, "+1"),
				deleted("e4", 1, 13, 5), sanctioned(events.MemberUnmuted, "e5", 1, 12, 13, nil), sent("e6", "m6", 1, 13, "back"),
				reacted("e7", "e7", 1, 13, 6, "+1")},
			want:    "sanctions=[] members=[10 11 12 13 14]",
			rejects: []string{"e1 muted", "e2 muted", "e3 muted"},
		},
		{
			name:    "a mute lapses at its until",
			state:   muted(staff(), 13, in(hour)),
			inputs:  []any{later(sent("e1", "m1", 1, 13, "early"), time.Minute), later(sent("e2", "m2", 1, 13, "late"), hour)},
			want:    "sanctions=[13:mute@1h0m0s] members=[10 11 12 13 14]",
			rejects: []string{"e1 muted"},
		},
		{
			name:   "a mute outlives leaving and rejoining",
			state:  staff(),
			inputs: []any{sanctioned(events.MemberMuted, "e1", 1, 12, 13, nil), removed("e2", 1, 13, 13), added("e3", 1, 10, 13), sent("e4", "m4", 1, 13, "hi")},
			want:   "sanctions=[13:mute] members=[10 11 12 13 14]", rejects: []string{"e4 muted"},
		},
		{
			name:    "a mute needs a member",
			state:   staff(),
			inputs:  []any{sanctioned(events.MemberMuted, "e1", 1, 12, 30, nil)},
			want:    "sanctions=[] members=[10 11 12 13 14]",
			rejects: []string{"e1 no_member"},
		},
		{
			name:   "lifting what is not there changes nothing",
			state:  staff(),
			inputs: []any{sanctioned(events.MemberUnbanned, "e1", 1, 12, 30, nil), sanctioned(events.MemberUnmuted, "e2", 1, 12, 13, nil)},
			want:   "sanctions=[] members=[10 11 12 13 14]",
		},
		{
			name:   "a service as itself bans anyone, the owner too",
			state:  staff(),
			inputs: []any{sanctioned(events.MemberBanned, "e1", 1, 0, 10, nil)},
			want:   "sanctions=[10:ban] members=[11 12 13 14]",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := runRules(t, tc.state, tc.inputs)
			got, rejects := sanctionSummary(b, 1)
			require.Equal(t, tc.want, got)
			require.Equal(t, tc.rejects, rejects)
		})
	}
}

// TestBanMessage: a ban is a system message; the banned member gets it
// and its span closes, as in a removal.
func TestBanMessage(t *testing.T) {
	until := at.Add(time.Hour)
	b := runRules(t, staff(), []any{sanctioned(events.MemberBanned, "e1", 1, 12, 14, &until)})
	res := summarize(b)
	require.Equal(t, []string{`1/7 system e1 12 {"by":12,"event":"member.banned","until":"2026-01-02T04:04:05Z","user_id":14}`}, res.msgs)
	require.Equal(t, []string{"1/14 7"}, res.closes)
	require.Equal(t, []string{"msg 1/7", "rec 1"}, res.inbox[14], "its removal, and its record removed")
}
