//go:build race

package target

const raceEnabled = true
