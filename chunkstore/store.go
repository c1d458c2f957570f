package chunkstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"math/bits"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	"github.com/capsule-storage/capsule/chunkstore/vfs"
)

// DefaultStripeUnit is the shard size of a full stripe (see doc.go for the
// measurement behind it).
const DefaultStripeUnit = 64 << 10

// DefaultAutoCommit is how many released slots wait for a commit before
// the store commits in the background (WithAutoCommit).
const DefaultAutoCommit = 4096

// genReserve: generations are reserved in blocks this large, committed
// ahead of use, so a crash never lets one be handed out twice.
const genReserve = 1 << 40

// Option configures Create and Open.
type Option func(*options)

type options struct {
	geo     Geometry
	geoSet  bool
	unit    int
	unitSet bool
	commit  int // WithAutoCommit
	logger  *slog.Logger

	overprov    float64
	overprovSet bool
	idleProv    float64       // WithIdleCompaction
	idleAfter   time.Duration // WithIdleCompaction; 0: never
	journal     int64         // WithJournalSize
	metaLog     bool          // WithMetaLog
	wcache      int64         // WithWriteCache
	wcExpire    time.Duration // how long a page may wait in the write cache
}

// WithMetaLog keeps the metadata replicas in the log format (meta.log:
// metalog.go) on every device, even those with a host path. Devices with
// none (a remote device) use it anyway. A store keeps the format it was
// created with: Open must be given the same option.
func WithMetaLog() Option { return func(o *options) { o.metaLog = true } }

// WithGeometry sets K+M. Create uses it (default 4+2); Open checks it
// against the store and fails with ErrGeometryMismatch if it differs.
func WithGeometry(g Geometry) Option { return func(o *options) { o.geo, o.geoSet = g, true } }

// WithStripeUnit sets the shard size of a full stripe in bytes: a multiple
// of 4 KiB from 4 KiB to 1 MiB (default 64 KiB). A full stripe holds K
// units of data. Open checks it like WithGeometry.
func WithStripeUnit(n int) Option { return func(o *options) { o.unit, o.unitSet = n, true } }

// WithAutoCommit sets how many slots, released by overwrites, discards
// and chunk deletes, may wait for a commit before the store commits in the
// background (default DefaultAutoCommit; 0 leaves it to Sync). A released
// slot is reused only after a commit (doc.go, "Writes"), so without one a
// host that overwrites and never flushes grows the shard files without
// bound.
func WithAutoCommit(slots int) Option { return func(o *options) { o.commit = slots } }

// WithLogger sets where the store reports device failures, repairs and the
// SIMD path it found. The default discards.
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.logger = l } }

func buildOptions(opts []Option) (options, error) {
	o := options{geo: DefaultGeometry, unit: DefaultStripeUnit, commit: DefaultAutoCommit, overprov: DefaultOverProvision,
		idleProv: DefaultIdleOverProvision, idleAfter: DefaultIdleAfter, journal: DefaultJournalSize, wcExpire: DefaultWriteCacheExpire}
	for _, f := range opts {
		f(&o)
	}
	if o.logger == nil {
		o.logger = slog.New(slog.DiscardHandler)
	}
	if err := o.geo.Validate(); err != nil {
		return o, err
	}
	if err := validUnit(o.unit); err != nil {
		return o, err
	}
	if o.commit < 0 {
		return o, fmt.Errorf("%w: auto-commit after %d slots", ErrInvalidOption, o.commit)
	}
	if !(o.overprov >= 0.05 && o.overprov <= 16) {
		return o, fmt.Errorf("%w: over-provisioning %g: want 0.05 to 16", ErrInvalidOption, o.overprov)
	}
	if !(o.idleProv >= 0.05 && o.idleProv <= 16) || o.idleAfter < 0 {
		return o, fmt.Errorf("%w: idle compaction to %g after %v: want 0.05 to 16, after 0 or more", ErrInvalidOption, o.idleProv, o.idleAfter)
	}
	if err := validJournalSize(o.journal); err != nil {
		return o, err
	}
	if o.wcache < 0 {
		return o, fmt.Errorf("%w: write cache of %d bytes", ErrInvalidOption, o.wcache)
	}
	return o, nil
}

