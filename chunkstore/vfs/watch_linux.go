package vfs

import (
	"encoding/binary"

	"golang.org/x/sys/unix"
)

// watchMask: what changes a root's entries or the root itself.
// IN_UNMOUNT and IN_IGNORED come without asking.
const watchMask = unix.IN_DELETE | unix.IN_MOVED_FROM | unix.IN_DELETE_SELF | unix.IN_MOVE_SELF | unix.IN_ONLYDIR

// watchImpl is an inotify instance; fd < 0 when there is none.
type watchImpl struct {
	fd  int
	wds map[int32]uint64 // watch descriptor → ids
	ids [64]int32        // id → watch descriptor, 0: none (descriptors start at 1)
	buf [4096]byte
}

func (w *watchImpl) init() {
	w.fd = -1
	fd, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
	if err != nil {
		return
	}
	w.fd, w.wds = fd, map[int32]uint64{}
}

func (w *watchImpl) add(id int, root string) bool {
	if w.fd < 0 {
		return false
	}
	wd, err := unix.InotifyAddWatch(w.fd, root, watchMask)
	if err != nil {
		return false
	}
	w.ids[id] = int32(wd)
	w.wds[int32(wd)] |= 1 << uint(id)
	return true
}

func (w *watchImpl) remove(id int) {
	wd := w.ids[id]
	if wd == 0 {
		return
	}
	w.ids[id] = 0
	if w.wds[wd] &^= 1 << uint(id); w.wds[wd] == 0 {
		delete(w.wds, wd)
		_, _ = unix.InotifyRmWatch(w.fd, uint32(wd))
	}
}

// drain reads every queued event: the ids with an event, those whose
// watch ended, and whether the queue overflowed. A failed read counts as
// an overflow.
func (w *watchImpl) drain() (changed, gone uint64, overflow bool) {
	if w.fd < 0 {
		return 0, 0, false
	}
	for {
		n, err := unix.Read(w.fd, w.buf[:])
		if err == unix.EINTR {
			continue
		}
		if err == unix.EAGAIN {
			return changed, gone, overflow
		}
		if err != nil || n < unix.SizeofInotifyEvent {
			return changed, gone, true
		}
		for b := w.buf[:n]; len(b) >= unix.SizeofInotifyEvent; {
			// struct inotify_event: wd, mask, cookie, len, name[len].
			wd := int32(binary.NativeEndian.Uint32(b[0:]))
			mask := binary.NativeEndian.Uint32(b[4:])
			size := unix.SizeofInotifyEvent + int(binary.NativeEndian.Uint32(b[12:]))
			if size > len(b) {
				return changed, gone, true
			}
			b = b[size:]
			if mask&unix.IN_Q_OVERFLOW != 0 {
				overflow = true
				continue
			}
			ids := w.wds[wd]
			// The root itself moved, went or was unmounted: what is at
			// its path now is not what is watched.
			if mask&(unix.IN_IGNORED|unix.IN_MOVE_SELF|unix.IN_DELETE_SELF|unix.IN_UNMOUNT) != 0 {
				gone |= ids
				for id := range w.ids {
					if ids&(1<<uint(id)) != 0 {
						w.remove(id)
					}
				}
				continue
			}
			changed |= ids
		}
	}
}

func (w *watchImpl) close() error {
	if w.fd < 0 {
		return nil
	}
	err := unix.Close(w.fd)
	w.fd, w.wds, w.ids = -1, nil, [64]int32{}
	return err
}
