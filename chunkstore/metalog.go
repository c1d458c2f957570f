package chunkstore

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"

	"io/fs"
	"os"
	"sort"
	"sync"

	"github.com/tidwall/btree"

	"github.com/capsule-storage/capsule/chunkstore/vfs"
	"github.com/capsule-storage/capsule/internal/crc32c"
)

// The log replica (meta.log): the metadata in the device's own files, for
// devices with no host path (a remote device, package internal/devsvc;
// MemFS without a host directory). The file is a sequence of frames:
//
//	0   u32  magic "CSML" (0x4C4D5343)
//	4   u32  kind: 1 snapshot, 2 delta
//	8   u32  payload length in bytes
//	12  u32  CRC32C of bytes 4 to 11 and the payload
//	16       payload: operations, one after another
//
// An operation is a code byte, the bucket name (a length byte and the
// name) and, for put and delete, the key (u32 length and bytes) and, for
// put, the value (u32 length and bytes): 1 create bucket, 2 delete
// bucket, 3 put, 4 delete key. The first frame is a snapshot, applied to
// nothing; each delta is one update transaction, applied on top. An
// update appends its delta and syncs the file before it returns, so a
// transaction is durable when update returns and absent when the frame is
// torn: a frame that does not check (magic, length, CRC) ends the log,
// and is cut off before the next append. When the log reaches four times
// its snapshot (and 1 MiB), it is written again as one snapshot into
// meta.log.tmp, synced, renamed over meta.log, and the directory synced.
//
// The whole replica is kept in memory (copy-on-write B-trees, one per
// bucket, tidwall/btree), as the store keeps its maps anyway.
const (
	metaLogFile = "meta.log"
	logMagic    = 0x4C4D5343
	logHeader   = 16
	logSnapshot = 1
	logDelta    = 2

	opCreateBucket = 1
	opDeleteBucket = 2
	opPut          = 3
	opDelete       = 4
)

type kvItem struct {
	k string
	v []byte
}

func kvLess(a, b kvItem) bool { return a.k < b.k }

type tree = btree.BTreeG[kvItem]

func newTree() *tree { return btree.NewBTreeGOptions(kvLess, btree.Options{NoLocks: true}) }

// logDB is a replica in meta.log.
type logDB struct {
	fsys vfs.FS

	mu      sync.RWMutex // update holds it exclusively, view shared; guards the rest
	f       vfs.File
	end     int64 // where the next frame goes
	snap    int64 // bytes of the snapshot at the start
	buckets map[string]*tree
	closed  bool
}

// openLog opens meta.log, or makes it with an empty snapshot.
func openLog(fsys vfs.FS) (*logDB, error) {
	f, err := fsys.OpenFile(metaLogFile, os.O_RDWR)
	if errors.Is(err, fs.ErrNotExist) {
		l := &logDB{fsys: fsys, buckets: map[string]*tree{}}
		if err := l.rewrite(); err != nil {
			return nil, err
		}
		return l, nil
	}
	if err != nil {
		return nil, err
	}
	l := &logDB{fsys: fsys, f: f, buckets: map[string]*tree{}}
	if err := l.load(); err != nil {
		f.Close()
		return nil, err
	}
	return l, nil
}

// load reads the frames, applying each, and cuts off a torn tail.
func (l *logDB) load() error {
	st, err := l.f.Stat()
	if err != nil {
		return err
	}
	size := st.Size()
	b := make([]byte, size)
	if err := vfs.ReadFull(l.f, b, 0); err != nil {
		return err
	}
	off := int64(0)
	for {
		kind, payload, n, ok := parseFrame(b[off:])
		if !ok {
			break
		}
		if (off == 0) != (kind == logSnapshot) {
			return corruptf("meta.log: frame of kind %d at %d", kind, off)
		}
		tx := &logTx{l: l, buckets: l.buckets, write: true}
		if err := tx.replay(payload); err != nil {
			return corruptf("meta.log: frame at %d: %v", off, err)
		}
		l.buckets = tx.buckets
		off += n
		if kind == logSnapshot {
			l.snap = n
		}
	}
	if off == 0 {
		return corruptf("meta.log: no snapshot")
	}
	l.end = off
	if off < size {
		// A torn frame: cut it off, so that nothing of it follows the
		// next frame.
		if err := l.f.Truncate(off); err != nil {
			return err
		}
		if err := l.f.Sync(); err != nil {
			return err
		}
	}
	return nil
}

// parseFrame checks the frame at the start of b.
func parseFrame(b []byte) (kind uint32, payload []byte, n int64, ok bool) {
	if len(b) < logHeader || binary.LittleEndian.Uint32(b) != logMagic {
		return 0, nil, 0, false
	}
	kind = binary.LittleEndian.Uint32(b[4:])
	plen := binary.LittleEndian.Uint32(b[8:])
	if uint64(plen) > uint64(len(b)-logHeader) || (kind != logSnapshot && kind != logDelta) {
		return 0, nil, 0, false
	}
	payload = b[logHeader : logHeader+int(plen)]
	crc := crc32c.Update(crc32c.Checksum(b[4:12]), payload)
	if crc != binary.LittleEndian.Uint32(b[12:]) {
		return 0, nil, 0, false
	}
	return kind, payload, logHeader + int64(plen), true
}

