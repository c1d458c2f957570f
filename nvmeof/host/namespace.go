package host

import (
	"context"
	"fmt"
	"io"
	"math/bits"
	"sync"
	"sync/atomic"
	"time"

	"github.com/capsule-storage/capsule/nvmeof"
)

// Namespace is an NVM namespace of a controller: a block device of
// Size() bytes in blocks of BlockSize() bytes. Its methods are safe for
// concurrent use.
//
// ReadAt and WriteAt honour io.ReaderAt and io.WriterAt:
//   - ReadAt may start and end anywhere: it reads the blocks that cover
//     the range and copies the bytes asked for. A read that reaches the
//     end of the namespace returns the bytes up to it and io.EOF.
//   - WriteAt, WriteZeroes and Discard must start and end on block
//     boundaries (ErrUnaligned otherwise, nothing written). A write that
//     reaches past the end is refused whole (ErrOutOfRange).
//   - On error n is the number of bytes before the first command that
//     failed, which is less than len(p).
//   - Neither keeps p after returning. Data is copied through the
//     controller's registered buffers: into them before a write command
//     is sent, out of them when a read command completes.
type Namespace struct {
	c     *Controller
	nsid  uint32
	id    nvmeof.IdentifyNamespace
	bs    int
	shift uint
	size  int64
	oncs  uint16
	// changed is set when a reconnect found the namespace different.
	changed atomic.Bool
}

// adminTimeout bounds the admin commands of Namespace.
const adminTimeout = 30 * time.Second

// Namespace returns the active namespace nsid, identifying it on first
// use (Identify Namespace).
func (c *Controller) Namespace(nsid uint32) (*Namespace, error) {
	c.mu.Lock()
	ns := c.namespaces[nsid]
	c.mu.Unlock()
	if ns != nil {
		return ns, nil
	}
	if c.discovery {
		return nil, fmt.Errorf("%w: a discovery controller has no namespaces", ErrNotSupported)
	}
	if nsid == 0 || nsid == nvmeof.NSIDAll {
		return nil, fmt.Errorf("%w: nsid %#x", ErrNamespaceNotFound, nsid)
	}
	a, err := c.liveAssociation()
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(c.ctx, adminTimeout)
	defer cancel()
	buf := make([]byte, nvmeof.IdentifyDataSize)
	if err := a.admin.identify(ctx, nvmeof.CNSNamespace, nsid, buf); err != nil {
		return nil, err
	}
	ns = &Namespace{c: c, nsid: nsid, oncs: a.id.ONCS}
	if err := ns.id.UnmarshalBinary(buf); err != nil {
		return nil, fmt.Errorf("nvmeof/host: Identify Namespace %d: %w", nsid, err)
	}
	if ns.id.NSZE == 0 {
		return nil, fmt.Errorf("%w: nsid %d", ErrNamespaceNotFound, nsid)
	}
	bs, err := ns.id.BlockSize()
	if err != nil {
		return nil, fmt.Errorf("nvmeof/host: namespace %d: %w", nsid, err)
	}
	if f := ns.id.LBAF[ns.id.FormatIndex()]; f.MS != 0 {
		return nil, fmt.Errorf("%w: namespace %d carries %d bytes of metadata per block", ErrNotSupported, nsid, f.MS)
	}
	if int(bs) > a.maxTransfer || bs > 1<<20 {
		return nil, fmt.Errorf("%w: namespace %d has %d-byte blocks, more than one command carries (%d)", ErrNotSupported, nsid, bs, a.maxTransfer)
	}
	if ns.id.NSZE > uint64(1<<63-1)>>bits.TrailingZeros32(bs) {
		return nil, fmt.Errorf("%w: namespace %d is too large to address in bytes", ErrNotSupported, nsid)
	}
	ns.bs = int(bs)
	ns.shift = uint(bits.TrailingZeros32(bs))
	ns.size = int64(ns.id.NSZE) << ns.shift
	c.mu.Lock()
	if old := c.namespaces[nsid]; old != nil {
		ns = old
	} else {
		c.namespaces[nsid] = ns
	}
	c.mu.Unlock()
	return ns, nil
}

