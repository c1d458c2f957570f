package nbd

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"time"
)

// Defaults of a Server.
const (
	// DefaultSlots is how many requests of one connection are in flight
	// at most; the server stops reading the connection while all are busy.
	DefaultSlots = 128
	// DefaultInFlightBytes bounds the data buffers of one connection's
	// requests in flight (a single larger request still runs, alone).
	DefaultInFlightBytes = 64 << 20
	// DefaultHandshakeTimeout bounds the handshake.
	DefaultHandshakeTimeout = 30 * time.Second
	// maxOptionLength is the most option data the server reads; a longer
	// option is skipped and refused up to maxOptionSkip, and beyond it
	// the connection is dropped.
	maxOptionLength = 64 << 10
	maxOptionSkip   = 1 << 20
)

// Server serves Exports over NBD. Set its fields before the first Serve;
// they are not changed after.
type Server struct {
	// Exports are the exports offered; the first is the default export
	// (the empty name). At least one.
	Exports []Export
	// Slots is DefaultSlots when 0.
	Slots int
	// InFlightBytes is DefaultInFlightBytes when 0.
	InFlightBytes int
	// HandshakeTimeout is DefaultHandshakeTimeout when 0.
	HandshakeTimeout time.Duration
	// Logger is slog.Default() when nil.
	Logger *slog.Logger

	initOnce sync.Once
	initErr  error

	// mu guards the fields below.
	mu        sync.Mutex
	listeners map[net.Listener]struct{}
	conns     map[*conn]struct{}
	nextConn  int
	closing   bool
	wg        sync.WaitGroup // connections being served
}

func (s *Server) init() error {
	s.initOnce.Do(func() {
		if len(s.Exports) == 0 {
			s.initErr = errors.New("nbd: a server needs at least one export")
			return
		}
		for i := range s.Exports {
			if err := s.Exports[i].validate(); err != nil {
				s.initErr = err
				return
			}
		}
		if s.Slots <= 0 {
			s.Slots = DefaultSlots
		}
		if s.InFlightBytes <= 0 {
			s.InFlightBytes = DefaultInFlightBytes
		}
		if s.HandshakeTimeout <= 0 {
			s.HandshakeTimeout = DefaultHandshakeTimeout
		}
		if s.Logger == nil {
			s.Logger = slog.Default()
		}
		s.listeners = map[net.Listener]struct{}{}
		s.conns = map[*conn]struct{}{}
	})
	return s.initErr
}

// Serve accepts connections on l and serves each on its own goroutines
// until Shutdown or Close, then returns ErrServerClosed.
func (s *Server) Serve(l net.Listener) error {
	if err := s.init(); err != nil {
		return err
	}
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		return ErrServerClosed
	}
	s.listeners[l] = struct{}{}
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.listeners, l)
		s.mu.Unlock()
	}()
	for {
		nc, err := l.Accept()
		if err != nil {
			s.mu.Lock()
			closing := s.closing
			s.mu.Unlock()
			if closing {
				return ErrServerClosed
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			return err
		}
		if tc, ok := nc.(*net.TCPConn); ok {
			tc.SetNoDelay(true)
		}
		go func() {
			if err := s.ServeConn(nc); err != nil && !errors.Is(err, ErrServerClosed) {
				s.Logger.Debug("nbd: connection ended", "remote", nc.RemoteAddr(), "err", err)
			}
		}()
	}
}

