//go:build !(invariants || race)

package chunkstore

const invariants = false
