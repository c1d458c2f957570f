// Command fio-capsule is capsule's ioengine for fio, built as a shared
// library (bin/fio-capsule.so, `make fio-engine`) that fio loads into its
// own process, as SPDK's fio plugin is loaded: fio then drives a capsule
// target in one hop, through the Go host library (nvmeof/host), over any
// transport it speaks.
//
//	fio --name=job --ioengine=external:bin/fio-capsule.so --thread=1 \
//	    --uri=shm://capsule[,URL...] [--nqn=NQN] [--nsid=1] [--hostnqn=NQN] [--fua=1] \
//	    [--reconnect_timeout=30] --rw=randread --bs=4k --iodepth=32
//
// # Layers
//
// engine.c is the C shim fio sees: the ioengine_ops table and the option
// table, and callbacks (setup/init, queue, commit, getevents, event,
// cleanup, open_file/close_file, iomem_alloc/iomem_free) that hand each
// io_u to the Go side
// through the plain-C interface of capsule_fio.h. exports.go is that Go
// side's entry points (cgo exports); job.go the logic, free of cgo, which
// the package's tests drive directly.
//
// engine.c carries the build tag fioengine and needs fio's headers:
// `make fio-engine` fetches the source package of the fio Debian
// installed (scripts/fio-src.sh), configures it for config-host.h, and
// builds this package with -buildmode=c-shared and that tag. Without the
// tag the package builds as an ordinary command that does nothing, so
// that go build, vet and test ./... need no fio headers.
//
// # Pinned to one fio
//
// The headers give struct thread_data, struct io_u and struct fio_option
// their layout; another fio may lay them out differently even with the
// same engine ABI version (FIO_IOOPS_VERSION). The engine is written for
// fio 3.33 (ABI 31): engine.c fails to compile against headers of another
// ABI, and at load get_ioengine (the only symbol fio finds, since the
// engine exports no "ioengine") compares the running fio's
// fio_version_string with the one built against. A different fio gets no
// engine and a message saying to rebuild, never a crash.
//
// # One job, one controller
//
// Each fio job connects its own Controller (host.Dial) with one I/O queue
// of the job's iodepth (WithQueues(1), WithQueueDepth(iodepth)) and a
// maximum transfer of the job's largest block (WithMaxTransfer), at
// setup (or at init with create_serialize=0), and closes it at cleanup.
// The subsystem is the one --nqn names, else the first NVM subsystem the
// discovery log at the URL lists (host.Dial without WithSubsystem); when
// the one --nqn names cannot be connected to and the discovery log does
// not list it, the job fails with a message naming the NVM subsystems it
// does list. The namespace (--nsid, default 1) is the job's one file: no
// --filename, its size is the namespace's.
//
// --uri may list several URLs, separated by commas: the paths of one
// subsystem (--nqn required), such as the nodes of a capsule cluster,
// each serving a volume with its own ANA state. The job then connects
// to all of them (host.DialMultipath) and its I/O goes where ANA says,
// following the volume's head when it moves. fio's buffers are then
// plain anonymous memory, not one controller's registered memory: on
// shm and RDMA each path copies through its own buffers.
//
// thread=1 is required, as for SPDK's plugin: the Go runtime started when
// fio loaded the engine does not survive fork, so the engine refuses
// process jobs with a message, before it calls into Go.
//
// # The I/O path
//
//   - fio's I/O memory (the io_u buffers, which verify reads into too) is
//     the job's registered memory of the host library: fio asks the
//     engine for it (iomem_alloc, after init, so the job is connected),
//     and the engine takes it from host.Controller.AllocBuffer, outside
//     the Go heap and registered once with the job's transport for the
//     job's life; iomem_free, before cleanup, gives it back. Reads and
//     writes in it move with no copy on the host side: the controller
//     RDMA-Reads writes from it and RDMA-Writes reads into it (a write
//     that travels in the capsule is sent from it, in the Send's second
//     SGE), and on TCP the PDUs are written from it and read into it.
//   - queue takes an io_u: a Request from the job's pool (iodepth of
//     them, made once) with the io_u's pointer as its Tag, kept until
//     commit. Reads and writes use fio's buffer (io_u->xfer_buf) as the
//     Request's Buf; trims are Dataset Management deallocations; sync,
//     datasync and sync_file_range are NVM Flush; --fua=1 sets Force Unit
//     Access on writes.
//   - commit submits the requests fio queued since the last commit, in
//     order, on the job's queue, as one batch (Namespace.SubmitBatch,
//     which does not block): their capsules go out together, one post of
//     Sends on RDMA (one write on iwarp, one doorbell on shm) or one
//     writev on TCP, for as many as have a free slot.
//   - Completions are reaped by the host's queue goroutine; each Request's
//     Done records (tag, errno, residual) in the job's finished list and
//     wakes the fio thread only when as many are finished as getevents
//     waits for. getevents hands them to the shim's event array; event
//     sets io_u->error and resid from it. Nothing is allocated, and no
//     data copied, per I/O on the Go side (TestJobNoAllocations here,
//     TestAllocBufferNoCopy in nvmeof/host).
//   - Errors: EINVAL for a request the namespace refuses (unaligned, out of
//     range), EOPNOTSUPP for a command the controller lacks, EIO for NVMe
//     errors and for a target that stayed away longer than
//     --reconnect_timeout (default 30 s, as bin/mount's): while it is away
//     the host reconnects and the I/Os wait, then are sent again.
//
// # Sharp edges
//
//   - Because the engine allocates fio's I/O memory, fio refuses
//     --mem/--iomem with this engine ("option 'mem/iomem' conflicts with
//     specified IO engine"). The memory stays registered with remote
//     access while the job runs: the target is trusted with fio's
//     buffers, as with the host library's own (nvmeof/host, Sharp edges).
//     A buffer that is not in it (none that fio makes) would still work,
//     copied through the queue's one large buffer (WithBuffers(1): fio's
//     own buffers need none), one such command at a time.
//   - fio's verify, trims and syncs go through the same queue as reads and
//     writes; a sync waits for nothing that is still in flight, as NVM
//     Flush does not.
package main