// Namespaces lists the active namespace IDs (Identify, CNS 02h).
func (c *Controller) Namespaces(ctx context.Context) ([]uint32, error) {
	a, err := c.liveAssociation()
	if err != nil {
		return nil, err
	}
	var ids []uint32
	buf := make([]byte, nvmeof.NamespaceListSize)
	after := uint32(0)
	for {
		if err := a.admin.identify(ctx, nvmeof.CNSActiveNamespaceList, after, buf); err != nil {
			return nil, err
		}
		n := len(ids)
		if ids, err = nvmeof.AppendNamespaceList(ids, buf); err != nil {
			return nil, err
		}
		if len(ids)-n < nvmeof.NamespaceListEntries {
			return ids, nil
		}
		after = ids[len(ids)-1]
	}
}

// NSID is the namespace ID.
func (ns *Namespace) NSID() uint32 { return ns.nsid }

// Size is the namespace's size in bytes (NSZE blocks).
func (ns *Namespace) Size() int64 { return ns.size }

// BlockSize is the logical block size in bytes.
func (ns *Namespace) BlockSize() int { return ns.bs }

// Identify returns the Identify Namespace data.
func (ns *Namespace) Identify() nvmeof.IdentifyNamespace { return ns.id }

// Controller is the controller the namespace belongs to.
func (ns *Namespace) Controller() *Controller { return ns.c }

// Submit starts r. It returns an error, and does not call r.Done, when r
// is invalid (ErrUnaligned, ErrOutOfRange, ErrInvalidRequest,
// ErrNotSupported), still in flight (ErrRequestBusy), or the controller
// is closed or dead. Otherwise r.Done is called (or r.Wait returns) once
// the request has completed. Submit does not block: when every command
// slot is busy, or the controller is reconnecting, the request waits in a
// queue. Submit does not allocate.
func (ns *Namespace) Submit(r *Request) error {
	if !r.state.CompareAndSwap(reqIdle, reqBusy) {
		return ErrRequestBusy
	}
	start, end, err := ns.check(r)
	if err == nil && ns.changed.Load() {
		err = ErrNamespaceChanged
	}
	if err != nil {
		r.state.Store(reqIdle)
		return err
	}
	r.ns, r.ctrl, r.raw = ns, ns.c, nil
	r.reset(start, end)
	r.queue = int(ns.c.rr.Add(1))
	if err := ns.c.start(r); err != nil {
		r.state.Store(reqIdle)
		return err
	}
	return nil
}

// check validates r and returns the device byte range it covers.
func (ns *Namespace) check(r *Request) (start, end int64, err error) {
	mask := int64(ns.bs - 1)
	var n int64
	switch r.Op {
	case OpRead, OpWrite:
		n = int64(len(r.Buf))
		if n == 0 || r.Length != 0 {
			return 0, 0, fmt.Errorf("%w: %v with %d bytes of Buf and Length %d", ErrInvalidRequest, r.Op, n, r.Length)
		}
	case OpWriteZeroes, OpDiscard:
		n = r.Length
		if n <= 0 || r.Buf != nil {
			return 0, 0, fmt.Errorf("%w: %v of Length %d (and Buf of %d bytes)", ErrInvalidRequest, r.Op, n, len(r.Buf))
		}
		bit, name := nvmeof.ONCSWriteZeroes, "Write Zeroes"
		if r.Op == OpDiscard {
			bit, name = nvmeof.ONCSDatasetManagement, "Dataset Management"
		}
		if ns.oncs&bit == 0 {
			return 0, 0, fmt.Errorf("%w: the controller does not support %s (ONCS %#x)", ErrNotSupported, name, ns.oncs)
		}
	case OpFlush:
		if r.Buf != nil || r.Length != 0 || r.Offset != 0 {
			return 0, 0, fmt.Errorf("%w: flush with a range", ErrInvalidRequest)
		}
		return 0, 1, nil
	default:
		return 0, 0, fmt.Errorf("%w: op %v", ErrInvalidRequest, r.Op)
	}
	if r.Offset < 0 || r.Offset > ns.size || n > ns.size-r.Offset {
		return 0, 0, fmt.Errorf("%w: %v of %d bytes at %d, namespace of %d bytes", ErrOutOfRange, r.Op, n, r.Offset, ns.size)
	}
	if r.Op != OpRead && (r.Offset|n)&mask != 0 {
		return 0, 0, fmt.Errorf("%w: %v of %d bytes at %d, blocks of %d bytes", ErrUnaligned, r.Op, n, r.Offset, ns.bs)
	}
	return r.Offset &^ mask, (r.Offset + n + mask) &^ mask, nil
}

