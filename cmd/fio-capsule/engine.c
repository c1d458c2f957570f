//go:build fioengine

/*
 * fio's side of the capsule ioengine: the ioengine_ops table, the option
 * table, and thin callbacks that hand each io_u to the Go side
 * (capsule_fio.h, exports.go). Built only by `make fio-engine` (build tag
 * fioengine), against the headers of the fio Debian installs.
 *
 * The engine is pinned to one fio: the headers give struct thread_data,
 * struct io_u and struct fio_option their layout, and a different fio may
 * lay them out differently even when its engine ABI version
 * (FIO_IOOPS_VERSION) is the same. get_ioengine, the one symbol fio looks
 * up at load, compares the running fio's version string with the one
 * built against and refuses, with a message, a fio that differs.
 */
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fio.h"
#include "optgroup.h"

#include "capsule_fio.h"
#include "_cgo_export.h"

/* The fio this engine is built for and checked against at load. */
#define CAPSULE_FIO_IOOPS 31
#ifndef CAPSULE_FIO_VERSION
#define CAPSULE_FIO_VERSION "fio-3.33"
#endif

#if FIO_IOOPS_VERSION != CAPSULE_FIO_IOOPS
#error "fio's headers have another engine ABI (FIO_IOOPS_VERSION) than the one this engine is written for"
#endif

/* fio's own functions, looked up in the running fio at load. */
static int (*fio_add_file)(struct thread_data *, const char *, int, int);

struct capsule_options {
	void *pad; /* fio takes offset 0 for "no field" */
	char *uri;
	unsigned int nsid;
	char *hostnqn;
	unsigned int fua;
	unsigned int reconnect_timeout;
	char *nqn;
};

/* Per job: the Go side's handle and the array getevents fills. */
struct capsule_data {
	uintptr_t job;
	int nr_events;
	struct capsule_fio_event *events;
};

static struct fio_option options[] = {
	{
		.name = "uri",
		.lname = "capsule URL",
		.type = FIO_OPT_STR_STORE,
		.off1 = offsetof(struct capsule_options, uri),
		.help = "capsule target URL: shm://NAME, iwarp://HOST:PORT, tcp://HOST:PORT, rdma://HOST:PORT",
		.category = FIO_OPT_C_ENGINE,
		.group = FIO_OPT_G_INVALID,
	},
	{
		.name = "nqn",
		.lname = "subsystem NQN",
		.type = FIO_OPT_STR_STORE,
		.off1 = offsetof(struct capsule_options, nqn),
		.help = "NVM subsystem to connect to (default: the first one the target's discovery log lists)",
		.category = FIO_OPT_C_ENGINE,
		.group = FIO_OPT_G_INVALID,
	},
	{
		.name = "nsid",
		.lname = "namespace ID",
		.type = FIO_OPT_INT,
		.off1 = offsetof(struct capsule_options, nsid),
		.minval = 1,
		.def = "1",
		.help = "NVMe namespace ID",
		.category = FIO_OPT_C_ENGINE,
		.group = FIO_OPT_G_INVALID,
	},
	{
		.name = "hostnqn",
		.lname = "host NQN",
		.type = FIO_OPT_STR_STORE,
		.off1 = offsetof(struct capsule_options, hostnqn),
		.help = "host NQN to connect as (default: the machine's, /etc/nvme/hostnqn or from /etc/machine-id)",
		.category = FIO_OPT_C_ENGINE,
		.group = FIO_OPT_G_INVALID,
	},
	{
		.name = "fua",
		.lname = "force unit access",
		.type = FIO_OPT_BOOL,
		.off1 = offsetof(struct capsule_options, fua),
		.def = "0",
		.help = "set Force Unit Access on writes",
		.category = FIO_OPT_C_ENGINE,
		.group = FIO_OPT_G_INVALID,
	},
	{
		.name = "reconnect_timeout",
		.lname = "reconnect timeout (s)",
		.type = FIO_OPT_INT,
		.off1 = offsetof(struct capsule_options, reconnect_timeout),
		.minval = 0,
		.def = "30",
		.help = "seconds I/Os wait for a lost target to come back before they fail with EIO (0: fail at once)",
		.category = FIO_OPT_C_ENGINE,
		.group = FIO_OPT_G_INVALID,
	},
	{
		.name = NULL,
	},
};

