package admin

import "golang.org/x/sys/unix"

// DiskSpace returns the size and the free bytes of the file system that
// holds dir, or zeros.
func DiskSpace(dir string) (total, free uint64) {
	var st unix.Statfs_t
	if unix.Statfs(dir, &st) != nil {
		return 0, 0
	}
	return st.Blocks * uint64(st.Bsize), st.Bavail * uint64(st.Bsize)
}
