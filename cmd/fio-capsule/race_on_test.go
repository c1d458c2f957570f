//go:build race

package main

// raceEnabled: the race detector allocates on synchronization.
const raceEnabled = true
