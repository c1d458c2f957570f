//go:build !amd64 || purego

package crc32c

// hasFolding is false: hash/crc32 does all the work.
const hasFolding = false

func fold(crc uint32, p []byte) uint32 { panic("crc32c: no folding path") }
