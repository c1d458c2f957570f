package main

/*
#include <stdlib.h>
#include "capsule_fio.h"
*/
import "C"

import (
	"context"
	"runtime/cgo"
	"time"
	"unsafe"

	"github.com/capsule-storage/capsule/nvmeof/host"
)

// The functions the C shim calls (capsule_fio.h). A job is known to C by
// a cgo.Handle.

// capsule_fio_open connects a job and returns its handle, with the
// namespace's size and block size; 0 and a message in errbuf on failure.
//
//export capsule_fio_open
func capsule_fio_open(uri, nqn *C.char, nsid C.uint, hostnqn *C.char, depth C.int, maxbs C.ulonglong,
	reconnectSec C.int, size *C.ulonglong, bs *C.uint, errbuf *C.char, errlen C.int) C.uintptr_t {
	cfg := jobConfig{
		NSID:             uint32(nsid),
		Depth:            int(depth),
		MaxBlock:         int(maxbs),
		ReconnectTimeout: time.Duration(reconnectSec) * time.Second,
	}
	if uri != nil {
		cfg.URI = C.GoString(uri)
	}
	if nqn != nil {
		cfg.NQN = C.GoString(nqn)
	}
	if hostnqn != nil {
		cfg.HostNQN = C.GoString(hostnqn)
	}
	ctx, cancel := context.WithTimeout(context.Background(), host.DefaultConnectTimeout)
	defer cancel()
	j, err := openJob(ctx, cfg)
	if err != nil {
		putError(errbuf, errlen, err)
		return 0
	}
	*size = C.ulonglong(j.size())
	*bs = C.uint(j.blockSize())
	return C.uintptr_t(cgo.NewHandle(j))
}

// capsule_fio_iomem_alloc returns size bytes of the job's registered I/O
// memory, outside the Go heap, for fio's io_u buffers; NULL and a message
// in errbuf on failure.
//
//export capsule_fio_iomem_alloc
func capsule_fio_iomem_alloc(h C.uintptr_t, size C.size_t, errbuf *C.char, errlen C.int) unsafe.Pointer {
	j := cgo.Handle(h).Value().(*job)
	mem, err := j.allocMem(int(size))
	if err != nil {
		putError(errbuf, errlen, err)
		return nil
	}
	return unsafe.Pointer(unsafe.SliceData(mem))
}

// capsule_fio_iomem_free releases what capsule_fio_iomem_alloc returned.
//
//export capsule_fio_iomem_free
func capsule_fio_iomem_free(h C.uintptr_t) {
	cgo.Handle(h).Value().(*job).freeMem()
}

// putError writes err's message, NUL-terminated and cut to fit, into
// the C buffer errbuf of errlen bytes.
func putError(errbuf *C.char, errlen C.int, err error) {
	if errbuf == nil || errlen <= 0 {
		return
	}
	msg := unsafe.Slice((*byte)(unsafe.Pointer(errbuf)), int(errlen))
	msg[copy(msg[:len(msg)-1], err.Error())] = 0
}

// capsule_fio_queue takes one io_u; 0, CAPSULE_FIO_BUSY, or an errno
// with which the io_u completes at once.
//
//export capsule_fio_queue
func capsule_fio_queue(h C.uintptr_t, iou C.uintptr_t, op C.int, off C.ulonglong, buf unsafe.Pointer, n C.ulonglong, fua C.int) C.int {
	j := cgo.Handle(h).Value().(*job)
	var hop host.Op
	var data []byte
	switch op {
	case C.CAPSULE_FIO_READ:
		hop = host.OpRead
	case C.CAPSULE_FIO_WRITE:
		hop = host.OpWrite
	case C.CAPSULE_FIO_FLUSH:
		hop = host.OpFlush
	case C.CAPSULE_FIO_TRIM:
		hop = host.OpDiscard
	default:
		return C.int(errnoOf(host.ErrInvalidRequest))
	}
	if (hop == host.OpRead || hop == host.OpWrite) && buf != nil {
		data = unsafe.Slice((*byte)(buf), int(n))
	}
	if err := j.queue(uint64(iou), hop, int64(off), data, int64(n), fua != 0); err != nil {
		return C.CAPSULE_FIO_BUSY
	}
	return 0
}

// capsule_fio_commit submits what capsule_fio_queue took.
//
//export capsule_fio_commit
func capsule_fio_commit(h C.uintptr_t) {
	cgo.Handle(h).Value().(*job).commit()
}

// capsule_fio_getevents waits for at least min completions (timeout in
// nanoseconds, negative: no limit) and writes up to max into events.
//
//export capsule_fio_getevents
func capsule_fio_getevents(h C.uintptr_t, minEvents, maxEvents C.int, timeoutNS C.longlong, events *C.struct_capsule_fio_event) C.int {
	j := cgo.Handle(h).Value().(*job)
	out := unsafe.Slice(events, int(maxEvents))
	n := j.getevents(int(minEvents), int(maxEvents), time.Duration(timeoutNS), func(i int, c completion) {
		out[i] = C.struct_capsule_fio_event{io_u: C.uintptr_t(c.tag), error: C.int32_t(c.errno), resid: C.uint64_t(c.resid)}
	})
	return C.int(n)
}

// capsule_fio_close disconnects the job and forgets its handle.
//
//export capsule_fio_close
func capsule_fio_close(h C.uintptr_t) {
	hd := cgo.Handle(h)
	j := hd.Value().(*job)
	hd.Delete()
	j.close()
}

func main() {}
