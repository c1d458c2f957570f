package devsvc

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/capsule-storage/capsule/chunkstore/vfs"
	"github.com/capsule-storage/capsule/nvmeof"
	"github.com/capsule-storage/capsule/nvmeof/host"
	"github.com/capsule-storage/capsule/nvmeof/target"
)

// FS is one volume's directory on a remote device: a vfs.FS whose every
// operation is a vendor command to the device's namespace.
type FS struct {
	ctrl  *host.Controller
	local *Server // instead of ctrl: a device of this process (NewLocal)
	nsid  uint32
	vol   string
	epoch func() uint64
	maxIO int
	stats [numKinds]kindCounters
}

// Kind sorts an FS's commands for Stats.
type Kind int

// The kinds of command.
const (
	KindRead  Kind = iota // READ
	KindWrite             // WRITE
	KindSync              // SYNC, SYNCDIR
	KindMeta              // the rest: OPEN, CLOSE, STAT, LIST, RENAME, ...
	numKinds
)

var kindNames = [numKinds]string{"read", "write", "sync", "meta"}

func (k Kind) String() string { return kindNames[k] }

func kindOf(op nvmeof.Opcode) Kind {
	switch op {
	case OpRead, OpReadRanges:
		return KindRead
	case OpWrite:
		return KindWrite
	case OpSync, OpSyncDir:
		return KindSync
	}
	return KindMeta
}

type kindCounters struct{ ops, errs, bytes, nanos atomic.Uint64 }

// KindStats count one kind of an FS's commands since New.
type KindStats struct {
	Ops    uint64        // commands completed, failed ones included
	Errors uint64        // of them, failed (a lost device, an errno)
	Bytes  uint64        // data read or written by those that succeeded
	Time   time.Duration // from send to completion, all of them together
}

// Stats returns the counts of the FS's commands, indexed by Kind: the
// remote shard I/O of a cluster volume's head.
func (f *FS) Stats() []KindStats {
	out := make([]KindStats, numKinds)
	for k := range out {
		c := &f.stats[k]
		out[k] = KindStats{Ops: c.ops.Load(), Errors: c.errs.Load(), Bytes: c.bytes.Load(), Time: time.Duration(c.nanos.Load())}
	}
	return out
}

var _ vfs.FS = (*FS)(nil)

// Option configures an FS.
type Option func(*FS)

// WithEpoch gives the head's epoch, sent with every command that changes
// the device. Without it the epoch is 0, which a device refuses once any
// head of the volume wrote to it.
func WithEpoch(fn func() uint64) Option { return func(f *FS) { f.epoch = fn } }

// New returns the directory of volume vol on the device that namespace
// nsid of ctrl exports. The controller stays the caller's.
func New(ctrl *host.Controller, nsid uint32, vol string, opts ...Option) (*FS, error) {
	if err := checkVolume(vol); err != nil {
		return nil, err
	}
	f := &FS{ctrl: ctrl, nsid: nsid, vol: vol, epoch: func() uint64 { return 0 }, maxIO: host.DefaultMaxTransfer}
	for _, o := range opts {
		o(f)
	}
	if in, err := ctrl.Info(); err == nil && in.MaxTransfer > 0 {
		f.maxIO = in.MaxTransfer
	}
	return f, nil
}

// NewLocal returns the directory of volume vol on the device srv serves
// in this process (a cluster head's own device): the same commands as
// New's FS sends, run by srv directly, with no round trip, and every
// change still passing the device's fence.
func NewLocal(srv *Server, vol string, opts ...Option) (*FS, error) {
	if err := checkVolume(vol); err != nil {
		return nil, err
	}
	f := &FS{local: srv, vol: vol, epoch: func() uint64 { return 0 }, maxIO: host.DefaultMaxTransfer}
	for _, o := range opts {
		o(f)
	}
	return f, nil
}

