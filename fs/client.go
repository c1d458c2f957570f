package fs

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/capsule-storage/capsule/fs/internal/proto"
	"github.com/capsule-storage/capsule/nvmeof"
	// Dial takes tcp://, iwarp://, shm:// (and rdma:// where built) URLs:
	// nvmeof/host links the providers in.
	"github.com/capsule-storage/capsule/nvmeof/host"
)

// Client is a connection to a file namespace of a capsule target. Its
// methods are safe for concurrent use. Every error a method returns is,
// or wraps, a syscall.Errno (errors.As finds it); transport failures are
// syscall.EIO once the reconnect timeout has passed.
//
// The inode methods (Lookup, GetAttr, ... RemoveXattr) are the low-level
// API the FUSE mount is written against: one round trip each, except
// Read, Write and ReadDir, which split what one command cannot carry.
// The path methods (Open, Stat, Create, ...) in iofs.go build on them.
type Client struct {
	url      string
	cfg      config
	log      *slog.Logger
	hostOpts []host.Option
	uid, gid uint32
	// lim is what the current controller takes; replaced when the client
	// dials again.
	lim atomic.Pointer[limits]

	ctrl atomic.Pointer[host.Controller]
	// bufs is the registered buffers of ctrl (buffers.go), replaced with
	// it.
	bufs atomic.Pointer[bufferSet]
	// redial serializes replacing a controller the host library gave up
	// on; it guards nothing else.
	redial sync.Mutex
	closed atomic.Bool

	calls sync.Pool // *host.Passthru

	// reqBase (random, top 32 bits) and reqSeq make the request IDs of the
	// operations that are not idempotent (protocol.go): the server answers
	// one sent again after a loss with its first run's outcome.
	reqBase uint64
	reqSeq  atomic.Uint32

	// self is the process's own credential, which operations run for
	// when their context names none (WithCred).
	self *Credential

	// handles are the open handles, reopened after a reconnect
	// (reclaim.go).
	handles handleTable
}

// Credential is a Cred made ready to send (its record and ID), for a
// caller that runs many operations for one Cred: WithCredential attaches
// it to a context without the work WithCred does each time. It is
// immutable and safe to share.
type Credential struct {
	rec []byte
	id  uint64
}

// NewCredential prepares c: its groups sorted, without repeats, cut to
// the protocol's 1024.
func NewCredential(c Cred) *Credential {
	g := slices.Clone(c.Groups)
	slices.Sort(g)
	g = slices.Compact(g)
	if len(g) > proto.MaxGroups {
		g = g[:proto.MaxGroups]
	}
	pc := proto.Cred{UID: c.Uid, GID: c.Gid, Groups: g}
	rec := make([]byte, pc.Size())
	pc.MarshalTo(rec)
	return &Credential{rec: rec, id: pc.ID()}
}

// processCred is the calling process's uid, gid and supplementary
// groups.
func processCred() Cred {
	c := Cred{Uid: uint32(syscall.Getuid()), Gid: uint32(syscall.Getgid())}
	if gs, err := syscall.Getgroups(); err == nil {
		for _, g := range gs {
			c.Groups = append(c.Groups, uint32(g))
		}
	}
	return c
}

type credKey struct{}

// WithCred returns a context under which the client's operations run for
// c instead of the process's own credentials: the server checks access
// as c (the FUSE mount passes each request's caller this way).
func WithCred(ctx context.Context, c Cred) context.Context {
	return WithCredential(ctx, NewCredential(c))
}

// WithCredential is WithCred for a prepared credential.
func WithCredential(ctx context.Context, c *Credential) context.Context {
	return context.WithValue(ctx, credKey{}, c)
}

// credOf returns the credential an operation under ctx runs for.
func (c *Client) credOf(ctx context.Context) *Credential {
	if v, ok := ctx.Value(credKey{}).(*Credential); ok && v != nil {
		return v
	}
	return c.self
}

