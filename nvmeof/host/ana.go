package host

import (
	"context"
	"fmt"
	"sync/atomic"

	"github.com/capsule-storage/capsule/nvmeof"
)

// Asymmetric Namespace Access on one controller: when Identify
// Controller has CMIC bit 3, the host reads the ANA log page (0Ch) as
// each association is set up, again on every ANA Change event (with
// WithAsyncEvents, or on a Multipath's paths), and when a command fails
// with an ANA status; ANAState answers from the last page read. A
// Multipath (multipath.go) picks its paths by these states.

// maxANALogRead bounds the ANA log page the host reads: 16 +
// NANAGRPID*32 + MNAN*4 bytes, as Linux sizes it; a controller that
// claims more has its ANA reporting ignored (every namespace taken as
// Optimized), as Linux ignores it past MDTS.
const maxANALogRead = 1 << 20

// anaTable is the ANA log page as a controller last reported it, with
// the state of each NSID it names.
type anaTable struct {
	log    nvmeof.ANALog
	byNSID map[uint32]nvmeof.ANAState
	group  map[uint32]uint32 // ANAGRPID by NSID
	// missed is set when a namespace the page does not name was asked
	// for: the page is read again once (a namespace added since).
	missed atomic.Bool
}

func newANATable(l nvmeof.ANALog) *anaTable {
	t := &anaTable{log: l, byNSID: map[uint32]nvmeof.ANAState{}, group: map[uint32]uint32{}}
	for _, g := range l.Groups {
		for _, id := range g.NSIDs {
			t.byNSID[id] = g.State
			t.group[id] = g.ANAGRPID
		}
	}
	return t
}

// anaLogSize is the size of the ANA log page read from a controller
// that reports ANA, 0 if it does not or its page would be too large.
func anaLogSize(id *nvmeof.IdentifyController) int {
	if id.CMIC&nvmeof.CMICANA == 0 || id.NANAGRPID == 0 {
		return 0
	}
	mnan := id.MNAN
	if mnan == 0 {
		mnan = id.NN
	}
	n := nvmeof.MaxANALogSize(id.NANAGRPID, mnan)
	if n > maxANALogRead {
		return 0
	}
	return int(n+3) &^ 3
}

// readANA reads the ANA log page on a's admin queue and makes it a's
// table (RAE clear: an ANA Change event may be reported again).
func (c *Controller) readANA(ctx context.Context, a *association) (*nvmeof.ANALog, error) {
	buf := make([]byte, a.anaSize)
	if err := a.admin.getLogPage(ctx, nvmeof.LogANA, 0, buf, a.maxTransfer); err != nil {
		return nil, err
	}
	var l nvmeof.ANALog
	if _, err := l.UnmarshalPrefix(buf); err != nil {
		return nil, fmt.Errorf("%w: ANA log page: %w", ErrProtocol, err)
	}
	a.ana.Store(newANATable(l))
	c.anaReads.Add(1)
	c.pathChanged()
	return &l, nil
}

// refreshANA reads the ANA log page again in the background, once at a
// time: a command failed with an ANA status, so what the host knows is
// out of date.
func (c *Controller) refreshANA() {
	a := c.live.Load()
	if a == nil || a.anaSize == 0 || !c.anaRefreshing.CompareAndSwap(false, true) {
		return
	}
	c.events.Go(func() {
		defer c.anaRefreshing.Store(false)
		ctx, cancel := context.WithTimeout(c.ctx, adminTimeout)
		defer cancel()
		if _, err := c.readANA(ctx, a); err != nil {
			c.log.Debug("nvmeof/host: reading the ANA log page", "err", err)
		}
	})
}

// ANAState returns the ANA state of namespace nsid through this
// controller, as the last ANA log page read says, and whether the
// controller reports ANA at all. A controller that does not (or is not
// live) answers Optimized and false. A namespace the page does not name
// is Inaccessible, and the page is read again in the background (once
// per page: the namespace may have been added since, which the
// controller tells with a Namespace Attribute Changed notice, not an ANA
// one), as Linux reads it again for a namespace in no group it knows.
func (c *Controller) ANAState(nsid uint32) (nvmeof.ANAState, bool) {
	a := c.live.Load()
	if a == nil || a.anaSize == 0 {
		return nvmeof.ANAOptimized, false
	}
	t := a.ana.Load()
	if t == nil {
		return nvmeof.ANAInaccessible, true
	}
	if s, ok := t.byNSID[nsid]; ok {
		return s, true
	}
	if t.missed.CompareAndSwap(false, true) {
		c.refreshANA()
	}
	return nvmeof.ANAInaccessible, true
}

// ANALog reads the ANA log page now (which clears an ANA Change event
// the controller reported) and returns it. It fails with ErrNotSupported
// when the controller does not report ANA.
func (c *Controller) ANALog(ctx context.Context) (nvmeof.ANALog, error) {
	a, err := c.liveAssociation()
	if err != nil {
		return nvmeof.ANALog{}, err
	}
	if a.anaSize == 0 {
		return nvmeof.ANALog{}, fmt.Errorf("%w: the controller does not report ANA (CMIC bit 3)", ErrNotSupported)
	}
	l, err := c.readANA(ctx, a)
	if err != nil {
		return nvmeof.ANALog{}, err
	}
	return *l, nil
}

// pathChanged tells a Multipath that this path's state may have changed
// (an ANA log page read, the controller lost or back).
func (c *Controller) pathChanged() {
	if f := c.cfg.pathChanged; f != nil {
		f()
	}
}

// isANAError reports whether a command's status is a Path Related
// Status: the command did not run through this controller, and another
// may run it.
func isANAError(st nvmeof.Status) bool { return st.SCT() == nvmeof.SCTPathRelated }
