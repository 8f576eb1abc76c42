// Package replay rebuilds the projections from the log. It reads every
// partition from offset 0 to the end offsets taken at its start, applies the
// records with the projector into a shadow schema (bulk batches, no
// synchronous commit: the shadow is disposable until it is swapped in), and
// then either swaps the shadow in as the new generation under a new epoch,
// or (Verify) compares it with the live projections without touching them.
//
// Replay refuses to run while a fanout holds projection.LockFanout: a replay
// is the only writer of the projections while it runs. A replay killed in
// the middle leaves the live projections as they were and an abandoned
// shadow schema that the next run drops and rebuilds.
package replay
