package bench

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/google/uuid"

	"github.com/inboxd/inboxd/events"
	"github.com/inboxd/inboxd/fanout"
	"github.com/inboxd/inboxd/internal/testenv"
	"github.com/inboxd/inboxd/producer"
)

// searchWriteCost projects the same messages into three databases
// through the fanout: one as migrated, one whose messages table has lost
// the search column (and with it its index), and one that keeps the
// column but not the index. The column is computed and the index updated
// by the projection's own INSERT, so the differences are the search's
// cost to the write path, and which part of it is the index. Each round
// appends the messages with the fanout stopped and then times the fanout
// on the backlog, so that every batch is full (MaxPollRecords) in every
// database; the rounds alternate the order of the databases.
func searchWriteCost(ctx context.Context, env *Env, cfg SearchConfig, vocab []string) (SearchWrite, error) {
	pr := env.Progress
	res := SearchWrite{Messages: cfg.WriteMessages, Members: cfg.Members, BatchSize: cfg.MaxPollRecords}
	type side struct {
		name  string
		prep  string // what the database loses of the search
		pl    *pipeline
		convs []e2eConv
		runs  *[]SearchWriteRun
	}
	sides := []*side{
		{name: "with the search column and index", runs: &res.With},
		{name: "without them", prep: `ALTER TABLE messages DROP COLUMN search_vector`, runs: &res.Without},
		{name: "with the column, without the index", prep: `DROP INDEX messages_search`, runs: &res.ColumnOnly},
	}
	for i, s := range sides {
		pl, err := env.newPipeline(ctx, fmt.Sprintf("searchwrite%d", i), cfg.Partitions)
		if err != nil {
			return res, err
		}
		defer pl.Close()
		s.pl = pl
		if s.prep != "" {
			if _, err := pl.pool.Exec(ctx, s.prep); err != nil {
				return res, fmt.Errorf("%s: %w", s.prep, err)
			}
		}
		_, stop, err := pl.startFanout(ctx, env, fanout.Config{MaxPollRecords: cfg.MaxPollRecords})
		if err != nil {
			return res, err
		}
		s.convs, err = appendConversations(ctx, pl.prod, cfg.WriteConversations, cfg.Members)
		if err == nil {
			err = testenv.WaitCaughtUp(ctx, pl.pool, pl.prod, 5*time.Minute)
		}
		stop()
		if err != nil {
			return res, err
		}
		if _, err := pl.settle(ctx); err != nil {
			return res, err
		}
	}
	progressf(pr, "bench search: write cost: %d conversations of %d members created in each database", cfg.WriteConversations, cfg.Members)
	for round := 0; round < cfg.WriteRounds; round++ {
		order := slices.Clone(sides)
		if round%2 == 1 {
			slices.Reverse(order)
		}
		for _, s := range order {
			run, err := searchWriteRound(ctx, env, s.pl, s.convs, cfg, vocab, uint64(round)+1)
			if err != nil {
				return res, fmt.Errorf("%s, round %d: %w", s.name, round+1, err)
			}
			*s.runs = append(*s.runs, run)
			progressf(pr, "bench search: write cost, round %d, %s: %s msg/s of apply time, %s msg/s in all, %d batches, load average %.2f",
				round+1, s.name, num(div(float64(run.Messages), run.ApplySeconds)), num(div(float64(run.Messages), run.Seconds)), run.Batches, run.Load)
		}
	}
	return res, nil
}

// searchWriteRound appends cfg.WriteMessages messages (the text of seed,
// the same in both databases) with no fanout running, then runs one on
// the backlog until it has committed it all.
func searchWriteRound(ctx context.Context, env *Env, pl *pipeline, convs []e2eConv, cfg SearchConfig, vocab []string, seed uint64) (SearchWriteRun, error) {
	run := SearchWriteRun{Messages: cfg.WriteMessages}
	g := newTextGen(vocab, cfg.CJKShare, 1000+seed)
	errs := make(chan error, 1)
	for i := 0; i < cfg.WriteMessages; i++ {
		c := convs[i%len(convs)]
		e := events.New(events.MessageSent, c.ID, c.Members[i/len(convs)%len(c.Members)])
		e.MsgID = uuid.NewString()
		body := g.body()
		e.Body = &body
		pl.prod.AppendAsync(ctx, e, func(_ producer.Position, err error) {
			if err != nil {
				select {
				case errs <- err:
				default:
				}
			}
		})
	}
	if err := pl.prod.Flush(ctx); err != nil {
		return run, err
	}
	select {
	case err := <-errs:
		return run, fmt.Errorf("append: %w", err)
	default:
	}
	if _, err := pl.settle(ctx); err != nil {
		return run, err
	}
	t0 := time.Now()
	reg, stop, err := pl.startFanout(ctx, env, fanout.Config{MaxPollRecords: cfg.MaxPollRecords})
	if err != nil {
		return run, err
	}
	err = testenv.WaitCaughtUp(ctx, pl.pool, pl.prod, 30*time.Minute)
	run.Seconds = time.Since(t0).Seconds()
	run.Load = loadAverage()
	stop()
	if err != nil {
		return run, err
	}
	run.ApplySeconds, run.Batches = batchSeconds(reg)
	return run, nil
}
