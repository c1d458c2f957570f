package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/capsule-storage/capsule/nvmeof"
	"github.com/capsule-storage/capsule/nvmeof/host"
)

// jobConfig is what one fio job asks of its connection: the engine's
// options and the job's own I/O shape.
type jobConfig struct {
	// URI is the capsule URL (shm://, iwarp://, tcp://, rdma://), or
	// several separated by commas: the paths of one subsystem (NQN must
	// be set), used as host.DialMultipath uses them.
	URI string
	// NQN, when set, is the NVM subsystem to connect to; without it, the
	// first NVM subsystem of the discovery log at URI.
	NQN string
	// NSID is the namespace (default 1).
	NSID uint32
	// HostNQN, when set, is presented instead of the machine's.
	HostNQN string
	// Depth is the job's iodepth: the requests in flight at most.
	Depth int
	// MaxBlock is the job's largest block size in bytes.
	MaxBlock int
	// ReconnectTimeout is how long I/Os wait for a lost target before
	// they fail with EIO (0: the host's default).
	ReconnectTimeout time.Duration
	// Logger receives the host library's notes (connection losses).
	Logger *slog.Logger
}

// completion is one finished io_u: fio's pointer to it, the errno it
// failed with (0 on success) and the bytes not transferred.
type completion struct {
	tag   uint64
	errno int32
	resid int64
}

// job is one fio job's connection: its own Controller with one I/O queue
// of the job's depth, a pool of Requests, the requests fio queued and has
// not committed yet, and the completions not yet reaped by getevents.
//
// queue, commit, getevents and close run on the fio job's thread, one at
// a time; onDone runs on the host's queue goroutine.
type job struct {
	ctrl *host.Controller
	ns   *host.Namespace
	// mp and mns are set instead of ctrl and ns when URI lists several
	// paths.
	mp   *host.Multipath
	mns  *host.MultipathNamespace
	done func(*host.Request) // j.onDone, made once
	// mem is fio's I/O memory (allocMem), registered with the host
	// library: reads and writes in it move without a copy.
	mem []byte

	// Touched only by the fio thread.
	free    []*host.Request // Requests not in flight
	pending []*host.Request // queued by fio, not yet committed

	mu sync.Mutex // guards finished, back and want
	// finished are completions not yet handed to fio; back the Requests
	// that completed, to return to free on the fio thread.
	finished []completion
	back     []*host.Request
	// want is how many finished completions the fio thread waits for
	// (0: it is not waiting); the Done that reaches it rings wake.
	want int
	wake chan struct{}
}

// errBusy: queue was called with every Request in flight (fio keeps at
// most iodepth in flight, so it does not happen).
var errBusy = errors.New("fio-capsule: every request is in flight")

// openJob connects to cfg.URI and opens the namespace.
func openJob(ctx context.Context, cfg jobConfig) (*job, error) {
	if cfg.URI == "" {
		return nil, errors.New("--uri is required (shm://NAME, iwarp://HOST:PORT, tcp://HOST:PORT)")
	}
	if cfg.Depth < 1 {
		cfg.Depth = 1
	}
	if cfg.NSID == 0 {
		cfg.NSID = 1
	}
	maxTransfer := max(cfg.MaxBlock, 4096)
	opts := []host.Option{
		host.WithQueues(1),
		host.WithQueueDepth(min(cfg.Depth, 4095)),
		host.WithMaxTransfer(maxTransfer),
		// fio's buffers are the job's AllocBuffer memory and take no
		// large buffer; one is kept for a buffer outside it.
		host.WithBuffers(1),
	}
	if cfg.NQN != "" {
		opts = append(opts, host.WithSubsystem(cfg.NQN))
	}
	if cfg.HostNQN != "" {
		opts = append(opts, host.WithHostNQN(cfg.HostNQN))
	}
	if cfg.ReconnectTimeout > 0 {
		opts = append(opts, host.WithCtrlLossTimeout(cfg.ReconnectTimeout))
	}
	if cfg.Logger != nil {
		opts = append(opts, host.WithLogger(cfg.Logger))
	}
	if urls := strings.Split(cfg.URI, ","); len(urls) > 1 {
		return openMultipath(ctx, cfg, urls, opts)
	}
	c, err := host.Dial(ctx, cfg.URI, opts...)
	if err != nil {
		if cfg.NQN != "" {
			return nil, subsystemError(ctx, cfg, err)
		}
		return nil, fmt.Errorf("connecting to %s: %w", cfg.URI, err)
	}
	ns, err := c.Namespace(cfg.NSID)
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("namespace %d of %s: %w", cfg.NSID, cfg.URI, err)
	}
	return newJob(cfg, &job{ctrl: c, ns: ns}), nil
}

