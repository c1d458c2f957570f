package server

import (
	"errors"
)

// Group commit. Every metadata change is a transaction of the working
// database (memdb.go); it fsyncs nothing (records.go), but a transaction
// copies the tree nodes on the paths it changes. Changes that arrive
// while a transaction is running are run together in the next one, on
// the committer goroutine, so that one set of copies covers all of them
// (concurrent writers' size and time updates; a client write larger than
// MDTS, 256 KiB over NVMe/TCP, is several commands in parallel, each with
// its own). A change that finds no transaction running
// and none waiting runs at once on its own goroutine: handing it to the
// committer and its result back cost two goroutine wake-ups, which
// dominated a lone create (BenchmarkMetadata).
//
// A function given to update may run more than once: when one function
// of a group fails, the group's transaction is rolled back and each
// function runs again in a transaction of its own, so that a failure
// (EEXIST, ENOENT ...) undoes only its own changes. Functions therefore
// set their results afresh on every run and do nothing outside the
// transaction that a second run would repeat.

// maxGroup bounds the functions one transaction runs.
const maxGroup = 64

type commitReq struct {
	fn  func(*memTx) error
	err chan error
}

// errGroupFailed aborts a group's transaction when one function failed.
var errGroupFailed = errors.New("fs/server: a function of the group failed")

// update runs fn in a writing transaction, grouped with the changes that
// arrive meanwhile, and returns fn's error or the commit's.
func (s *Server) update(fn func(*memTx) error) error {
	s.commitMu.RLock()
	if s.closed.Load() {
		s.commitMu.RUnlock()
		return errClosed
	}
	if len(s.commits) == 0 && s.txMu.TryLock() {
		err := s.db.Update(fn)
		s.txMu.Unlock()
		s.commitMu.RUnlock()
		return err
	}
	req := commitReq{fn: fn, err: make(chan error, 1)}
	s.commits <- &req
	s.commitMu.RUnlock()
	return <-req.err
}

// committer runs the groups of changes, one transaction each, until the
// channel is closed.
func (s *Server) committer() {
	defer close(s.committerDone)
	batch := make([]*commitReq, 0, maxGroup)
	errs := make([]error, maxGroup)
	for req := range s.commits {
		batch = append(batch[:0], req)
	drain:
		for len(batch) < maxGroup {
			select {
			case r, ok := <-s.commits:
				if !ok {
					break drain
				}
				batch = append(batch, r)
			default:
				break drain
			}
		}
		if len(batch) == 1 {
			req.err <- s.runUpdate(req.fn)
			continue
		}
		failed := false
		err := s.runUpdate(func(tx *memTx) error {
			for i, r := range batch {
				if errs[i] = r.fn(tx); errs[i] != nil {
					failed = true
					return errGroupFailed
				}
			}
			return nil
		})
		switch {
		case err == nil:
			for _, r := range batch {
				r.err <- nil
			}
		case failed:
			for _, r := range batch {
				r.err <- s.runUpdate(r.fn)
			}
		default:
			for _, r := range batch {
				r.err <- err
			}
		}
		clear(batch)
	}
}

// runUpdate runs one writing transaction under txMu.
func (s *Server) runUpdate(fn func(*memTx) error) error {
	s.txMu.Lock()
	defer s.txMu.Unlock()
	return s.db.Update(fn)
}
