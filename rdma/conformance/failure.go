package conformance

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/capsule-storage/capsule/rdma"
)

// testSetErrorFlushes: SetError flushes outstanding Recvs with WRFlushErr
// in order; later WRs are flushed too; the peer sees the connection end.
func testSetErrorFlushes(t *testing.T, env Env) {
	const n = 5
	p := setup(t, env, 0)
	bufA := p.allocA(n*64, rdma.AccessLocalWrite, 1)
	bufB := p.allocB(n*64, rdma.AccessLocalWrite, 2)
	p.connect(pairOptions{primeA: recvSlots(bufA, n, 64, 1), primeB: recvSlots(bufB, 3, 64, 1)})

	p.a.SetError()
	require.Equal(t, rdma.StateError, p.a.State(), "State after SetError")
	require.ErrorIs(t, waitDone(t, p.a, "SetError"), rdma.WRFlushErr, "QP.Err after SetError")
	for i, wc := range waitWC(t, p.cqA, n) {
		require.Equal(t, uint64(i+1), wc.ID, "flushed receives out of order")
		require.Equal(t, rdma.WRFlushErr, wc.Status, "receive outstanding at SetError: %+v", wc)
		require.Equal(t, p.a.Num(), wc.QPNum)
	}

	// In Error, later WRs are taken and flushed.
	postRecv(t, p.a, rdma.RecvWR{ID: 10, SGL: sgl(bufA, piece{0, 64})})
	postSend(t, p.a, rdma.SendWR{ID: 11, Op: rdma.OpSend, Flags: rdma.Signaled, SGL: sgl(bufA, piece{0, 64})})
	for i, wc := range waitWC(t, p.cqA, 2) {
		require.Equal(t, uint64(10+i), wc.ID)
		require.Equal(t, rdma.WRFlushErr, wc.Status, "WR posted in Error: %+v", wc)
	}

	require.Error(t, waitDone(t, p.b, "peer"), "the peer of a QP put in Error says why")
	for _, wc := range waitWC(t, p.cqB, 3) {
		require.NotEqual(t, rdma.Success, wc.Status, "the peer's receives end when the connection does: %+v", wc)
	}
	requireEmpty(t, p.cqA)
}

// traffic keeps a QP busy with Writes, Reads and Sends of a peer that
// posts receives, so that a failure can be made to happen mid-transfer.
type traffic struct {
	qp    rdma.QP
	cq    rdma.CQ
	local rdma.MR // depth slots of chunk bytes
	peer  peerRegion
	chunk int // bytes of each Write and Read
	send  int // bytes of each Send: no more than the peer's receives
	depth int // WRs in flight
}

// trafficResult counts what happened to the WRs of traffic.run.
type trafficResult struct {
	posted, completed int
	status            map[rdma.WCStatus]int
}

// run posts until the QP leaves RTS or stops taking WRs. Once trigger
// WRs have succeeded it calls stop, then allows the QP waitTimeout to
// enter Error. It returns when every posted WR has completed, or an error
// that says which did not.
func (tr *traffic) run(trigger int, stop func()) (trafficResult, error) {
	res := trafficResult{status: map[rdma.WCStatus]int{}}
	ctx, cancel := context.WithTimeout(context.Background(), 2*waitTimeout)
	defer cancel()
	var deadline <-chan time.Time // set when stop is called
	ops := [...]rdma.Opcode{rdma.OpWrite, rdma.OpRead, rdma.OpSend}
	wc := make([]rdma.WC, 64)
	posting, stopped := true, false
	for {
		if posting {
			select {
			case <-tr.qp.Done():
				posting = false
			case <-deadline:
				return res, fmt.Errorf("the QP was still in %v %v after the failure (%d WRs posted, %d completed: %v)",
					tr.qp.State(), waitTimeout, res.posted, res.completed, res.status)
			default:
			}
		}
		if posting && res.posted-res.completed < tr.depth {
			slot := res.posted % tr.depth
			wr := rdma.SendWR{ID: uint64(res.posted), Op: ops[res.posted%len(ops)], Flags: rdma.Signaled,
				RemoteAddr: tr.peer.addr + uint64(slot*tr.chunk), RKey: tr.peer.rkey}
			n := tr.chunk
			if wr.Op == rdma.OpSend {
				n = tr.send
			}
			wr.SGL = sgl(tr.local, piece{slot * tr.chunk, n})
			if err := tr.qp.PostSend([]rdma.SendWR{wr}); err != nil {
				posting = false
				continue
			}
			res.posted++
			continue
		}
		if !posting && res.completed == res.posted {
			return res, nil
		}
		k, err := tr.cq.Wait(ctx, wc)
		if err != nil {
			return res, fmt.Errorf("%d of %d posted WRs never completed (QP %v, completions so far %v): %w",
				res.posted-res.completed, res.posted, tr.qp.State(), res.status, err)
		}
		for _, w := range wc[:k] {
			res.status[w.Status]++
		}
		res.completed += k
		if !stopped && res.status[rdma.Success] >= trigger {
			stopped = true
			deadline = time.After(waitTimeout)
			stop()
		}
	}
}

