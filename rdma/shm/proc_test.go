package shm

import (
	"bufio"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/capsule-storage/capsule/rdma"
)

// The two-process tests re-execute the test binary as the peer: with
// peerEnv set, TestMain runs the peer instead of the tests.
const (
	peerEnv     = "CAPSULE_SHM_TEST_PEER"
	peerNameEnv = "CAPSULE_SHM_TEST_NAME"

	peerRegion = 1 << 20 // bytes of the region the peer exposes
	peerSeed   = 42      // its initial pattern
	peerMsgMax = 1 << 20 // largest message the peer echoes
)

func TestMain(m *testing.M) {
	if role := os.Getenv(peerEnv); role != "" {
		if err := runPeer(role, os.Getenv(peerNameEnv)); err != nil {
			fmt.Fprintln(os.Stderr, "peer:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// runPeer is the other process: it listens on name, accepts one
// connection, exposes a region (its address and rkey are the accept's
// private data) and echoes every message it receives until the
// connection ends.
func runPeer(role, name string) error {
	if strings.HasPrefix(role, "doorbell-") {
		return runDoorbellPeer(role)
	}
	if role != "echo" {
		return fmt.Errorf("unknown role %q", role)
	}
	ctx := context.Background()
	l, err := rdma.Listen(ctx, "shm://"+name)
	if err != nil {
		return err
	}
	defer l.Close()
	fmt.Println("ready")
	req, err := l.Accept(ctx)
	if err != nil {
		return err
	}
	pd, err := rdma.OpenPD("shm://peer")
	if err != nil {
		return err
	}
	cq, err := pd.CreateCQ(1024)
	if err != nil {
		return err
	}
	region, err := pd.Alloc(peerRegion, rdma.AccessAll)
	if err != nil {
		return err
	}
	copy(region.Bytes(), pattern(peerRegion, peerSeed))
	const slots = 4
	bufs, err := pd.Alloc(slots*peerMsgMax, rdma.AccessLocalWrite)
	if err != nil {
		return err
	}
	qp, err := pd.CreateQP(rdma.QPConfig{SendCQ: cq, MaxRecvWR: slots, MaxSendWR: slots})
	if err != nil {
		return err
	}
	for i := 0; i < slots; i++ {
		if err := qp.PostRecv([]rdma.RecvWR{{ID: uint64(i), SGL: sge(bufs, i*peerMsgMax, peerMsgMax)}}); err != nil {
			return err
		}
	}
	var priv [16]byte
	binary.LittleEndian.PutUint64(priv[0:], region.Addr())
	binary.LittleEndian.PutUint32(priv[8:], region.RKey())
	if err := req.Accept(qp, priv[:]); err != nil {
		return err
	}
	wcs := make([]rdma.WC, 16)
	for {
		n, err := cq.Wait(ctx, wcs)
		if err != nil {
			return err
		}
		for _, wc := range wcs[:n] {
			if wc.Status != rdma.Success {
				return nil // the connection ended
			}
			// Echo a message from its buffer; repost the buffer once the
			// echo has completed. Completions of the two directions come
			// in no particular order.
			i := int(wc.ID)
			switch wc.Opcode {
			case rdma.WCRecv:
				if err := qp.PostSend([]rdma.SendWR{{ID: wc.ID, Op: rdma.OpSendImm, Imm: wc.Imm + 1, Flags: rdma.Signaled, SGL: sge(bufs, i*peerMsgMax, int(wc.ByteLen))}}); err != nil {
					return nil
				}
			case rdma.WCSend:
				if err := qp.PostRecv([]rdma.RecvWR{{ID: wc.ID, SGL: sge(bufs, i*peerMsgMax, peerMsgMax)}}); err != nil {
					return nil
				}
			}
		}
	}
}

// peerProc is a running peer process.
type peerProc struct {
	cmd    *exec.Cmd
	name   string
	addr   uint64
	rkey   uint32
	stdout io.ReadCloser
}

func startPeer(t *testing.T, role string) *peerProc {
	t.Helper()
	name := freshName()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), peerEnv+"="+role, peerNameEnv+"="+name)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	line, err := bufio.NewReader(out).ReadString('\n')
	require.NoError(t, err)
	require.Equal(t, "ready\n", line)
	return &peerProc{cmd: cmd, name: name, stdout: out}
}

// dialPeer connects a QP to the peer and learns its region.
func dialPeer(t *testing.T, pp *peerProc, pd rdma.PD, cq rdma.CQ) rdma.QP {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), hangLimit)
	defer cancel()
	qp, reply, err := rdma.Dial(ctx, "shm://"+pp.name, pd, rdma.QPConfig{SendCQ: cq, MaxRecvWR: 8}, []byte("hi"))
	require.NoError(t, err)
	require.Len(t, reply, 16)
	pp.addr = binary.LittleEndian.Uint64(reply[0:])
	pp.rkey = binary.LittleEndian.Uint32(reply[8:])
	return qp
}

