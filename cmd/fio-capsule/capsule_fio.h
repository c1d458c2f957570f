/*
 * The interface between the engine's C shim (engine.c) and its Go side
 * (exports.go): plain C types only, so that neither needs the other's
 * headers. Every function but capsule_fio_version runs on the fio job's
 * thread.
 */
#ifndef CAPSULE_FIO_H
#define CAPSULE_FIO_H

#include <stdint.h>

/* What a queued io_u does (capsule_fio_queue's op). */
enum capsule_fio_op {
	CAPSULE_FIO_READ = 1,
	CAPSULE_FIO_WRITE = 2,
	CAPSULE_FIO_FLUSH = 3,
	CAPSULE_FIO_TRIM = 4,
};

/* One completed io_u, as capsule_fio_getevents hands it back. */
struct capsule_fio_event {
	uintptr_t io_u;        /* the struct io_u * given to capsule_fio_queue */
	int32_t error;         /* 0, or the errno the I/O failed with */
	uint64_t resid;        /* bytes not transferred */
};

/* capsule_fio_queue's result when every request of the job is in flight. */
#define CAPSULE_FIO_BUSY (-1)

#endif
