package chunkstore

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/google/uuid"
	bolt "go.etcd.io/bbolt"

	"github.com/capsule-storage/capsule/chunkstore/vfs"
)

// File names in a device directory.
const (
	identityFile = "identity" // identity record, written once
	shardFile    = "shards"   // shard slots: slot p at p × (4 KiB + unit)
	metaFile     = "meta.db"  // bbolt replica of the metadata (a host file)
	// journalFile (journal.go): the ring of flush records
)

// DeviceFiles returns the names of the files a device directory of a
// store may hold: its own files, and the temporary name its identity
// record is written under.
func DeviceFiles() []string {
	return []string{identityFile, identityFile + ".tmp", shardFile, metaFile, journalFile}
}

// DeviceState says how the store uses a device.
type DeviceState int32

const (
	// DeviceHealthy: read and written.
	DeviceHealthy DeviceState = iota
	// DeviceRebuilding: a replaced device being rebuilt. Written, and read
	// only when the other devices cannot serve a stripe.
	DeviceRebuilding
	// DeviceMissing: not usable since Open (absent, empty, unreadable).
	DeviceMissing
	// DeviceFailed: failed an I/O since Open; out of use until the store is
	// reopened or the device rebuilt.
	DeviceFailed
)

func (s DeviceState) String() string {
	switch s {
	case DeviceHealthy:
		return "healthy"
	case DeviceRebuilding:
		return "rebuilding"
	case DeviceMissing:
		return "missing"
	case DeviceFailed:
		return "failed"
	}
	return fmt.Sprintf("DeviceState(%d)", int32(s))
}

// DeviceInfo describes one device of an open store.
type DeviceInfo struct {
	Pos   int
	Name  string    // the device's FS (its directory)
	ID    uuid.UUID // zero when the device has no identity
	State DeviceState
	Err   error // why it is missing or failed
	// I/O since Open: read and write calls (a vectored call counts
	// once), those that failed, and the bytes they moved (header regions
	// included).
	Reads, Writes, Errors int64
	ReadBytes, WriteBytes int64
}

// device is one position of the store.
type device struct {
	pos   int
	state atomic.Int32 // DeviceState

	// files holds what the device has open; replaced whole (by Open and
	// Rebuild) before state moves to a usable value, so a reader that saw
	// a usable state sees the files.
	files atomic.Pointer[devFiles]

	// mu guards err. Leaf lock.
	mu  sync.Mutex
	err error

	reads, writes, errs   atomic.Int64
	readBytes, writeBytes atomic.Int64
	// unsynced: the shard file was written since its last fsync (a flush
	// syncs only such devices); junsynced: the journal file.
	unsynced, junsynced atomic.Bool
}

// devFiles are a device's open handles.
type devFiles struct {
	fs   vfs.FS
	id   identity
	data vfs.File // nil when the device is missing
	db   metaDB   // nil when the device is missing
	// alloc tracks the shard file's blocks where flushes can be shared
	// (flush.go); nil: every flush fdatasyncs the file.
	alloc *allocTrack
	// jnl is the journal file (journal.go; nil: none), jwhole says it has
	// its size and every block, jalloc lets it share its disk's flushes,
	// and ring is where its records are (guarded by flushMu).
	jnl    vfs.File
	jwhole bool
	jalloc *allocTrack
	ring   jring
}

// close closes f's files.
func (f *devFiles) close() {
	if f.data != nil {
		_ = f.data.Close()
	}
	if f.jnl != nil {
		_ = f.jnl.Close()
	}
	if f.db != nil {
		_ = f.db.close()
	}
}

func (d *device) getState() DeviceState { return DeviceState(d.state.Load()) }

// readable: a first choice for reads.
func (d *device) readable() bool { return d.getState() == DeviceHealthy }

// writable: receives new shards.
func (d *device) writable() bool {
	st := d.getState()
	return st == DeviceHealthy || st == DeviceRebuilding
}

func (d *device) fsys() vfs.FS {
	if f := d.files.Load(); f != nil {
		return f.fs
	}
	return nil
}

func (d *device) name() string {
	if f := d.fsys(); f != nil {
		return f.String()
	}
	return "?"
}

func (d *device) setErr(err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.err = err
}

func (d *device) getErr() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.err
}

