package fusefs

import (
	"context"
	"fmt"
	"log"
	"os"
	"runtime"
	"strconv"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
)

// MaxWrite is the largest READ or WRITE request the kernel sends: 1 MiB,
// the kernel's own limit.
const MaxWrite = 1 << 20

// Options configure a mount. The zero value is usable: see each field
// for its default.
type Options struct {
	// AttrTimeout is how long the kernel may cache attributes. Zero
	// asks the target on every stat.
	AttrTimeout time.Duration
	// EntryTimeout is how long the kernel may cache a name's inode.
	EntryTimeout time.Duration

	// MaxReadAhead is the kernel's read-ahead window for buffered reads,
	// in bytes (0: DefaultMaxReadAhead). FUSE's INIT can ask for at most
	// 128 KiB; a larger window is set through the mount's backing device
	// in sysfs (/sys/class/bdi/MAJ:MIN/read_ahead_kb), which needs root,
	// and stays at 128 KiB where that fails.
	MaxReadAhead int
	// Readers is how many goroutines may wait for requests on the FUSE
	// device at once (go-fuse's MaxReaders, which it derives from
	// GOMAXPROCS when the server starts; 0: go-fuse's choice).
	Readers int
	// Splice lets go-fuse splice READ replies through a pipe. With 1 MiB
	// requests a reply plus its header overflows the 1 MiB pipe limit
	// and go-fuse copies anyway, so it is off unless asked for.
	Splice bool

	// FsName names the source in /proc/mounts (default "capsule").
	FsName string
	// AllowOther lets users other than the mounter use the mount. A
	// mount made by root always does (doc.go, "Access").
	AllowOther bool
	// DefaultPermissions adds the kernel's own permission checks
	// (default_permissions) to the target's, which decide either way;
	// see doc.go, "Access", for what that changes.
	DefaultPermissions bool
	// WriteBehind buffers small writes in the mount instead of
	// answering every WRITE only once the target has its bytes (doc.go,
	// "Writes"), when WritebackCache is off.
	WriteBehind bool
	// WritebackCache turns the kernel's writeback cache on: written
	// pages stay dirty in the kernel and go to the target in large
	// WRITEs when it writes them back, at the latest at close, fsync
	// or unmount (doc.go, "Writes"; writeback.go says how close-to-open
	// consistency holds across mounts). WriteBehind is ignored with it.
	WritebackCache bool
	// Debug logs every FUSE request and reply.
	Debug bool
	// Logger receives go-fuse's diagnostics (default: log.Default()).
	Logger *log.Logger
}

// DefaultMaxReadAhead is the read-ahead window when Options.MaxReadAhead
// is zero; see BENCHMARKS.md (R6) for how it was chosen.
const DefaultMaxReadAhead = 1 << 20

// Mount mounts the file system c serves at mountpoint and starts serving
// it. It returns once the kernel has answered INIT and a stat of the
// mountpoint has gone through the mount, so the mount is live. The
// caller unmounts with Unmount and waits for the end with Wait (which
// also returns after `fusermount3 -u`).
func Mount(ctx context.Context, c Client, mountpoint string, o Options) (*fuse.Server, error) {
	server, _, err := mount(ctx, c, mountpoint, o)
	return server, err
}

// mount is Mount, also returning the mount's state for tests.
func mount(ctx context.Context, c Client, mountpoint string, o Options) (*fuse.Server, *fileSystem, error) {
	root, err := c.GetAttr(ctx, RootIno)
	if err != nil {
		return nil, nil, fmt.Errorf("fusefs: the root directory: %w", err)
	}
	if root.Mode&syscall.S_IFMT != syscall.S_IFDIR {
		return nil, nil, fmt.Errorf("fusefs: the root inode is not a directory (mode %#o)", root.Mode)
	}
	attr, entry := o.AttrTimeout, o.EntryTimeout
	var zero time.Duration
	readAhead := o.MaxReadAhead
	if readAhead == 0 {
		readAhead = DefaultMaxReadAhead
	}
	name := o.FsName
	if name == "" {
		name = "capsule"
	}
	allowOther := o.AllowOther || os.Geteuid() == 0
	mopts := []string{"nodev"}
	if o.DefaultPermissions {
		mopts = append(mopts, "default_permissions")
	}
	caps := uint64(fuse.CAP_HANDLE_KILLPRIV_V2)
	if o.WritebackCache {
		caps |= fuse.CAP_WRITEBACK_CACHE
	}
	opts := &fs.Options{
		MountOptions: fuse.MountOptions{
			AllowOther:    allowOther,
			Options:       mopts,
			MaxWrite:      MaxWrite,
			MaxReadAhead:  readAhead,
			FsName:        name,
			Name:          "capsule",
			DisableSplice: !o.Splice,
			EnableLocks:   true,
			// The server drops set-ID bits and capabilities on write,
			// truncate and chown: the kernel need not GETXATTR
			// security.capability before every write to find out.
			ExtraCapabilities: caps,
			Debug:             o.Debug,
			Logger:            o.Logger,
		},
		AttrTimeout: &attr,
		// No EntryTimeout: every entry gets its own (newChild).
		NegativeTimeout: &zero,
		NullPermissions: true,
		RootStableAttr:  &fs.StableAttr{Ino: uint64(RootIno), Gen: root.Gen},
		Logger:          o.Logger,
	}
	fsys := &fileSystem{c: c, entryTimeout: entry, guardedEntries: allowOther && !o.DefaultPermissions, writeBehind: o.WriteBehind && !o.WritebackCache,
		writeback: o.WritebackCache, attrTimeout: attr}
	n := &node{fsys: fsys, ino: RootIno}
	n.mode.Store(root.Mode)
	if o.Readers > 0 {
		prev := runtime.GOMAXPROCS(o.Readers)
		defer runtime.GOMAXPROCS(prev)
	}
	server, err := fs.Mount(mountpoint, n, opts)
	if err != nil {
		return nil, nil, fmt.Errorf("fusefs: mount %s: %w", mountpoint, err)
	}
	var st syscall.Stat_t
	if err := syscall.Stat(mountpoint, &st); err != nil {
		server.Unmount()
		return nil, nil, fmt.Errorf("fusefs: %s is mounted but does not answer: %w", mountpoint, err)
	}
	if readAhead > kernelReadAhead {
		if err := setReadAhead(st.Dev, readAhead); err != nil && o.Logger != nil {
			o.Logger.Printf("fusefs: read-ahead stays at %d KiB: %v", kernelReadAhead>>10, err)
		}
	}
	return server, fsys, nil
}

// kernelReadAhead is the most read-ahead a FUSE mount asks for at INIT
// can get: the kernel caps it at its default window.
const kernelReadAhead = 128 << 10

// setReadAhead raises the read-ahead window of the mount's backing
// device (dev, st_dev of the mountpoint) beyond what FUSE's INIT can ask
// for, through sysfs; this needs root.
func setReadAhead(dev uint64, bytes int) error {
	p := fmt.Sprintf("/sys/class/bdi/%d:%d/read_ahead_kb", unix.Major(dev), unix.Minor(dev))
	return os.WriteFile(p, []byte(strconv.Itoa(bytes>>10)), 0o644)
}
