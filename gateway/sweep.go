package gateway

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// DefaultSweepInterval is how often a gateway removes the objects of
// expired and erased uploads (AttachmentsConfig.SweepInterval).
const DefaultSweepInterval = time.Minute

// The sweeper removes from the store what no message may point at: the
// uploads never attached past their expiry (the projection keeps only the
// attachments still claimed and open when it projects a message, under
// the same row lock, so an upload taken here is one no message will
// keep; the parts of one in parts are dropped too), and the uploads of
// deleted messages (erased by the projection).
// It marks them removing, deletes their objects, then their rows; a
// crash in between is taken up again by the next round. Gateways share
// the work: a row another gateway has locked is skipped.
const (
	sqlSweepTake = `UPDATE uploads SET state = 'removing', key = NULL
WHERE id IN (SELECT id FROM uploads
	WHERE state IN ('erased', 'removing') OR state = 'open' AND expires_at < now()
	ORDER BY expires_at LIMIT $1 FOR UPDATE SKIP LOCKED)
RETURNING id::text, object_key, COALESCE(multipart_id, '')`
	sqlSweepDone = `DELETE FROM uploads WHERE id = $1::uuid AND state = 'removing'`
)

// SweepUploads runs one round of the sweeper on every server and returns
// how many objects it removed.
func (g *Gateway) SweepUploads(ctx context.Context) (int, error) {
	st := g.cfg.Attachments.Store
	if st == nil {
		return 0, nil
	}
	total := 0
	for i, pool := range g.srv.Pools {
		for {
			var ids, objs, mps []string
			rows, err := pool.Query(ctx, sqlSweepTake, 100)
			if err != nil {
				return total, fmt.Errorf("sweep uploads of server %d: %w", i+1, err)
			}
			var id, obj, mp string
			if _, err := pgx.ForEachRow(rows, []any{&id, &obj, &mp}, func() error {
				ids, objs, mps = append(ids, id), append(objs, obj), append(mps, mp)
				return nil
			}); err != nil {
				return total, fmt.Errorf("sweep uploads of server %d: %w", i+1, err)
			}
			if len(ids) == 0 {
				break
			}
			for j := range ids {
				if mps[j] != "" {
					if err := st.AbortMultipart(ctx, objs[j], mps[j]); err != nil {
						return total, fmt.Errorf("sweep upload %s: %w", ids[j], err)
					}
				}
				if err := st.Delete(ctx, thumbnailObject(objs[j])); err != nil {
					return total, fmt.Errorf("sweep upload %s: %w", ids[j], err)
				}
				if err := st.Delete(ctx, objs[j]); err != nil {
					return total, fmt.Errorf("sweep upload %s: %w", ids[j], err)
				}
				if _, err := pool.Exec(ctx, sqlSweepDone, ids[j]); err != nil {
					return total, fmt.Errorf("sweep upload %s: %w", ids[j], err)
				}
				total++
				g.metrics.swept.Inc()
			}
		}
	}
	return total, nil
}

// runSweeper runs SweepUploads every interval until ctx ends.
func (g *Gateway) runSweeper(ctx context.Context) error {
	if g.cfg.Attachments.Store == nil {
		return nil
	}
	every(ctx, g.cfg.Attachments.SweepInterval, func() {
		if n, err := g.SweepUploads(ctx); err != nil && ctx.Err() == nil {
			g.log.Warn("sweeping uploads failed; trying again at the next round", "err", err)
		} else if n > 0 {
			g.log.Info("removed the objects of expired or erased uploads", "objects", n)
		}
	})
	return nil
}

// every runs round every interval until ctx ends: the background rounds
// of attachments (the sweeper, the thumbnails), each of which logs its own
// failure and is tried again at the next.
func every(ctx context.Context, interval time.Duration, round func()) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		round()
	}
}