// Store is an erasure-coded store on K+M devices. It holds volumes (block
// devices) and chunks (objects). All methods are safe for concurrent use.
type Store struct {
	id       uuid.UUID
	geo      Geometry
	n        int // K+M
	unit     int
	slotSize int64
	codec    *codec
	golden   [32]byte
	log      *slog.Logger
	opts     options
	devs     []*device
	created  int64

	alloc allocator
	gen   atomic.Uint64 // last generation handed out
	owner atomic.Uint64 // next owner ID

	// commitMu serialises commits, volume creation and deletion, and the
	// device table. Lock order: commitMu, then a Volume's or chunk's
	// stripe lock, then volMu / Volume.mu / chunkTable.mu, then leaf
	// locks (allocator, repair queue, device).
	commitMu sync.Mutex
	seq      uint64               // last committed Seq; guarded by commitMu
	genHigh  uint64               // committed generation reservation; guarded by commitMu
	devRecs  map[int]deviceRecord // device table; guarded by commitMu
	devDirty bool                 // device table changed; guarded by commitMu

	// volMu guards vols and volByOwner.
	volMu      sync.RWMutex
	vols       map[string]*Volume
	volByOwner map[uint64]*Volume

	chunks chunkTable
	repair repairQueue
	// wpool holds the volumes' write caches (wcache.go); nil without
	// WithWriteCache. The destager writes them out in the background: it
	// is kicked by wcKick and closes wcDone when it returns.
	wpool  *wpool
	wcKick chan struct{}
	wcDone chan struct{}
	stats  counters
	bufs   bufferPool
	hdrs   hdrCache // shard headers reads decoded (hdrcache.go)

	// lmu guards the log (log.go): the open stripe, the stripes being
	// written, the slot table, every owner's map, the reservation and the
	// counters below. It is held for map operations and memory copies,
	// never across device I/O. Taken after flushMu.
	lmu         sync.Mutex
	lcond       *sync.Cond // on lmu: a stripe was written, a checkpoint reserved slots
	owners      map[uint64]*ownerMap
	slots       []slotInfo // by slot
	open        *logStripe
	unwritten   map[uint64]*logStripe // sealed and being written, by seq
	failed      map[uint64]*logStripe // sealed, the write failed, by seq
	inflight    int
	logQ        []*logStripe // sealed, waiting for a log writer (logWriter)
	logWriters  int          // logWriter goroutines running
	nextSeq     uint64       // seq of the newest stripe opened
	sealed      uint64       // seq of the newest stripe sealed
	resv        []uint64     // reserved slots, the next one first
	resvSize    int          // how many a checkpoint reserves
	resvHead    int          // how many of them the log may use while the next checkpoint is written
	pops        uint64       // slots taken from the reservation since Open
	resvLimit   uint64       // pops the last committed reservation covers
	ckptErr     error        // the last checkpoint's failure, nil after one completes
	ckptFails   uint64       // checkpoints failed, for writers waiting for room
	dirtySlots  map[uint64]struct{}
	unsynced    []uint64 // slots written since the last fsync of every device
	liveTotal   int64    // sectors the maps point at
	dataSlots   int64    // slots holding a stripe (or the open one)
	dataCap     int64    // sectors those stripes can hold (capOf; the open one counts full)
	ckptNeeded  bool     // a change the roll-forward cannot redo (unmap, chunk record) waits for a checkpoint
	ckptBusy    bool     // a checkpoint in flight carries such changes (it took ckptNeeded)
	shortCold   int      // short stripes sealed into slots without blocks since the last checkpoint's snapshot
	maxRuns     int
	scratch     []pageRun
	runPool     [][]sumRun
	cleaned     int64             // sectors the cleaner moved
	idleCleaned int64             // of those, sectors moved by idle passes
	hostSecs    int64             // sectors written by callers
	hostReads   int64             // reads by callers (the cleaner's idle time is time without either)
	wepoch      uint64            // counts callers' appends: a flush makes durable every write up to the epoch it saw
	opening     bool              // Open is writing the journal's records to the log: no cleaner to wait for
	trimWanted  bool              // an idle pass is done: the next checkpoint trims (commit.go)
	spaceShort  bool              // a stripe write met ENOSPC: the cleaner compacts at once (cleaner.go)
	punchWanted bool              // that pass is done: the next checkpoint, done or failed, punches (commit.go)
	records     map[string][]byte // staged records (records.go), for the next checkpoint

	// gate: device reads of mapped data and repairs hold it shared from
	// before they leave lmu until they are done; freeing slots holds it
	// exclusively, so no slot is reused under a reader.
	gate sync.RWMutex
	// flushMu serialises log flushes (group commit) and checkpoints' device
	// syncs. Taken after commitMu, before lmu.
	flushMu sync.Mutex
	// durable is the write epoch (wepoch) through which every write is
	// durable; guarded by flushMu.
	durable uint64
	// The journal (journal.go; each device's file is opts.journal bytes,
	// 0: none), guarded by flushMu: the last record's seq, the generation
	// below which records are dead, and the record being written.
	jseq  uint64
	jdead uint64
	jw    jwrite

	// watch tells a flush which devices' directories are as they were
	// (vfs.Watcher), so that it looks up only the others; nil until Open
	// has loaded the devices, and then no device is quiet.
	watch *vfs.Watcher

	ckptKick  chan struct{}
	cleanKick chan struct{}

	closed atomic.Bool
	// stop ends the background committer (autoCommit) and the cleaner,
	// which close bgDone and cleanDone when they return.
	stop      chan struct{}
	bgDone    chan struct{}
	cleanDone chan struct{}
}

