package conformance

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/capsule-storage/capsule/rdma"
)

// waitTimeout bounds every wait of the suite. It is a guard against a
// provider that loses a completion, not a performance expectation.
const waitTimeout = time.Minute

// pairOptions shape one connection set up by newPair or pair.connect.
type pairOptions struct {
	cfgA, cfgB rdma.QPConfig // SendCQ and RecvCQ are filled in by connect
	cqDepth    int           // newPair only: depth of each side's CQ; default 4096

	// primeA and primeB run on each side's QP in StateInit, before the
	// connection is made: the place to post receives.
	primeA, primeB func(qp rdma.QP) error

	privA, privB []byte // private data of the connect and of the accept
}

// pair is one reliable connection between two QPs of the same provider,
// each with its own PD and CQ: a is the active side, which usually
// initiates; b is the passive side, the target of one-sided operations.
type pair struct {
	t        testing.TB
	l        rdma.Listener
	pdA, pdB rdma.PD
	cqA, cqB rdma.CQ
	a, b     rdma.QP
	reply    []byte // the accept's private data as Connect returned it
	reqPriv  []byte // the connect's private data as the listener saw it

	mu  sync.Mutex // guards qps, mrs and cqs
	qps []rdma.QP  // closed first at cleanup
	mrs []rdma.MR  // deregistered at cleanup, after the QPs close
	cqs []rdma.CQ  // closed last at cleanup; the PDs close after
}

// listen starts a listener at a fresh URL of env; it is closed at cleanup.
func listen(t testing.TB, env Env) rdma.Listener {
	t.Helper()
	l, err := rdma.Listen(context.Background(), env.ListenURL())
	require.NoError(t, err, "Listen")
	t.Cleanup(func() { l.Close() })
	return l
}

// hostOf is the host part of a listener address, as Connect takes it.
func hostOf(t testing.TB, url string) string {
	t.Helper()
	_, host, err := rdma.ParseURL(url)
	require.NoError(t, err, "Listener.Addr %q", url)
	return host
}

// openPD opens a PD for url; it is closed at cleanup.
func openPD(t testing.TB, url string) rdma.PD {
	t.Helper()
	pd, err := rdma.OpenPD(url)
	require.NoError(t, err, "OpenPD(%q)", url)
	t.Cleanup(func() { pd.Close() })
	return pd
}