// ServeConn runs the handshake and the transmission phase on nc, and
// closes it. It returns nil after a clean disconnect (NBD_CMD_DISC,
// NBD_OPT_ABORT, or the client closing between requests).
func (s *Server) ServeConn(nc net.Conn) error {
	if err := s.init(); err != nil {
		nc.Close()
		return err
	}
	c := &conn{s: s, nc: nc, br: bufio.NewReaderSize(nc, 64<<10), bw: bufio.NewWriterSize(nc, 64<<10)}
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		nc.Close()
		return ErrServerClosed
	}
	c.id = s.nextConn
	s.nextConn++
	s.conns[c] = struct{}{}
	s.wg.Add(1)
	s.mu.Unlock()
	defer func() {
		nc.Close()
		s.mu.Lock()
		delete(s.conns, c)
		s.mu.Unlock()
		s.wg.Done()
	}()

	nc.SetDeadline(time.Now().Add(s.HandshakeTimeout))
	exp, err := c.handshake()
	if err != nil {
		if errors.Is(err, ErrAborted) || errors.Is(err, io.EOF) {
			return nil
		}
		return err
	}
	nc.SetDeadline(time.Time{})
	s.mu.Lock()
	closing := s.closing
	s.mu.Unlock()
	if closing {
		return ErrServerClosed
	}
	dev, err := exp.Open(c.id)
	if err != nil {
		return fmt.Errorf("nbd: opening export %q: %w", exp.Name, err)
	}
	return c.transmit(exp, dev)
}

// Shutdown stops accepting connections and reading requests, waits for
// the requests in flight to be answered and the connections to close,
// or for ctx to end (then it closes them at once).
func (s *Server) Shutdown(ctx context.Context) error {
	if err := s.init(); err != nil {
		return err
	}
	s.mu.Lock()
	s.closing = true
	for l := range s.listeners {
		l.Close()
	}
	for c := range s.conns {
		c.stopReading()
	}
	s.mu.Unlock()
	done := make(chan struct{})
	go func() {
		s.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		s.Close()
		<-done
		return ctx.Err()
	}
}

