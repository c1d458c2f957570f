package devsvc

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path"
	"strings"
	"sync"
	"syscall"

	"github.com/capsule-storage/capsule/chunkstore/vfs"
	"github.com/capsule-storage/capsule/nvmeof"
	"github.com/capsule-storage/capsule/nvmeof/target"
)

// fenceDir holds each volume's newest epoch, one file per volume, in the
// device's root. Volume names never start with a dot, so no name a
// client can send reaches it.
const fenceDir = ".fence"

// Server exports one device directory as a namespace's vendor commands:
// a target.VendorHandler.
type Server struct {
	root vfs.FS
	log  *slog.Logger
	inst uint64 // top 32 bits of every handle of this run

	mu      sync.Mutex // guards handles and seq
	handles map[uint64]*handle
	seq     uint32

	fmu    sync.Mutex // guards fences
	fences map[string]*fence
}

// handle is an open file. Commands on it hold mu shared; CLOSE holds it
// exclusively, so a file is never closed under a command that uses it,
// whatever order a client sends them in.
type handle struct {
	mu     sync.RWMutex
	f      vfs.File
	vol    string
	closed bool // guarded by mu
}

// fence is one volume's newest epoch. Mutating commands hold mu shared
// while they check and run; raising the epoch takes it exclusively, so
// once a command of a new head returns, no command of an older one is
// still running or can start.
type fence struct {
	mu     sync.RWMutex
	epoch  uint64 // guarded by mu; persisted before it is raised
	loaded bool   // guarded by mu
}

var (
	_ target.VendorHandler = (*Server)(nil)
	_ io.Closer            = (*Server)(nil)
)

// NewServer serves the device directory root (the host's file system
// through vfs.NewOS, or any vfs.FS). log may be nil.
func NewServer(root vfs.FS, log *slog.Logger) *Server {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	var b [4]byte
	rand.Read(b[:])
	return &Server{
		root: root, log: log,
		inst:    uint64(binary.LittleEndian.Uint32(b[:])|1) << 32,
		handles: map[uint64]*handle{}, fences: map[string]*fence{},
	}
}

// Close closes every open handle.
func (s *Server) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for k, h := range s.handles {
		h.mu.Lock()
		if !h.closed {
			h.closed = true
			h.f.Close()
		}
		h.mu.Unlock()
		delete(s.handles, k)
	}
	return nil
}

// Sync is the namespace's Flush: every SYNC already made its file
// durable, so there is nothing left.
func (s *Server) Sync() error { return nil }

// PrepareVendor checks a command's shape before any data moves.
func (s *Server) PrepareVendor(cmd *nvmeof.Command, dataLen, payloadLen int) nvmeof.Status {
	bad := nvmeof.StatusInvalidField
	switch cmd.Opcode {
	case OpOpen, OpStat, OpList:
		if payloadLen == 0 || payloadLen > MaxName {
			return bad
		}
		if cmd.Opcode == OpOpen && (dataLen < OpenReplySize || cmd.CDW12&^flagsKnown != 0) {
			return bad
		}
		if cmd.Opcode == OpStat && dataLen < InfoSize {
			return bad
		}
	case OpRename:
		if dataLen == 0 || dataLen > 2*MaxName {
			return bad
		}
	case OpRemove, OpMkdirAll, OpSyncDir:
		if dataLen == 0 || dataLen > MaxName {
			return bad
		}
	case OpRead:
		if int64(cmd.CDW14) > int64(dataLen) || arg1(cmd) > 1<<62 {
			return bad
		}
	case OpReadRanges:
		if payloadLen == 0 || payloadLen%RangeSize != 0 || payloadLen > MaxRanges*RangeSize {
			return bad
		}
	case OpWrite:
		if arg1(cmd) > 1<<62 {
			return bad
		}
	case OpFstat:
		if dataLen < InfoSize {
			return bad
		}
	case OpTruncate, OpPunch:
		if arg1(cmd) > 1<<62 || join(cmd.CDW14, cmd.CDW15) > 1<<62 {
			return bad
		}
	case OpClose, OpSync:
	default:
		return nvmeof.StatusInvalidOpcode
	}
	return nvmeof.StatusSuccess
}

// ExecuteVendor runs a command. The outcome is an errno in DW0 (0 for
// success); DW1 is the bytes of reply data.
func (s *Server) ExecuteVendor(c *target.VendorCommand) nvmeof.Status {
	n, err := s.execute(c)
	if err != nil {
		c.DW0 = uint32(errnoOf(err))
		if c.DW0 == uint32(syscall.EIO) {
			s.log.Warn("devsvc: command failed", "op", OpName(c.Cmd.Opcode), "err", err)
		}
		n = 0
	}
	c.N, c.DW1 = n, uint32(n)
	return nvmeof.StatusSuccess
}

