//go:build race

package testenv

// raceEnabled: the tests run under the race detector, so the binaries they
// start are built with it too.
const raceEnabled = true
