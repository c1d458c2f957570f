//go:build race

package conformance

// raceEnabled reports whether the binary was built with -race.
const raceEnabled = true