// Close closes the listeners and every connection at once. Requests in
// flight still complete on their devices before each connection's Device
// is closed, but their replies may be lost.
func (s *Server) Close() error {
	if err := s.init(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closing = true
	for l := range s.listeners {
		l.Close()
	}
	for c := range s.conns {
		c.nc.Close()
	}
	return nil
}

// lookup finds the export a client names; "" is the default export.
func (s *Server) lookup(name string) *Export {
	for i := range s.Exports {
		if s.Exports[i].Name == name {
			return &s.Exports[i]
		}
	}
	if name == "" {
		return &s.Exports[0]
	}
	return nil
}

// handshake runs the fixed newstyle handshake and returns the export the
// client chose. c.structured is set when structured replies were agreed.
func (c *conn) handshake() (*Export, error) {
	var g [GreetingSize]byte
	binary.BigEndian.PutUint64(g[0:], MagicNBD)
	binary.BigEndian.PutUint64(g[8:], MagicOption)
	binary.BigEndian.PutUint16(g[16:], FlagFixedNewstyle|FlagNoZeroes)
	if _, err := c.nc.Write(g[:]); err != nil {
		return nil, err
	}
	var cf [4]byte
	if _, err := io.ReadFull(c.br, cf[:]); err != nil {
		return nil, err
	}
	flags := binary.BigEndian.Uint32(cf[:])
	if flags&^(ClientFlagFixedNewstyle|ClientFlagNoZeroes) != 0 {
		return nil, fmt.Errorf("%w: %#x", ErrClientFlags, flags)
	}
	noZeroes := flags&ClientFlagNoZeroes != 0
	var hb [OptionHeaderSize]byte
	var out []byte
	for {
		if _, err := io.ReadFull(c.br, hb[:]); err != nil {
			return nil, err
		}
		var h OptionHeader
		if err := h.UnmarshalBinary(hb[:]); err != nil {
			return nil, err
		}
		if h.Length > maxOptionLength {
			if h.Length > maxOptionSkip {
				return nil, fmt.Errorf("%w: %v with %d bytes", ErrOptionTooLarge, h.Option, h.Length)
			}
			if _, err := io.CopyN(io.Discard, c.br, int64(h.Length)); err != nil {
				return nil, err
			}
			if h.Option == OptExportName {
				return nil, fmt.Errorf("%w: export name of %d bytes", ErrAborted, h.Length)
			}
			if err := c.writeRaw(appendOptionReply(out[:0], h.Option, RepErrTooBig, nil)); err != nil {
				return nil, err
			}
			continue
		}
		data := make([]byte, h.Length)
		if _, err := io.ReadFull(c.br, data); err != nil {
			return nil, err
		}
		out = out[:0]
		exp, done, err := c.option(h.Option, data, noZeroes, &out)
		if werr := c.writeRaw(out); werr != nil {
			return nil, werr
		}
		if err != nil || done {
			return exp, err
		}
	}
}

// option answers one option into *out. done is set when transmission
// begins (exp is then the export) or the handshake ends (err).
func (c *conn) option(opt Option, data []byte, noZeroes bool, out *[]byte) (exp *Export, done bool, err error) {
	s := c.s
	reply := func(typ uint32, payload []byte) { *out = appendOptionReply(*out, opt, typ, payload) }
	refuse := func(typ uint32, msg string) { reply(typ, []byte(msg)) }
	switch opt {
	case OptExportName:
		exp = s.lookup(string(data))
		if exp == nil {
			return nil, true, fmt.Errorf("%w: no export %q", ErrAborted, data)
		}
		*out = binary.BigEndian.AppendUint64(*out, uint64(exp.Size))
		*out = binary.BigEndian.AppendUint16(*out, exp.transmissionFlags(c.structured))
		if !noZeroes {
			*out = append(*out, make([]byte, ExportNameZeroes)...)
		}
		return exp, true, nil
	case OptAbort:
		reply(RepAck, nil)
		return nil, true, ErrAborted
	case OptList:
		if len(data) != 0 {
			refuse(RepErrInvalid, "NBD_OPT_LIST takes no data")
			return nil, false, nil
		}
		for i := range s.Exports {
			e := &s.Exports[i]
			p := binary.BigEndian.AppendUint32(nil, uint32(len(e.Name)))
			p = append(p, e.Name...)
			p = append(p, e.Description...)
			reply(RepServer, p)
		}
		reply(RepAck, nil)
		return nil, false, nil
	case OptStructuredReply:
		if len(data) != 0 {
			refuse(RepErrInvalid, "NBD_OPT_STRUCTURED_REPLY takes no data")
			return nil, false, nil
		}
		c.structured = true
		reply(RepAck, nil)
		return nil, false, nil
	case OptInfo, OptGo:
		var q InfoRequest
		if err := q.UnmarshalBinary(data); err != nil {
			refuse(RepErrInvalid, err.Error())
			return nil, false, nil
		}
		exp = s.lookup(q.Name)
		if exp == nil {
			refuse(RepErrUnknown, fmt.Sprintf("no export %q", q.Name))
			return nil, false, nil
		}
		info := binary.BigEndian.AppendUint16(nil, InfoExport)
		info = binary.BigEndian.AppendUint64(info, uint64(exp.Size))
		info = binary.BigEndian.AppendUint16(info, exp.transmissionFlags(c.structured))
		reply(RepInfo, info)
		// Block sizes are always sent: the minimum is not the default
		// of 1 for most devices, and the protocol lets a server send
		// what was not asked for.
		bs := binary.BigEndian.AppendUint16(nil, InfoBlockSize)
		bs = binary.BigEndian.AppendUint32(bs, exp.MinBlock)
		bs = binary.BigEndian.AppendUint32(bs, exp.PreferredBlock)
		bs = binary.BigEndian.AppendUint32(bs, exp.MaxPayload)
		reply(RepInfo, bs)
		for _, i := range q.Infos {
			switch i {
			case InfoName:
				reply(RepInfo, append(binary.BigEndian.AppendUint16(nil, InfoName), exp.Name...))
			case InfoDescription:
				reply(RepInfo, append(binary.BigEndian.AppendUint16(nil, InfoDescription), exp.Description...))
			}
		}
		reply(RepAck, nil)
		if opt == OptGo {
			return exp, true, nil
		}
		return nil, false, nil
	}
	refuse(RepErrUnsup, fmt.Sprintf("%v is not supported", opt))
	return nil, false, nil
}

// writeRaw writes handshake bytes straight to the connection.
func (c *conn) writeRaw(b []byte) error {
	if len(b) == 0 {
		return nil
	}
	_, err := c.nc.Write(b)
	return err
}