/*
 * capsule_open connects the job, once, from whichever of setup and init
 * fio calls first (setup first unless create_serialize=0).
 */
static int capsule_open(struct thread_data *td)
{
	struct capsule_options *o = td->eo;
	struct capsule_data *cd = td->io_ops_data;
	char err[512];
	unsigned long long size = 0, maxbs;
	unsigned int bs = 0;

	if (!td->o.use_thread) {
		fprintf(stderr, "fio-capsule: thread=1 is required: the engine runs the Go host library in "
				"fio's process and cannot be forked (add --thread=1)\n");
		return 1;
	}
	if (cd)
		return 0;
	if (!o->uri || !o->uri[0]) {
		fprintf(stderr, "fio-capsule: --uri is required (shm://NAME, iwarp://HOST:PORT, tcp://HOST:PORT)\n");
		return 1;
	}
	cd = calloc(1, sizeof(*cd));
	if (!cd)
		return 1;
	cd->nr_events = td->o.iodepth > 0 ? td->o.iodepth : 1;
	cd->events = calloc(cd->nr_events, sizeof(*cd->events));
	if (!cd->events) {
		free(cd);
		return 1;
	}
	maxbs = td->o.max_bs[DDIR_READ];
	if (td->o.max_bs[DDIR_WRITE] > maxbs)
		maxbs = td->o.max_bs[DDIR_WRITE];
	err[0] = 0;
	cd->job = capsule_fio_open(o->uri, o->nqn && o->nqn[0] ? o->nqn : NULL, o->nsid, o->hostnqn, cd->nr_events, maxbs,
				   (int)o->reconnect_timeout, &size, &bs, err, sizeof(err));
	if (!cd->job) {
		fprintf(stderr, "fio-capsule: %s\n", err);
		free(cd->events);
		free(cd);
		return 1;
	}
	td->io_ops_data = cd;

	/* No --filename: the namespace is the job's one file. */
	if (!td->files_index) {
		if (fio_add_file(td, o->uri, 0, 0) < 0)
			return 1;
		td->o.nr_files = td->o.nr_files ?: 1;
		td->o.open_files++;
	}
	td->files[0]->real_file_size = size;
	(void)bs;
	return 0;
}

static int capsule_setup(struct thread_data *td)
{
	return capsule_open(td);
}

static int capsule_init(struct thread_data *td)
{
	return capsule_open(td);
}

static void capsule_cleanup(struct thread_data *td)
{
	struct capsule_data *cd = td->io_ops_data;

	if (!cd)
		return;
	capsule_fio_close(cd->job);
	free(cd->events);
	free(cd);
	td->io_ops_data = NULL;
}

/*
 * fio's io_u buffers are the job's registered memory of the host library
 * (host.Controller.AllocBuffer): reads and writes move between it and the
 * target without a copy. fio calls this after init, so the job is open.
 */
static int capsule_iomem_alloc(struct thread_data *td, size_t total_mem)
{
	struct capsule_data *cd = td->io_ops_data;
	char err[512];
	void *p;

	if (!cd)
		return 1;
	err[0] = 0;
	p = capsule_fio_iomem_alloc(cd->job, total_mem, err, sizeof(err));
	if (!p) {
		fprintf(stderr, "fio-capsule: %s\n", err);
		return 1;
	}
	td->orig_buffer = p;
	return 0;
}

/* Before cleanup: fio frees its buffers, then closes the engine. */
static void capsule_iomem_free(struct thread_data *td)
{
	struct capsule_data *cd = td->io_ops_data;

	if (cd && td->orig_buffer)
		capsule_fio_iomem_free(cd->job);
	td->orig_buffer = NULL;
}

static enum fio_q_status capsule_queue(struct thread_data *td, struct io_u *io_u)
{
	struct capsule_data *cd = td->io_ops_data;
	struct capsule_options *o = td->eo;
	int op, r;