func (s *Server) execute(c *target.VendorCommand) (int, error) {
	cmd := c.Cmd
	switch cmd.Opcode {
	case OpOpen, OpStat, OpList:
		name, vol, err := s.name(c.Payload)
		if err != nil {
			return 0, err
		}
		switch cmd.Opcode {
		case OpOpen:
			if name == vol {
				return 0, syscall.EISDIR // a volume's directory is no file
			}
			return s.open(c, name, vol)
		case OpStat:
			st, err := s.root.Stat(name)
			if err != nil {
				return 0, err
			}
			i := infoOf(st)
			i.MarshalTo(c.Data)
			return InfoSize, nil
		default:
			names, err := s.root.List(name)
			if err != nil {
				return 0, err
			}
			n := 0
			for _, e := range names {
				if n+len(e)+1 > len(c.Data) {
					return 0, syscall.EOVERFLOW
				}
				n += copy(c.Data[n:], e)
				c.Data[n] = 0
				n++
			}
			return n, nil
		}
	case OpRename:
		a, b, err := splitPair(c.Data, cmd.CDW15)
		if err != nil {
			return 0, syscall.EINVAL
		}
		oldName, vol, err := s.name([]byte(a))
		if err != nil {
			return 0, err
		}
		newName, vol2, err := s.name([]byte(b))
		if err != nil {
			return 0, err
		}
		if vol != vol2 {
			return 0, syscall.EXDEV
		}
		if oldName == vol || newName == vol {
			return 0, syscall.EPERM // a volume's directory stays where it is
		}
		return 0, s.fenced(vol, epochOf(cmd), func() error { return s.root.Rename(oldName, newName) })
	case OpRemove, OpMkdirAll, OpSyncDir:
		name, vol, err := s.name(c.Data)
		if err != nil {
			return 0, err
		}
		return 0, s.fenced(vol, epochOf(cmd), func() error {
			switch cmd.Opcode {
			case OpRemove:
				if name == vol {
					return syscall.EPERM // the volume's directory stays
				}
				return s.root.Remove(name)
			case OpMkdirAll:
				return s.root.MkdirAll(name)
			default:
				return s.root.SyncDir(name)
			}
		})
	}
	h, err := s.handle(arg0(cmd))
	if err != nil {
		return 0, err
	}
	if cmd.Opcode == OpClose {
		s.mu.Lock()
		delete(s.handles, arg0(cmd))
		s.mu.Unlock()
		h.mu.Lock()
		defer h.mu.Unlock()
		if h.closed {
			return 0, syscall.EBADF
		}
		h.closed = true
		return 0, h.f.Close()
	}
	h.mu.RLock()
	defer h.mu.RUnlock()
	if h.closed {
		return 0, syscall.EBADF
	}
	switch cmd.Opcode {
	case OpRead:
		n, err := h.f.ReadAt(c.Data[:cmd.CDW14], int64(arg1(cmd)))
		if errors.Is(err, io.EOF) {
			err = nil
		}
		return n, err
	case OpReadRanges:
		var buf [MaxRanges]Range
		rs, err := ParseRanges(buf[:0], c.Payload)
		if err != nil {
			return 0, syscall.EINVAL
		}
		total := 0
		for _, r := range rs {
			total += r.Len
		}
		if total > len(c.Data) {
			return 0, syscall.EINVAL
		}
		// The ranges' data back to back; a short range (the end of the
		// file) ends the reply there.
		done := 0
		for _, r := range rs {
			n, err := h.f.ReadAt(c.Data[done:done+r.Len], r.Off)
			done += n
			if errors.Is(err, io.EOF) || (err == nil && n < r.Len) {
				break
			}
			if err != nil {
				return 0, err
			}
		}
		return done, nil
	case OpFstat:
		st, err := h.f.Stat()
		if err != nil {
			return 0, err
		}
		i := infoOf(st)
		i.MarshalTo(c.Data)
		return InfoSize, nil
	}
	err = s.fenced(h.vol, epochOf(cmd), func() error {
		switch cmd.Opcode {
		case OpWrite:
			_, err := h.f.WriteAt(c.Data, int64(arg1(cmd)))
			return err
		case OpSync:
			return h.f.Sync()
		case OpTruncate:
			return h.f.Truncate(int64(arg1(cmd)))
		default: // OpPunch
			p, ok := h.f.(vfs.Puncher)
			if !ok {
				return syscall.EOPNOTSUPP
			}
			return p.Punch(int64(arg1(cmd)), int64(join(cmd.CDW14, cmd.CDW15)))
		}
	})
	return 0, err
}