// fail takes a healthy or rebuilding device out of use after an I/O
// error. It reports whether this call did it.
func (d *device) fail(err error, log *slog.Logger) bool {
	for {
		st := d.getState()
		if st != DeviceHealthy && st != DeviceRebuilding {
			return false
		}
		if d.state.CompareAndSwap(int32(st), int32(DeviceFailed)) {
			d.setErr(err)
			log.Error("chunkstore: device failed; continuing degraded", "pos", d.pos, "device", d.name(), "err", err)
			return true
		}
	}
}

func (d *device) devErr(err error) *DeviceError {
	return &DeviceError{Pos: d.pos, Device: d.name(), Err: err}
}

// readIdentity reads and decodes a device's identity record, classifying
// what it finds: ErrDeviceMissing (no directory, unreadable),
// ErrDeviceEmpty (directory without identity), or corruption.
func readIdentity(fsys vfs.FS) (identity, error) {
	b, err := vfs.ReadFile(fsys, identityFile)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			if _, serr := fsys.Stat("."); serr == nil {
				return identity{}, ErrDeviceEmpty
			}
		}
		return identity{}, fmt.Errorf("%w: %w", ErrDeviceMissing, err)
	}
	id, err := decodeIdentity(b)
	if err != nil {
		return identity{}, fmt.Errorf("%w: identity record: %w", ErrDeviceMissing, err)
	}
	return id, nil
}

// boltMmapSize is the address space a metadata replica maps at open.
// bbolt maps its file again each time the file outgrows the mapping
// (doubling from 32 KiB), and each time it first copies every node the
// writing transaction holds out of the old mapping: the checkpoints of
// a new store that filled with file-system metadata spent a third of
// their time doing that. The space is only reserved: pages past the end
// of the file are never touched.
const boltMmapSize = 256 << 20

// openBolt opens a metadata replica at the device's host path.
func openBolt(fsys vfs.FS) (*bolt.DB, error) {
	p, err := fsys.HostPath(metaFile)
	if err != nil {
		return nil, err
	}
	db, err := bolt.Open(p, 0o600, &bolt.Options{Timeout: boltLockTimeout, NoFreelistSync: true, FreelistType: bolt.FreelistMapType,
		InitialMmapSize: boltMmapSize})
	if err != nil {
		if errors.Is(err, syscall.EWOULDBLOCK) || errors.Is(err, errBoltTimeout) {
			return nil, fmt.Errorf("%w: %s: %v", ErrDeviceBusy, p, err)
		}
		return nil, err
	}
	return db, nil
}

// formatDevice writes the files of a new or replaced device: the shard
// file, the journal (jsize bytes; none when 0), the metadata replica
// (filled by fill), and last the identity record, so a device with an
// identity always has its other files.
func formatDevice(fsys vfs.FS, id identity, jsize int64, metaLog bool, fill func(metaDB) error) (*devFiles, error) {
	if err := fsys.MkdirAll("."); err != nil {
		return nil, err
	}
	data, err := fsys.OpenFile(shardFile, os.O_RDWR|os.O_CREATE|os.O_TRUNC)
	if err != nil {
		return nil, err
	}
	fail := func(err error) (*devFiles, error) {
		_ = data.Close()
		return nil, err
	}
	if err := data.Sync(); err != nil {
		return fail(err)
	}
	var jnl vfs.File
	if jsize > 0 {
		if jnl, err = createJournal(fsys, jsize); err != nil {
			return fail(err)
		}
	}
	fail = func(err error) (*devFiles, error) {
		_ = data.Close()
		if jnl != nil {
			_ = jnl.Close()
		}
		return nil, err
	}
	db, err := openMeta(fsys, metaLog)
	if err != nil {
		return fail(err)
	}
	if err := fill(db); err != nil {
		_ = db.close()
		return fail(err)
	}
	// WriteFile syncs the directory after its rename, which also makes
	// the entries of the shard file and the journal durable.
	if err := vfs.WriteFile(fsys, identityFile, id.encode()); err != nil {
		_ = db.close()
		return fail(err)
	}
	f := &devFiles{fs: fsys, id: id, data: data, db: db, jnl: jnl, jwhole: jnl != nil}
	if jnl != nil {
		trackJournal(f, jsize)
	}
	return f, nil
}
