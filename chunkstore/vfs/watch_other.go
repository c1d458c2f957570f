//go:build !linux

package vfs

// watchImpl watches nothing where there is no inotify: no root is quiet.
type watchImpl struct{}

func (watchImpl) init()                                        {}
func (watchImpl) add(int, string) bool                         { return false }
func (watchImpl) remove(int)                                   {}
func (watchImpl) drain() (changed, gone uint64, overflow bool) { return 0, 0, false }
func (watchImpl) close() error                                 { return nil }