func checkVolume(vol string) error {
	if vol == "" || vol[0] == '.' || len(vol) > 64 || path.Clean(vol) != vol || path.Base(vol) != vol {
		return &os.PathError{Op: "devsvc", Path: vol, Err: vfs.ErrInvalidName}
	}
	return nil
}

// String names the FS in messages.
func (f *FS) String() string {
	if f.local != nil {
		return "devsvc:local:" + f.vol
	}
	return fmt.Sprintf("devsvc:nsid %d:%s", f.nsid, f.vol)
}

// HostPath: a remote device has no host file here.
func (f *FS) HostPath(string) (string, error) { return "", vfs.ErrNotSupported }

// full turns a name relative to the FS into one relative to the device.
func (f *FS) full(name string) (string, error) {
	c, err := vfs.Clean(name)
	if err != nil {
		return "", err
	}
	return path.Join(f.vol, c), nil
}

// call is one command and what came back.
type call struct {
	op      nvmeof.Opcode
	a0, a1  uint64
	cdw14   uint32
	cdw15   uint32
	in, out []byte
}

// do sends c and returns the bytes of reply, or the errno, counting it
// in the FS's Stats.
func (f *FS) do(c *call) (int, error) {
	start := time.Now()
	n, err := f.send(c)
	k := &f.stats[kindOf(c.op)]
	k.ops.Add(1)
	k.nanos.Add(uint64(time.Since(start)))
	switch {
	case err != nil:
		k.errs.Add(1)
	case c.op == OpRead || c.op == OpReadRanges:
		k.bytes.Add(uint64(n))
	case c.op == OpWrite:
		k.bytes.Add(uint64(len(c.in)))
	}
	return n, err
}

// send sends c and returns the bytes of reply, or the errno.
func (f *FS) send(c *call) (int, error) {
	p := &host.Passthru{}
	p.Cmd.Opcode = c.op
	p.Cmd.NSID = f.nsid
	p.Cmd.CDW10, p.Cmd.CDW11 = lo(c.a0), hi(c.a0)
	p.Cmd.CDW12, p.Cmd.CDW13 = lo(c.a1), hi(c.a1)
	p.Cmd.CDW14, p.Cmd.CDW15 = c.cdw14, c.cdw15
	if mutating(c.op) || c.op == OpOpen {
		e := f.epoch()
		p.Cmd.CDW2, p.Cmd.CDW3 = lo(e), hi(e)
	}
	switch c.op.Direction() {
	case nvmeof.HostToController:
		p.Data = c.in
	case nvmeof.ControllerToHost:
		p.Data = c.out
	case nvmeof.Bidirectional:
		p.Payload, p.Data = c.in, c.out
	}
	p.ReplyLenInDW1 = c.op.Direction()&nvmeof.ControllerToHost != 0
	// RENAME, REMOVE and a creating OPEN are not idempotent: the host
	// fails them rather than send them twice after a reconnect.
	p.Idempotent = c.op != OpRename && c.op != OpRemove && !(c.op == OpOpen && c.a1&(FlagCreate|FlagExcl|FlagTrunc) != 0)
	if f.local != nil {
		if err := f.runLocal(p); err != nil {
			return 0, fmt.Errorf("devsvc: %s on %s: %w", OpName(c.op), f, err)
		}
	} else if err := f.ctrl.Exec(context.Background(), p); err != nil {
		return 0, fmt.Errorf("devsvc: %s on %s: %w", OpName(c.op), f, err)
	}
	if p.CQE.DW0 != 0 {
		e := syscall.Errno(p.CQE.DW0)
		if e == syscall.EKEYREVOKED {
			return 0, fmt.Errorf("%s: %w", f, ErrStaleEpoch)
		}
		return 0, e
	}
	return p.N, nil
}

