package conformance

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/capsule-storage/capsule/rdma"
)

// maxTransfer is the largest single Write or Read of the suite.
const maxTransfer = 16 << 20

// transferSizes are the lengths of testWriteRead: nothing, a byte, odd
// sizes around a page and above 64 KiB, a megabyte and change, and
// maxTransfer.
var transferSizes = []int{0, 1, 3, 4095, 4097, 65537, 1<<20 + 7, maxTransfer}

// sizeName names a length for a subtest: 4097B, 1MiB+7B, 16MiB.
func sizeName(n int) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%dMiB", n>>20)
	case n > 1<<20:
		return fmt.Sprintf("%dMiB+%dB", n>>20, n%(1<<20))
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%dKiB", n>>10)
	}
	return fmt.Sprintf("%dB", n)
}

// span is the SGL for n bytes at off of mr: no SGE at all for 0 bytes.
func span(mr rdma.MR, off, n int) []rdma.SGE {
	if n == 0 {
		return nil
	}
	return sgl(mr, piece{off, n})
}

// testWriteRead: Writes and Reads of every size in transferSizes at odd
// offsets on both sides; the bytes around the target range stay as they
// were.
func testWriteRead(t *testing.T, env Env) {
	p := newPair(t, env, pairOptions{})
	const pad = 29
	for i, n := range transferSizes {
		t.Run(sizeName(n), func(t *testing.T) {
			seed := uint64(i) * 8
			remote := p.allocB(n+2*pad, rdma.AccessAll, seed+1)
			src := p.allocA(n+pad, rdma.AccessLocalWrite, seed+2)
			sink := p.allocA(n+2*pad, rdma.AccessLocalWrite, seed+3)
			defer func() {
				p.free(sink)
				p.free(src)
				p.free(remote)
			}()

			// Write src[7:7+n] to remote[13:13+n], then Read it back into
			// sink[5:5+n].
			wantR := bytes.Clone(remote.Bytes())
			copy(wantR[13:13+n], src.Bytes()[7:7+n])
			wantK := bytes.Clone(sink.Bytes())
			copy(wantK[5:5+n], src.Bytes()[7:7+n])
			postSend(t, p.a,
				rdma.SendWR{ID: 1, Op: rdma.OpWrite, Flags: rdma.Signaled, SGL: span(src, 7, n),
					RemoteAddr: remote.Addr() + 13, RKey: remote.RKey()},
				rdma.SendWR{ID: 2, Op: rdma.OpRead, Flags: rdma.Signaled, SGL: span(sink, 5, n),
					RemoteAddr: remote.Addr() + 13, RKey: remote.RKey()})
			wcs := waitWC(t, p.cqA, 2)
			requireWC(t, wcs[0], 1, rdma.WCWrite, rdma.Success)
			requireWC(t, wcs[1], 2, rdma.WCRead, rdma.Success)
			requireBytes(t, wantR, remote.Bytes(), "target region after a Write of %d bytes at offset 13", n)
			requireBytes(t, wantK, sink.Bytes(), "sink after a Read of %d bytes at offset 13", n)

			// Read a range that straddles the written one: remote[1:1+n]
			// into sink[pad+2:pad+2+n].
			fill(sink.Bytes(), seed+4)
			wantK = bytes.Clone(sink.Bytes())
			copy(wantK[pad+2:pad+2+n], wantR[1:1+n])
			postSend(t, p.a, rdma.SendWR{ID: 3, Op: rdma.OpRead, Flags: rdma.Signaled, SGL: span(sink, pad+2, n),
				RemoteAddr: remote.Addr() + 1, RKey: remote.RKey()})
			requireWC(t, waitWC(t, p.cqA, 1)[0], 3, rdma.WCRead, rdma.Success)
			requireBytes(t, wantK, sink.Bytes(), "sink after a Read of %d bytes at offset 1", n)
			requireBytes(t, wantR, remote.Bytes(), "target region after a Read")
		})
	}
}