// Create formats devs (one vfs.FS per device, in order) as a new store
// and opens it. Every device must be empty of store files.
func Create(devs []vfs.FS, opts ...Option) (*Store, error) {
	o, err := buildOptions(opts)
	if err != nil {
		return nil, err
	}
	if len(devs) != o.geo.Devices() {
		return nil, fmt.Errorf("%w: geometry %s needs %d devices, %d given", ErrInvalidArgument, o.geo, o.geo.Devices(), len(devs))
	}
	c, err := newCodec(o.geo)
	if err != nil {
		return nil, err
	}
	golden, err := c.checkGolden(nil)
	if err != nil {
		return nil, err
	}
	for i, fsys := range devs {
		if _, err := readIdentity(fsys); !errors.Is(err, ErrDeviceEmpty) && !errors.Is(err, ErrDeviceMissing) {
			return nil, &DeviceError{Pos: i, Device: fsys.String(), Err: ErrStoreExists}
		}
	}
	storeID := uuid.New()
	now := time.Now().UnixNano()
	ids := make([]identity, len(devs))
	recs := map[int]deviceRecord{}
	for i := range devs {
		ids[i] = identity{Device: uuid.New(), Store: storeID, Pos: i, Geo: o.geo, Unit: o.unit, Created: now, Golden: golden}
		recs[i] = deviceRecord{Device: ids[i].Device, State: recHealthy}
	}
	b := newBatch()
	b.super = superblock{Store: storeID, Geo: o.geo, Unit: o.unit, Seq: 1, GenHigh: genReserve, NextOwner: 1}
	b.devices = recs
	for i, fsys := range devs {
		files, err := formatDevice(fsys, ids[i], o.journal, o.metaLog, func(db metaDB) error { return db.update(b.apply) })
		if err != nil {
			return nil, &DeviceError{Pos: i, Device: fsys.String(), Err: err}
		}
		files.close()
	}
	return Open(devs, opts...)
}

// OpenOrCreate opens the store on devs, or creates one when no device
// holds any part of a store (every directory is missing or empty). A
// partly present store is opened (degraded) or refused, never formatted.
func OpenOrCreate(devs []vfs.FS, opts ...Option) (*Store, error) {
	s, err := Open(devs, opts...)
	if err == nil || !errors.Is(err, ErrNoStore) {
		return s, err
	}
	for _, fsys := range devs {
		if _, ierr := readIdentity(fsys); !errors.Is(ierr, ErrDeviceEmpty) && !errors.Is(ierr, fs.ErrNotExist) {
			return nil, err
		}
	}
	return Create(devs, opts...)
}

// OpenOrCreateDirs is OpenOrCreate on directories (created as needed).
func OpenOrCreateDirs(dirs []string, opts ...Option) (*Store, error) {
	return OpenOrCreate(osDevices(dirs), opts...)
}

// CreateDirs creates the directories and a store on them.
func CreateDirs(dirs []string, opts ...Option) (*Store, error) {
	return Create(osDevices(dirs), opts...)
}

// OpenDirs opens the store on the directories.
func OpenDirs(dirs []string, opts ...Option) (*Store, error) {
	return Open(osDevices(dirs), opts...)
}

// DeviceDirs returns the default device directories of a data directory:
// DATA/dev0 … DATA/dev{K+M-1}.
func DeviceDirs(dataDir string, g Geometry) []string {
	dirs := make([]string, g.Devices())
	for i := range dirs {
		dirs[i] = filepath.Join(dataDir, fmt.Sprintf("dev%d", i))
	}
	return dirs
}

func osDevices(dirs []string) []vfs.FS {
	fss := make([]vfs.FS, len(dirs))
	for i, d := range dirs {
		fss[i] = vfs.NewOS(d)
	}
	return fss
}