// runLocal runs p on the local server as the target would: checked by
// PrepareVendor, then executed, its completion and count copied back.
func (f *FS) runLocal(p *host.Passthru) error {
	dataLen := len(p.Data)
	if p.Cmd.Opcode.Direction() == nvmeof.NoData {
		dataLen = 0
	}
	if st := f.local.PrepareVendor(&p.Cmd, dataLen, len(p.Payload)); !st.Success() {
		return st
	}
	vc := &target.VendorCommand{Cmd: &p.Cmd, Payload: p.Payload, Data: p.Data[:dataLen]}
	if st := f.local.ExecuteVendor(vc); !st.Success() {
		return st
	}
	p.CQE.DW0, p.CQE.DW1 = vc.DW0, vc.DW1
	p.N = min(max(vc.N, 0), dataLen)
	return nil
}

func (f *FS) nameCall(op nvmeof.Opcode, name string, out []byte) (int, error) {
	full, err := f.full(name)
	if err != nil {
		return 0, err
	}
	n, err := f.do(&call{op: op, in: []byte(full), out: out})
	if err != nil {
		return 0, &os.PathError{Op: OpName(op), Path: name, Err: err}
	}
	return n, nil
}

// Rename replaces newname with oldname.
func (f *FS) Rename(oldname, newname string) error {
	a, err := f.full(oldname)
	if err != nil {
		return err
	}
	b, err := f.full(newname)
	if err != nil {
		return err
	}
	if _, err := f.do(&call{op: OpRename, in: []byte(a + b), cdw15: uint32(len(a))}); err != nil {
		return &os.LinkError{Op: "rename", Old: oldname, New: newname, Err: err}
	}
	return nil
}

// Remove removes a file or an empty directory.
func (f *FS) Remove(name string) error { _, err := f.nameCall(OpRemove, name, nil); return err }

// MkdirAll creates a directory and its parents.
func (f *FS) MkdirAll(dir string) error { _, err := f.nameCall(OpMkdirAll, dir, nil); return err }

// SyncDir makes dir's entries durable.
func (f *FS) SyncDir(dir string) error { _, err := f.nameCall(OpSyncDir, dir, nil); return err }

// Stat describes name.
func (f *FS) Stat(name string) (fs.FileInfo, error) {
	var b [InfoSize]byte
	n, err := f.nameCall(OpStat, name, b[:])
	if err != nil {
		return nil, err
	}
	var i Info
	if err := i.Unmarshal(b[:n]); err != nil {
		return nil, err
	}
	return fileInfo{name: path.Base(name), i: i}, nil
}

// List returns the names in dir, sorted.
func (f *FS) List(dir string) ([]string, error) {
	buf := make([]byte, f.maxIO)
	n, err := f.nameCall(OpList, dir, buf)
	if err != nil {
		return nil, err
	}
	return parseNames(buf[:n])
}

// OpenFile opens name with os.O_* flags.
func (f *FS) OpenFile(name string, flag int) (vfs.File, error) {
	full, err := f.full(name)
	if err != nil {
		return nil, err
	}
	var wire uint32
	if flag&(os.O_RDWR|os.O_WRONLY) != 0 {
		wire |= FlagWrite
	}
	if flag&os.O_CREATE != 0 {
		wire |= FlagCreate
	}
	if flag&os.O_EXCL != 0 {
		wire |= FlagExcl
	}
	if flag&os.O_TRUNC != 0 {
		wire |= FlagTrunc
	}
	file := &file{fs: f, name: name, full: full, flags: wire}
	if err := file.open(wire); err != nil {
		return nil, &os.PathError{Op: "open", Path: name, Err: err}
	}
	return file, nil
}

// file is an open remote file. A handle the device forgot (it
// restarted: ESTALE) is opened again, without create or truncate, and
// the command sent once more.
type file struct {
	fs    *FS
	name  string
	full  string
	flags uint32

	mu     sync.Mutex // guards h and closed
	h      uint64
	closed bool
}

var _ vfs.Puncher = (*file)(nil)