// testWriteReadSGL: a Write gathers several SGEs into one remote range and
// a Read scatters one remote range over several SGEs.
func testWriteReadSGL(t *testing.T, env Env) {
	p := setup(t, env, 0)
	remote := p.allocB(1<<17, rdma.AccessAll, 1)
	src := p.allocA(1<<17, rdma.AccessLocalWrite, 2)
	sink := p.allocA(1<<17, rdma.AccessLocalWrite, 3)
	p.connect(pairOptions{cfgA: rdma.QPConfig{MaxSGE: 4}})

	g := []piece{{1, 1000}, {2001, 4096}, {7000, 3}, {9001, 60001}}
	msg := gather(src.Bytes(), g...)
	wantR := bytes.Clone(remote.Bytes())
	copy(wantR[17:], msg)
	s := []piece{{100001, 5}, {3, 65536}, {70000, 7}, {80001, 4000}}
	wantK := bytes.Clone(sink.Bytes())
	total := 5 + 65536 + 7 + 4000
	scatter(wantK, wantR[9:9+total], s...)

	postSend(t, p.a,
		rdma.SendWR{ID: 1, Op: rdma.OpWrite, Flags: rdma.Signaled, SGL: sgl(src, g...),
			RemoteAddr: remote.Addr() + 17, RKey: remote.RKey()},
		rdma.SendWR{ID: 2, Op: rdma.OpRead, Flags: rdma.Signaled, SGL: sgl(sink, s...),
			RemoteAddr: remote.Addr() + 9, RKey: remote.RKey()})
	wcs := waitWC(t, p.cqA, 2)
	requireWC(t, wcs[0], 1, rdma.WCWrite, rdma.Success)
	requireWC(t, wcs[1], 2, rdma.WCRead, rdma.Success)
	requireBytes(t, wantR, remote.Bytes(), "target region after a gathered Write")
	requireBytes(t, wantK, sink.Bytes(), "sink after a scattered Read")
}

// testOrderWriteSend: when the receive of a Send posted after a Write
// completes, the Write's bytes are in place.
func testOrderWriteSend(t *testing.T, env Env) {
	const rounds = 8
	n := 1 << 20
	p := setup(t, env, 0)
	remote := p.allocB(n, rdma.AccessAll, 1)
	src := p.allocA(n, rdma.AccessLocalWrite, 2)
	note := p.allocA(8, rdma.AccessLocalWrite, 3)
	dst := p.allocB(8*rounds, rdma.AccessLocalWrite, 4)
	p.connect(pairOptions{primeB: recvSlots(dst, rounds, 8, 0)})

	for r := range rounds {
		fill(src.Bytes(), uint64(100+r))
		flags := rdma.SendFlags(0)
		if r%2 == 1 {
			flags = rdma.Signaled
		}
		postSend(t, p.a,
			rdma.SendWR{ID: uint64(2 * r), Op: rdma.OpWrite, Flags: flags, SGL: sgl(src, piece{0, n}),
				RemoteAddr: remote.Addr(), RKey: remote.RKey()},
			rdma.SendWR{ID: uint64(2*r + 1), Op: rdma.OpSend, Flags: rdma.Signaled, SGL: sgl(note, piece{0, 8})})
		requireWC(t, waitWC(t, p.cqB, 1)[0], uint64(r), rdma.WCRecv, rdma.Success)
		requireBytes(t, src.Bytes(), remote.Bytes(), "round %d: the Write's bytes when the following Send's receive completes", r)
		want := 1
		if flags&rdma.Signaled != 0 {
			want = 2
		}
		wcs := waitWC(t, p.cqA, want)
		requireSuccess(t, wcs)
		require.Equal(t, uint64(2*r+1), wcs[want-1].ID)
	}
}

// testOrderWriteRead: a Read posted after a Write sees the Write's bytes,
// in one PostSend or two.
func testOrderWriteRead(t *testing.T, env Env) {
	const rounds = 8
	n := 1 << 20
	p := setup(t, env, 0)
	remote := p.allocB(n, rdma.AccessAll, 1)
	src := p.allocA(n, rdma.AccessLocalWrite, 2)
	sink := p.allocA(n, rdma.AccessLocalWrite, 3)
	p.connect(pairOptions{})

	for r := range rounds {
		fill(src.Bytes(), uint64(200+r))
		w := rdma.SendWR{ID: uint64(2 * r), Op: rdma.OpWrite, SGL: sgl(src, piece{0, n}),
			RemoteAddr: remote.Addr(), RKey: remote.RKey()}
		rd := rdma.SendWR{ID: uint64(2*r + 1), Op: rdma.OpRead, Flags: rdma.Signaled, SGL: sgl(sink, piece{0, n}),
			RemoteAddr: remote.Addr(), RKey: remote.RKey()}
		if r%2 == 0 {
			postSend(t, p.a, w, rd)
		} else {
			postSend(t, p.a, w)
			postSend(t, p.a, rd)
		}
		requireWC(t, waitWC(t, p.cqA, 1)[0], uint64(2*r+1), rdma.WCRead, rdma.Success)
		requireBytes(t, src.Bytes(), sink.Bytes(), "round %d: a Read after a Write", r)
		requireBytes(t, src.Bytes(), remote.Bytes(), "round %d: the target after a Write and a Read", r)
	}
}