// Open opens the store on devs, one vfs.FS per device in the order they
// were created. Up to M devices may be missing, empty or unreadable: the
// store opens degraded and reports them in Info. A device of another store
// (ErrForeignDevice) or in another position (ErrDeviceSwapped) fails Open,
// as do more than M unusable devices (ErrTooManyFailures); the returned
// *DevicesError lists every device at fault.
func Open(devs []vfs.FS, opts ...Option) (*Store, error) {
	o, err := buildOptions(opts)
	if err != nil {
		return nil, err
	}
	if len(devs) == 0 {
		return nil, fmt.Errorf("%w: no devices", ErrInvalidArgument)
	}
	s := &Store{log: o.logger, opts: o, wpool: newWpool(o.wcache)}
	s.ckptKick, s.cleanKick = make(chan struct{}, 1), make(chan struct{}, 1)
	s.alloc.commitAt, s.alloc.kick = o.commit, s.ckptKick
	s.lcond = sync.NewCond(&s.lmu)
	s.devs = make([]*device, len(devs))
	ids := make([]identity, len(devs))
	idErr := make([]error, len(devs))
	votes := map[uuid.UUID]int{}
	for i, fsys := range devs {
		d := &device{pos: i}
		d.files.Store(&devFiles{fs: fsys})
		d.state.Store(int32(DeviceMissing))
		s.devs[i] = d
		ids[i], idErr[i] = readIdentity(fsys)
		if idErr[i] == nil {
			votes[ids[i].Store]++
		}
		if errors.Is(idErr[i], ErrFormatV1) {
			return nil, &DevicesError{Err: ErrFormatV1, Devices: []*DeviceError{d.devErr(idErr[i])}}
		}
	}
	// The store is the one most devices name.
	best := 0
	var tie bool
	for id, n := range votes {
		if n > best {
			best, s.id, tie = n, id, false
		} else if n == best {
			tie = true
		}
	}
	if best == 0 || tie {
		var des []*DeviceError
		for i, e := range idErr {
			if e == nil {
				e = fmt.Errorf("%w: store %s", ErrForeignDevice, ids[i].Store)
			}
			des = append(des, s.devs[i].devErr(e))
		}
		return nil, &DevicesError{Err: ErrNoStore, Devices: des}
	}
	var ref identity
	for i := range ids {
		if idErr[i] == nil && ids[i].Store == s.id {
			ref = ids[i]
			break
		}
	}
	s.geo, s.unit, s.n, s.golden = ref.Geo, ref.Unit, ref.Geo.Devices(), ref.Golden
	s.slotSize = int64(shardHeaderRegion + s.unit)
	s.created = ref.Created
	if o.geoSet && o.geo != s.geo {
		return nil, fmt.Errorf("%w: the store is %s, %s asked", ErrGeometryMismatch, s.geo, o.geo)
	}
	if o.unitSet && o.unit != s.unit {
		return nil, fmt.Errorf("%w: the store's stripe unit is %d, %d asked", ErrGeometryMismatch, s.unit, o.unit)
	}
	if len(devs) != s.n {
		return nil, fmt.Errorf("%w: the store is %s on %d devices, %d given", ErrInvalidArgument, s.geo, s.n, len(devs))
	}

	// Classify each device; devices that cannot be used silently are hard
	// errors.
	var hard, soft []*DeviceError
	for i := range devs {
		switch {
		case idErr[i] != nil:
			soft = append(soft, s.devs[i].devErr(idErr[i]))
		case ids[i].Store != s.id:
			hard = append(hard, s.devs[i].devErr(fmt.Errorf("%w: it belongs to store %s, not %s", ErrForeignDevice, ids[i].Store, s.id)))
		case ids[i].Pos != i:
			hard = append(hard, s.devs[i].devErr(fmt.Errorf("%w: it is device %d of this store, given as device %d", ErrDeviceSwapped, ids[i].Pos, i)))
		case ids[i].Geo != s.geo || ids[i].Unit != s.unit || ids[i].Golden != s.golden:
			hard = append(hard, s.devs[i].devErr(corruptf("identity says %s unit %d, the store is %s unit %d", ids[i].Geo, ids[i].Unit, s.geo, s.unit)))
		}
	}
	if len(hard) > 0 {
		return nil, &DevicesError{Err: hard[0].Err, Devices: append(hard, soft...)}
	}

	// The golden self-test: this build must encode as the store was written.
	c, err := newCodec(s.geo)
	if err != nil {
		return nil, err
	}
	if _, err := c.checkGolden(&s.golden); err != nil {
		return nil, err
	}
	s.codec = c
	s.bufs.init(s.unit, s.geo.Data)
	s.maxRuns = maxSummaryRuns(s.unit)
	s.resvSize = min(max(resvBytes/s.stripeBytes(), 64), maxResv)
	s.resvHead = max(s.resvSize/2, resvHeadMin)

	st, err := s.openReplicas(ids, idErr, &soft)
	if err != nil {
		s.closeFiles()
		return nil, err
	}
	if len(soft) > s.geo.Parity {
		s.closeFiles()
		return nil, &DevicesError{Err: ErrTooManyFailures, Devices: soft}
	}
	for _, de := range soft {
		s.devs[de.Pos].setErr(de.Err)
		s.log.Warn("chunkstore: device unavailable; store is degraded", "pos", de.Pos, "device", de.Device, "err", de.Err)
	}

	// Roll forward: the stripes the log wrote after the checkpoint. Those
	// a crash left with some shards bad are repaired at once, so the
	// store opens with every stripe's parity consistent.
	replayed := s.replay(st.resv, st.super.LogGen)
	if invariants {
		if err := s.checkMap(); err != nil {
			panic(fmt.Sprintf("chunkstore: after the roll-forward: %v", err))
		}
	}
	if s.repair.len() > 0 {
		if _, err := s.RepairQueued(context.Background(), ScrubOptions{}); err != nil {
			s.log.Warn("chunkstore: repairing stripes the crash cut", "err", err)
		}
	}
	// Generations: hand out from the committed reservation and commit a
	// new one (and a new checkpoint, with a new log reservation) before
	// any write. The journal's records go to the log first, so that this
	// checkpoint, after which they are dead, holds them.
	s.gen.Store(s.genHigh)
	journaled, err := s.replayJournal(st.super.LogGen, replayed)
	if err == nil {
		err = s.commit()
	}
	if err != nil {
		s.closeFiles()
		return nil, err
	}
	s.resetJournals()
	s.watch = vfs.NewWatcher()
	for _, d := range s.devs {
		if f := d.files.Load(); f.data != nil {
			s.watch.Add(d.pos, f.fs)
		}
	}
	s.stop, s.bgDone, s.cleanDone = make(chan struct{}), make(chan struct{}), make(chan struct{})
	go s.autoCommit()
	go s.cleaner()
	s.wcKick, s.wcDone = make(chan struct{}, 1), make(chan struct{})
	if s.wpool != nil {
		go s.destager()
	} else {
		close(s.wcDone)
	}
	if len(replayed) > 0 || journaled > 0 {
		s.log.Info("chunkstore: rolled the log forward", "stripes", len(replayed), "journal records", journaled)
	}
	s.log.Info("chunkstore: open", "store", s.id, "geometry", s.geo.String(), "unit", s.unit,
		"simd", SIMD(), "degraded", len(soft))
	return s, nil
}

