package perftest

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/capsule-storage/capsule/rdma"
)

// MaxSamples is how many latency samples a run keeps (the newest).
const MaxSamples = 1 << 20

// Params describe one client run.
type Params struct {
	Op       Op
	Size     int
	QD       int
	Duration time.Duration
	// Warmup runs before measuring; its operations are not counted.
	Warmup time.Duration
}

// Result is what a run measured.
type Result struct {
	Params
	Elapsed time.Duration
	Ops     int64
	Bytes   int64
	// Latency percentiles of the kept samples.
	P50, P90, P99, P999, Max time.Duration
}

// BytesPerSec is the measured bandwidth.
func (r Result) BytesPerSec() float64 { return float64(r.Bytes) / r.Elapsed.Seconds() }

// OpsPerSec is the measured message rate.
func (r Result) OpsPerSec() float64 { return float64(r.Ops) / r.Elapsed.Seconds() }

func (r Result) String() string {
	return fmt.Sprintf("op=%s size=%d qd=%d time=%s ops=%d bandwidth=%.2f MB/s msgs=%.0f/s lat p50=%s p90=%s p99=%s p99.9=%s max=%s",
		r.Op, r.Size, r.QD, r.Elapsed.Round(time.Millisecond), r.Ops, r.BytesPerSec()/1e6, r.OpsPerSec(),
		r.P50, r.P90, r.P99, r.P999, r.Max)
}

// Run connects to a perftest server at url and measures p.
func Run(ctx context.Context, url string, p Params) (Result, error) {
	h := Hello{Op: p.Op, Size: uint32(p.Size), QD: uint32(p.QD)}
	if p.Size <= 0 || p.QD <= 0 || p.Duration <= 0 {
		return Result{}, fmt.Errorf("%w: size, qd and duration must be positive", ErrBadParams)
	}
	if err := h.Validate(); err != nil {
		return Result{}, err
	}
	pd, err := rdma.OpenPD(url)
	if err != nil {
		return Result{}, err
	}
	defer pd.Close()
	mr, err := pd.Alloc(p.Size*p.QD, rdma.AccessAll)
	if err != nil {
		return Result{}, err
	}
	defer mr.Deregister()
	ack, err := pd.Alloc(8*p.QD, rdma.AccessLocalWrite)
	if err != nil {
		return Result{}, err
	}
	defer ack.Deregister()
	cq, err := pd.CreateCQ(4*p.QD + 16)
	if err != nil {
		return Result{}, err
	}
	defer cq.Close()
	qp, err := pd.CreateQP(rdma.QPConfig{SendCQ: cq, MaxSendWR: 2 * p.QD, MaxRecvWR: 2 * p.QD, MaxSGE: 1})
	if err != nil {
		return Result{}, err
	}
	defer qp.Close()

	_, host, err := rdma.ParseURL(url)
	if err != nil {
		return Result{}, err
	}
	recvs := make([]rdma.RecvWR, p.QD)
	rsges := make([]rdma.SGE, p.QD)
	for i := range recvs {
		rsges[i] = rdma.SGEOf(ack, 8*i, 8)
		recvs[i] = rdma.RecvWR{ID: uint64(i), SGL: rsges[i : i+1]}
	}
	if p.Op == OpSend {
		if err := qp.PostRecv(recvs); err != nil {
			return Result{}, err
		}
	}
	var hb [helloLen]byte
	priv, err := qp.Connect(ctx, host, h.MarshalTo(hb[:]))
	if err != nil {
		return Result{}, err
	}
	var reply Reply
	if err := reply.UnmarshalBinary(priv); err != nil {
		return Result{}, err
	}
	if reply.Len < uint64(p.Size*p.QD) {
		return Result{}, ErrRegionTooSmall
	}
	return drive(ctx, qp, cq, mr, recvs, reply, p)
}

// drive keeps QD operations in flight until the warmup and the measured
// duration have passed, then drains.
func drive(ctx context.Context, qp rdma.QP, cq rdma.CQ, mr rdma.MR, recvs []rdma.RecvWR, reply Reply, p Params) (Result, error) {
	var op rdma.Opcode
	switch p.Op {
	case OpWrite:
		op = rdma.OpWrite
	case OpRead:
		op = rdma.OpRead
	default:
		op = rdma.OpSendImm
	}
	wrs := make([]rdma.SendWR, p.QD)
	sges := make([]rdma.SGE, p.QD)
	started := make([]time.Time, p.QD)
	pending := make([]uint8, p.QD) // events a slot still waits for
	for i := range wrs {
		sges[i] = rdma.SGEOf(mr, i*p.Size, p.Size)
		wrs[i] = rdma.SendWR{ID: uint64(i), Op: op, Flags: rdma.Signaled, SGL: sges[i : i+1],
			Imm: uint32(i), RemoteAddr: reply.Addr + uint64(i*p.Size), RKey: reply.RKey}
	}
	events := uint8(1)
	if p.Op == OpSend {
		events = 2 // the Send's completion and the answer
	}
	samples := make([]time.Duration, 0, MaxSamples)
	var kept int64

	post := func(i int) error {
		started[i] = time.Now()
		pending[i] = events
		return qp.PostSend(wrs[i : i+1])
	}
	for i := range wrs {
		if err := post(i); err != nil {
			return Result{}, err
		}
	}

	begin := time.Now()
	measureFrom := begin.Add(p.Warmup)
	end := measureFrom.Add(p.Duration)
	var res Result
	res.Params = p
	inflight := p.QD
	stopping := false
	wcs := make([]rdma.WC, 64)
	for inflight > 0 {
		n, err := cq.Wait(ctx, wcs)
		if err != nil {
			return Result{}, err
		}
		now := time.Now()
		if !stopping && !now.Before(end) {
			stopping = true
		}
		for _, wc := range wcs[:n] {
			if wc.Status != rdma.Success {
				return Result{}, fmt.Errorf("perf: %v completion of slot %d: %w (QP: %v)", wc.Opcode, wc.ID, wc.Status, qp.Err())
			}
			i := int(wc.ID)
			if wc.Opcode == rdma.WCRecv {
				i = int(wc.Imm)
				if i >= len(recvs) {
					return Result{}, fmt.Errorf("%w: answer for slot %d", ErrBadWire, i)
				}
				if err := qp.PostRecv(recvs[wc.ID : wc.ID+1]); err != nil {
					return Result{}, err
				}
			}
			pending[i]--
			if pending[i] > 0 {
				continue
			}
			if !started[i].Before(measureFrom) && !now.After(end) {
				res.Ops++
				res.Bytes += int64(p.Size)
				lat := now.Sub(started[i])
				if len(samples) < MaxSamples {
					samples = append(samples, lat)
				} else {
					samples[kept%MaxSamples] = lat
				}
				kept++
			}
			if stopping {
				inflight--
				continue
			}
			if err := post(i); err != nil {
				return Result{}, err
			}
		}
	}
	res.Elapsed = end.Sub(measureFrom)
	if len(samples) > 0 {
		slices.Sort(samples)
		at := func(q float64) time.Duration { return samples[min(len(samples)-1, int(q*float64(len(samples))))] }
		res.P50, res.P90, res.P99, res.P999, res.Max = at(0.50), at(0.90), at(0.99), at(0.999), samples[len(samples)-1]
	}
	return res, nil
}
