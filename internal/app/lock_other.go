//go:build !unix

package app

import "os"

// lockDataDir is a no-op where flock does not exist.
func lockDataDir(string) (*os.File, error) { return nil, nil }