// openReplicas opens the metadata replica of every identified device,
// adopts the one with the highest Seq, brings the others up to it, checks
// the device table against the identities and loads the metadata.
func (s *Store) openReplicas(ids []identity, idErr []error, soft *[]*DeviceError) (*metaState, error) {
	type rep struct {
		db  metaDB
		sb  superblock
		err error
	}
	reps := make([]rep, s.n)
	bestPos := -1
	var hard []*DeviceError
	dbs := make([]metaDB, s.n)
	dbErr := make([]error, s.n)
	parallel(s.n, true, func(i int) {
		if idErr[i] == nil {
			dbs[i], dbErr[i] = openMeta(s.devs[i].fsys(), s.opts.metaLog)
		}
	})
	for i, d := range s.devs {
		if idErr[i] != nil {
			continue
		}
		db, err := dbs[i], dbErr[i]
		if err != nil {
			if errors.Is(err, ErrDeviceBusy) {
				hard = append(hard, d.devErr(err))
			} else {
				*soft = append(*soft, d.devErr(fmt.Errorf("%w: metadata: %v", ErrDeviceMissing, err)))
			}
			idErr[i] = err
			continue
		}
		sb, err := readSuper(db)
		if err == nil && sb.Version == formatV1 {
			hard = append(hard, d.devErr(ErrFormatV1))
		}
		if err == nil && (sb.Store != s.id || sb.Geo != s.geo || sb.Unit != s.unit) {
			err = corruptf("metadata replica is of store %s %s, identity says %s %s", sb.Store, sb.Geo, s.id, s.geo)
		}
		reps[i] = rep{db: db, sb: sb, err: err}
		if err == nil && (bestPos < 0 || sb.Seq > reps[bestPos].sb.Seq) {
			bestPos = i
		}
	}
	closeAll := func() {
		for _, r := range reps {
			if r.db != nil {
				_ = r.db.close()
			}
		}
	}
	if len(hard) > 0 {
		closeAll()
		return nil, &DevicesError{Err: hard[0].Err, Devices: hard}
	}
	if bestPos < 0 {
		closeAll()
		return nil, &DevicesError{Err: fmt.Errorf("%w: no readable metadata replica", ErrNoStore), Devices: *soft}
	}
	st, err := loadMeta(reps[bestPos].db)
	if err != nil {
		// The freshest replica is unreadable past its superblock: try the
		// others, freshest first.
		order := make([]int, 0, s.n)
		for i := range reps {
			if reps[i].db != nil && reps[i].err == nil && i != bestPos {
				order = append(order, i)
			}
		}
		sort.Slice(order, func(a, b int) bool { return reps[order[a]].sb.Seq > reps[order[b]].sb.Seq })
		reps[bestPos].err = err
		bestPos = -1
		for _, i := range order {
			if st, err = loadMeta(reps[i].db); err == nil {
				bestPos = i
				break
			}
			reps[i].err = err
		}
		if bestPos < 0 {
			closeAll()
			return nil, fmt.Errorf("chunkstore: no metadata replica loads: %w", err)
		}
	}
	s.seq = st.super.Seq
	s.genHigh = st.super.GenHigh
	s.owner.Store(st.super.NextOwner)
	s.devRecs = st.devices

	// The device table names the device UUID of each position: a device
	// with this store's identity but another UUID was replaced.
	for i, d := range s.devs {
		if idErr[i] != nil {
			continue
		}
		rec, ok := st.devices[i]
		if !ok || rec.Device != ids[i].Device {
			hard = append(hard, d.devErr(fmt.Errorf("%w: device %s was replaced in this store by %s", ErrForeignDevice, ids[i].Device, rec.Device)))
		}
	}
	if len(hard) > 0 {
		closeAll()
		return nil, &DevicesError{Err: hard[0].Err, Devices: hard}
	}

	// Bring stale replicas up to the adopted one and open shard files.
	for i, d := range s.devs {
		r := reps[i]
		if r.db == nil {
			continue
		}
		if i != bestPos && (r.err != nil || r.sb.Seq != st.super.Seq) {
			if r.err != nil {
				s.log.Warn("chunkstore: rewriting unreadable metadata replica", "pos", i, "err", r.err)
			}
			if err := copyMeta(r.db, reps[bestPos].db); err != nil {
				_ = r.db.close()
				reps[i].db = nil
				*soft = append(*soft, d.devErr(fmt.Errorf("%w: metadata: %v", ErrDeviceMissing, err)))
				continue
			}
		}
		data, err := d.fsys().OpenFile(shardFile, os.O_RDWR)
		if err != nil {
			_ = r.db.close()
			reps[i].db = nil
			*soft = append(*soft, d.devErr(fmt.Errorf("%w: %v", ErrDeviceMissing, err)))
			continue
		}
		files := &devFiles{fs: d.fsys(), id: ids[i], data: data, db: r.db}
		err = s.trackAlloc(files, true)
		if err == nil {
			// Read at Open for its records, then made whole and empty
			// (resetJournals).
			files.jnl, files.jwhole, err = openJournal(d.fsys(), s.opts.journal)
		}
		if err != nil {
			files.close()
			reps[i].db = nil
			*soft = append(*soft, d.devErr(fmt.Errorf("%w: %v", ErrDeviceMissing, err)))
			continue
		}
		d.files.Store(files)
		if st.devices[i].State == recRebuilding {
			d.state.Store(int32(DeviceRebuilding))
		} else {
			d.state.Store(int32(DeviceHealthy))
		}
	}
	s.load(st)
	return st, nil
}