// openMultipath connects to every URL as a path of the subsystem cfg.NQN
// names (host.DialMultipath) and opens the namespace on them.
func openMultipath(ctx context.Context, cfg jobConfig, urls []string, opts []host.Option) (*job, error) {
	if cfg.NQN == "" {
		return nil, errors.New("--uri with several paths needs --nqn")
	}
	m, err := host.DialMultipath(ctx, urls, opts...)
	if err != nil {
		return nil, fmt.Errorf("connecting to %s at %s: %w", cfg.NQN, cfg.URI, err)
	}
	ns, err := m.Namespace(cfg.NSID)
	if err != nil {
		m.Close()
		return nil, fmt.Errorf("namespace %d of %s: %w", cfg.NSID, cfg.URI, err)
	}
	return newJob(cfg, &job{mp: m, mns: ns}), nil
}

// newJob readies j, connected, for cfg.Depth requests in flight.
func newJob(cfg jobConfig, j *job) *job {
	j.free = make([]*host.Request, 0, cfg.Depth)
	j.pending = make([]*host.Request, 0, cfg.Depth)
	j.finished = make([]completion, 0, cfg.Depth)
	j.back = make([]*host.Request, 0, cfg.Depth)
	j.wake = make(chan struct{}, 1)
	j.done = j.onDone
	for range cfg.Depth {
		j.free = append(j.free, &host.Request{Done: j.done})
	}
	return j
}

// subsystemError explains why the subsystem --nqn names could not be
// connected to: when the discovery log at the URL does not list it, the
// error says so and names the NVM subsystems it does list.
func subsystemError(ctx context.Context, cfg jobConfig, err error) error {
	var dopts []host.Option
	if cfg.HostNQN != "" {
		dopts = append(dopts, host.WithHostNQN(cfg.HostNQN))
	}
	entries, derr := host.Discover(ctx, cfg.URI, dopts...)
	if derr != nil {
		return fmt.Errorf("connecting to subsystem %s at %s: %w", cfg.NQN, cfg.URI, err)
	}
	var served []string
	for _, e := range entries {
		if e.SUBTYPE != nvmeof.SubsystemNVMe {
			continue
		}
		if e.SUBNQN == cfg.NQN {
			return fmt.Errorf("connecting to subsystem %s at %s: %w", cfg.NQN, cfg.URI, err)
		}
		if !slices.Contains(served, e.SUBNQN) {
			served = append(served, e.SUBNQN)
		}
	}
	if len(served) == 0 {
		return fmt.Errorf("--nqn=%s: %s serves no NVM subsystem", cfg.NQN, cfg.URI)
	}
	return fmt.Errorf("--nqn=%s: %s serves no such subsystem (it serves %s)", cfg.NQN, cfg.URI, strings.Join(served, ", "))
}

// size is the namespace's size in bytes; blockSize its block size.
func (j *job) size() int64 {
	if j.mns != nil {
		return j.mns.Size()
	}
	return j.ns.Size()
}

func (j *job) blockSize() int {
	if j.mns != nil {
		return j.mns.BlockSize()
	}
	return j.ns.BlockSize()
}

func (j *job) close() error {
	if j.mp != nil {
		return j.mp.Close()
	}
	return j.ctrl.Close()
}

// info describes the job's controller; with several paths, the first
// connected one's.
func (j *job) info() host.Info {
	c := j.ctrl
	if j.mp != nil {
		for _, p := range j.mp.Paths() {
			if p.Controller != nil {
				c = p.Controller
				break
			}
		}
	}
	if c == nil {
		return host.Info{}
	}
	i, _ := c.Info()
	return i
}