// syncRequests holds the Requests of the blocking calls.
var syncRequests = sync.Pool{New: func() any { return &Request{wake: make(chan struct{}, 1)} }}

// run submits a pooled request set up by fill and waits for it.
func (ns *Namespace) run(op Op, off int64, buf []byte, length int64) (int, error) {
	r := syncRequests.Get().(*Request)
	r.Op, r.Offset, r.Buf, r.Length, r.N = op, off, buf, length, 0
	err := ns.Submit(r)
	if err == nil {
		err = r.Wait()
	}
	n := r.N
	r.Buf, r.Err, r.ns, r.ctrl = nil, nil, nil, nil
	syncRequests.Put(r)
	return n, err
}

// syncRunner runs one request and waits for it: Namespace and
// MultipathNamespace, whose synchronous calls share the helpers below.
type syncRunner interface {
	run(op Op, off int64, buf []byte, length int64) (int, error)
}

// readAt is ReadAt of a namespace of size bytes: io.ReaderAt's contract,
// io.EOF at and past the end.
func readAt(r syncRunner, size int64, p []byte, off int64) (int, error) {
	if off < 0 {
		return 0, fmt.Errorf("%w: read at %d", ErrOutOfRange, off)
	}
	if off >= size {
		return 0, io.EOF
	}
	eof := false
	if int64(len(p)) > size-off {
		p = p[:size-off]
		eof = true
	}
	if len(p) == 0 {
		return 0, nil
	}
	n, err := r.run(OpRead, off, p, 0)
	if err == nil && eof {
		err = io.EOF
	}
	return n, err
}

func writeAt(r syncRunner, p []byte, off int64) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	return r.run(OpWrite, off, p, 0)
}

// ranged runs a Write Zeroes or a Discard of length bytes at off.
func ranged(r syncRunner, op Op, off, length int64) error {
	if length == 0 {
		return nil
	}
	_, err := r.run(op, off, nil, length)
	return err
}

// ReadAt reads len(p) bytes at off (see Namespace for the contract).
func (ns *Namespace) ReadAt(p []byte, off int64) (int, error) { return readAt(ns, ns.size, p, off) }

// WriteAt writes p at off (see Namespace for the contract).
func (ns *Namespace) WriteAt(p []byte, off int64) (int, error) { return writeAt(ns, p, off) }

// Flush makes the writes completed so far durable (NVM Flush).
func (ns *Namespace) Flush() error {
	_, err := ns.run(OpFlush, 0, nil, 0)
	return err
}

// WriteZeroes zeroes length bytes at off (NVM Write Zeroes), both
// block-aligned. It fails with ErrNotSupported when the controller lacks
// the command.
func (ns *Namespace) WriteZeroes(off, length int64) error {
	return ranged(ns, OpWriteZeroes, off, length)
}

// Discard deallocates length bytes at off (Dataset Management with
// Attribute Deallocate), both block-aligned. Reads of deallocated blocks
// return what the namespace's DLFEAT says (zeros when DLFEAT reads 001b).
// It fails with ErrNotSupported when the controller lacks the command.
func (ns *Namespace) Discard(off, length int64) error { return ranged(ns, OpDiscard, off, length) }

// DeallocatedReadsZero reports whether the namespace promises that
// deallocated (discarded) blocks read as zeros (DLFEAT bits 2:0 = 001b).
func (ns *Namespace) DeallocatedReadsZero() bool {
	return ns.id.DLFEAT&7 == nvmeof.DLFEATReadZeroes
}

var (
	_ io.ReaderAt = (*Namespace)(nil)
	_ io.WriterAt = (*Namespace)(nil)
)
