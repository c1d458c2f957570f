package target

import "sync"

// workers runs the commands of one queue whose devices may block, on the
// target's ioWorkersPerQueue goroutines, started at the first such
// command. Both bindings use it with their own slot type. Only the
// queue's goroutine calls start and sends on work; stop is called once,
// when the queue is torn down.
type workers[S any] struct {
	work    chan S // requests for the workers
	wg      sync.WaitGroup
	started bool // workers started; the queue goroutine's
}

func newWorkers[S any](slots int) workers[S] {
	return workers[S]{work: make(chan S, slots)}
}

// start starts n workers that call run for every slot sent on work.
// The queue's goroutine starts them at its first blocking command (and
// builds the method value run only then, so that handing a command to a
// worker allocates nothing).
func (w *workers[S]) start(n int, run func(S)) {
	w.started = true
	for range n {
		w.wg.Go(func() {
			for s := range w.work {
				run(s)
			}
		})
	}
}

// stop lets the workers finish what they were given and waits for them.
func (w *workers[S]) stop() {
	if w.started {
		close(w.work)
		w.wg.Wait()
	}
}
