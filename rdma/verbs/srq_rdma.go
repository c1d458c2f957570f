//go:build rdma && cgo

package verbs

/*
#include "cverbs.h"
*/
import "C"

import (
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/capsule-storage/capsule/rdma"
)

// srq is an ibv_srq. Its receives complete in any order across the QPs
// that share it, so outstanding WRs live in slots found through a free
// list rather than in a ring; the device's wr_id is wrRecv|wrSRQ|slot.
type srq struct {
	pd     *pd
	srq    *C.struct_ibv_srq
	maxSGE int
	failed atomic.Bool // set by IBV_EVENT_SRQ_ERR

	mu     sync.Mutex // guards slots, free, ch and closed; held across a post
	slots  []uint64   // the caller's WR ID per slot
	free   []uint32
	ch     *chain
	closed bool
}

var _ rdma.SRQ = (*srq)(nil)

func newSRQ(p *pd, depth, maxSGE int) (*srq, error) {
	var e C.int
	s := C.cap_create_srq(p.pd, C.int(depth), C.int(maxSGE), &e)
	if s == nil {
		return nil, callErr("ibv_create_srq", e)
	}
	ch, err := newChain(depth, maxSGE, false)
	if err != nil {
		C.ibv_destroy_srq(s)
		return nil, err
	}
	q := &srq{pd: p, srq: s, maxSGE: maxSGE, slots: make([]uint64, depth), ch: ch}
	q.free = make([]uint32, depth)
	for i := range q.free {
		q.free[i] = uint32(depth - 1 - i)
	}
	p.dev.setSRQ(q, true)
	return q, nil
}

func (s *srq) PostRecv(wrs []rdma.RecvWR) error {
	if len(wrs) == 0 {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || s.failed.Load() {
		return &rdma.PostError{Index: 0, Err: rdma.ErrInvalidState}
	}
	var taken []uint32
	n, bad := fillRecv(s.ch, wrs, s.maxSGE, func(k int, user uint64) (uint64, error) {
		if len(s.free) == 0 {
			return 0, rdma.ErrQueueFull
		}
		slot := s.free[len(s.free)-1]
		s.free = s.free[:len(s.free)-1]
		s.slots[slot] = user
		taken = append(taken, slot)
		return wrRecv | wrSRQ | uint64(slot), nil
	})
	if n > 0 {
		var badIdx C.int
		if rc := C.cap_post_srq_recv(s.srq, s.ch.c, C.int(n), &badIdx); rc != 0 {
			s.free = append(s.free, taken[badIdx:]...)
			return &rdma.PostError{Index: int(badIdx), Err: postErr("ibv_post_srq_recv", rc)}
		}
	}
	if bad != nil {
		return &rdma.PostError{Index: n, Err: bad}
	}
	return nil
}

// retire frees the slot of a completed receive.
func (s *srq) retire(id uint64) (uint64, bool) {
	slot := uint32(id &^ (wrRecv | wrSRQ))
	s.mu.Lock()
	defer s.mu.Unlock()
	if int(slot) >= len(s.slots) {
		return 0, false
	}
	s.free = append(s.free, slot)
	return s.slots[slot], true
}

// Close is ibv_destroy_srq; it fails with EBUSY while QPs use the SRQ.
func (s *srq) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	if r := C.ibv_destroy_srq(s.srq); r != 0 {
		return fmt.Errorf("verbs: %w", callErr("ibv_destroy_srq", r))
	}
	s.closed = true
	s.pd.dev.setSRQ(s, false)
	s.ch.free()
	return nil
}
