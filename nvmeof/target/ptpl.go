package target

import (
	"encoding/json"
	"fmt"

	"github.com/capsule-storage/capsule/nvmeof"
)

// ReservationStore keeps the reservation state of namespaces whose host
// asked for Persist Through Power Loss (PTPL), across restarts of the
// target. A namespace given one (NamespaceConfig.Reservations) claims
// PTPL in RESCAP, loads its state when it is added, and saves it before
// a reservation command that changed it completes. Implementations must
// make Save durable before returning (`target serve` keeps it in the
// bbolt database DATA/reservations.db: internal/resstore, opened by
// internal/admin). Save and Load may be called from many
// goroutines.
type ReservationStore interface {
	// Load returns what Save last stored for the namespace, or nil.
	Load(subnqn string, nsid uint32) ([]byte, error)
	// Save stores state for the namespace; nil state deletes it.
	Save(subnqn string, nsid uint32, state []byte) error
}

// ptplState is what a ReservationStore holds for a namespace, as JSON.
type ptplState struct {
	Version int                    `json:"version"`
	GEN     uint32                 `json:"gen"`
	RTYPE   nvmeof.ReservationType `json:"rtype"`
	Holder  [16]byte               `json:"holder"`
	Regs    []ptplRegistrant       `json:"registrants"`
}

type ptplRegistrant struct {
	HostID [16]byte `json:"hostid"`
	Key    uint64   `json:"key"`
}

const ptplVersion = 1

// persistLocked saves the state when PTPL is on, and deletes it when it
// was just turned off (off).
func (rs *reservation) persistLocked(ns *Namespace, off bool) error {
	if rs.store == nil || (!rs.ptpl && !off) {
		return nil
	}
	if off {
		return rs.store.Save(ns.sub.nqn, ns.nsid, nil)
	}
	st := ptplState{Version: ptplVersion, GEN: rs.gen, RTYPE: rs.rtype, Holder: rs.holder}
	for h, g := range rs.regs {
		st.Regs = append(st.Regs, ptplRegistrant{HostID: h, Key: g.key})
	}
	b, err := json.Marshal(&st)
	if err != nil {
		return err
	}
	return rs.store.Save(ns.sub.nqn, ns.nsid, b)
}

// restore loads a namespace's persisted reservation, if any. Registrants
// come back without a controller (CNTLID FFFFh in Report) until they
// register again.
func (rs *reservation) restore(ns *Namespace) error {
	if rs.store == nil {
		return nil
	}
	b, err := rs.store.Load(ns.sub.nqn, ns.nsid)
	if err != nil || b == nil {
		return err
	}
	var st ptplState
	if err := json.Unmarshal(b, &st); err != nil {
		return fmt.Errorf("reservation state of NSID %d: %w", ns.nsid, err)
	}
	if st.Version != ptplVersion || (st.RTYPE != nvmeof.ReservationNone && !st.RTYPE.Valid()) {
		return fmt.Errorf("reservation state of NSID %d: version %d, RTYPE %d", ns.nsid, st.Version, st.RTYPE)
	}
	rs.mu.Lock()
	defer rs.mu.Unlock()
	rs.ptpl, rs.gen = true, st.GEN
	rs.regs = map[[16]byte]registration{}
	for _, g := range st.Regs {
		rs.regs[g.HostID] = registration{key: g.Key, cntlid: 0xffff}
	}
	rs.setLocked(st.RTYPE, st.Holder)
	return nil
}

// setPTPL is Set Features 83h: PTPL on or off for the namespace NSID (or
// every namespace, FFFFFFFFh); on needs a ReservationStore.
func setPTPL(r *request, on bool) nvmeof.Status {
	nss := r.q.ctrl.sub.Namespaces()
	if r.cmd.NSID != nvmeof.NSIDAll {
		nss = []*Namespace{r.q.ctrl.sub.Namespace(r.cmd.NSID)}
	}
	for _, ns := range nss {
		if ns == nil || (on && ns.res.store == nil) {
			return r.fail(nvmeof.StatusInvalidField.WithDNR(), nvmeof.CommandOffsetCDW11)
		}
	}
	for _, ns := range nss {
		rs := &ns.res
		rs.mu.Lock()
		was := rs.ptpl
		rs.ptpl = on
		err := rs.persistLocked(ns, was && !on)
		rs.mu.Unlock()
		if err != nil {
			r.q.t.log.Error("saving reservations failed", "subnqn", ns.sub.nqn, "nsid", ns.nsid, "err", err)
			return nvmeof.StatusInternalError
		}
	}
	return nvmeof.StatusSuccess
}