// Dial connects to the target at url (tcp://host:port, iwarp://host:port,
// shm://name)
// and finds its file namespace.
func Dial(ctx context.Context, url string, opts ...Option) (*Client, error) {
	cfg := config{reconnectTimeout: DefaultReconnectTimeout, logger: slog.Default()}
	for _, o := range opts {
		o(&cfg)
	}
	if cfg.reconnectTimeout <= 0 {
		return nil, fmt.Errorf("capfs: reconnect timeout %v: %w", cfg.reconnectTimeout, syscall.EINVAL)
	}
	c := &Client{url: url, cfg: cfg, log: cfg.logger, uid: uint32(syscall.Getuid()), gid: uint32(syscall.Getgid()),
		self: NewCredential(processCred())}
	var nonce [4]byte
	if _, err := rand.Read(nonce[:]); err != nil {
		return nil, fmt.Errorf("capfs: %w: %w", syscall.EIO, err)
	}
	c.reqBase = uint64(binary.LittleEndian.Uint32(nonce[:])|1) << 32
	c.hostOpts = []host.Option{
		host.WithCtrlLossTimeout(cfg.reconnectTimeout),
		host.WithMaxTransfer(1 << 20),
		host.WithLogger(cfg.logger),
		host.WithReconnectDelay(50*time.Millisecond, time.Second),
	}
	if cfg.subNQN != "" {
		c.hostOpts = append(c.hostOpts, host.WithSubsystem(cfg.subNQN))
	}
	if cfg.hostNQN != "" {
		c.hostOpts = append(c.hostOpts, host.WithHostNQN(cfg.hostNQN))
	}
	if cfg.queues > 0 {
		c.hostOpts = append(c.hostOpts, host.WithQueues(cfg.queues))
	}
	ctrl, err := host.Dial(ctx, url, c.hostOpts...)
	if err != nil {
		return nil, fmt.Errorf("capfs: %w: %w", syscall.EIO, err)
	}
	if err := c.adopt(ctx, ctrl); err != nil {
		ctrl.Close()
		return nil, err
	}
	c.ctrl.Store(ctrl)
	c.bufs.Store(&bufferSet{ctrl: ctrl})
	return c, nil
}

// limits are what one command to the current controller carries, and
// where the file namespace is.
type limits struct {
	nsid        uint32
	maxTransfer int // data through SGL1
	icd         int // request bytes in the capsule
}

// adopt reads a new controller's limits and finds the file namespace.
func (c *Client) adopt(ctx context.Context, ctrl *host.Controller) error {
	info, err := ctrl.Info()
	if err != nil {
		return fmt.Errorf("capfs: %w: %w", syscall.EIO, err)
	}
	lim := &limits{maxTransfer: info.MaxTransfer, icd: info.InCapsule, nsid: c.cfg.nsid}
	if lim.icd < proto.MaxName+proto.SetAttrSize {
		return fmt.Errorf("capfs: the controller takes %d bytes of in-capsule data, too few for file operations: %w", lim.icd, syscall.EPROTO)
	}
	if lim.nsid == 0 {
		ids, err := ctrl.Namespaces(ctx)
		if err != nil {
			return fmt.Errorf("capfs: %w: %w", syscall.EIO, err)
		}
		buf := make([]byte, proto.StatFSSize)
		for _, id := range ids {
			p := &host.Passthru{Cmd: nvmeof.Command{Opcode: proto.OpStatFS, NSID: id}, Data: buf, Idempotent: true}
			if ctrl.Exec(ctx, p) == nil && p.CQE.DW0 == 0 {
				lim.nsid = id
				break
			}
		}
		if lim.nsid == 0 {
			return fmt.Errorf("capfs: %s has no file namespace: %w", ctrl.SubsystemNQN(), syscall.ENODEV)
		}
	}
	c.lim.Store(lim)
	return nil
}

// Close ends the connection. Operations in flight fail.
func (c *Client) Close() error {
	c.closed.Store(true)
	c.redial.Lock()
	defer c.redial.Unlock()
	// The controller closes now, or when the last Buffer out comes back.
	return c.bufs.Load().retire()
}

// Controller returns the host library's controller the client runs on
// now (it changes when the client dials again after a long outage).
func (c *Client) Controller() *host.Controller { return c.ctrl.Load() }

