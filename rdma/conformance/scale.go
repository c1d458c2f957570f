package conformance

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/capsule-storage/capsule/rdma"
)

// manyQPs is the number of connections of the ManyQPs cases.
const manyQPs = 64

// connectMany connects manyQPs QP pairs through p's listener, all at
// once. cqA and cqB give the CQ of the active and passive QP number i;
// primeB primes the passive QP i. QP i of each side is returned at index i.
func connectMany(t *testing.T, p *pair, cqA, cqB func(i int) (rdma.CQ, error), primeB func(i int, qp rdma.QP) error) (as, bs []rdma.QP) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	as, bs = make([]rdma.QP, manyQPs), make([]rdma.QP, manyQPs)
	host := hostOf(t, p.l.Addr())
	var errs errList
	var wg sync.WaitGroup
	wg.Go(func() {
		for range manyQPs {
			req, err := p.l.Accept(ctx)
			if err != nil {
				errs.add(fmt.Errorf("Accept: %w", err))
				return
			}
			priv := req.PrivateData()
			if len(priv) != 1 || int(priv[0]) >= manyQPs {
				req.Reject(nil)
				errs.add(fmt.Errorf("connection request with private data %x", priv))
				continue
			}
			i := int(priv[0])
			err = func() error {
				cq, err := cqB(i)
				if err != nil {
					return err
				}
				qp, err := p.pdB.CreateQP(rdma.QPConfig{SendCQ: cq})
				if err != nil {
					return err
				}
				p.track(qp)
				bs[i] = qp
				if err := primeB(i, qp); err != nil {
					return err
				}
				return req.Accept(qp, nil)
			}()
			if err != nil {
				req.Reject(nil)
				errs.add(fmt.Errorf("passive QP %d: %w", i, err))
			}
		}
	})
	for i := range manyQPs {
		wg.Go(func() {
			cq, err := cqA(i)
			if err != nil {
				errs.add(err)
				return
			}
			qp, err := p.pdA.CreateQP(rdma.QPConfig{SendCQ: cq})
			if err != nil {
				errs.add(fmt.Errorf("active QP %d: %w", i, err))
				return
			}
			p.track(qp)
			if _, err := qp.Connect(ctx, host, []byte{byte(i)}); err != nil {
				errs.add(fmt.Errorf("active QP %d: Connect: %w", i, err))
				cancel()
				return
			}
			as[i] = qp
		})
	}
	wg.Wait()
	require.NoError(t, errs.err(), "connecting %d QPs", manyQPs)
	return as, bs
}

// testManyQPsSharedCQ: 64 QPs on each side share one CQ per side. Each
// QP Writes its own slots and follows each Write with a SendImm naming
// the round; one poller per side sorts the completions by WC.QPNum.
func testManyQPsSharedCQ(t *testing.T, env Env) {
	const rounds = 8
	chunk := 64 << 10
	depth := manyQPs * rounds * 2
	p := setup(t, env, depth)
	slot := func(q, r int) int { return (q*rounds + r) * chunk }
	src := p.allocA(manyQPs*rounds*chunk, rdma.AccessLocalWrite, 1)
	remote := p.allocB(manyQPs*rounds*chunk, rdma.AccessAll, 2)
	shared := func(cq rdma.CQ) func(int) (rdma.CQ, error) {
		return func(int) (rdma.CQ, error) { return cq, nil }
	}
	as, bs := connectMany(t, p, shared(p.cqA), shared(p.cqB), func(i int, qp rdma.QP) error {
		wrs := make([]rdma.RecvWR, rounds)
		for r := range wrs {
			wrs[r] = rdma.RecvWR{ID: uint64(i<<16 | r)}
		}
		return qp.PostRecv(wrs)
	})
	idxA, idxB := map[uint32]int{}, map[uint32]int{}
	for i := range manyQPs {
		idxA[as[i].Num()], idxB[bs[i].Num()] = i, i
	}
	require.Len(t, idxA, manyQPs, "QP numbers of one PD must differ")
	require.Len(t, idxB, manyQPs, "QP numbers of one PD must differ")

	var wg sync.WaitGroup
	var errs errList
	// The passive side's poller checks each QP's slot when the SendImm
	// that follows its Write arrives.
	wg.Go(func() {
		next := make([]int, manyQPs)
		wcs, err := collectWC(p.cqB, manyQPs*rounds)
		if err != nil {
			errs.add(fmt.Errorf("passive side: %w", err))
		}
		for _, wc := range wcs {
			q, ok := idxB[wc.QPNum]
			switch {
			case !ok:
				errs.add(fmt.Errorf("passive side: completion %+v names no QP", wc))
			case wc.Status != rdma.Success || wc.Opcode != rdma.WCRecv || wc.Flags&rdma.WCWithImm == 0:
				errs.add(fmt.Errorf("passive QP %d: completion %+v", q, wc))
			case wc.ID != uint64(q<<16|next[q]) || wc.Imm != uint32(next[q]):
				errs.add(fmt.Errorf("passive QP %d: completion %+v, want receive %d with Imm %d", q, wc, next[q], next[q]))
			default:
				r := next[q]
				if err := diffBytes(src.Bytes()[slot(q, r):slot(q, r)+chunk], remote.Bytes()[slot(q, r):slot(q, r)+chunk]); err != nil {
					errs.add(fmt.Errorf("QP %d round %d: the Write's bytes when the SendImm arrived: %w", q, r, err))
				}
			}
			if ok {
				next[q]++
			}
		}
	})
	wg.Go(func() {
		next := make([]int, manyQPs)
		wcs, err := collectWC(p.cqA, manyQPs*rounds)
		if err != nil {
			errs.add(fmt.Errorf("active side: %w", err))
		}
		for _, wc := range wcs {
			q, ok := idxA[wc.QPNum]
			if !ok {
				errs.add(fmt.Errorf("active side: completion %+v names no QP", wc))
				continue
			}
			if wc.Status != rdma.Success || wc.ID != uint64(q<<16|next[q]) {
				errs.add(fmt.Errorf("active side: completion %+v, want QP %d's SendImm %d", wc, q, next[q]))
			}
			next[q]++
		}
	})
	for q := range manyQPs {
		wg.Go(func() {
			for r := range rounds {
				err := as[q].PostSend([]rdma.SendWR{
					{ID: uint64(q<<16 | r), Op: rdma.OpWrite, SGL: sgl(src, piece{slot(q, r), chunk}),
						RemoteAddr: remote.Addr() + uint64(slot(q, r)), RKey: remote.RKey()},
					{ID: uint64(q<<16 | r), Op: rdma.OpSendImm, Flags: rdma.Signaled, Imm: uint32(r)},
				})
				if err != nil {
					errs.add(fmt.Errorf("active QP %d round %d: %w", q, r, err))
					return
				}
			}
		})
	}
	wg.Wait()
	require.NoError(t, errs.err())
	requireBytes(t, src.Bytes(), remote.Bytes(), "the target regions of %d QPs", manyQPs)
}

