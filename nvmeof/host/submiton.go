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

// SubmitBatch is SubmitOn for each of rs in order, with their commands
// sent together: the capsules the batch issues at once go out in one post
// of Sends (RDMA: one PostSend, one write on iwarp) or one writev (TCP)
// when the last of rs is submitted, rather than one per command. A caller
// that gathers several requests before it starts them (fio's queue and
// commit) saves a system call or doorbell per command. It returns how many
// of rs were submitted: on an error from SubmitOn, rs[n] was refused (its
// Done is not called) and those after it were not tried. SubmitBatch does
// not allocate.
func (ns *Namespace) SubmitBatch(q int, rs []*Request) (n int, err error) {
	if q < 0 {
		q = -q
	}
	if a := ns.c.live.Load(); a != nil && len(rs) > 1 {
		qu := a.io[q%len(a.io)]
		qu.holdSends()
		defer qu.sendHeld()
	}
	for i, r := range rs {
		if err := ns.SubmitOn(q, r); err != nil {
			return i, err
		}
	}
	return len(rs), nil
}