func (f *file) open(flags uint32) error {
	var b [OpenReplySize]byte
	n, err := f.fs.do(&call{op: OpOpen, a1: uint64(flags), in: []byte(f.full), out: b[:]})
	if err != nil {
		return err
	}
	if n != OpenReplySize {
		return fmt.Errorf("%w: OPEN reply of %d bytes", ErrProtocol, n)
	}
	var i Info
	if err := i.Unmarshal(b[8:]); err != nil {
		return err
	}
	f.mu.Lock()
	f.h = binary.LittleEndian.Uint64(b[:])
	f.mu.Unlock()
	return nil
}

// cmd sends a handle command, reopening once after ESTALE.
func (f *file) cmd(c *call) (int, error) {
	for try := 0; ; try++ {
		f.mu.Lock()
		if f.closed {
			f.mu.Unlock()
			return 0, vfs.ErrClosed
		}
		h := f.h
		f.mu.Unlock()
		c.a0 = h
		n, err := f.fs.do(c)
		if !errors.Is(err, syscall.ESTALE) || try > 0 {
			return n, err
		}
		if err := f.open(f.flags &^ (FlagCreate | FlagExcl | FlagTrunc)); err != nil {
			return 0, err
		}
	}
}

func (f *file) pathErr(op string, err error) error {
	if err == nil || err == io.EOF {
		return err
	}
	return &os.PathError{Op: op, Path: f.name, Err: err}
}

// ReadAt reads len(p) bytes at off, in commands of at most maxIO bytes.
func (f *file) ReadAt(p []byte, off int64) (int, error) {
	if off < 0 {
		return 0, f.pathErr("read", syscall.EINVAL)
	}
	done := 0
	for done < len(p) {
		chunk := p[done:min(len(p), done+f.fs.maxIO)]
		n, err := f.cmd(&call{op: OpRead, a1: uint64(off) + uint64(done), cdw14: uint32(len(chunk)), out: chunk})
		done += n
		if err != nil {
			return done, f.pathErr("read", err)
		}
		if n < len(chunk) {
			return done, io.EOF
		}
	}
	return done, nil
}

// WriteAt writes p at off, in commands of at most maxIO bytes.
func (f *file) WriteAt(p []byte, off int64) (int, error) {
	if off < 0 {
		return 0, f.pathErr("write", syscall.EINVAL)
	}
	done := 0
	for done < len(p) {
		chunk := p[done:min(len(p), done+f.fs.maxIO)]
		if _, err := f.cmd(&call{op: OpWrite, a1: uint64(off) + uint64(done), in: chunk}); err != nil {
			return done, f.pathErr("write", err)
		}
		done += len(chunk)
	}
	return done, nil
}

// scratch holds the buffers ReadAtv and WriteAtv gather into: one
// command for a shard's header and data costs one round trip, where two
// cost two.
var scratch sync.Pool // of *[]byte

// gather returns a scratch buffer of n bytes, and its pool entry.
func gather(n int) ([]byte, *[]byte) {
	bp, _ := scratch.Get().(*[]byte)
	if bp == nil || cap(*bp) < n {
		b := make([]byte, n)
		bp = &b
	}
	return (*bp)[:n], bp
}

// scatter copies b into bufs in order, as far as it goes.
func scatter(bufs [][]byte, b []byte) {
	for _, dst := range bufs {
		if len(b) == 0 {
			return
		}
		b = b[copy(dst, b):]
	}
}

// vecLen is the bytes of bufs, and whether they fit one command.
func (f *file) vecLen(bufs [][]byte) (int, bool) {
	n := 0
	for _, b := range bufs {
		n += len(b)
	}
	return n, len(bufs) > 1 && n <= f.fs.maxIO
}

