package target

import (
	"errors"
	"time"

	"github.com/capsule-storage/capsule/nvmeof"
)

// Fabrics commands: Connect, Property Get, Property Set, Disconnect
// (NVMe Base 2.x, 6).

// fieldStatus turns a wire decoder's error into the status to complete
// with, and for Connect Invalid Parameters puts IATTR and IPO in DW0.
func fieldStatus(r *request, err error) nvmeof.Status {
	st := nvmeof.StatusOf(err)
	var fe *nvmeof.FieldError
	if errors.As(err, &fe) {
		if !fe.InData {
			r.errLoc = fe.Offset
		}
		if errors.Is(st, nvmeof.StatusConnectInvalidParameters) {
			r.rsp.DW0 = fe.InvalidParameter().DW0()
		}
	}
	return st
}

// invalidParameter completes a Connect with Connect Invalid Parameters
// naming the offending field.
func invalidParameter(r *request, inData bool, offset int) nvmeof.Status {
	r.rsp.DW0 = nvmeof.InvalidParameter{InData: inData, Offset: uint16(offset)}.DW0()
	if !inData {
		r.errLoc = offset
	}
	return nvmeof.StatusConnectInvalidParameters.WithDNR()
}

func prepareConnect(r *request) nvmeof.Status {
	x, err := nvmeof.ParseConnect(&r.cmd)
	if err != nil {
		return fieldStatus(r, err)
	}
	if r.q.connected {
		return r.fail(nvmeof.StatusCommandSequenceError.WithDNR(), nvmeof.CommandOffsetFCTYPE)
	}
	if r.q.qidFromConnect {
		// NVMe/TCP: the Connect command names the queue.
		if int(x.QID) > r.q.t.cfg.maxIOQueues {
			return invalidParameter(r, false, nvmeof.ConnectOffsetQID)
		}
		r.q.qid = x.QID
	}
	if x.QID != r.q.qid {
		// The transport's connection was made for another queue.
		return invalidParameter(r, false, nvmeof.ConnectOffsetQID)
	}
	r.dir, r.dataLen = nvmeof.HostToController, nvmeof.ConnectDataSize
	return nvmeof.StatusSuccess
}

func executeConnect(r *request) nvmeof.Status {
	x, err := nvmeof.ParseConnect(&r.cmd)
	if err != nil {
		return fieldStatus(r, err)
	}
	var d nvmeof.ConnectData
	if err := d.UnmarshalTolerant(r.data[:nvmeof.ConnectDataSize]); err != nil {
		return fieldStatus(r, err)
	}
	q, t := r.q, r.q.t
	if q.connected {
		return r.fail(nvmeof.StatusCommandSequenceError.WithDNR(), nvmeof.CommandOffsetFCTYPE)
	}
	sub := t.lookupSubsystem(d.SubNQN)
	if sub == nil && t.starting.Load() {
		t.log.Info("connect to a subsystem not yet created: the target is starting", "subnqn", d.SubNQN, "hostnqn", d.HostNQN)
		return nvmeof.StatusConnectControllerBusy
	}
	if sub == nil {
		t.log.Warn("connect to an unknown subsystem", "subnqn", d.SubNQN, "hostnqn", d.HostNQN)
		return invalidParameter(r, true, nvmeof.ConnectDataOffsetSUBNQN)
	}
	if !sub.ListenerAllowed(q.listener) {
		t.log.Warn("connect to a subsystem not served on this listener", "subnqn", d.SubNQN, "listener", q.listener, "hostnqn", d.HostNQN)
		return invalidParameter(r, true, nvmeof.ConnectDataOffsetSUBNQN)
	}
	if !sub.HostAllowed(d.HostNQN) {
		t.log.Warn("connect from a host not allowed", "subnqn", d.SubNQN, "hostnqn", d.HostNQN)
		r.rsp.DW0 = nvmeof.InvalidParameter{InData: true, Offset: nvmeof.ConnectDataOffsetHOSTNQN}.DW0()
		return nvmeof.StatusConnectInvalidHost.WithDNR()
	}
	entries := x.QueueEntries()
	if x.QID == 0 {
		if d.CNTLID != nvmeof.CNTLIDDynamic {
			return invalidParameter(r, true, nvmeof.ConnectDataOffsetCNTLID)
		}
		if entries > AdminQueueEntries || entries > q.maxEntries {
			return invalidParameter(r, false, nvmeof.ConnectOffsetSQSIZE)
		}
		ctrl := newController(t, sub, q, &d, time.Duration(x.KATO)*time.Millisecond)
		if ctrl == nil {
			return nvmeof.StatusConnectControllerBusy
		}
		q.attach(ctrl, entries, x.CATTR)
		ctrl.mu.Lock()
		ctrl.adminEntries = entries
		ctrl.mu.Unlock()
		ctrl.log.Info("controller created", "kato", ctrl.kato, "queue_entries", entries)
	} else {
		ctrl := sub.findController(d.CNTLID)
		if ctrl == nil || ctrl.hostNQN != d.HostNQN {
			return invalidParameter(r, true, nvmeof.ConnectDataOffsetCNTLID)
		}
		if sub.discovery {
			return invalidParameter(r, false, nvmeof.ConnectOffsetQID)
		}
		if entries > t.cfg.maxQueueEntries || entries > q.maxEntries {
			return invalidParameter(r, false, nvmeof.ConnectOffsetSQSIZE)
		}
		if st := ctrl.attachIOQueue(q, entries, x.CATTR); !st.Success() {
			if errors.Is(st, nvmeof.StatusConnectInvalidParameters) {
				return invalidParameter(r, false, nvmeof.ConnectOffsetQID)
			}
			return r.fail(st, nvmeof.ConnectOffsetQID)
		}
		ctrl.log.Debug("I/O queue connected", "qid", q.qid, "queue_entries", entries)
	}
	r.rsp.DW0 = nvmeof.ConnectResponse{CNTLID: q.ctrl.cntlid}.DW0()
	return nvmeof.StatusSuccess
}

