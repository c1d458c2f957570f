//go:build race

package server

// raceEnabled: the race detector allocates and slows everything down.
const raceEnabled = true
