//go:build !unix

package client

import "os"

// lockFile does nothing where flock is missing: one process per state file
// is then the app's responsibility.
func lockFile(*os.File) error { return nil }
