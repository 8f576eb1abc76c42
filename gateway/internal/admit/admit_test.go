package admit

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

type clock struct{ t time.Time }

func (c *clock) now() time.Time          { return c.t }
func (c *clock) advance(d time.Duration) { c.t = c.t.Add(d) }
func newClock() *clock                   { return &clock{t: time.Unix(1_700_000_000, 0)} }

// TestCrowdServedInOrder: a crowd arriving at once is admitted up to the
// burst; every other client gets a distinct slot at the rate, and coming
// back on it is admitted the first time: two requests at most per client,
// and the last admitted when the rate says.
func TestCrowdServedInOrder(t *testing.T) {
	clk := newClock()
	c, err := New(Config{Rate: 1000, Burst: 100, Now: clk.now})
	require.NoError(t, err)
	const crowd = 3000
	type back struct {
		at time.Duration
		id int
	}
	var returns []back
	admitted := 0
	for i := 0; i < crowd; i++ {
		d := c.Admit()
		if d.Admitted {
			admitted++
			continue
		}
		returns = append(returns, back{at: d.RetryAfter, id: i})
	}
	// The burst, the slot due now and those within the claim slack.
	require.Equal(t, 100+1+int(DefaultClaimSlack/time.Millisecond), admitted)
	require.Equal(t, crowd-admitted, c.Queue())
	waits := make([]time.Duration, len(returns))
	for i, r := range returns {
		waits[i] = r.at
	}
	require.True(t, slices.IsSorted(waits), "slots are given in arrival order")
	require.Len(t, slices.Compact(slices.Clone(waits)), len(waits), "every refused client has a slot of its own")
	last := waits[len(waits)-1]
	require.InDelta(t, float64(time.Duration(crowd-100)*time.Millisecond), float64(last), float64(2*time.Millisecond),
		"the crowd is through when the rate says")

	// Every client comes back on its slot, in order: each is admitted.
	start := clk.t
	for _, r := range returns {
		clk.t = start.Add(r.at)
		d := c.Admit()
		require.True(t, d.Admitted, "client %d back on its slot %v", r.id, r.at)
		require.True(t, d.Claimed)
	}
	require.Zero(t, c.Queue())
}

// TestWalkInsAtTheRate: arrivals at the rate are all admitted at once.
func TestWalkInsAtTheRate(t *testing.T) {
	clk := newClock()
	c, err := New(Config{Rate: 100, Now: clk.now})
	require.NoError(t, err)
	for i := 0; i < 1000; i++ {
		require.True(t, c.Admit().Admitted, "arrival %d", i)
		clk.advance(10 * time.Millisecond)
	}
}

// TestUnclaimedSlotsExpire: a client told to come back that never does
// frees its slot after the grace.
func TestUnclaimedSlotsExpire(t *testing.T) {
	clk := newClock()
	c, err := New(Config{Rate: 10, Burst: 1, Now: clk.now})
	require.NoError(t, err)
	d := c.Admit()
	for d.Admitted {
		d = c.Admit()
	}
	require.Equal(t, 1, c.Queue())
	clk.advance(d.RetryAfter + DefaultClaimGrace + time.Millisecond)
	require.Zero(t, c.Queue())
}

// TestMaxWait: beyond MaxWait nothing is reserved and the wait is capped.
func TestMaxWait(t *testing.T) {
	clk := newClock()
	c, err := New(Config{Rate: 1, Burst: 1, MaxWait: 3 * time.Second, Now: clk.now})
	require.NoError(t, err)
	for i := 0; i < 10; i++ {
		c.Admit()
	}
	d := c.Admit()
	require.False(t, d.Admitted)
	require.Equal(t, 3*time.Second, d.RetryAfter)
	require.LessOrEqual(t, c.Queue(), 3)
}

// TestSpread: the delays of a drain start at RestartDelay, cover the
// window at the rate, one per slot.
func TestSpread(t *testing.T) {
	c, err := New(Config{Rate: 1000, RestartDelay: 4 * time.Second})
	require.NoError(t, err)
	d := c.Spread(3000, rand.New(rand.NewPCG(1, 2)))
	slices.Sort(d)
	require.GreaterOrEqual(t, d[0], 4*time.Second)
	require.Less(t, d[len(d)-1], 4*time.Second+c.Window(3000))
	for i, x := range d {
		slot := 4*time.Second + time.Duration(i)*time.Millisecond
		require.True(t, x >= slot && x < slot+time.Millisecond, "delay %d: %v not in its slot", i, x)
	}
	after, window := c.Hint(3000)
	require.Equal(t, 4*time.Second, after)
	require.Equal(t, 3*time.Second*5/4, window, "the admission window and a quarter")
}

func TestConfigInvalid(t *testing.T) {
	_, err := New(Config{Rate: -1})
	require.Error(t, err)
	_, err = New(Config{RestartDelay: -time.Second})
	require.Error(t, err)
}
