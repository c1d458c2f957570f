//go:build !linux

package admin

// DiskSpace is not measured here.
func DiskSpace(string) (total, free uint64) { return 0, 0 }