	fio_ro_check(td, io_u);
	switch (io_u->ddir) {
	case DDIR_READ:
		op = CAPSULE_FIO_READ;
		break;
	case DDIR_WRITE:
		op = CAPSULE_FIO_WRITE;
		break;
	case DDIR_TRIM:
		op = CAPSULE_FIO_TRIM;
		break;
	case DDIR_SYNC:
	case DDIR_DATASYNC:
	case DDIR_SYNC_FILE_RANGE:
		op = CAPSULE_FIO_FLUSH;
		break;
	default:
		io_u->error = EINVAL;
		return FIO_Q_COMPLETED;
	}
	r = capsule_fio_queue(cd->job, (uintptr_t)io_u, op, io_u->offset, io_u->xfer_buf,
			      io_u->xfer_buflen, o->fua && io_u->ddir == DDIR_WRITE);
	if (r == CAPSULE_FIO_BUSY)
		return FIO_Q_BUSY;
	if (r) {
		io_u->error = r;
		return FIO_Q_COMPLETED;
	}
	return FIO_Q_QUEUED;
}

static int capsule_commit(struct thread_data *td)
{
	struct capsule_data *cd = td->io_ops_data;

	capsule_fio_commit(cd->job);
	return 0;
}

static int capsule_getevents(struct thread_data *td, unsigned int min, unsigned int max,
			     const struct timespec *t)
{
	struct capsule_data *cd = td->io_ops_data;
	long long ns = -1;

	if (t)
		ns = (long long)t->tv_sec * 1000000000LL + t->tv_nsec;
	if (max > (unsigned int)cd->nr_events)
		max = cd->nr_events;
	if (min > max)
		min = max;
	return capsule_fio_getevents(cd->job, min, max, ns, cd->events);
}

static struct io_u *capsule_event(struct thread_data *td, int i)
{
	struct capsule_data *cd = td->io_ops_data;
	struct capsule_fio_event *e = &cd->events[i];
	struct io_u *io_u = (struct io_u *)e->io_u;

	io_u->error = e->error;
	io_u->resid = e->resid;
	return io_u;
}

static int capsule_open_file(struct thread_data *td, struct fio_file *f)
{
	return 0;
}

static int capsule_close_file(struct thread_data *td, struct fio_file *f)
{
	return 0;
}

static int capsule_invalidate(struct thread_data *td, struct fio_file *f)
{
	return 0;
}

static struct ioengine_ops capsule_ops = {
	.name = "capsule",
	.version = FIO_IOOPS_VERSION,
	.flags = FIO_DISKLESSIO | FIO_NOEXTEND | FIO_NODISKUTIL,
	.setup = capsule_setup,
	.init = capsule_init,
	.queue = capsule_queue,
	.commit = capsule_commit,
	.getevents = capsule_getevents,
	.event = capsule_event,
	.cleanup = capsule_cleanup,
	.open_file = capsule_open_file,
	.close_file = capsule_close_file,
	.invalidate = capsule_invalidate,
	.iomem_alloc = capsule_iomem_alloc,
	.iomem_free = capsule_iomem_free,
	.options = options,
	.option_struct_size = sizeof(struct capsule_options),
};

/*
 * get_ioengine is what fio calls at load (the engine exports no
 * "ioengine" symbol, so fio asks here). A fio other than the one built
 * against gets no engine, and a message that says what to do.
 */
void get_ioengine(struct ioengine_ops **ops)
{
	const char *running = dlsym(RTLD_DEFAULT, "fio_version_string");

	*ops = NULL;
	if (!running || strcmp(running, CAPSULE_FIO_VERSION) != 0) {
		fprintf(stderr,
			"fio-capsule: this engine is built for %s (engine ABI %d) and this fio is %s: "
			"rebuild it against this fio (make fio-engine)\n",
			CAPSULE_FIO_VERSION, CAPSULE_FIO_IOOPS, running ? running : "of unknown version");
		return;
	}
	fio_add_file = dlsym(RTLD_DEFAULT, "add_file");
	if (!fio_add_file) {
		fprintf(stderr, "fio-capsule: this fio exports no add_file: it cannot load external engines\n");
		return;
	}
	*ops = &capsule_ops;
}