// newCQ makes a CQ on pd that p closes at cleanup, after its QPs. It may
// be called from any goroutine.
func (p *pair) newCQ(pd rdma.PD, depth int) (rdma.CQ, error) {
	cq, err := pd.CreateCQ(depth)
	if err != nil {
		return nil, fmt.Errorf("CreateCQ(%d): %w", depth, err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cqs = append(p.cqs, cq)
	return cq, nil
}

// newPair listens at a fresh URL of env and connects two QPs.
func newPair(t testing.TB, env Env, o pairOptions) *pair {
	t.Helper()
	p := setup(t, env, o.cqDepth)
	p.connect(o)
	return p
}

// setup listens at a fresh URL of env and opens both sides' PDs and CQs
// (of cqDepth completions; 0 means 4096), ready for MRs to be allocated
// and for connect.
func setup(t testing.TB, env Env, cqDepth int) *pair {
	t.Helper()
	return setupOn(t, listen(t, env), cqDepth)
}

// setupOn is setup with an existing listener.
func setupOn(t testing.TB, l rdma.Listener, cqDepth int) *pair {
	t.Helper()
	if cqDepth == 0 {
		cqDepth = 4096
	}
	p := &pair{t: t, l: l}
	p.pdA = openPD(t, l.Addr())
	p.pdB = openPD(t, l.Addr())
	t.Cleanup(p.release)
	var err error
	p.cqA, err = p.newCQ(p.pdA, cqDepth)
	require.NoError(t, err, "active side")
	p.cqB, err = p.newCQ(p.pdB, cqDepth)
	require.NoError(t, err, "passive side")
	return p
}

// connect creates a QP on each side and connects them through p's
// listener, which must have no other connection request pending.
func (p *pair) connect(o pairOptions) {
	t := p.t
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()

	cfgB := o.cfgB
	cfgB.SendCQ, cfgB.RecvCQ = p.cqB, p.cqB
	type accepted struct {
		qp   rdma.QP
		priv []byte
		err  error
	}
	done := make(chan accepted, 1)
	go func() {
		req, err := p.l.Accept(ctx)
		if err != nil {
			done <- accepted{err: fmt.Errorf("Accept: %w", err)}
			return
		}
		priv := bytes.Clone(req.PrivateData())
		qp, err := p.pdB.CreateQP(cfgB)
		if err != nil {
			req.Reject(nil)
			done <- accepted{err: fmt.Errorf("CreateQP (passive side): %w", err)}
			return
		}
		if o.primeB != nil {
			if err := o.primeB(qp); err != nil {
				req.Reject(nil)
				done <- accepted{qp: qp, err: fmt.Errorf("priming the passive QP: %w", err)}
				return
			}
		}
		if err := req.Accept(qp, o.privB); err != nil {
			done <- accepted{qp: qp, err: fmt.Errorf("ConnRequest.Accept: %w", err)}
			return
		}
		done <- accepted{qp: qp, priv: priv}
	}()

	cfgA := o.cfgA
	cfgA.SendCQ, cfgA.RecvCQ = p.cqA, p.cqA
	a, err := p.pdA.CreateQP(cfgA)
	require.NoError(t, err, "CreateQP (active side)")
	p.track(a)
	require.Equal(t, rdma.StateInit, a.State(), "a new QP is in Init")
	if o.primeA != nil {
		require.NoError(t, o.primeA(a), "priming the active QP")
	}
	reply, connErr := a.Connect(ctx, hostOf(t, p.l.Addr()), o.privA)
	if connErr != nil {
		// Unblock an Accept that never got the request.
		cancel()
	}
	acc := <-done
	if acc.qp != nil {
		p.track(acc.qp)
	}
	require.NoError(t, connErr, "Connect")
	require.NoError(t, acc.err, "passive side of the connection")
	p.a, p.b, p.reply, p.reqPriv = a, acc.qp, reply, acc.priv
}

// track closes qp at cleanup.
func (p *pair) track(qp rdma.QP) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.qps = append(p.qps, qp)
}

// release closes the pair's QPs, deregisters its MRs and closes its CQs,
// in that order. The PDs close after, by their own cleanups.
func (p *pair) release() {
	p.mu.Lock()
	qps, mrs, cqs := p.qps, p.mrs, p.cqs
	p.qps, p.mrs, p.cqs = nil, nil, nil
	p.mu.Unlock()
	for _, qp := range qps {
		qp.Close()
	}
	for _, mr := range mrs {
		mr.Deregister()
	}
	for _, cq := range cqs {
		cq.Close()
	}
}

// free deregisters mr now instead of at cleanup.
func (p *pair) free(mr rdma.MR) {
	p.t.Helper()
	p.mu.Lock()
	for i, m := range p.mrs {
		if m == mr {
			p.mrs = append(p.mrs[:i], p.mrs[i+1:]...)
			break
		}
	}
	p.mu.Unlock()
	require.NoError(p.t, mr.Deregister(), "Deregister")
}

// allocA allocates an MR of n bytes on the active side, filled with the
// pattern of seed.
func (p *pair) allocA(n int, access rdma.Access, seed uint64) rdma.MR {
	p.t.Helper()
	return p.alloc(p.pdA, n, access, seed)
}

// allocB allocates an MR of n bytes on the passive side, filled with the
// pattern of seed.
func (p *pair) allocB(n int, access rdma.Access, seed uint64) rdma.MR {
	p.t.Helper()
	return p.alloc(p.pdB, n, access, seed)
}

func (p *pair) alloc(pd rdma.PD, n int, access rdma.Access, seed uint64) rdma.MR {
	p.t.Helper()
	mr, err := p.tryAlloc(pd, n, access, seed)
	require.NoError(p.t, err)
	return mr
}

// tryAlloc is alloc for any goroutine: it returns its error.
func (p *pair) tryAlloc(pd rdma.PD, n int, access rdma.Access, seed uint64) (rdma.MR, error) {
	mr, err := pd.Alloc(n, access)
	if err != nil {
		return nil, fmt.Errorf("Alloc(%d, %v): %w", n, access, err)
	}
	p.mu.Lock()
	p.mrs = append(p.mrs, mr)
	p.mu.Unlock()
	if len(mr.Bytes()) != n {
		return nil, fmt.Errorf("Alloc(%d) gave a region of %d bytes", n, len(mr.Bytes()))
	}
	fill(mr.Bytes(), seed)
	return mr, nil
}

// fill writes the deterministic pseudo-random pattern of seed into b.
func fill(b []byte, seed uint64) {
	var s [32]byte
	binary.LittleEndian.PutUint64(s[:], seed)
	copy(s[8:], "capsule conformance")
	rand.NewChaCha8(s).Read(b)
}

// pattern returns n bytes of the pattern of seed.
func pattern(n int, seed uint64) []byte {
	b := make([]byte, n)
	fill(b, seed)
	return b
}

// diffBytes describes how got differs from want, or returns nil. It never
// prints the buffers, which may be megabytes long.
func diffBytes(want, got []byte) error {
	if bytes.Equal(want, got) {
		return nil
	}
	if len(want) != len(got) {
		return fmt.Errorf("%d bytes, want %d", len(got), len(want))
	}
	first, last, n := -1, -1, 0
	for i := range want {
		if want[i] != got[i] {
			if first < 0 {
				first = i
			}
			last = i
			n++
		}
	}
	return fmt.Errorf("%d of %d bytes differ, at [%d, %d]; first: got %#02x, want %#02x",
		n, len(want), first, last+1, got[first], want[first])
}

// requireBytes fails t unless got equals want byte for byte.
func requireBytes(t testing.TB, want, got []byte, format string, args ...any) {
	t.Helper()
	if err := diffBytes(want, got); err != nil {
		t.Fatalf("%s: %v", fmt.Sprintf(format, args...), err)
	}
}

// waitWC waits for exactly n completions on cq and returns them.
func waitWC(t testing.TB, cq rdma.CQ, n int) []rdma.WC {
	t.Helper()
	wcs, err := collectWC(cq, n)
	require.NoError(t, err)
	return wcs
}

// collectWC waits for exactly n completions on cq. It never takes more
// than n, so later completions stay queued.
func collectWC(cq rdma.CQ, n int) ([]rdma.WC, error) {
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	out := make([]rdma.WC, 0, n)
	buf := make([]rdma.WC, 64)
	for len(out) < n {
		k, err := cq.Wait(ctx, buf[:min(len(buf), n-len(out))])
		out = append(out, buf[:k]...)
		if err != nil {
			return out, fmt.Errorf("waiting for %d completions, got %d %v: %w", n, len(out), out, err)
		}
	}
	return out, nil
}

// requireEmpty fails t if cq holds a completion.
func requireEmpty(t testing.TB, cq rdma.CQ) {
	t.Helper()
	var wc [4]rdma.WC
	n, err := cq.Poll(wc[:])
	require.NoError(t, err, "Poll")
	require.Zero(t, n, "unexpected completions %v", wc[:n])
}

// waitDone waits until qp is in StateError and returns its Err.
func waitDone(t testing.TB, qp rdma.QP, who string) error {
	t.Helper()
	select {
	case <-qp.Done():
	case <-time.After(waitTimeout):
		t.Fatalf("%s QP never entered StateError (state %v)", who, qp.State())
	}
	require.Equal(t, rdma.StateError, qp.State(), "%s QP: Done is closed but the state is not Error", who)
	return qp.Err()
}

// requireStatus fails t unless wc is the completion of id with status.
func requireWC(t testing.TB, wc rdma.WC, id uint64, op rdma.WCOpcode, status rdma.WCStatus) {
	t.Helper()
	require.Equal(t, id, wc.ID, "completion %+v: wrong WR", wc)
	require.Equal(t, status, wc.Status, "completion %+v: status %v, want %v", wc, wc.Status, status)
	if status == rdma.Success {
		require.Equal(t, op, wc.Opcode, "completion %+v: opcode", wc)
	}
}

// requireSuccess fails t unless every completion succeeded.
func requireSuccess(t testing.TB, wcs []rdma.WC) {
	t.Helper()
	for i, wc := range wcs {
		require.Equal(t, rdma.Success, wc.Status, "completion %d of %d: %+v", i, len(wcs), wc)
	}
}

// postSend posts wrs and fails t on error.
func postSend(t testing.TB, qp rdma.QP, wrs ...rdma.SendWR) {
	t.Helper()
	require.NoError(t, qp.PostSend(wrs), "PostSend")
}

// postRecv posts wrs and fails t on error.
func postRecv(t testing.TB, qp rdma.QP, wrs ...rdma.RecvWR) {
	t.Helper()
	require.NoError(t, qp.PostRecv(wrs), "PostRecv")
}

// recvSlots returns a primer that posts n receives, each of size bytes at
// offset i*size of mr, with IDs first, first+1, …
func recvSlots(m rdma.MR, n, size int, first uint64) func(rdma.QP) error {
	return func(qp rdma.QP) error {
		wrs := make([]rdma.RecvWR, n)
		for i := range wrs {
			wrs[i] = rdma.RecvWR{ID: first + uint64(i), SGL: []rdma.SGE{rdma.SGEOf(m, i*size, size)}}
		}
		return qp.PostRecv(wrs)
	}
}

// postErrorIndex returns the Index of err, which must be a *rdma.PostError
// wrapping want.
func postErrorIndex(t testing.TB, err, want error) int {
	t.Helper()
	require.Error(t, err, "posting should fail with %v", want)
	var pe *rdma.PostError
	require.True(t, errors.As(err, &pe), "error %v (%T) is not a *rdma.PostError", err, err)
	require.ErrorIs(t, err, want)
	return pe.Index
}