// attach makes q a queue of ctrl with the size Connect asked for.
func (q *queue) attach(ctrl *controller, entries int, cattr nvmeof.ConnectAttributes) {
	q.ctrl = ctrl
	q.entries = entries
	q.sqFlowOff = cattr&nvmeof.ConnectDisableSQFlowControl != 0
	q.sqhd.Store(0)
	q.connected = true
}

// attachIOQueue checks an I/O queue's QID against the queues granted and
// those already connected, and attaches it.
func (c *controller) attachIOQueue(q *queue, entries int, cattr nvmeof.ConnectAttributes) nvmeof.Status {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.dead || int(q.qid) > c.queuesGranted {
		return nvmeof.StatusConnectInvalidParameters.WithDNR()
	}
	if c.io[q.qid] != nil {
		return nvmeof.StatusCommandSequenceError.WithDNR()
	}
	q.attach(c, entries, cattr)
	c.io[q.qid] = q
	c.ioCount++
	return nvmeof.StatusSuccess
}

func preparePropertyGet(r *request) nvmeof.Status {
	if _, err := nvmeof.ParsePropertyGet(&r.cmd); err != nil {
		return fieldStatus(r, err)
	}
	return nvmeof.StatusSuccess
}

func executePropertyGet(r *request) nvmeof.Status {
	x, _ := nvmeof.ParsePropertyGet(&r.cmd)
	v, st := r.q.ctrl.property(x.Offset, x.Size)
	if !st.Success() {
		return r.fail(st, nvmeof.PropertyOffsetOFST)
	}
	r.rsp.SetValue64(v)
	return nvmeof.StatusSuccess
}

func preparePropertySet(r *request) nvmeof.Status {
	if _, err := nvmeof.ParsePropertySet(&r.cmd); err != nil {
		return fieldStatus(r, err)
	}
	return nvmeof.StatusSuccess
}

func executePropertySet(r *request) nvmeof.Status {
	x, _ := nvmeof.ParsePropertySet(&r.cmd)
	if x.Offset != nvmeof.PropertyCC {
		// CAP, VS and CSTS are read-only; NSSR (subsystem reset) is not
		// supported; anything else is not a property.
		return r.fail(nvmeof.StatusInvalidField.WithDNR(), nvmeof.PropertyOffsetOFST)
	}
	if x.Size != nvmeof.PropertySize4 {
		return r.fail(nvmeof.StatusInvalidField.WithDNR(), nvmeof.PropertyOffsetATTRIB)
	}
	r.q.ctrl.setCC(nvmeof.CC(uint32(x.Value)))
	return nvmeof.StatusSuccess
}

func prepareDisconnect(r *request) nvmeof.Status {
	if _, err := nvmeof.ParseDisconnect(&r.cmd); err != nil {
		return fieldStatus(r, err)
	}
	if r.q.qid == 0 {
		return r.fail(nvmeof.StatusInvalidQueueType.WithDNR(), nvmeof.CommandOffsetFCTYPE)
	}
	return nvmeof.StatusSuccess
}

// executeDisconnect deletes the I/O queue: it leaves its controller (its
// QID is free at once) and takes no more commands. The binding closes the
// connection once the response is out and the host had time to close it
// (rdmaDisconnectGrace).
func executeDisconnect(r *request) nvmeof.Status {
	q := r.q
	q.ctrl.removeIOQueue(q)
	q.disconnected = true
	r.closeQueue = true
	return nvmeof.StatusSuccess
}
