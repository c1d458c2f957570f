package shm

import (
	"sync"

	"golang.org/x/sys/unix"
)

// remoteView is a peer PD as this PD sees it: the peer's key table,
// mapped read-only, and the peer's regions mapped so far. QPs of this PD
// connected to QPs of that PD share one view.
type remoteView struct {
	id   uint64
	kt   []byte // read-only mapping of the peer's key table
	cap  uint32 // checked capacity of kt
	refs int    // guarded by the owning pd.mu

	// mu guards regions. Accesses hold it for reading during their copy;
	// a fetch that replaces or drops a mapping holds it for writing, so
	// no copy uses a mapping that is being unmapped.
	mu      sync.RWMutex
	regions map[uint32]*remoteRegion // by key-table index
}

// remoteRegion is a peer's memfd mapped here.
type remoteRegion struct {
	serial uint64
	mem    []byte
}

// acquireView returns the view of peer PD id, mapping its key table from
// ktFd if no QP of p maps it yet. It takes ownership of ktFd.
func (p *pd) acquireView(id uint64, ktFd int) (*remoteView, error) {
	defer unix.Close(ktFd)
	p.mu.Lock()
	defer p.mu.Unlock()
	if v := p.views[id]; v != nil {
		v.refs++
		return v, nil
	}
	mem, err := mapFd(ktFd, ktHdrLen, false)
	if err != nil {
		return nil, err
	}
	capacity, err := checkKeyTable(mem)
	if err != nil {
		unmap(mem)
		return nil, err
	}
	v := &remoteView{id: id, kt: mem, cap: capacity, refs: 1, regions: map[uint32]*remoteRegion{}}
	p.views[id] = v
	return v, nil
}

// releaseView drops a QP's reference; the last one unmaps everything.
func (p *pd) releaseView(v *remoteView) {
	p.mu.Lock()
	v.refs--
	last := v.refs == 0
	if last {
		delete(p.views, v.id)
	}
	p.mu.Unlock()
	if !last {
		return
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	for i, r := range v.regions {
		unmap(r.mem)
		delete(v.regions, i)
	}
	unmap(v.kt)
	v.kt = nil
}

// insert records a fetched mapping, replacing an older one of the same
// index, and drops mappings of regions the peer has since deregistered.
func (v *remoteView) insert(idx uint32, r *remoteRegion) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if old := v.regions[idx]; old != nil {
		unmap(old.mem)
	}
	v.regions[idx] = r
	for i, o := range v.regions {
		if i == idx {
			continue
		}
		if e := keyTableEntry(v.kt, i).load(); e.State == 0 || e.Serial != o.serial {
			unmap(o.mem)
			delete(v.regions, i)
		}
	}
}