// peerRegion is the target region of a peer, as it sends it in the
// accept's private data.
type peerRegion struct {
	addr uint64
	rkey uint32
	size uint32
}

func (r peerRegion) marshal() []byte {
	b := make([]byte, 16)
	binary.BigEndian.PutUint64(b[0:8], r.addr)
	binary.BigEndian.PutUint32(b[8:12], r.rkey)
	binary.BigEndian.PutUint32(b[12:16], r.size)
	return b
}

func (r *peerRegion) unmarshal(b []byte) error {
	if len(b) < 16 {
		return fmt.Errorf("peer region: %d bytes of private data, want 16", len(b))
	}
	r.addr = binary.BigEndian.Uint64(b[0:8])
	r.rkey = binary.BigEndian.Uint32(b[8:12])
	r.size = binary.BigEndian.Uint32(b[12:16])
	return nil
}

// Shape of the mid-transfer cases.
var (
	failChunk   = 1 << 20  // bytes per Write and Read
	failSend    = 64 << 10 // bytes per Send
	failDepth   = 8        // WRs in flight
	failRecvs   = 64       // receives the peer keeps posted
	failTrigger = 24       // successful WRs before the failure
)

// repostReceives keeps failRecvs receives of failSend bytes posted on qp
// until the QP leaves RTS or ctx ends.
func repostReceives(ctx context.Context, qp rdma.QP, cq rdma.CQ, buf rdma.MR) {
	wc := make([]rdma.WC, 64)
	for {
		n, err := cq.Wait(ctx, wc)
		if err != nil {
			return
		}
		for _, w := range wc[:n] {
			if w.Status != rdma.Success || w.Opcode != rdma.WCRecv {
				continue
			}
			slot := int(w.ID)
			if qp.PostRecv([]rdma.RecvWR{{ID: w.ID, SGL: sgl(buf, piece{slot * failSend, failSend})}}) != nil {
				return
			}
		}
		select {
		case <-qp.Done():
			return
		default:
		}
	}
}

// servePeer accepts one connection on l, gives the connecting side a
// region to Write and Read and keeps receives posted for its Sends. It
// returns when the connection ends or ctx does. The passive side of the
// mid-transfer cases, in this process or in a peer process.
func servePeer(ctx context.Context, l rdma.Listener) error {
	req, err := l.Accept(ctx)
	if err != nil {
		return fmt.Errorf("Accept: %w", err)
	}
	pd, err := rdma.OpenPD(l.Addr())
	if err != nil {
		req.Reject(nil)
		return err
	}
	defer pd.Close()
	cq, err := pd.CreateCQ(1024)
	if err != nil {
		req.Reject(nil)
		return err
	}
	defer cq.Close()
	region, err := pd.Alloc(failDepth*failChunk, rdma.AccessAll)
	if err != nil {
		req.Reject(nil)
		return err
	}
	defer region.Deregister()
	recvBuf, err := pd.Alloc(failRecvs*failSend, rdma.AccessLocalWrite)
	if err != nil {
		req.Reject(nil)
		return err
	}
	defer recvBuf.Deregister()
	qp, err := pd.CreateQP(rdma.QPConfig{SendCQ: cq, MaxRecvWR: failRecvs})
	if err != nil {
		req.Reject(nil)
		return err
	}
	defer qp.Close()
	if err := recvSlots(recvBuf, failRecvs, failSend, 0)(qp); err != nil {
		req.Reject(nil)
		return err
	}
	info := peerRegion{addr: region.Addr(), rkey: region.RKey(), size: uint32(len(region.Bytes()))}
	if err := req.Accept(qp, info.marshal()); err != nil {
		return fmt.Errorf("Accept: %w", err)
	}
	repostReceives(ctx, qp, cq, recvBuf)
	if err := ctx.Err(); err != nil {
		return err
	}
	if qp.Err() == nil {
		return fmt.Errorf("the serving QP stopped in %v with no error", qp.State())
	}
	return nil
}

// peerEnv names the environment variable that makes the test binary the
// peer process of testPeerKilled. Its value is the URL to listen on.
const peerEnv = "CAPSULE_CONFORMANCE_PEER_URL"

var (
	peerMu     sync.Mutex // guards peerHooked
	peerHooked bool       // PeerMain was called: the binary can be a peer
)

