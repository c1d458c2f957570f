//go:build rdma && cgo

package verbs

/*
#include "cverbs.h"
*/
import "C"

import (
	"github.com/capsule-storage/capsule/rdma"
)

// sendView is one WR of a send chain as the device will read it, decoded
// back from the ibv_send_wr that cap_build_send linked: for diagnostics
// of what a PostSend handed the device, and for the chain's tests.
type sendView struct {
	WRID       uint64
	Next       int // index of the next WR, -1 at the end of the chain
	Opcode     uint32
	Flags      uint32
	Imm        uint32 // host order
	InvRKey    uint32
	RemoteAddr uint64
	RKey       uint32
	SGL        []rdma.SGE
}

// fillSend copies send WRs into the chain as PostSend does, with wr_id
// seq0+i, without posting. It stops at the first WR q would refuse.
func (ch *chain) fillSend(wrs []rdma.SendWR, seq0 uint64) int {
	nsge := 0
	for i := range wrs {
		w := &wrs[i]
		code, _, ok := wrOpcode(w.Op)
		if !ok || i >= len(ch.swr) || len(w.SGL) > ch.nsge {
			return i
		}
		ch.swr[i] = C.struct_cap_swr{
			wr_id:       C.uint64_t(seq0 + uint64(i)),
			remote_addr: C.uint64_t(w.RemoteAddr),
			rkey:        C.uint32_t(w.RKey),
			imm:         C.uint32_t(w.Imm),
			inv_rkey:    C.uint32_t(w.InvRKey),
			num_sge:     C.uint32_t(len(w.SGL)),
			opcode:      C.uint32_t(code),
			flags:       C.uint32_t(sendFlags(w.Flags)),
		}
		for _, g := range w.SGL {
			ch.sge[nsge] = C.struct_ibv_sge{addr: C.uint64_t(g.Addr), length: C.uint32_t(g.Length), lkey: C.uint32_t(g.LKey)}
			nsge++
		}
	}
	return len(wrs)
}

// linkSend links the first n WRs of the chain (cap_build_send) and decodes them.
func (ch *chain) linkSend(n int) []sendView {
	C.cap_build_send(ch.c, C.int(n))
	out := make([]sendView, n)
	for i := range out {
		var w C.struct_cap_swr
		var next, off C.int
		C.cap_send_view(ch.c, C.int(i), &w, &next, &off)
		v := sendView{
			WRID: uint64(w.wr_id), Next: int(next), Opcode: uint32(w.opcode), Flags: uint32(w.flags),
			Imm: uint32(w.imm), InvRKey: uint32(w.inv_rkey), RemoteAddr: uint64(w.remote_addr), RKey: uint32(w.rkey),
		}
		for k := 0; k < int(w.num_sge) && off >= 0; k++ {
			g := ch.sge[int(off)+k]
			v.SGL = append(v.SGL, rdma.SGE{Addr: uint64(g.addr), Length: uint32(g.length), LKey: uint32(g.lkey)})
		}
		out[i] = v
	}
	return out
}
