package shm

import (
	"context"
	"encoding/binary"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/capsule-storage/capsule/rdma"
)

// A slot whose unsignaled Send is known finished only because the peer
// replied is reused by the goroutine that sees the reply, not by the one
// that posted the Send: the pattern of the NVMe-oF host. The reply comes
// through shared memory, which the race detector does not see, so under
// -race this test checks that the provider supplies the happens-before
// edge from the post to the reply's completion.
func TestSlotReuseAfterReply(t *testing.T) {
	const (
		slots   = 4
		slotLen = 64
		rounds  = 2000
	)
	cfg := rdma.QPConfig{MaxSendWR: 64, MaxRecvWR: 64}
	p := newPair(t, pairOpts{cfgA: cfg, cfgB: cfg})

	// Side A: Go memory for the slots (WRs, SGEs and payload), Alloc'd
	// memory for the replies.
	buf := make([]byte, slots*slotLen)
	bufMR := register(t, p.pdA, buf, rdma.AccessLocalWrite)
	wrs := make([]rdma.SendWR, slots)
	sges := make([]rdma.SGE, slots)
	replyA := alloc(t, p.pdA, slots*slotLen, rdma.AccessLocalWrite)
	for i := range slots {
		require.NoError(t, p.a.PostRecv([]rdma.RecvWR{{ID: uint64(i), SGL: sge(replyA, i*slotLen, slotLen)}}))
	}

	// Side B echoes every message.
	recvB := alloc(t, p.pdB, slots*slotLen, rdma.AccessLocalWrite)
	sendB := alloc(t, p.pdB, slotLen, rdma.AccessLocalWrite)
	for i := range slots {
		require.NoError(t, p.b.PostRecv([]rdma.RecvWR{{ID: uint64(i), SGL: sge(recvB, i*slotLen, slotLen)}}))
	}
	ctx, cancel := context.WithTimeout(context.Background(), hangLimit)
	defer cancel()
	echoErr := make(chan error, 1)
	go func() {
		wc := make([]rdma.WC, 8)
		for echoed := 0; echoed < rounds; {
			n, err := p.cqB.Wait(ctx, wc)
			if err != nil {
				echoErr <- err
				return
			}
			for _, c := range wc[:n] {
				if err := c.Status.Err(); err != nil {
					echoErr <- err
					return
				}
				if c.Opcode != rdma.WCRecv {
					continue
				}
				i := int(c.ID)
				copy(sendB.Bytes(), recvB.Bytes()[i*slotLen:(i+1)*slotLen])
				if err := p.b.PostRecv([]rdma.RecvWR{{ID: c.ID, SGL: sge(recvB, i*slotLen, slotLen)}}); err != nil {
					echoErr <- err
					return
				}
				if err := p.b.PostSend([]rdma.SendWR{{Op: rdma.OpSend, Flags: rdma.Inline, SGL: sge(sendB, 0, slotLen)}}); err != nil {
					echoErr <- err
					return
				}
				echoed++
			}
		}
		echoErr <- nil
	}()

	// The reusing goroutine: on each reply it clears the slot's WR and
	// payload and hands the slot back to the poster.
	free := make(chan int, slots)
	for i := range slots {
		free <- i
	}
	type result struct {
		replies int
		err     error
	}
	reuseDone := make(chan result, 1)
	go func() {
		var r result
		defer func() { reuseDone <- r }()
		wc := make([]rdma.WC, 8)
		for r.replies < rounds {
			n, err := p.cqA.Wait(ctx, wc)
			if err != nil {
				r.err = err
				return
			}
			for _, c := range wc[:n] {
				if r.err = c.Status.Err(); r.err != nil {
					return
				}
				if c.Opcode != rdma.WCRecv {
					continue
				}
				reply := replyA.Bytes()[c.ID*slotLen : (c.ID+1)*slotLen]
				slot := int(binary.LittleEndian.Uint64(reply))
				if slot >= slots {
					r.err = assert.AnError
					return
				}
				wrs[slot] = rdma.SendWR{}
				sges[slot] = rdma.SGE{}
				clear(buf[slot*slotLen : (slot+1)*slotLen])
				if r.err = p.a.PostRecv([]rdma.RecvWR{{ID: c.ID, SGL: sge(replyA, int(c.ID)*slotLen, slotLen)}}); r.err != nil {
					return
				}
				r.replies++
				free <- slot
			}
		}
	}()

	// The posting goroutine (this one): fill a free slot and Send it,
	// unsignaled, alternately inline and by reference.
	for n := range rounds {
		var slot int
		select {
		case slot = <-free:
		case <-ctx.Done():
			require.NoError(t, ctx.Err(), "after %d sends", n)
		}
		b := buf[slot*slotLen : (slot+1)*slotLen]
		binary.LittleEndian.PutUint64(b, uint64(slot))
		binary.LittleEndian.PutUint64(b[8:], uint64(n))
		sges[slot] = rdma.SGEOf(bufMR, slot*slotLen, slotLen)
		wrs[slot] = rdma.SendWR{ID: uint64(n), Op: rdma.OpSend, SGL: sges[slot : slot+1]}
		if n%2 == 0 {
			wrs[slot].Flags = rdma.Inline
		}
		require.NoError(t, p.a.PostSend(wrs[slot:slot+1]))
	}
	r := <-reuseDone
	require.NoError(t, r.err)
	assert.Equal(t, rounds, r.replies)
	require.NoError(t, <-echoErr)
}
