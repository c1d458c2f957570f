package vfs

import "sync"

// A Watcher tells cheaply that the root directories of some FSes are
// still as they were: that no entry was removed or renamed in them and
// that none of them was itself removed, renamed or unmounted. A flush
// asks it instead of looking each device's identity file up by path (a
// stat per device per flush), and looks up only the devices it names as
// changed.
//
// On Linux, one inotify instance (inotify(7)) watches every root added,
// and Quiet is one read(2) that finds nothing. inotify queues an event
// before the unlink, rename or rmdir that caused it returns, so a device
// directory removed before Quiet is called is never reported quiet. It
// does not see a file system mounted over a root; the store's
// checkpoints, which look every device up by path, still do. Only OSFS
// roots can be watched: any other FS, and every FS where inotify is
// missing or out of instances, is never quiet, so the caller looks it up
// every time.
type Watcher struct {
	mu   sync.Mutex
	impl watchImpl
	// live: the ids with a watch; changed: those with an event since the
	// last Quiet.
	live, changed uint64
}

// NewWatcher returns a Watcher with no roots. It never fails: without
// inotify, no root is ever quiet.
func NewWatcher() *Watcher {
	w := &Watcher{}
	w.impl.init()
	return w
}

// Add watches the root of fsys under id (0 to 63), replacing what id
// watched before. It reports whether the root is watched; when it is not,
// id is never quiet. The first Quiet after Add reports id as changed, so
// that the caller looks the root up once more.
func (w *Watcher) Add(id int, fsys FS) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	bit := uint64(1) << uint(id)
	w.impl.remove(id)
	w.live &^= bit
	w.changed |= bit
	o, ok := fsys.(*OSFS)
	if !ok || !w.impl.add(id, o.root) {
		return false
	}
	w.live |= bit
	return true
}

// Quiet returns the ids whose roots are watched and had no event since
// the last call to Quiet (or since Add). An id whose root was itself
// removed, renamed or unmounted is never quiet again until it is added
// anew.
func (w *Watcher) Quiet() uint64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	changed, gone, overflow := w.impl.drain()
	w.live &^= gone
	w.changed |= changed | gone
	if overflow {
		w.changed = ^uint64(0)
	}
	q := w.live &^ w.changed
	w.changed = 0
	return q
}

// Close releases the watches. A closed Watcher is never quiet.
func (w *Watcher) Close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.live = 0
	return w.impl.close()
}