// allocMem returns size bytes of the controller's registered memory
// (host.Controller.AllocBuffer) for fio's io_u buffers, once per job:
// fio's reads and writes then move straight between it and the target.
func (j *job) allocMem(size int) ([]byte, error) {
	if j.mem != nil {
		return nil, errors.New("the job's I/O memory is already allocated")
	}
	if j.mp != nil {
		// No one controller's memory serves every path: plain memory
		// outside the Go heap, which each path moves through its own
		// buffers (a copy on shm and RDMA, none on TCP).
		mem, err := unix.Mmap(-1, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
		if err != nil {
			return nil, fmt.Errorf("allocating %d bytes of I/O memory: %w", size, err)
		}
		j.mem = mem
		return mem, nil
	}
	mem, err := j.ctrl.AllocBuffer(size)
	if err != nil {
		return nil, fmt.Errorf("allocating %d bytes of registered I/O memory: %w", size, err)
	}
	j.mem = mem
	return mem, nil
}

// freeMem releases what allocMem returned; no I/O may be in flight.
func (j *job) freeMem() error {
	if j.mem == nil {
		return nil
	}
	var err error
	if j.mp != nil {
		err = unix.Munmap(j.mem)
	} else {
		err = j.ctrl.FreeBuffer(j.mem)
	}
	j.mem = nil
	return err
}

// queue takes one io_u (tag): op at off, with buf (reads and writes) or
// length bytes (trims). It is sent at the next commit. The only error is
// errBusy: the io_u was not taken.
func (j *job) queue(tag uint64, op host.Op, off int64, buf []byte, length int64, fua bool) error {
	if len(j.free) == 0 {
		j.reclaim()
		if len(j.free) == 0 {
			return errBusy
		}
	}
	r := j.free[len(j.free)-1]
	j.free = j.free[:len(j.free)-1]
	r.Op, r.Offset, r.FUA, r.Tag = op, off, fua, tag
	r.Buf, r.Length = nil, 0
	switch op {
	case host.OpRead, host.OpWrite:
		r.Buf = buf
	case host.OpDiscard, host.OpWriteZeroes:
		r.Length = length
	}
	j.pending = append(j.pending, r)
	return nil
}

// commit submits what queue took since the last commit, as one batch:
// their capsules go out in one post (SubmitBatch). A request the host
// refuses at once completes with its errno, and the batch goes on after
// it.
func (j *job) commit() {
	rest := j.pending
	if j.mns != nil {
		for _, r := range rest {
			if err := j.mns.Submit(r); err != nil {
				r.Err, r.N = err, 0
				j.finish(r)
			}
		}
		rest = nil
	}
	for len(rest) > 0 {
		n, err := j.ns.SubmitBatch(0, rest)
		if err == nil {
			break
		}
		r := rest[n]
		r.Err, r.N = err, 0
		j.finish(r)
		rest = rest[n+1:]
	}
	clear(j.pending)
	j.pending = j.pending[:0]
}

// onDone is every Request's Done, on the host's queue goroutine.
func (j *job) onDone(r *host.Request) { j.finish(r) }

// finish records r's outcome and wakes the fio thread when it waits for
// no more than are now finished.
func (j *job) finish(r *host.Request) {
	c := completion{tag: r.Tag}
	if r.Err != nil {
		c.errno = int32(errnoOf(r.Err))
		c.resid = int64(max(len(r.Buf)-r.N, 0))
		if r.Buf == nil {
			c.resid = r.Length
		}
	}
	j.mu.Lock()
	j.finished = append(j.finished, c)
	j.back = append(j.back, r)
	ring := j.want > 0 && len(j.finished) >= j.want
	if ring {
		j.want = 0
	}
	j.mu.Unlock()
	if ring {
		select {
		case j.wake <- struct{}{}:
		default:
		}
	}
}

// reclaim moves completed Requests back to the free list. On the fio
// thread, with j.mu not held.
func (j *job) reclaim() {
	j.mu.Lock()
	j.free = append(j.free, j.back...)
	clear(j.back)
	j.back = j.back[:0]
	j.mu.Unlock()
}

// getevents waits until at least minEvents completions are finished (for
// at most timeout when timeout >= 0; forever when it is negative), then
// hands up to maxEvents of them to out, oldest first, and returns how
// many it handed.
func (j *job) getevents(minEvents, maxEvents int, timeout time.Duration, out func(i int, c completion)) int {
	var timer *time.Timer
	for {
		j.mu.Lock()
		if len(j.finished) >= minEvents || timeout == 0 {
			break
		}
		j.want = minEvents
		j.mu.Unlock()
		if timeout < 0 {
			<-j.wake
			continue
		}
		if timer == nil {
			timer = time.NewTimer(timeout)
			defer timer.Stop()
		}
		select {
		case <-j.wake:
		case <-timer.C:
			timeout = 0
		}
	}
	// j.mu is held.
	n := min(len(j.finished), maxEvents)
	for i := range n {
		out(i, j.finished[i])
	}
	rest := copy(j.finished, j.finished[n:])
	j.finished = j.finished[:rest]
	j.want = 0
	j.free = append(j.free, j.back...)
	clear(j.back)
	j.back = j.back[:0]
	j.mu.Unlock()
	// A wake rung for an earlier wait that was satisfied without it.
	select {
	case <-j.wake:
	default:
	}
	return n
}

// errnoOf maps a request's error to the errno fio reports: EINVAL for a
// request the namespace refuses (unaligned, out of range), EOPNOTSUPP
// for a command the controller lacks, EIO for everything else: NVMe
// errors and a controller lost past the reconnect timeout.
func errnoOf(err error) syscall.Errno {
	switch {
	case err == nil:
		return 0
	case errors.Is(err, host.ErrUnaligned), errors.Is(err, host.ErrOutOfRange), errors.Is(err, host.ErrInvalidRequest):
		return syscall.EINVAL
	case errors.Is(err, host.ErrNotSupported):
		return syscall.EOPNOTSUPP
	default:
		return syscall.EIO
	}
}