// frame encodes a frame of kind around payload.
func frame(kind uint32, payload []byte) []byte {
	b := make([]byte, logHeader, logHeader+len(payload))
	binary.LittleEndian.PutUint32(b, logMagic)
	binary.LittleEndian.PutUint32(b[4:], kind)
	binary.LittleEndian.PutUint32(b[8:], uint32(len(payload)))
	b = append(b, payload...)
	binary.LittleEndian.PutUint32(b[12:], crc32c.Update(crc32c.Checksum(b[4:12]), payload))
	return b
}

// snapshot encodes every bucket as create and put operations.
func (l *logDB) snapshot() []byte {
	names := make([]string, 0, len(l.buckets))
	for n := range l.buckets {
		names = append(names, n)
	}
	sort.Strings(names)
	var p []byte
	for _, n := range names {
		p = appendOp(p, opCreateBucket, n, nil, nil)
		l.buckets[n].Scan(func(it kvItem) bool {
			p = appendOp(p, opPut, n, []byte(it.k), it.v)
			return true
		})
	}
	return p
}

// rewrite writes the replica as one snapshot in a new file that replaces
// meta.log.
func (l *logDB) rewrite() error {
	fr := frame(logSnapshot, l.snapshot())
	const tmp = metaLogFile + ".tmp"
	f, err := l.fsys.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_TRUNC)
	if err != nil {
		return err
	}
	if _, err := f.WriteAt(fr, 0); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := l.fsys.Rename(tmp, metaLogFile); err != nil {
		f.Close()
		return err
	}
	if err := l.fsys.SyncDir("."); err != nil {
		f.Close()
		return err
	}
	if l.f != nil {
		l.f.Close()
	}
	l.f, l.end, l.snap = f, int64(len(fr)), int64(len(fr))
	return nil
}

func appendOp(p []byte, op byte, bucket string, k, v []byte) []byte {
	p = append(p, op, byte(len(bucket)))
	p = append(p, bucket...)
	if op == opPut || op == opDelete {
		p = binary.LittleEndian.AppendUint32(p, uint32(len(k)))
		p = append(p, k...)
	}
	if op == opPut {
		p = binary.LittleEndian.AppendUint32(p, uint32(len(v)))
		p = append(p, v...)
	}
	return p
}

func (l *logDB) view(fn func(kvTx) error) error {
	l.mu.RLock()
	defer l.mu.RUnlock()
	if l.closed {
		return ErrClosed
	}
	return fn(&logTx{l: l, buckets: l.buckets})
}

func (l *logDB) update(fn func(kvTx) error) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return ErrClosed
	}
	tx := &logTx{l: l, buckets: l.buckets, write: true}
	if err := fn(tx); err != nil {
		return err
	}
	if len(tx.ops) == 0 {
		return nil
	}
	fr := frame(logDelta, tx.ops)
	if _, err := l.f.WriteAt(fr, l.end); err != nil {
		return err
	}
	if err := l.f.Sync(); err != nil {
		return err
	}
	l.end += int64(len(fr))
	l.buckets = tx.buckets
	if l.end > 4*l.snap && l.end > 1<<20 {
		// The delta is durable already; a failed rewrite leaves the
		// longer log, which is as good.
		_ = l.rewrite()
	}
	return nil
}

func (l *logDB) close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil
	}
	l.closed = true
	return l.f.Close()
}

// logTx is a transaction on a logDB. A writing one works on copies of
// the buckets it changes (copy-on-write), and records what it does in
// ops, which update appends as one delta.
type logTx struct {
	l       *logDB
	buckets map[string]*tree
	write   bool
	copied  map[string]bool // buckets already copied for writing
	ops     []byte
}

// own gives the transaction a bucket map of its own, at its first change.
func (t *logTx) own() {
	if t.copied != nil {
		return
	}
	m := make(map[string]*tree, len(t.buckets))
	for k, v := range t.buckets {
		m[k] = v
	}
	t.buckets, t.copied = m, map[string]bool{}
}

// writable returns bucket name's tree for changing, copied first.
func (t *logTx) writable(name string) *tree {
	if t.copied[name] {
		return t.buckets[name]
	}
	t.own()
	tr := t.buckets[name].Copy()
	t.buckets[name] = tr
	t.copied[name] = true
	return tr
}

func (t *logTx) bucket(name []byte) kvBucket {
	if _, ok := t.buckets[string(name)]; !ok {
		return nil
	}
	return &logBucket{tx: t, name: string(name)}
}

