package mapdbbench

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// IOCounters are byte counters. From /proc/self/io (all the process's
// threads, so pebble's background flushes and compactions included),
// Read and Write are read_bytes and write_bytes, what the process caused
// to be read from and written to the storage layer, and WChar is wchar,
// the bytes it passed to write system calls. From a block device's
// stat, Read and Write are the bytes it read and wrote.
type IOCounters struct{ Read, Write, WChar int64 }

// ReadIO reads /proc/self/io.
func ReadIO() (IOCounters, error) {
	b, err := os.ReadFile("/proc/self/io")
	if err != nil {
		return IOCounters{}, err
	}
	var c IOCounters
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		name, val, ok := bytes.Cut(sc.Bytes(), []byte(": "))
		if !ok {
			continue
		}
		n, err := strconv.ParseInt(string(val), 10, 64)
		if err != nil {
			return IOCounters{}, fmt.Errorf("/proc/self/io: %s: %w", name, err)
		}
		switch string(name) {
		case "read_bytes":
			c.Read = n
		case "write_bytes":
			c.Write = n
		case "wchar":
			c.WChar = n
		}
	}
	return c, nil
}

// CPUTime is the process's user plus system CPU time (getrusage).
func CPUTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// FSType names the file system dir is on.
func FSType(dir string) string {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return "unknown (" + err.Error() + ")"
	}
	switch st.Type {
	case unix.EXT4_SUPER_MAGIC:
		return "ext4"
	case unix.XFS_SUPER_MAGIC:
		return "xfs"
	case unix.BTRFS_SUPER_MAGIC:
		return "btrfs"
	case unix.TMPFS_MAGIC:
		return "tmpfs"
	case unix.OVERLAYFS_SUPER_MAGIC:
		return "overlayfs"
	}
	return fmt.Sprintf("0x%x", st.Type)
}

// dropFile syncs the file at path and asks the kernel to drop its pages
// from the page cache, so the next read of it comes from the disk.
func dropFile(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := f.Sync(); err != nil {
		return err
	}
	return unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED)
}

// DiskCounters are the bytes read from and written to the block device
// that holds dir since boot (/sys/dev/block/MAJ:MIN/stat): what really
// reached the disk, file system journal included, from every process.
func DiskCounters(dir string) (IOCounters, error) {
	var st unix.Stat_t
	if err := unix.Stat(dir, &st); err != nil {
		return IOCounters{}, err
	}
	p := fmt.Sprintf("/sys/dev/block/%d:%d/stat", unix.Major(st.Dev), unix.Minor(st.Dev))
	b, err := os.ReadFile(p)
	if err != nil {
		return IOCounters{}, err
	}
	f := strings.Fields(string(b))
	if len(f) < 7 {
		return IOCounters{}, fmt.Errorf("%s: %d fields", p, len(f))
	}
	rd, err1 := strconv.ParseInt(f[2], 10, 64)
	wr, err2 := strconv.ParseInt(f[6], 10, 64)
	if err1 != nil || err2 != nil {
		return IOCounters{}, fmt.Errorf("%s: %q", p, b)
	}
	return IOCounters{Read: rd * 512, Write: wr * 512}, nil
}