// controller returns a controller to run on. When the host library gave
// up on the current one (the target was away longer than the reconnect
// timeout), it dials again, for up to the reconnect timeout.
func (c *Client) controller(ctx context.Context) (*host.Controller, error) {
	ctrl := c.ctrl.Load()
	if ctrl.State() != host.StateDead {
		return ctrl, nil
	}
	c.redial.Lock()
	defer c.redial.Unlock()
	if c.closed.Load() {
		return nil, fmt.Errorf("capfs: client closed: %w", syscall.EIO)
	}
	if ctrl = c.ctrl.Load(); ctrl.State() != host.StateDead {
		return ctrl, nil
	}
	dctx, cancel := context.WithTimeout(ctx, c.cfg.reconnectTimeout)
	defer cancel()
	var last error
	for {
		n, err := host.Dial(dctx, c.url, c.hostOpts...)
		if err == nil {
			if err = c.adopt(dctx, n); err == nil {
				// The old controller closes once its buffers are back.
				c.bufs.Swap(&bufferSet{ctrl: n}).retire()
				c.ctrl.Store(n)
				c.log.Info("capfs: connected again", "url", c.url)
				return n, nil
			}
			n.Close()
		}
		last = err
		select {
		case <-dctx.Done():
			return nil, fmt.Errorf("capfs: target unreachable for %v: %w: %w", c.cfg.reconnectTimeout, syscall.EIO, last)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// call is one file operation's command.
type call struct {
	op       nvmeof.Opcode
	a0, a1   uint64
	cdw2     uint32 // with cdw3: FALLOCATE's length
	cdw3     uint32
	cdw14    uint32
	cdw15    uint32
	in       []byte // request bytes: the data of 01b, the payload of 11b
	out      []byte // reply buffer of 10b and 11b
	idem     bool   // safe to send again after a loss
	n        int    // reply bytes received
	dw1      uint32
	noErrno  bool // DW0 is not checked (the caller wants it)
	dw0      uint32
	attempts int
	reclaim  bool // a reclaim's OPEN (reclaim.go): no reclaim before it
}

// do runs c on the target and turns its outcome into an errno.
//
// When the host library gives up on a connection before the reconnect
// timeout has passed since the operation began (it does when the target
// refuses a reconnect for good, such as a queue's Connect naming a
// controller a new cut has just ended), do dials again and sends the
// command once more: it is idempotent, or carries a request ID the
// server answers from its memory.
func (c *Client) do(ctx context.Context, k *call) error {
	if c.closed.Load() {
		return fmt.Errorf("capfs: client closed: %w", syscall.EIO)
	}
	p, _ := c.calls.Get().(*host.Passthru)
	if p == nil {
		p = new(host.Passthru)
	}
	defer c.calls.Put(p)
	p.Cmd = nvmeof.Command{Opcode: k.op, CDW2: k.cdw2, CDW3: k.cdw3, CDW14: k.cdw14, CDW15: k.cdw15}
	proto.SetArgs(&p.Cmd, k.a0, k.a1)
	var cr *Credential
	if k.op != proto.OpCred {
		cr = c.credOf(ctx)
		p.Cmd.MPTR = cr.id
	}
	registered := 0
	if !k.idem && proto.HasRequestID(k.op) {
		// Not idempotent: a request ID makes sending it again safe.
		id := c.reqBase | uint64(c.reqSeq.Add(1))
		p.Cmd.CDW2, p.Cmd.CDW3 = proto.Lo(id), proto.Hi(id)
		k.idem = true
	}
	p.ReplyLenInDW1 = k.op.Direction()&nvmeof.ControllerToHost != 0
	p.Idempotent = k.idem
	deadline := time.Now().Add(c.cfg.reconnectTimeout)
	for {
		ctrl, err := c.controller(ctx)
		if err != nil {
			return err
		}
		if !k.reclaim && k.op != proto.OpCred {
			// A CRED depends on no handle, and a reclaim's OPEN sends
			// one when the restarted server asks (ENOKEY).
			c.settle(ctx, ctrl)
		}
		p.Cmd.NSID = c.lim.Load().nsid
		switch k.op.Direction() {
		case nvmeof.HostToController:
			p.Data = k.in
		case nvmeof.ControllerToHost:
			p.Data = k.out
		case nvmeof.Bidirectional:
			p.Payload, p.Data = k.in, k.out
		}
		err = ctrl.Exec(ctx, p)
		k.n, k.dw1, k.dw0 = p.N, p.CQE.DW1, p.CQE.DW0
		p.Payload, p.Data = nil, nil
		if err != nil && k.idem && errors.Is(err, host.ErrControllerLost) && ctrl.State() == host.StateDead &&
			time.Now().Before(deadline) && !c.closed.Load() && ctx.Err() == nil {
			c.log.Debug("capfs: the connection was given up early; dialing again", "op", proto.OpName(k.op), "err", err)
			var cancel context.CancelFunc
			ctx, cancel = context.WithDeadline(ctx, deadline)
			defer cancel()
			continue
		}
		if err != nil {
			return c.transportError(k.op, err)
		}
		if k.dw0 == uint32(syscall.ENOKEY) && k.op != proto.OpCred && registered < 3 {
			// The server does not hold the credential (it restarted, or
			// never saw it): nothing ran; register it and send again.
			registered++
			if err := c.do(ctx, &call{op: proto.OpCred, a0: cr.id, in: cr.rec, idem: true}); err != nil {
				return err
			}
			continue
		}
		if k.dw0 != 0 && !k.noErrno {
			return syscall.Errno(k.dw0)
		}
		return nil
	}
}

// transportError maps what the host library reports to an errno.
func (c *Client) transportError(op nvmeof.Opcode, err error) error {
	var ce *host.CommandError
	switch {
	case errors.As(err, &ce) && ce.Status.Code() == nvmeof.StatusInvalidOpcode:
		return fmt.Errorf("capfs: %s: %w: %w", proto.OpName(op), syscall.ENOSYS, err)
	case errors.As(err, &ce) && ce.Status.Code() == nvmeof.StatusInvalidField:
		return fmt.Errorf("capfs: %s: %w: %w", proto.OpName(op), syscall.EINVAL, err)
	case errors.Is(err, host.ErrInvalidRequest):
		return fmt.Errorf("capfs: %s: %w: %w", proto.OpName(op), syscall.EINVAL, err)
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("capfs: %s: %w: %w", proto.OpName(op), syscall.EINTR, err)
	}
	return fmt.Errorf("capfs: %s: %w: %w", proto.OpName(op), syscall.EIO, err)
}

// checkName refuses names the server would refuse, without a round trip.
func checkName(name string) error {
	switch {
	case len(name) > proto.MaxName:
		return syscall.ENAMETOOLONG
	case name == "":
		return syscall.ENOENT
	}
	for i := 0; i < len(name); i++ {
		if name[i] == '/' || name[i] == 0 {
			return syscall.EINVAL
		}
	}
	return nil
}

func attrOf(p *proto.Attr) Attr {
	return Attr{
		Ino: Ino(p.Ino), Gen: p.Gen, Mode: p.Mode, Nlink: p.Nlink, Uid: p.UID, Gid: p.GID, Rdev: p.Rdev,
		Size: p.Size, Blocks: p.Blocks,
		Atime: time.Unix(0, p.Atime), Mtime: time.Unix(0, p.Mtime), Ctime: time.Unix(0, p.Ctime),
	}
}

// attrReply decodes the Attr at the start of a reply.
func attrReply(k *call, b []byte) (Attr, error) {
	var a proto.Attr
	if k.n < proto.AttrSize || a.Unmarshal(b) != nil {
		return Attr{}, fmt.Errorf("capfs: %s: malformed attributes in the reply: %w", proto.OpName(k.op), syscall.EIO)
	}
	return attrOf(&a), nil
}

// attrCall runs an operation whose reply is an Attr.
func (c *Client) attrCall(ctx context.Context, k *call) (Attr, error) {
	var buf [proto.AttrSize]byte
	k.out = buf[:]
	if err := c.do(ctx, k); err != nil {
		return Attr{}, err
	}
	return attrReply(k, buf[:])
}

// Lookup finds name in the directory parent. "." and ".." are looked up
// as POSIX says (".." of the root is the root).
func (c *Client) Lookup(ctx context.Context, parent Ino, name string) (Attr, error) {
	if err := checkName(name); err != nil {
		return Attr{}, err
	}
	return c.attrCall(ctx, &call{op: proto.OpLookup, a0: uint64(parent), in: []byte(name), idem: true})
}

// GetAttr returns an inode's attributes.
func (c *Client) GetAttr(ctx context.Context, ino Ino) (Attr, error) {
	return c.attrCall(ctx, &call{op: proto.OpGetAttr, a0: uint64(ino), idem: true})
}

// SetAttr changes the attributes in (truncating or extending the file
// when Size is set) and returns the new ones.
func (c *Client) SetAttr(ctx context.Context, ino Ino, in SetAttr) (Attr, error) {
	var s proto.SetAttr
	if in.Mode != nil {
		s.Valid |= proto.SetMode
		s.Mode = *in.Mode & 0o7777
	}
	if in.Uid != nil {
		s.Valid |= proto.SetUID
		s.UID = *in.Uid
	}
	if in.Gid != nil {
		s.Valid |= proto.SetGID
		s.GID = *in.Gid
	}
	if in.Size != nil {
		if *in.Size > 1<<63-1 {
			return Attr{}, syscall.EFBIG
		}
		s.Valid |= proto.SetSize
		s.Size = *in.Size
	}
	switch {
	case in.AtimeNow:
		s.Valid |= proto.SetAtimeNow
	case in.Atime != nil:
		s.Valid |= proto.SetAtime
		s.Atime = in.Atime.UnixNano()
	}
	switch {
	case in.MtimeNow:
		s.Valid |= proto.SetMtimeNow
	case in.Mtime != nil:
		s.Valid |= proto.SetMtime
		s.Mtime = in.Mtime.UnixNano()
	}
	b := make([]byte, proto.SetAttrSize)
	s.MarshalTo(b)
	// Setting absolute values is idempotent; "now" moves on, harmlessly.
	return c.attrCall(ctx, &call{op: proto.OpSetAttr, a0: uint64(ino), in: b, idem: true})
}

func ids(uid, gid uint32) uint64 { return uint64(uid) | uint64(gid)<<32 }

// Mknod makes a regular file (S_IFREG), a FIFO (S_IFIFO), a socket
// (S_IFSOCK), or for a root caller a block or character device (S_IFBLK,
// S_IFCHR, rdev in Linux's encoding; EPERM for others); other types get
// EINVAL.
func (c *Client) Mknod(ctx context.Context, parent Ino, name string, mode, rdev, uid, gid uint32) (Attr, error) {
	if err := checkName(name); err != nil {
		return Attr{}, err
	}
	return c.attrCall(ctx, &call{op: proto.OpMknod, a0: uint64(parent), a1: ids(uid, gid), cdw14: mode, cdw15: rdev, in: []byte(name)})
}

// Mkdir makes a directory.
func (c *Client) Mkdir(ctx context.Context, parent Ino, name string, mode, uid, gid uint32) (Attr, error) {
	if err := checkName(name); err != nil {
		return Attr{}, err
	}
	return c.attrCall(ctx, &call{op: proto.OpMkdir, a0: uint64(parent), a1: ids(uid, gid), cdw14: mode & 0o7777, in: []byte(name)})
}

// Create makes and opens a regular file, or with flags lacking O_EXCL
// opens an existing one (O_TRUNC truncates it).
func (c *Client) Create(ctx context.Context, parent Ino, name string, mode, uid, gid uint32, flags int) (Attr, Handle, error) {
	if err := checkName(name); err != nil {
		return Attr{}, 0, err
	}
	var buf [proto.CreateReplyLen]byte
	k := &call{op: proto.OpCreate, a0: uint64(parent), a1: ids(uid, gid), cdw14: mode & 0o7777, cdw15: uint32(flags), in: []byte(name), out: buf[:]}
	if err := c.do(ctx, k); err != nil {
		return Attr{}, 0, err
	}
	a, err := attrReply(k, buf[:])
	if err != nil || k.n != proto.CreateReplyLen {
		return Attr{}, 0, fmt.Errorf("capfs: CREATE: malformed reply: %w", syscall.EIO)
	}
	h := Handle(le64(buf[proto.AttrSize:]))
	c.handles.opened(h, a.Ino, flags, c.credOf(ctx))
	return a, h, nil
}

// Symlink makes a symbolic link to target.
func (c *Client) Symlink(ctx context.Context, parent Ino, name, target string, uid, gid uint32) (Attr, error) {
	if err := checkName(name); err != nil {
		return Attr{}, err
	}
	if len(target) > proto.MaxSymlink {
		return Attr{}, syscall.ENAMETOOLONG
	}
	if len(name)+len(target) > c.lim.Load().icd {
		return Attr{}, syscall.ENAMETOOLONG
	}
	in, cdw15 := proto.AppendPair(nil, name, target)
	return c.attrCall(ctx, &call{op: proto.OpSymlink, a0: uint64(parent), a1: ids(uid, gid), cdw15: cdw15, in: in})
}

// Readlink returns a symbolic link's target.
func (c *Client) Readlink(ctx context.Context, ino Ino) (string, error) {
	buf := make([]byte, proto.MaxSymlink)
	k := &call{op: proto.OpReadlink, a0: uint64(ino), out: buf, idem: true}
	if err := c.do(ctx, k); err != nil {
		return "", err
	}
	return string(buf[:k.n]), nil
}

// Link makes newName in newParent another name of ino.
func (c *Client) Link(ctx context.Context, ino, newParent Ino, newName string) (Attr, error) {
	if err := checkName(newName); err != nil {
		return Attr{}, err
	}
	return c.attrCall(ctx, &call{op: proto.OpLink, a0: uint64(ino), a1: uint64(newParent), in: []byte(newName)})
}

// Unlink removes a name that is not a directory. The file lives on while
// a handle is open on it.
func (c *Client) Unlink(ctx context.Context, parent Ino, name string) error {
	if err := checkName(name); err != nil {
		return err
	}
	return c.do(ctx, &call{op: proto.OpUnlink, a0: uint64(parent), in: []byte(name)})
}

// Rmdir removes an empty directory.
func (c *Client) Rmdir(ctx context.Context, parent Ino, name string) error {
	if err := checkName(name); err != nil {
		return err
	}
	return c.do(ctx, &call{op: proto.OpRmdir, a0: uint64(parent), in: []byte(name)})
}

// Rename moves name in parent to newName in newParent; flags are
// RenameNoReplace and RenameExchange.
func (c *Client) Rename(ctx context.Context, parent Ino, name string, newParent Ino, newName string, flags uint32) error {
	if err := checkName(name); err != nil {
		return err
	}
	if err := checkName(newName); err != nil {
		return err
	}
	in, cdw15 := proto.AppendPair(nil, name, newName)
	return c.do(ctx, &call{op: proto.OpRename, a0: uint64(parent), a1: uint64(newParent), cdw14: flags, cdw15: cdw15, in: in})
}

// Open opens an inode and returns the server's handle (O_TRUNC truncates).
func (c *Client) Open(ctx context.Context, ino Ino, flags int) (Handle, error) {
	h, _, err := c.OpenAttr(ctx, ino, flags)
	return h, err
}

// OpenAttr is Open that also returns the attributes after the open: the
// revalidation close-to-open consistency asks for.
func (c *Client) OpenAttr(ctx context.Context, ino Ino, flags int) (Handle, Attr, error) {
	var buf [proto.OpenReplyLen]byte
	k := &call{op: proto.OpOpen, a0: uint64(ino), cdw14: uint32(flags), out: buf[:]}
	if err := c.do(ctx, k); err != nil {
		return 0, Attr{}, err
	}
	var a proto.Attr
	if k.n != proto.OpenReplyLen || a.Unmarshal(buf[proto.HandleSize:]) != nil {
		return 0, Attr{}, fmt.Errorf("capfs: OPEN: malformed reply: %w", syscall.EIO)
	}
	h := Handle(le64(buf[:]))
	c.handles.opened(h, ino, flags, c.credOf(ctx))
	return h, attrOf(&a), nil
}

// Access reports whether the caller may access ino as mask (access(2)'s
// R_OK 4, W_OK 2, X_OK 1; 0: whether it exists): nil, or EACCES.
func (c *Client) Access(ctx context.Context, ino Ino, mask uint32) error {
	return c.do(ctx, &call{op: proto.OpAccess, a0: uint64(ino), cdw14: mask, idem: true})
}

// Release closes a handle.
func (c *Client) Release(ctx context.Context, ino Ino, h Handle) error {
	known := c.handles.released(h)
	err := c.do(ctx, &call{op: proto.OpRelease, a0: uint64(ino), a1: uint64(h)})
	if known && errors.Is(err, syscall.EBADF) {
		// A restarted target that the handle was not reclaimed on yet
		// (or could not be): nothing is left to close.
		return nil
	}
	return err
}

// Read reads at off into p; the count is short only at the end of the
// file. Reads larger than one command are split and run in parallel.
func (c *Client) Read(ctx context.Context, ino Ino, h Handle, p []byte, off int64) (int, error) {
	if off < 0 {
		return 0, syscall.EINVAL
	}
	mt := c.lim.Load().maxTransfer
	if len(p) <= mt {
		return c.readOne(ctx, ino, p, off)
	}
	parts := (len(p) + mt - 1) / mt
	ns := make([]int, parts)
	errs := make([]error, parts)
	var wg sync.WaitGroup
	for i := range parts {
		lo, hi := i*mt, min((i+1)*mt, len(p))
		wg.Go(func() { ns[i], errs[i] = c.readOne(ctx, ino, p[lo:hi], off+int64(lo)) })
	}
	wg.Wait()
	total := 0
	for i := range parts {
		if errs[i] != nil {
			return total, errs[i]
		}
		total += ns[i]
		if ns[i] < min((i+1)*mt, len(p))-i*mt {
			break
		}
	}
	return total, nil
}

func (c *Client) readOne(ctx context.Context, ino Ino, p []byte, off int64) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	k := &call{op: proto.OpRead, a0: uint64(ino), a1: uint64(off), cdw14: uint32(len(p)), out: p, idem: true}
	if err := c.do(ctx, k); err != nil {
		return 0, err
	}
	return k.n, nil
}

// Write writes p at off, whatever flags h was opened with: a caller that
// wants O_APPEND semantics (the end of the file as the server sees it when
// it runs the command) calls WriteAppend. Writes larger than one command
// are split and run in parallel.
func (c *Client) Write(ctx context.Context, ino Ino, h Handle, p []byte, off int64) (int, error) {
	return c.write(ctx, ino, p, off, false)
}

// WriteAppend writes p at the end of the file, wherever that is when the
// server runs the command (O_APPEND).
func (c *Client) WriteAppend(ctx context.Context, ino Ino, h Handle, p []byte) (int, error) {
	return c.write(ctx, ino, p, 0, true)
}

func (c *Client) write(ctx context.Context, ino Ino, p []byte, off int64, appending bool) (int, error) {
	if off < 0 {
		return 0, syscall.EINVAL
	}
	mt := c.lim.Load().maxTransfer
	if len(p) <= mt || appending {
		total := 0
		for total < len(p) {
			n := min(len(p)-total, mt)
			if err := c.writeOne(ctx, ino, p[total:total+n], off+int64(total), appending); err != nil {
				return total, err
			}
			total += n
		}
		return total, nil
	}
	parts := (len(p) + mt - 1) / mt
	errs := make([]error, parts)
	var wg sync.WaitGroup
	for i := range parts {
		lo, hi := i*mt, min((i+1)*mt, len(p))
		wg.Go(func() { errs[i] = c.writeOne(ctx, ino, p[lo:hi], off+int64(lo), false) })
	}
	wg.Wait()
	for i := range parts {
		if errs[i] != nil {
			return i * mt, errs[i]
		}
	}
	return len(p), nil
}

func (c *Client) writeOne(ctx context.Context, ino Ino, p []byte, off int64, appending bool) error {
	k := &call{op: proto.OpWrite, a0: uint64(ino), a1: uint64(off), in: p, idem: !appending}
	if appending {
		k.cdw14 = proto.WriteAppend
	}
	if err := c.do(ctx, k); err != nil {
		return err
	}
	if int(k.dw1) != len(p) {
		return fmt.Errorf("capfs: WRITE: %d of %d bytes written: %w", k.dw1, len(p), syscall.EIO)
	}
	return nil
}

// Fsync makes the file's data (and with dataOnly false its attributes)
// durable.
func (c *Client) Fsync(ctx context.Context, ino Ino, h Handle, dataOnly bool) error {
	var fl uint32
	if dataOnly {
		fl = proto.FsyncData
	}
	return c.do(ctx, &call{op: proto.OpFsync, a0: uint64(ino), cdw14: fl, idem: true})
}

// Fallocate allocates (mode 0, or FALLOC_FL_KEEP_SIZE) or punches a hole
// (FALLOC_FL_PUNCH_HOLE|FALLOC_FL_KEEP_SIZE) in [off, off+length).
func (c *Client) Fallocate(ctx context.Context, ino Ino, h Handle, mode uint32, off, length int64) error {
	if off < 0 || length <= 0 {
		return syscall.EINVAL
	}
	return c.do(ctx, &call{op: proto.OpFallocate, a0: uint64(ino), a1: uint64(off), cdw14: mode,
		cdw2: proto.Lo(uint64(length)), cdw3: proto.Hi(uint64(length)), idem: true})
}

// CopyFileRange copies up to length bytes of the file src from srcOff to
// the file dst at dstOff inside the target (COPYRANGE), without the data
// crossing the network, as copy_file_range(2) does; it returns the bytes
// copied, fewer than length only at src's end. It runs as the caller of
// ctx, who needs read access to src and write access to dst (by mode, or
// by handles that caller opened).
func (c *Client) CopyFileRange(ctx context.Context, src Ino, srcOff int64, dst Ino, dstOff int64, length int64) (int64, error) {
	if srcOff < 0 || dstOff < 0 || length < 0 {
		return 0, syscall.EINVAL
	}
	var rec [proto.CopyRangeSize]byte
	done := int64(0)
	for done < length {
		k := min(length-done, proto.MaxCopyRange)
		r := proto.CopyRange{Ino: uint64(src), Off: uint64(srcOff + done), Length: uint64(k)}
		r.MarshalTo(rec[:])
		call := &call{op: proto.OpCopyRange, a0: uint64(dst), a1: uint64(dstOff + done), in: rec[:], idem: true}
		if err := c.do(ctx, call); err != nil {
			return done, err
		}
		done += int64(call.dw1)
		if int64(call.dw1) < k {
			break
		}
	}
	return done, nil
}

// readDirBuffer is the reply buffer of one READDIR round trip.
const readDirBuffer = 64 << 10

// ReadDir calls fn for the entries after cookie (0: from the start, "."
// and ".." included) until fn returns false or the directory ends, in as
// many round trips as it takes.
func (c *Client) ReadDir(ctx context.Context, ino Ino, cookie uint64, plus bool, fn func(DirEntry) bool) error {
	op := proto.OpReadDir
	if plus {
		op = proto.OpReadDirPlus
	}
	buf := make([]byte, min(readDirBuffer, c.lim.Load().maxTransfer))
	for {
		k := &call{op: op, a0: uint64(ino), a1: cookie, out: buf, idem: true}
		if err := c.do(ctx, k); err != nil {
			return err
		}
		stop := false
		count := 0
		eof, err := proto.ParseDirents(buf[:k.n], plus, func(e *proto.Dirent) error {
			count++
			if stop {
				return nil
			}
			de := DirEntry{Name: string(e.Name), Ino: Ino(e.Ino), Mode: e.Mode, Cookie: e.Cookie}
			if plus {
				de.Attr = attrOf(&e.Attr)
			}
			cookie = e.Cookie
			if !fn(de) {
				stop = true
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("capfs: %s: %w: %w", proto.OpName(op), syscall.EIO, err)
		}
		if stop || eof {
			return nil
		}
		if count == 0 {
			return fmt.Errorf("capfs: %s: an empty page before the end: %w", proto.OpName(op), syscall.EIO)
		}
	}
}

// StatFS returns the file system's usage.
func (c *Client) StatFS(ctx context.Context) (StatFS, error) {
	var buf [proto.StatFSSize]byte
	k := &call{op: proto.OpStatFS, out: buf[:], idem: true}
	if err := c.do(ctx, k); err != nil {
		return StatFS{}, err
	}
	var s proto.StatFS
	if k.n != proto.StatFSSize || s.Unmarshal(buf[:]) != nil {
		return StatFS{}, fmt.Errorf("capfs: STATFS: malformed reply: %w", syscall.EIO)
	}
	return StatFS{Blocks: s.Blocks, Bfree: s.Bfree, Bavail: s.Bavail, Files: s.Files, Ffree: s.Ffree,
		Bsize: s.Bsize, Frsize: s.Frsize, NameLen: s.NameLen}, nil
}

func checkXattrName(name string) error {
	switch {
	case name == "":
		return syscall.EINVAL
	case len(name) > proto.MaxXattrName:
		return syscall.ERANGE
	}
	return nil
}

// GetXattr returns an extended attribute's value (ENODATA when absent).
func (c *Client) GetXattr(ctx context.Context, ino Ino, name string) ([]byte, error) {
	if err := checkXattrName(name); err != nil {
		return nil, err
	}
	buf := make([]byte, min(proto.MaxXattrValue, c.lim.Load().maxTransfer))
	k := &call{op: proto.OpGetXattr, a0: uint64(ino), in: []byte(name), out: buf, idem: true}
	if err := c.do(ctx, k); err != nil {
		return nil, err
	}
	return buf[:k.n:k.n], nil
}

// SetXattr sets an extended attribute; flags XattrCreate or XattrReplace.
func (c *Client) SetXattr(ctx context.Context, ino Ino, name string, value []byte, flags uint32) error {
	if err := checkXattrName(name); err != nil {
		return err
	}
	if len(value) > proto.MaxXattrValue || len(name)+len(value) > c.lim.Load().maxTransfer {
		return syscall.E2BIG
	}
	in, cdw15 := proto.AppendPair(make([]byte, 0, len(name)+len(value)), name, string(value))
	return c.do(ctx, &call{op: proto.OpSetXattr, a0: uint64(ino), cdw14: flags, cdw15: cdw15, in: in, idem: flags == 0})
}

// ListXattr lists the extended attributes' names.
func (c *Client) ListXattr(ctx context.Context, ino Ino) ([]string, error) {
	buf := make([]byte, min(proto.MaxXattrValue, c.lim.Load().maxTransfer))
	k := &call{op: proto.OpListXattr, a0: uint64(ino), out: buf, idem: true}
	if err := c.do(ctx, k); err != nil {
		return nil, err
	}
	names, err := proto.ParseNames(buf[:k.n])
	if err != nil {
		return nil, fmt.Errorf("capfs: LISTXATTR: %w: %w", syscall.EIO, err)
	}
	return names, nil
}

// RemoveXattr removes an extended attribute (ENODATA when absent).
func (c *Client) RemoveXattr(ctx context.Context, ino Ino, name string) error {
	if err := checkXattrName(name); err != nil {
		return err
	}
	return c.do(ctx, &call{op: proto.OpRemoveXattr, a0: uint64(ino), in: []byte(name)})
}

func le64(b []byte) uint64 {
	_ = b[7]
	return uint64(b[0]) | uint64(b[1])<<8 | uint64(b[2])<<16 | uint64(b[3])<<24 |
		uint64(b[4])<<32 | uint64(b[5])<<40 | uint64(b[6])<<48 | uint64(b[7])<<56
}