func TestTwoProcesses(t *testing.T) {
	pp := startPeer(t, "echo")
	pd := openTestPD(t)
	cq, err := pd.CreateCQ(256)
	require.NoError(t, err)
	defer cq.Close()
	qp := dialPeer(t, pp, pd, cq)

	// Read the peer's region as it filled it, Write a new pattern, Read it back.
	local := alloc(t, pd, peerRegion, rdma.AccessLocalWrite)
	require.NoError(t, qp.PostSend([]rdma.SendWR{{ID: 1, Op: rdma.OpRead, Flags: rdma.Signaled, SGL: sge(local, 0, peerRegion), RemoteAddr: pp.addr, RKey: pp.rkey}}))
	require.NoError(t, waitWC(t, cq, 1)[0].Status.Err())
	require.True(t, string(pattern(peerRegion, peerSeed)) == string(local.Bytes()), "the peer's region as the peer wrote it")
	copy(local.Bytes(), pattern(peerRegion, 7))
	sink := make([]byte, peerRegion)
	sinkMR := register(t, pd, sink, rdma.AccessLocalWrite)
	require.NoError(t, qp.PostSend([]rdma.SendWR{
		{ID: 2, Op: rdma.OpWrite, SGL: sge(local, 0, peerRegion), RemoteAddr: pp.addr, RKey: pp.rkey},
		{ID: 3, Op: rdma.OpRead, Flags: rdma.Signaled, SGL: sge(sinkMR, 0, peerRegion), RemoteAddr: pp.addr, RKey: pp.rkey},
	}))
	require.NoError(t, waitWC(t, cq, 1)[0].Status.Err())
	require.True(t, string(pattern(peerRegion, 7)) == string(sink), "a Read after a Write sees it, across processes")

	// Messages of many sizes, including ones larger than the ring, echoed.
	msg := alloc(t, pd, peerMsgMax, rdma.AccessLocalWrite)
	echo := alloc(t, pd, peerMsgMax, rdma.AccessLocalWrite)
	for i, n := range []int{0, 1, 31, 32, 33, 4096, 65 << 10, 300 << 10, peerMsgMax} {
		copy(msg.Bytes(), pattern(n, byte(i)))
		require.NoError(t, qp.PostRecv([]rdma.RecvWR{{ID: 100, SGL: sge(echo, 0, peerMsgMax)}}))
		require.NoError(t, qp.PostSend([]rdma.SendWR{{ID: 4, Op: rdma.OpSendImm, Imm: uint32(i), SGL: sge(msg, 0, n)}}))
		ctx, cancel := context.WithTimeout(context.Background(), hangLimit)
		wcs := make([]rdma.WC, 1)
		_, err := cq.Wait(ctx, wcs)
		cancel()
		if err != nil {
			t.Fatalf("echo of %d bytes: %v; %s", n, err, qpState(qp))
		}
		recv := wcs[0]
		require.NoError(t, recv.Status.Err())
		assert.Equal(t, uint32(n), recv.ByteLen)
		assert.Equal(t, uint32(i+1), recv.Imm)
		require.True(t, string(pattern(n, byte(i))) == string(echo.Bytes()[:n]), "echo of %d bytes", n)
	}

	// Closing ends the peer, which exits cleanly.
	require.NoError(t, qp.Close())
	require.NoError(t, pp.cmd.Wait())
}

func TestPeerKilled(t *testing.T) {
	pp := startPeer(t, "echo")
	pd := openTestPD(t)
	cq, err := pd.CreateCQ(256)
	require.NoError(t, err)
	defer cq.Close()
	qpi := dialPeer(t, pp, pd, cq)
	q := qpi.(*qp)
	local := alloc(t, pd, 4096, rdma.AccessLocalWrite)
	require.NoError(t, qpi.PostSend([]rdma.SendWR{{ID: 1, Op: rdma.OpRead, Flags: rdma.Signaled, SGL: sge(local, 0, 4096), RemoteAddr: pp.addr, RKey: pp.rkey}}))
	require.NoError(t, waitWC(t, cq, 1)[0].Status.Err())
	require.NoError(t, qpi.PostRecv([]rdma.RecvWR{{ID: 10, SGL: sge(local, 0, 4096)}, {ID: 11, SGL: sge(local, 0, 4096)}}))

	require.NoError(t, pp.cmd.Process.Kill())
	pp.cmd.Wait()
	waitDone(t, qpi)
	assert.ErrorIs(t, qpi.Err(), rdma.RetryExcErr)
	for _, wc := range waitWC(t, cq, 2) {
		assert.Equal(t, rdma.WRFlushErr, wc.Status, "outstanding Recvs are flushed")
	}
	// Later WRs complete with a flush too.
	require.NoError(t, qpi.PostSend([]rdma.SendWR{{ID: 2, Op: rdma.OpWrite, SGL: sge(local, 0, 8), RemoteAddr: pp.addr, RKey: pp.rkey}}))
	assert.Equal(t, rdma.WRFlushErr, waitWC(t, cq, 1)[0].Status)

	// The dead peer's region is still mapped here, and safe to touch.
	q.view.mu.RLock()
	require.Len(t, q.view.regions, 1)
	for _, r := range q.view.regions {
		assert.Equal(t, pattern(4096, peerSeed), r.mem[:4096])
		r.mem[0] ^= 1
	}
	q.view.mu.RUnlock()
	require.NoError(t, qpi.Close())
}