// ReadAtv fills bufs in order from off: with one READ when they fit one
// command, else one READ (or more) per buffer.
func (f *file) ReadAtv(bufs [][]byte, off int64) (int, error) {
	n, one := f.vecLen(bufs)
	if !one {
		return vfs.ReadAtvLoop(f, bufs, off)
	}
	b, bp := gather(n)
	defer scratch.Put(bp)
	got, err := f.ReadAt(b, off)
	scatter(bufs, b[:got])
	return got, err
}

// ReadRanges fills each bufs[i] from offs[i] with one READRANGES when
// they fit one command, else with a READ (or more) each. As ReadAt, it
// returns io.EOF when the file ends before the last range does; the
// count is the bytes filled, range after range.
func (f *file) ReadRanges(bufs [][]byte, offs []int64) (int, error) {
	n, one := f.vecLen(bufs)
	if !one || len(bufs) > MaxRanges || len(offs) != len(bufs) {
		done := 0
		for i, b := range bufs {
			k, err := f.ReadAt(b, offs[i])
			done += k
			if err != nil {
				return done, err
			}
		}
		return done, nil
	}
	// One scratch buffer: the reply, then the request.
	b, bp := gather(n + len(bufs)*RangeSize)
	defer scratch.Put(bp)
	req := b[n:n]
	for i, buf := range bufs {
		if offs[i] < 0 {
			return 0, f.pathErr("read", syscall.EINVAL)
		}
		req = appendRange(req, offs[i], len(buf))
	}
	got, err := f.cmd(&call{op: OpReadRanges, in: req, out: b[:n]})
	if err != nil {
		return 0, f.pathErr("read", err)
	}
	scatter(bufs, b[:got])
	if got < n {
		return got, io.EOF
	}
	return got, nil
}

var _ vfs.RangeReader = (*file)(nil)

// WriteAtv writes bufs in order at off: with one WRITE when they fit one
// command, else one WRITE (or more) per buffer.
func (f *file) WriteAtv(bufs [][]byte, off int64) (int, error) {
	n, one := f.vecLen(bufs)
	if !one {
		return vfs.WriteAtvLoop(f, bufs, off)
	}
	b, bp := gather(n)
	defer scratch.Put(bp)
	done := 0
	for _, src := range bufs {
		done += copy(b[done:], src)
	}
	return f.WriteAt(b, off)
}

// Sync makes the file's data and size durable on the device.
func (f *file) Sync() error {
	_, err := f.cmd(&call{op: OpSync})
	return f.pathErr("sync", err)
}

// Stat describes the open file.
func (f *file) Stat() (fs.FileInfo, error) {
	var b [InfoSize]byte
	n, err := f.cmd(&call{op: OpFstat, out: b[:]})
	if err != nil {
		return nil, f.pathErr("stat", err)
	}
	var i Info
	if err := i.Unmarshal(b[:n]); err != nil {
		return nil, err
	}
	return fileInfo{name: path.Base(f.name), i: i}, nil
}

// Truncate changes the file's size.
func (f *file) Truncate(size int64) error {
	if size < 0 {
		return f.pathErr("truncate", syscall.EINVAL)
	}
	_, err := f.cmd(&call{op: OpTruncate, a1: uint64(size)})
	return f.pathErr("truncate", err)
}

// Punch gives up the blocks under [off, off+n).
func (f *file) Punch(off, n int64) error {
	if off < 0 || n < 0 {
		return f.pathErr("punch", syscall.EINVAL)
	}
	_, err := f.cmd(&call{op: OpPunch, a1: uint64(off), cdw14: lo(uint64(n)), cdw15: hi(uint64(n))})
	return f.pathErr("punch", err)
}

// Close closes the handle on the device.
func (f *file) Close() error {
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		return vfs.ErrClosed
	}
	f.mu.Unlock()
	_, err := f.cmd(&call{op: OpClose})
	f.mu.Lock()
	f.closed = true
	f.mu.Unlock()
	if errors.Is(err, syscall.ESTALE) || errors.Is(err, syscall.EBADF) {
		err = nil // the device forgot it already
	}
	return f.pathErr("close", err)
}