// load builds the in-memory tables, the maps and the allocator from the
// metadata.
func (s *Store) load(st *metaState) {
	s.vols = map[string]*Volume{}
	s.volByOwner = map[uint64]*Volume{}
	s.owners = map[uint64]*ownerMap{}
	s.unwritten = map[uint64]*logStripe{}
	s.failed = map[uint64]*logStripe{}
	s.dirtySlots = map[uint64]struct{}{}
	s.records = map[string][]byte{}
	shared := 0
	var why []string // the first few, for the message
	bad := func(format string, args ...any) {
		shared++
		if len(why) < 4 {
			why = append(why, fmt.Sprintf(format, args...))
		}
	}
	for slot, r := range st.slots {
		si := s.slotAt(slot)
		*si = slotInfo{used: true, key: r.Key, ext: r.Ext, sectors: int32(r.Sectors)}
		si.ext.Zero = s.zeroShards(r.Key, r.Ext.ShardLen, r.Sectors)
		s.dataSlots++
		s.dataCap += s.capOf(si)
		if !s.alloc.markUsed(slot) {
			bad("slot %d recorded twice", slot)
		}
	}
	for _, slot := range st.resv {
		if !s.alloc.markUsed(slot) {
			bad("slot %d recorded and reserved", slot)
		}
	}
	addOwner := func(owner uint64) {
		m := newOwnerMap()
		for page, runs := range st.pages[owner] {
			m.pages[page] = runs
			for _, r := range runs {
				if r.slot >= uint64(len(s.slots)) || !s.slots[r.slot].used {
					// Cannot happen by construction: the read would fail its
					// header check; count it like a slot named twice.
					bad("slot %d mapped by owner %d, not recorded", r.slot, owner)
					continue
				}
				s.slots[r.slot].live += int32(r.n)
				s.liveTotal += int64(r.n)
				m.mapped += int64(r.n)
			}
		}
		s.owners[owner] = m
	}
	for name, r := range st.volumes {
		v := newVolume(s, name, r)
		addOwner(r.Owner)
		s.vols[name] = v
		s.volByOwner[r.Owner] = v
	}
	s.chunks.init()
	for id, r := range st.chunks {
		rc := r
		s.chunks.m[id] = &rc
		s.chunks.byOwner[r.Owner] = id
		addOwner(r.Owner)
	}
	// No owner in use may be handed out again: the superblock's next
	// owner is above every owner its checkpoint names (commitLocked reads
	// it after the chunk records).
	for owner := range s.owners {
		if owner >= s.owner.Load() {
			if invariants {
				panic(fmt.Sprintf("chunkstore: owner %d is in use, the superblock's next owner is %d", owner, s.owner.Load()))
			}
			s.owner.Store(owner + 1)
		}
	}
	if shared > 0 {
		if invariants {
			panic(fmt.Sprintf("chunkstore: %d slots are named twice or not at all: %s", shared, strings.Join(why, "; ")))
		}
		s.log.Error("chunkstore: metadata names some slots twice or not at all", "slots", shared, "first", strings.Join(why, "; "))
	}
	// A checkpoint records every stripe written before its snapshot, also
	// one whose every sector was rewritten while it was being written:
	// such a slot holds nothing live and is released now (the roll-forward
	// releases those whose last sectors it rewrites). The queue of
	// reserved slots starts as the checkpoint left it.
	for p := range s.slots {
		if s.slots[p].used && s.slots[p].live == 0 {
			s.releaseSlotLocked(uint64(p))
		}
	}
	s.resv = append([]uint64(nil), st.resv...)
	s.repair.init()
}