// name checks a name from the wire: a clean relative path whose first
// element, the volume, does not start with a dot. It returns the name
// and the volume.
func (s *Server) name(b []byte) (string, string, error) {
	if len(b) == 0 || len(b) > MaxName {
		return "", "", syscall.EINVAL
	}
	n, err := vfs.Clean(string(b))
	if err != nil || n == "." {
		return "", "", syscall.EINVAL
	}
	vol, _, _ := strings.Cut(n, "/")
	if strings.HasPrefix(vol, ".") || strings.IndexByte(n, 0) >= 0 {
		return "", "", syscall.EINVAL
	}
	return n, vol, nil
}

func (s *Server) open(c *target.VendorCommand, name, vol string) (int, error) {
	flags := os.O_RDONLY
	f := c.Cmd.CDW12
	if f&FlagWrite != 0 {
		flags = os.O_RDWR
	}
	if f&FlagCreate != 0 {
		flags |= os.O_CREATE
	}
	if f&FlagExcl != 0 {
		flags |= os.O_EXCL
	}
	if f&FlagTrunc != 0 {
		flags |= os.O_TRUNC
	}
	var file vfs.File
	do := func() error {
		var err error
		file, err = s.root.OpenFile(name, flags)
		return err
	}
	var err error
	if flags != os.O_RDONLY && flags != os.O_RDWR {
		err = s.fenced(vol, epochOf(c.Cmd), do) // it may create or truncate
	} else {
		err = do()
	}
	if err != nil {
		return 0, err
	}
	st, err := file.Stat()
	if err != nil {
		file.Close()
		return 0, err
	}
	s.mu.Lock()
	s.seq++
	id := s.inst | uint64(s.seq)
	s.handles[id] = &handle{f: file, vol: vol}
	s.mu.Unlock()
	binary.LittleEndian.PutUint64(c.Data[0:], id)
	i := infoOf(st)
	i.MarshalTo(c.Data[8:])
	return OpenReplySize, nil
}

// handle finds an open handle: ESTALE for one of an earlier run of the
// server (the client opens its file again), EBADF for any other unknown.
func (s *Server) handle(id uint64) (*handle, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if h, ok := s.handles[id]; ok {
		return h, nil
	}
	if id&^0xFFFFFFFF != s.inst && id != 0 {
		return nil, syscall.ESTALE
	}
	return nil, syscall.EBADF
}

// fenced runs fn under the volume's fence with the command's epoch.
func (s *Server) fenced(vol string, epoch uint64, fn func() error) error {
	s.fmu.Lock()
	f := s.fences[vol]
	if f == nil {
		f = &fence{}
		s.fences[vol] = f
	}
	s.fmu.Unlock()
	for {
		f.mu.RLock()
		if f.loaded && epoch <= f.epoch {
			defer f.mu.RUnlock()
			if epoch < f.epoch {
				return ErrStaleEpoch
			}
			return fn()
		}
		f.mu.RUnlock()
		if err := s.raise(f, vol, epoch); err != nil {
			return err
		}
	}
}

// raise loads the volume's epoch and, if epoch is newer, makes it the
// volume's epoch on disk first.
func (s *Server) raise(f *fence, vol string, epoch uint64) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	p := path.Join(fenceDir, vol)
	if !f.loaded {
		b, err := vfs.ReadFile(s.root, p)
		switch {
		case err == nil && len(b) == 8:
			f.epoch = binary.LittleEndian.Uint64(b)
		case err == nil:
			return syscall.EIO
		case !errors.Is(err, fs.ErrNotExist):
			return err
		}
		f.loaded = true
	}
	if epoch <= f.epoch {
		return nil
	}
	if err := s.root.MkdirAll(fenceDir); err != nil {
		return err
	}
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], epoch)
	if err := vfs.WriteFile(s.root, p, b[:]); err != nil {
		return err
	}
	f.epoch = epoch
	return nil
}

// errnoOf turns an error into the errno that travels in DW0.
func errnoOf(err error) syscall.Errno {
	var e syscall.Errno
	switch {
	case errors.Is(err, ErrStaleEpoch):
		return syscall.EKEYREVOKED
	case errors.As(err, &e):
		return e
	case errors.Is(err, fs.ErrNotExist):
		return syscall.ENOENT
	case errors.Is(err, fs.ErrExist):
		return syscall.EEXIST
	case errors.Is(err, vfs.ErrInvalidName):
		return syscall.EINVAL
	case errors.Is(err, vfs.ErrNotSupported):
		return syscall.EOPNOTSUPP
	}
	return syscall.EIO
}
