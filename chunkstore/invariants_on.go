//go:build invariants || race

package chunkstore

// invariants turns on expensive self-checks that panic on a broken
// invariant. Builds with -tags invariants, and -race builds, have them.
const invariants = true
