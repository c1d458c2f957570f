package host

import (
	"context"
	"fmt"

	"github.com/capsule-storage/capsule/nvmeof"
)

// AsyncEvent is an Asynchronous Event the controller reported
// (WithAsyncEvents).
type AsyncEvent struct {
	nvmeof.AsyncEvent
	// ChangedNamespaces, for a Namespace Attribute Changed notice, are
	// the NSIDs of the Changed Namespace List log page (read to clear the
	// event): namespaces added, removed or changed since the last one.
	// Nil when the list overflowed (more than 1024 changed: look at all
	// of them).
	ChangedNamespaces []uint32
	// ANA, for an ANA Change notice, is the ANA log page read to clear
	// the event; Controller.ANAState answers from it from now on.
	ANA *nvmeof.ANALog
	// Err is set when the log page could not be read.
	Err error
}

// startEvents runs the event loop of a new live association, when the
// caller asked for events and the controller takes them. It ends with
// the association: a lost association's Asynchronous Event Request fails
// like any admin command, and the next association starts its own loop.
func (c *Controller) startEvents(a *association) {
	if !a.events {
		return
	}
	c.events.Go(func() { c.eventLoop(a) })
}

// eventLoop keeps one Asynchronous Event Request outstanding; each
// completion is handled (for a namespace notice: the Changed Namespace
// List is read, which clears it, and the namespaces named are identified
// again) and handed to the caller, and a new request is sent.
func (c *Controller) eventLoop(a *association) {
	for {
		var cmd nvmeof.Command
		cmd.Opcode = nvmeof.AdminAsyncEventRequest
		cqe, err := a.admin.exec(context.Background(), cmd, nil, nvmeof.NoData, false) // ends with the queue
		if err != nil {
			return // the association is gone, or Close
		}
		ev := AsyncEvent{AsyncEvent: nvmeof.ParseAsyncEvent(cqe.DW0)}
		switch {
		case ev.Type == nvmeof.AsyncEventNotice && ev.LogPage == nvmeof.LogChangedNamespaceList:
			ev.ChangedNamespaces, ev.Err = c.namespacesChanged(a)
		case ev.Type == nvmeof.AsyncEventNotice && ev.LogPage == nvmeof.LogANA && a.anaSize > 0:
			ctx, cancel := context.WithTimeout(c.ctx, adminTimeout)
			ev.ANA, ev.Err = c.readANA(ctx, a)
			cancel()
		}
		c.log.Debug("nvmeof/host: asynchronous event", "event", ev.String(), "changed", ev.ChangedNamespaces)
		c.cfg.onEvent(ev)
	}
}

// namespacesChanged reads the Changed Namespace List and forgets the
// handles of the namespaces it names whose identity is gone or changed
// (they fail with ErrNamespaceChanged; Namespace identifies them anew).
func (c *Controller) namespacesChanged(a *association) ([]uint32, error) {
	ctx, cancel := context.WithTimeout(c.ctx, adminTimeout)
	defer cancel()
	buf := make([]byte, nvmeof.ChangedNamespaceLogSize)
	if err := a.admin.getLogPage(ctx, nvmeof.LogChangedNamespaceList, 0, buf, a.maxTransfer); err != nil {
		return nil, err
	}
	ids, err := nvmeof.AppendNamespaceList(nil, buf)
	if err != nil {
		return nil, fmt.Errorf("nvmeof/host: Changed Namespace List: %w", err)
	}
	overflow := len(ids) == 1 && ids[0] == nvmeof.NSIDAll
	c.mu.Lock()
	var check []*Namespace
	for nsid, ns := range c.namespaces {
		if overflow || containsNSID(ids, nsid) {
			check = append(check, ns)
		}
	}
	c.mu.Unlock()
	id := make([]byte, nvmeof.IdentifyDataSize)
	for _, ns := range check {
		var now nvmeof.IdentifyNamespace
		if err := a.admin.identify(ctx, nvmeof.CNSNamespace, ns.nsid, id); err != nil {
			return ids, err
		}
		if now.UnmarshalBinary(id) == nil && now.NSZE == ns.id.NSZE && now.FLBAS == ns.id.FLBAS && now.NGUID == ns.id.NGUID {
			continue
		}
		ns.changed.Store(true)
		c.mu.Lock()
		if c.namespaces[ns.nsid] == ns {
			delete(c.namespaces, ns.nsid)
		}
		c.mu.Unlock()
	}
	if overflow {
		return nil, nil
	}
	return ids, nil
}

func containsNSID(ids []uint32, nsid uint32) bool {
	for _, id := range ids {
		if id == nsid {
			return true
		}
	}
	return false
}
