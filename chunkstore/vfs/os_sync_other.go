//go:build !linux

package vfs

// Sync is fsync(2).
func (f osFile) Sync() error { return f.f.Sync() }
