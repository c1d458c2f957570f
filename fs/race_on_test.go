//go:build race

package fs_test

// raceEnabled: the race detector slows every round trip down many times.
const raceEnabled = true
