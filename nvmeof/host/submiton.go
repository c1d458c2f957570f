package host

// SubmitOn is Submit with the I/O queue chosen by the caller: the request
// runs on queue q modulo the number of I/O queues of the association it
// is issued on (Info().Queues), instead of the next queue in round-robin
// order. A caller with several independent streams of requests (an NBD
// server with several client connections, say) maps each stream to its
// own queue, so that one stream's commands do not wait behind another's
// in a queue's slots and each queue's completions are reaped by its own
// goroutine. After a reconnect the same q picks the same queue index
// (modulo the queues granted then). Errors and the rest of the contract
// are Submit's; SubmitOn does not allocate.
func (ns *Namespace) SubmitOn(q int, r *Request) error {
	if q < 0 {
		q = -q
	}
	if !r.state.CompareAndSwap(reqIdle, reqBusy) {
		return ErrRequestBusy
	}
	start, end, err := ns.check(r)
	if err == nil && ns.changed.Load() {
		err = ErrNamespaceChanged
	}
	if err != nil {
		r.state.Store(reqIdle)
		return err
	}
	r.ns, r.ctrl, r.raw = ns, ns.c, nil
	r.reset(start, end)
	r.queue = q
	if err := ns.c.start(r); err != nil {
		r.state.Store(reqIdle)
		return err
	}
	return nil
}
