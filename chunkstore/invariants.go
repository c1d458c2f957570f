package chunkstore

import "fmt"

// checkMap verifies the maps against the stripes' summaries: every mapped
// sector points at a slot that holds a stripe whose summary names that
// sector at that place, and every slot's live count is the number of
// sectors the maps point at in it. It reads every summary that is not in
// memory, holding lmu throughout: for tests and invariants builds (Open
// runs it after the roll-forward there).
func (s *Store) checkMap() error {
	s.lmu.Lock()
	defer s.lmu.Unlock()
	type at struct {
		owner, lba uint64
	}
	summaries := map[uint64][]at{} // slot → what each sector holds
	summary := func(slot uint64) ([]at, error) {
		if sm, ok := summaries[slot]; ok {
			return sm, nil
		}
		si := &s.slots[slot]
		var runs []sumRun
		if si.mem != nil {
			runs = si.mem.runs
		} else {
			var err error
			if runs, err = s.summaryOf(si.key, si.ext, int(si.sectors)); err != nil {
				return nil, fmt.Errorf("slot %d: %w", slot, err)
			}
		}
		var sm []at
		for _, r := range runs {
			for j := range uint64(r.N) {
				sm = append(sm, at{r.Owner, r.LBA + j})
			}
		}
		summaries[slot] = sm
		return sm, nil
	}
	live := map[uint64]int32{}
	var total int64
	for owner, m := range s.owners {
		var mapped int64
		for page, runs := range m.pages {
			for _, r := range runs {
				if r.slot >= uint64(len(s.slots)) || !s.slots[r.slot].used {
					return fmt.Errorf("owner %d page %d maps sectors to slot %d, which holds no stripe", owner, page, r.slot)
				}
				sm, err := summary(r.slot)
				if err != nil {
					return err
				}
				for j := range int(r.n) {
					lba := page*pageSectors + uint64(r.off) + uint64(j)
					pos := int(r.sec) + j
					if pos >= len(sm) || sm[pos] != (at{owner, lba}) {
						return fmt.Errorf("owner %d sector %d maps to slot %d sector %d, whose summary names another", owner, lba, r.slot, pos)
					}
				}
				live[r.slot] += int32(r.n)
				mapped += int64(r.n)
			}
		}
		if mapped != m.mapped {
			return fmt.Errorf("owner %d maps %d sectors, counts %d", owner, mapped, m.mapped)
		}
		total += mapped
	}
	var used, capacity int64
	for p := range s.slots {
		si := &s.slots[p]
		if !si.used {
			continue
		}
		used++
		capacity += s.capOf(si)
		if si.live != live[uint64(p)] {
			return fmt.Errorf("slot %d counts %d live sectors, the maps point at %d", p, si.live, live[uint64(p)])
		}
		if si.live == 0 && si.mem == nil {
			return fmt.Errorf("slot %d holds nothing live but was not released", p)
		}
	}
	if capacity != s.dataCap {
		return fmt.Errorf("the store counts room for %d sectors, its stripes have %d", s.dataCap, capacity)
	}
	if total != s.liveTotal || used != s.dataSlots {
		return fmt.Errorf("the store counts %d live sectors in %d slots; the maps hold %d in %d", s.liveTotal, s.dataSlots, total, used)
	}
	return nil
}