// PeerMain makes the test binary usable as the peer process that the
// PeerKilled case starts and kills. Call it first thing in TestMain. It
// returns at once, unless the binary was started as that peer: then it
// listens at the URL it was given, prints "addr <Listener.Addr>" on
// stdout, serves one connection and exits. The peer also exits when its
// stdin closes, so that it never outlives the test that started it.
func PeerMain() {
	peerMu.Lock()
	peerHooked = true
	peerMu.Unlock()
	url := os.Getenv(peerEnv)
	if url == "" {
		return
	}
	go func() {
		io.Copy(io.Discard, os.Stdin)
		os.Exit(3)
	}()
	l, err := rdma.Listen(context.Background(), url)
	if err != nil {
		fmt.Fprintln(os.Stderr, "conformance peer:", err)
		os.Exit(1)
	}
	fmt.Printf("addr %s\n", l.Addr())
	if err := servePeer(context.Background(), l); err != nil {
		fmt.Fprintln(os.Stderr, "conformance peer:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

// startPeer starts the test binary as a peer process listening at url and
// returns the process and the address it listens at. The process is
// killed at cleanup if it still runs.
func startPeer(t *testing.T, url string) (*exec.Cmd, string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$", "-test.bench=^$")
	cmd.Env = append(os.Environ(), peerEnv+"="+url)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start(), "starting the peer process")
	waited := make(chan error, 1)
	t.Cleanup(func() {
		stdin.Close()
		cmd.Process.Kill()
		<-waited
	})

	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if addr, ok := strings.CutPrefix(sc.Text(), "addr "); ok {
				lines <- addr
				break
			}
		}
		close(lines)
		io.Copy(io.Discard, stdout)
		waited <- cmd.Wait()
	}()
	select {
	case addr, ok := <-lines:
		if !ok {
			t.Fatalf("the peer process exited before it listened: %s", stderr.String())
		}
		return cmd, addr
	case <-time.After(waitTimeout):
		t.Fatalf("the peer process did not listen within %v", waitTimeout)
	}
	return nil, ""
}

// testPeerKilled: a peer process killed with SIGKILL mid-transfer. Every
// posted WR completes, with success, flush or an error status, and the
// QP enters Error with RetryExcErr, the status of a lost connection.
func testPeerKilled(t *testing.T, env Env) {
	peerMu.Lock()
	hooked := peerHooked
	peerMu.Unlock()
	if !hooked {
		t.Skip("the test binary's TestMain does not call conformance.PeerMain, so it cannot be the peer process")
	}
	cmd, addr := startPeer(t, env.ListenURL())

	pd := openPD(t, addr)
	p := &pair{t: t, pdA: pd}
	t.Cleanup(p.release)
	cq, err := p.newCQ(pd, 1024)
	require.NoError(t, err)
	local := p.allocA(failDepth*failChunk, rdma.AccessLocalWrite, 1)
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	qp, reply, err := rdma.Dial(ctx, addr, pd, rdma.QPConfig{SendCQ: cq}, nil)
	require.NoError(t, err, "connecting to the peer process")
	p.track(qp)
	tr := &traffic{qp: qp, cq: cq, local: local, chunk: failChunk, send: failSend, depth: failDepth}
	require.NoError(t, tr.peer.unmarshal(reply))

	res, err := tr.run(failTrigger, func() { cmd.Process.Signal(syscall.SIGKILL) })
	require.NoError(t, err)
	t.Logf("%d WRs posted, %v", res.posted, res.status)
	require.GreaterOrEqual(t, res.status[rdma.Success], failTrigger, "the QP failed before the peer was killed")
	require.Equal(t, rdma.StateError, qp.State(), "QP state after the peer died")
	require.ErrorIs(t, qp.Err(), rdma.RetryExcErr, "QP.Err after the peer died")
}

// testLocalCloseMidTransfer: Close of a busy QP. Every posted WR
// completes, the QP is in Error with WRFlushErr, and the peer's QP enters
// Error too.
func testLocalCloseMidTransfer(t *testing.T, env Env) {
	l := listen(t, env)
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- servePeer(ctx, l) }()
	peerDone := false
	defer func() {
		cancel()
		if !peerDone {
			<-served
		}
	}()

	pd := openPD(t, l.Addr())
	p := &pair{t: t, pdA: pd}
	t.Cleanup(p.release)
	cq, err := p.newCQ(pd, 1024)
	require.NoError(t, err)
	local := p.allocA(failDepth*failChunk, rdma.AccessLocalWrite, 1)
	dctx, dcancel := context.WithTimeout(context.Background(), waitTimeout)
	defer dcancel()
	qp, reply, err := rdma.Dial(dctx, l.Addr(), pd, rdma.QPConfig{SendCQ: cq}, nil)
	require.NoError(t, err)
	p.track(qp)
	tr := &traffic{qp: qp, cq: cq, local: local, chunk: failChunk, send: failSend, depth: failDepth}
	require.NoError(t, tr.peer.unmarshal(reply))

	closed := make(chan error, 1)
	res, err := tr.run(failTrigger, func() { go func() { closed <- qp.Close() }() })
	require.NoError(t, err)
	t.Logf("%d WRs posted, %v", res.posted, res.status)
	require.GreaterOrEqual(t, res.status[rdma.Success], failTrigger, "the QP failed before it was closed")
	select {
	case err := <-closed:
		require.NoError(t, err, "Close")
	case <-time.After(waitTimeout):
		t.Fatal("Close did not return")
	}
	require.Equal(t, rdma.StateError, qp.State(), "QP state after Close")
	require.ErrorIs(t, qp.Err(), rdma.WRFlushErr, "QP.Err after Close")
	select {
	case err := <-served:
		peerDone = true
		require.NoError(t, err, "the peer's QP should enter Error when the local QP closes")
	case <-time.After(waitTimeout):
		t.Fatal("the peer's QP did not end when the local QP closed")
	}
}