// closeFiles closes every device's handles.
func (s *Store) closeFiles() {
	for _, d := range s.devs {
		if f := d.files.Load(); f != nil {
			f.close()
		}
	}
}

// Close writes out the log, checkpoints, and closes the devices. The
// returned error is that of the final Sync; the devices are closed anyway.
// Using the store or its volumes after Close returns ErrClosed.
func (s *Store) Close() error {
	if s.closed.Load() {
		return nil
	}
	err := s.flushCaches()
	if cerr := s.commit(); err == nil {
		err = cerr
	}
	if !s.closed.CompareAndSwap(false, true) {
		return nil
	}
	close(s.stop)
	<-s.bgDone
	<-s.cleanDone
	<-s.wcDone
	if p := s.wpool; p != nil {
		p.mu.Lock()
		if p.used == 0 { // else a write raced with Close: leave its slabs be
			p.freeSlabsLocked()
		}
		p.mu.Unlock()
	}
	s.lmu.Lock()
	s.lcond.Broadcast() // appenders waiting for room see the store closed
	s.lmu.Unlock()
	s.commitMu.Lock()
	s.flushMu.Lock()
	s.closeFiles()
	_ = s.watch.Close()
	s.flushMu.Unlock()
	s.commitMu.Unlock()
	return err
}

func (s *Store) checkOpen() error {
	if s.closed.Load() {
		return ErrClosed
	}
	return nil
}

// Sync makes every write that returned before it durable. When only log
// appends wait, that is a log flush: the open stripe is written (short,
// if it is not full) and every device is fsynced once, shared with every
// concurrent Sync and FUA write (group commit). When an unmap, a chunk
// record or a device change waits too, it is a checkpoint (commit).
func (s *Store) Sync() error {
	if err := s.checkOpen(); err != nil {
		return err
	}
	if err := s.flushCaches(); err != nil {
		return err
	}
	s.lmu.Lock()
	need := s.ckptNeeded || s.ckptBusy
	s.lmu.Unlock()
	if need {
		// A checkpoint in flight may carry this caller's changes: wait
		// for it, and checkpoint again only if it failed (it puts
		// ckptNeeded back) or more changes came.
		s.commitMu.Lock()
		defer s.commitMu.Unlock()
		s.lmu.Lock()
		need = s.ckptNeeded
		s.lmu.Unlock()
		if need {
			return s.commitLocked(nil)
		}
	}
	return s.flushLog(s.lastEpoch())
}