func (t *logTx) createBucket(name []byte) (kvBucket, error) {
	if !t.write {
		return nil, errors.New("chunkstore: meta.log: write in a read-only transaction")
	}
	if len(name) == 0 || len(name) > 255 {
		return nil, fmt.Errorf("chunkstore: meta.log: bucket name of %d bytes", len(name))
	}
	n := string(name)
	if _, ok := t.buckets[n]; !ok {
		t.own()
		t.buckets[n] = newTree()
		t.copied[n] = true
		t.ops = appendOp(t.ops, opCreateBucket, n, nil, nil)
	}
	return &logBucket{tx: t, name: n}, nil
}

func (t *logTx) deleteBucket(name []byte) error {
	if !t.write {
		return errors.New("chunkstore: meta.log: write in a read-only transaction")
	}
	n := string(name)
	if _, ok := t.buckets[n]; !ok {
		return nil
	}
	t.own()
	delete(t.buckets, n)
	delete(t.copied, n)
	t.ops = appendOp(t.ops, opDeleteBucket, n, nil, nil)
	return nil
}

// replay applies a frame's operations (at load, no ops recorded).
func (t *logTx) replay(p []byte) error {
	for len(p) > 0 {
		if len(p) < 2 || len(p) < 2+int(p[1]) {
			return errors.New("operation cut short")
		}
		op, name := p[0], p[2:2+int(p[1])]
		p = p[2+int(p[1]):]
		var k, v []byte
		take := func() ([]byte, bool) {
			if len(p) < 4 || uint64(binary.LittleEndian.Uint32(p)) > uint64(len(p)-4) {
				return nil, false
			}
			n := binary.LittleEndian.Uint32(p)
			b := p[4 : 4+n]
			p = p[4+n:]
			return b, true
		}
		var ok bool
		switch op {
		case opCreateBucket:
			if _, err := t.createBucket(name); err != nil {
				return err
			}
		case opDeleteBucket:
			if err := t.deleteBucket(name); err != nil {
				return err
			}
		case opPut, opDelete:
			if k, ok = take(); !ok {
				return errors.New("key cut short")
			}
			if op == opPut {
				if v, ok = take(); !ok {
					return errors.New("value cut short")
				}
			}
			bk := t.bucket(name)
			if bk == nil {
				return fmt.Errorf("no bucket %q", name)
			}
			var err error
			if op == opPut {
				err = bk.put(k, v)
			} else {
				err = bk.del(k)
			}
			if err != nil {
				return err
			}
		default:
			return fmt.Errorf("operation %d", op)
		}
	}
	t.ops = nil
	return nil
}

type logBucket struct {
	tx   *logTx
	name string
}

func (b *logBucket) tree() *tree { return b.tx.buckets[b.name] }

func (b *logBucket) get(k []byte) []byte {
	it, ok := b.tree().Get(kvItem{k: string(k)})
	if !ok {
		return nil
	}
	return it.v
}

func (b *logBucket) put(k, v []byte) error {
	if !b.tx.write {
		return errors.New("chunkstore: meta.log: write in a read-only transaction")
	}
	if len(k) == 0 {
		return errors.New("chunkstore: meta.log: empty key")
	}
	b.tx.writable(b.name).Set(kvItem{k: string(k), v: bytes.Clone(v)})
	b.tx.ops = appendOp(b.tx.ops, opPut, b.name, k, v)
	return nil
}

func (b *logBucket) del(k []byte) error {
	if !b.tx.write {
		return errors.New("chunkstore: meta.log: write in a read-only transaction")
	}
	if _, ok := b.tree().Get(kvItem{k: string(k)}); !ok {
		return nil
	}
	b.tx.writable(b.name).Delete(kvItem{k: string(k)})
	b.tx.ops = appendOp(b.tx.ops, opDelete, b.name, k, nil)
	return nil
}

func (b *logBucket) forEach(fn func(k, v []byte) error) error {
	var err error
	b.tree().Scan(func(it kvItem) bool {
		err = fn([]byte(it.k), it.v)
		return err == nil
	})
	return err
}

func (b *logBucket) cursor() kvCursor { return &logCursor{b: b} }

// logCursor walks a bucket. It keeps the key it is at and seeks past it
// for next, so that changes to the bucket between calls are fine.
type logCursor struct {
	b   *logBucket
	cur []byte // nil: not at a key
}

func (c *logCursor) at(key string, strict bool) ([]byte, []byte) {
	it := c.b.tree().Iter()
	defer it.Release()
	ok := it.Seek(kvItem{k: key})
	if ok && strict && it.Item().k == key {
		ok = it.Next()
	}
	if !ok {
		c.cur = nil
		return nil, nil
	}
	c.cur = []byte(it.Item().k)
	return c.cur, it.Item().v
}

func (c *logCursor) seek(k []byte) ([]byte, []byte) { return c.at(string(k), false) }

func (c *logCursor) next() ([]byte, []byte) {
	if c.cur == nil {
		return nil, nil
	}
	return c.at(string(c.cur), true)
}

func (c *logCursor) del() error {
	if c.cur == nil {
		return nil
	}
	return c.b.del(c.cur)
}