// testManyQPsCQEach: 64 QPs, each with its own CQ on both sides as in a
// QP-per-core design, each Writing and Reading back its own slots from
// its own goroutine.
func testManyQPsCQEach(t *testing.T, env Env) {
	const rounds = 8
	chunk := 64 << 10
	p := setup(t, env, 16)
	slot := func(q, r int) int { return (q*rounds + r) * chunk }
	src := p.allocA(manyQPs*rounds*chunk, rdma.AccessLocalWrite, 1)
	sink := p.allocA(manyQPs*rounds*chunk, rdma.AccessLocalWrite, 2)
	remote := p.allocB(manyQPs*rounds*chunk, rdma.AccessAll, 3)
	cqs := make([]rdma.CQ, manyQPs)
	as, _ := connectMany(t, p,
		func(i int) (rdma.CQ, error) {
			cq, err := p.newCQ(p.pdA, 64)
			cqs[i] = cq
			return cq, err
		},
		func(int) (rdma.CQ, error) { return p.newCQ(p.pdB, 64) },
		func(int, rdma.QP) error { return nil })

	var wg sync.WaitGroup
	var errs errList
	for q := range manyQPs {
		wg.Go(func() {
			for r := range rounds {
				s := slot(q, r)
				err := as[q].PostSend([]rdma.SendWR{
					{ID: 1, Op: rdma.OpWrite, Flags: rdma.Signaled, SGL: sgl(src, piece{s, chunk}),
						RemoteAddr: remote.Addr() + uint64(s), RKey: remote.RKey()},
					{ID: 2, Op: rdma.OpRead, Flags: rdma.Signaled, SGL: sgl(sink, piece{s, chunk}),
						RemoteAddr: remote.Addr() + uint64(s), RKey: remote.RKey()},
				})
				if err != nil {
					errs.add(fmt.Errorf("QP %d round %d: %w", q, r, err))
					return
				}
				wcs, err := collectWC(cqs[q], 2)
				if err != nil {
					errs.add(fmt.Errorf("QP %d round %d: %w", q, r, err))
					return
				}
				for i, wc := range wcs {
					if wc.Status != rdma.Success || wc.ID != uint64(i+1) || wc.QPNum != as[q].Num() {
						errs.add(fmt.Errorf("QP %d round %d: completion %+v", q, r, wc))
						return
					}
				}
				if err := diffBytes(src.Bytes()[s:s+chunk], sink.Bytes()[s:s+chunk]); err != nil {
					errs.add(fmt.Errorf("QP %d round %d: Read after Write: %w", q, r, err))
					return
				}
			}
		})
	}
	wg.Wait()
	require.NoError(t, errs.err())
	requireBytes(t, src.Bytes(), remote.Bytes(), "the target regions of %d QPs", manyQPs)
}

// errList collects the errors of many goroutines. Safe for concurrent use.
type errList struct {
	mu   sync.Mutex // guards errs and more
	errs []error
	more int // errors left out beyond the first 20
}

func (l *errList) add(err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.errs) == 20 {
		l.more++
		return
	}
	l.errs = append(l.errs, err)
}

// err joins the errors collected.
func (l *errList) err() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.more > 0 {
		return errors.Join(append(l.errs, fmt.Errorf("and %d more errors", l.more))...)
	}
	return errors.Join(l.errs...)
}