// forWritable runs fn on every writable device in parallel; a device whose
// fn fails is taken out of use. It returns the mask of devices that
// succeeded.
func (s *Store) forWritable(fn func(*device, *devFiles) error) uint64 {
	var wg sync.WaitGroup
	var ok atomic.Uint64
	for _, d := range s.devs {
		if !d.writable() {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := fn(d, d.files.Load()); err != nil {
				d.fail(err, s.log)
				return
			}
			for {
				old := ok.Load()
				if ok.CompareAndSwap(old, old|1<<d.pos) {
					return
				}
			}
		}()
	}
	wg.Wait()
	return ok.Load()
}

// forWritableSeq is forWritable one device after the other, for quick
// calls.
func (s *Store) forWritableSeq(fn func(*device, *devFiles) error) uint64 {
	var ok uint64
	for _, d := range s.devs {
		if !d.writable() {
			continue
		}
		if err := fn(d, d.files.Load()); err != nil {
			d.fail(err, s.log)
			continue
		}
		ok |= 1 << d.pos
	}
	return ok
}

func (s *Store) allMask() uint64 {
	if s.n == 64 {
		return ^uint64(0)
	}
	return 1<<s.n - 1
}

// writableMask returns the devices that receive new shards.
func (s *Store) writableMask() uint64 {
	var m uint64
	for _, d := range s.devs {
		if d.writable() {
			m |= 1 << d.pos
		}
	}
	return m
}

// enoughDevices fails when more than M devices are out of use.
func (s *Store) enoughDevices() error {
	if out := s.n - bits.OnesCount64(s.writableMask()); out > s.geo.Parity {
		return fmt.Errorf("%w: %d of %d devices unavailable, %s tolerates %d", ErrTooManyFailures, out, s.n, s.geo, s.geo.Parity)
	}
	return nil
}

func (s *Store) volumeList() []*Volume {
	s.volMu.RLock()
	defer s.volMu.RUnlock()
	vs := make([]*Volume, 0, len(s.vols))
	for _, v := range s.vols {
		vs = append(vs, v)
	}
	sort.Slice(vs, func(i, j int) bool { return vs[i].owner < vs[j].owner })
	return vs
}

// Info describes an open store.
type Info struct {
	ID         uuid.UUID
	Geometry   Geometry
	StripeUnit int
	// SIMD is the vector path of the erasure coder (see SIMD).
	SIMD string
	// Degraded is true when any device is not healthy.
	Degraded bool
	Devices  []DeviceInfo
	// SlotsInUse counts the physical stripe slots that hold a stripe, and
	// Slots is one more than the highest of them: each slot is 4 KiB +
	// StripeUnit on every device. Reserved counts the free slots set
	// aside for the log's next stripes.
	SlotsInUse, Slots, Reserved uint64
}

// Info returns the store's identity, geometry and device states.
func (s *Store) Info() Info {
	in := Info{ID: s.id, Geometry: s.geo, StripeUnit: s.unit, SIMD: SIMD()}
	for _, d := range s.devs {
		di := DeviceInfo{Pos: d.pos, Name: d.name(), State: d.getState(), Err: d.getErr(),
			Reads: d.reads.Load(), Writes: d.writes.Load(), Errors: d.errs.Load(),
			ReadBytes: d.readBytes.Load(), WriteBytes: d.writeBytes.Load()}
		if f := d.files.Load(); f != nil {
			di.ID = f.id.Device
		}
		if di.State != DeviceHealthy {
			in.Degraded = true
		}
		in.Devices = append(in.Devices, di)
	}
	s.lmu.Lock()
	in.SlotsInUse = uint64(s.dataSlots)
	for p := len(s.slots) - 1; p >= 0; p-- {
		if s.slots[p].used {
			in.Slots = uint64(p) + 1
			break
		}
	}
	in.Reserved = uint64(len(s.resv))
	s.lmu.Unlock()
	return in
}

// stripe placement: shard i of slot p lives on device (p + i) mod (K+M),
// which spreads data and parity over every device.
func (s *Store) devOf(slot uint64, shard int) int {
	return int((slot + uint64(shard)) % uint64(s.n))
}

func (s *Store) shardOf(slot uint64, dev int) int {
	return int((uint64(dev) + uint64(s.n) - slot%uint64(s.n)) % uint64(s.n))
}

func (s *Store) slotOffset(slot uint64) int64 { return int64(slot) * s.slotSize }

// stripeBytes is the data capacity of a full stripe.
func (s *Store) stripeBytes() int { return s.geo.Data * s.unit }

var _ io.Closer = (*Store)(nil)
