package perftest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"

	"github.com/capsule-storage/capsule/rdma"
)

// Server answers perftest clients on one listener.
type Server struct {
	ln  rdma.Listener
	pd  rdma.PD
	log *slog.Logger

	wg sync.WaitGroup // the per-connection goroutines
}

// Listen opens a PD and a listener at url. Call Serve, then Close.
func Listen(ctx context.Context, url string, log *slog.Logger) (*Server, error) {
	pd, err := rdma.OpenPD(url)
	if err != nil {
		return nil, err
	}
	ln, err := rdma.Listen(ctx, url)
	if err != nil {
		pd.Close()
		return nil, err
	}
	if log == nil {
		log = slog.Default()
	}
	return &Server{ln: ln, pd: pd, log: log}, nil
}

// Addr is the listener's URL.
func (s *Server) Addr() string { return s.ln.Addr() }

// Serve accepts clients until ctx is done or the listener is closed. It
// returns nil when ctx ends it.
func (s *Server) Serve(ctx context.Context) error {
	for {
		req, err := s.ln.Accept(ctx)
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, rdma.ErrClosed) {
				return nil
			}
			return err
		}
		var h Hello
		if err := h.UnmarshalBinary(req.PrivateData()); err != nil {
			s.log.Warn("perf: refusing client", "peer", req.RemoteAddr(), "err", err)
			req.Reject([]byte(err.Error()))
			continue
		}
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			if err := s.serveConn(ctx, req, h); err != nil {
				s.log.Warn("perf: connection ended", "peer", req.RemoteAddr(), "err", err)
			}
		}()
	}
}

// Close stops the listener, waits for connections to end and frees the PD.
func (s *Server) Close() error {
	err := s.ln.Close()
	s.wg.Wait()
	s.pd.Close()
	return err
}

func (s *Server) serveConn(ctx context.Context, req rdma.ConnRequest, h Hello) error {
	size, qd := int(h.Size), int(h.QD)
	mr, err := s.pd.Alloc(size*qd, rdma.AccessAll)
	if err != nil {
		req.Reject([]byte(err.Error()))
		return err
	}
	defer mr.Deregister()
	ack, err := s.pd.Alloc(8*qd, rdma.AccessLocalWrite)
	if err != nil {
		req.Reject([]byte(err.Error()))
		return err
	}
	defer ack.Deregister()
	cq, err := s.pd.CreateCQ(4*qd + 16)
	if err != nil {
		req.Reject([]byte(err.Error()))
		return err
	}
	defer cq.Close()
	qp, err := s.pd.CreateQP(rdma.QPConfig{SendCQ: cq, MaxSendWR: 2 * qd, MaxRecvWR: 2 * qd, MaxSGE: 1})
	if err != nil {
		req.Reject([]byte(err.Error()))
		return err
	}
	defer qp.Close()

	recvs := make([]rdma.RecvWR, qd)
	sges := make([]rdma.SGE, qd)
	if h.Op == OpSend {
		for i := range recvs {
			sges[i] = rdma.SGEOf(mr, i*size, size)
			recvs[i] = rdma.RecvWR{ID: uint64(i), SGL: sges[i : i+1]}
		}
		if err := qp.PostRecv(recvs); err != nil {
			req.Reject([]byte(err.Error()))
			return err
		}
	}
	var rb [replyLen]byte
	reply := Reply{RKey: mr.RKey(), Addr: mr.Addr(), Len: uint64(size * qd)}
	if err := req.Accept(qp, reply.MarshalTo(rb[:])); err != nil {
		return err
	}
	s.log.Debug("perf: client connected", "peer", req.RemoteAddr(), "op", h.Op, "size", size, "qd", qd)

	if h.Op != OpSend {
		// One-sided: the provider serves the client. Wait for it to leave.
		select {
		case <-qp.Done():
		case <-ctx.Done():
		}
		return nil
	}

	wcs := make([]rdma.WC, 32)
	answer := []rdma.SendWR{{Op: rdma.OpSendImm, Flags: rdma.Signaled, SGL: make([]rdma.SGE, 1)}}
	for {
		n, err := cq.Wait(ctx, wcs)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		for _, wc := range wcs[:n] {
			if wc.Status != rdma.Success {
				if wc.Status == rdma.WRFlushErr || qp.State() == rdma.StateError {
					return nil // the client went away
				}
				return fmt.Errorf("perf: %v completion: %w", wc.Opcode, wc.Status)
			}
			if wc.Opcode != rdma.WCRecv {
				continue
			}
			i := int(wc.ID)
			if err := qp.PostRecv(recvs[i : i+1]); err != nil {
				return err
			}
			answer[0].ID = uint64(i)
			answer[0].Imm = wc.Imm
			answer[0].SGL[0] = rdma.SGEOf(ack, 8*i, 8)
			if err := qp.PostSend(answer); err != nil {
				return err
			}
		}
	}
}
