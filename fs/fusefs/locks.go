package fusefs

import (
	"context"
	"sync"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// Byte-range (fcntl) and whole-file (flock) locks are kept by the mount,
// per inode, with the open file as the owner: two descriptors from two
// opens conflict, as open file description locks (F_OFD_SETLK) and flock
// do, and a file's locks go when it is released. The target has no lock
// operations, so locks exclude each other between processes of one
// mount only, not between mounts.

// lockTable holds an inode's locks.
type lockTable struct {
	mu      sync.Mutex // guards locks and changed
	locks   []heldLock
	changed chan struct{} // closed and replaced whenever a lock goes
}

type heldLock struct {
	owner *fileHandle
	flock bool // flock(2) lock, else a byte-range lock
	fuse.FileLock
}

func overlaps(a, b *fuse.FileLock) bool {
	return a.Start <= b.End && b.Start <= a.End
}

// conflict returns a lock that keeps owner from taking lk, or nil.
func (t *lockTable) conflict(owner *fileHandle, flock bool, lk *fuse.FileLock) *heldLock {
	for i := range t.locks {
		h := &t.locks[i]
		if h.owner == owner || h.flock != flock || !overlaps(&h.FileLock, lk) {
			continue
		}
		if h.Typ == syscall.F_WRLCK || lk.Typ == syscall.F_WRLCK {
			return h
		}
	}
	return nil
}

// set makes owner's locks over lk's range what lk says (F_UNLCK:
// none), splitting the locks it held there.
func (t *lockTable) set(owner *fileHandle, flock bool, lk *fuse.FileLock) {
	kept := t.locks[:0:0]
	released := false
	for _, h := range t.locks {
		if h.owner != owner || h.flock != flock || !overlaps(&h.FileLock, lk) {
			kept = append(kept, h)
			continue
		}
		released = true
		if h.Start < lk.Start {
			left := h
			left.End = lk.Start - 1
			kept = append(kept, left)
		}
		if h.End > lk.End {
			right := h
			right.Start = lk.End + 1
			kept = append(kept, right)
		}
	}
	if lk.Typ != syscall.F_UNLCK {
		kept = append(kept, heldLock{owner: owner, flock: flock, FileLock: *lk})
	}
	t.locks = kept
	if released {
		t.wake()
	}
}

// wake tells lock waiters that a lock went.
func (t *lockTable) wake() {
	if t.changed != nil {
		close(t.changed)
		t.changed = nil
	}
}

// releaseAll drops every lock owner holds.
func (t *lockTable) releaseAll(owner *fileHandle) {
	t.mu.Lock()
	defer t.mu.Unlock()
	kept := t.locks[:0]
	for _, h := range t.locks {
		if h.owner != owner {
			kept = append(kept, h)
		}
	}
	if len(kept) != len(t.locks) {
		clear(t.locks[len(kept):])
		t.locks = kept
		t.wake()
	}
}

var (
	_ = (fs.NodeGetlker)((*node)(nil))
	_ = (fs.NodeSetlker)((*node)(nil))
	_ = (fs.NodeSetlkwer)((*node)(nil))
)

func lockOwner(f fs.FileHandle) (*fileHandle, syscall.Errno) {
	fh, ok := f.(*fileHandle)
	if !ok {
		return nil, syscall.EBADF
	}
	return fh, 0
}

func (n *node) Getlk(ctx context.Context, f fs.FileHandle, owner uint64, lk *fuse.FileLock, flags uint32, out *fuse.FileLock) syscall.Errno {
	fh, e := lockOwner(f)
	if e != 0 {
		return e
	}
	t := &n.locks
	t.mu.Lock()
	defer t.mu.Unlock()
	if h := t.conflict(fh, flags&fuse.LK_FLOCK != 0, lk); h != nil {
		*out = h.FileLock
		return 0
	}
	*out = *lk
	out.Typ = syscall.F_UNLCK
	return 0
}

func (n *node) Setlk(ctx context.Context, f fs.FileHandle, owner uint64, lk *fuse.FileLock, flags uint32) syscall.Errno {
	return n.setLock(ctx, f, lk, flags, false)
}

func (n *node) Setlkw(ctx context.Context, f fs.FileHandle, owner uint64, lk *fuse.FileLock, flags uint32) syscall.Errno {
	return n.setLock(ctx, f, lk, flags, true)
}

// setLock takes or releases a lock. A blocking request waits until no
// lock conflicts, or until the kernel interrupts it (EINTR).
func (n *node) setLock(ctx context.Context, f fs.FileHandle, lk *fuse.FileLock, flags uint32, wait bool) syscall.Errno {
	fh, e := lockOwner(f)
	if e != 0 {
		return e
	}
	switch lk.Typ {
	case syscall.F_RDLCK, syscall.F_WRLCK, syscall.F_UNLCK:
	default:
		return syscall.EINVAL
	}
	flock := flags&fuse.LK_FLOCK != 0
	t := &n.locks
	for {
		t.mu.Lock()
		if lk.Typ == syscall.F_UNLCK || t.conflict(fh, flock, lk) == nil {
			t.set(fh, flock, lk)
			t.mu.Unlock()
			return 0
		}
		if !wait {
			t.mu.Unlock()
			return syscall.EAGAIN
		}
		if t.changed == nil {
			t.changed = make(chan struct{})
		}
		changed := t.changed
		t.mu.Unlock()
		select {
		case <-changed:
		case <-ctx.Done():
			return syscall.EINTR
		}
	}
}
