// Package target is capsule's NVMe over Fabrics target: the controller
// side of NVMe-oF, with NVM subsystems, their namespaces, the discovery
// subsystem, the NVMe/RDMA transport binding over package rdma and the
// NVMe/TCP transport binding over package net, which standard initiators
// (Linux nvme-tcp, SPDK) speak.
//
//	t, _ := target.New(target.WithLogger(log))
//	sub, _ := t.AddSubsystem(target.SubsystemConfig{NQN: "nqn.2026-11.io.capsule:default", AllowAnyHost: true})
//	dev, _ := blockdev.NewMemory(1 << 30)
//	sub.AddNamespace(target.NamespaceConfig{NSID: 1, Device: dev, BlockSize: 512})
//	t.Listen(ctx, "iwarp://127.0.0.1:4420")
//	t.Listen(ctx, "shm://capsule")
//	t.Listen(ctx, "tcp://127.0.0.1:4420")
//	...
//	t.Close() // drain, flush, close devices
//
// # The model
//
// A Target holds NVM subsystems by NQN and the discovery subsystem
// (nqn.2014-08.org.nvmexpress.discovery). Every subsystem is reachable
// through every listener, unless it was made with OwnListeners: then
// only through those it names (SubsystemConfig.Listeners,
// AllowListener), as a port serves the subsystems linked to it in SPDK
// and Linux nvmet. The discovery subsystem is served on every listener. A subsystem has namespaces (NSID 1 to 1024,
// 512- or 4096-byte blocks, on a blockdev.Device) and a host allow-list
// with an explicit allow-any setting; the discovery subsystem admits any
// host and lists, for each host, the subsystems that host may connect to.
//
// Everything can change while hosts are connected: AddNamespace and
// RemoveNamespace tell the subsystem's controllers with a Namespace
// Attribute Changed event (and the Changed Namespace List log); Listen,
// StopListening, AddSubsystem, RemoveSubsystem, AllowListener,
// DisallowListener and the allow-list methods change the discovery log and tell discovery controllers with
// a Discovery Log Page Change event, each to the controllers that
// enabled it with Set Features (Asynchronous Event Configuration).
// RemoveSubsystem and DisconnectHost end the controllers concerned;
// StopListening leaves the connections made through the listener.
// A daemon that opens its listeners before it has created its
// subsystems (restoring a saved state) makes the target WithStarting:
// until Ready, a Connect to a subsystem it does not have yet is refused
// with Connect Controller Busy, which hosts retry, not Connect Invalid
// Parameters with DNR, which ends their reconnecting.
//
// A host's Connect on an admin queue creates a controller (the dynamic
// controller model: CNTLID 1..FFEFh picked by the subsystem); Connects on
// I/O queues naming that CNTLID attach queues to it. A controller holds
// the property registers (CAP, VS, CC, CSTS: the enable, reset and
// shutdown handshakes), the features (Number of Queues, Keep Alive
// Timer, Asynchronous Event Configuration, Volatile Write Cache and the
// other mandatory ones), held
// Asynchronous Event Requests, the error log, the changed namespace
// list and the reservation notices. Each namespace holds its
// reservation and its registrants (reservation.go).
//
// Asymmetric Namespace Access (ana.go): each namespace is in an ANA
// group (NamespaceConfig.ANAGroupID, its NSID by default, as in SPDK),
// and each listener of a subsystem has a state per group, Optimized
// until Subsystem.SetANAState sets another (Non-Optimized, Inaccessible,
// Persistent Loss, Change), as a port has in Linux nvmet and a listener
// in SPDK. A controller reports the states of the listener its admin
// queue came through: the ANA log page (0Ch) has one descriptor per
// group with namespaces, each with its change count and its NSIDs
// (none with RGO); Identify Controller has CMIC bit 3, ANACAP (all five
// states, ANAGRPID fixed while attached), ANATT 10 s, ANAGRPMAX and
// NANAGRPID 1024 and MNAN 1024; Identify Namespace has ANAGRPID, and NUSE
// 0 through a path where the group is Inaccessible or in Persistent
// Loss. I/O commands to a namespace whose group is neither Optimized nor
// Non-Optimized through the controller's listener are aborted with the
// state's Path Related Status (SCT 3h: 01h Persistent Loss, 02h
// Inaccessible, 03h Transition), without DNR, so that a host retries on
// another path. A change of state is told to the controllers connected
// through that listener with an Asynchronous Event (Notice, ANA Change,
// log page 0Ch) when they enabled it (AEC bit 11); it is reported once
// until the host reads the log page with RAE clear. It ends when its admin queue's connection ends, when the
// keep-alive timer expires (every command restarts it: CTRATT.TBKAS), or
// when the target shuts down; then every queue of it is disconnected and
// everything it held is freed.
//
// # Structure
//
// The core is transport neutral:
//
//	target.go      Target, listeners, Shutdown
//	subsystem.go   Subsystem, allow-list, CNTLID allocation
//	namespace.go   Namespace, derived UUID, NGUID and serial number
//	controller.go  controller: properties, handshakes, keep-alive, events, error log
//	workers.go     the per-queue worker pool for commands that may block
//	queue.go       queue: CIDs in use, commands outstanding, SQHD; the
//	               queueTransport interface a binding implements
//	request.go     request: one command in a command slot
//	dispatch.go    the handler tables: opcode -> handler{prepare, execute}
//	fabrics.go     Connect, Property Get/Set, Disconnect
//	admin.go       Identify, Get Log Page, Set/Get Features, Keep Alive, AER, Abort
//	nvm.go         Read, Write, Flush, Write Zeroes, Dataset Management
//	reservation.go Reservation Register, Acquire, Release, Report, and the
//	               reservation conflicts of I/O; notices
//	ana.go         ANA groups and states per listener, the ANA log page,
//	               ANA Change events
//	ptpl.go        ReservationStore: reservations through power loss
//	discovery.go   the discovery log page and listener addresses
//	vendor.go      vendor-specific I/O commands (80h-FFh), routed to the
//	               VendorHandler of a namespace (the file service)
//	stats.go       counters for metrics: per namespace and kind of I/O
//	               command (Namespace.IOStats: ops, errors, bytes, a
//	               latency histogram), per host (Subsystem.HostStats:
//	               connects, keep-alive expiries); queue depths come with
//	               ControllerInfos
//
// and the RDMA binding sits beside it in rdma_listener.go (RDMA_CM
// private data, accept or reject) and rdma_queue.go (capsules by Send,
// data by RDMA Read and Write, responses by Send or Send with
// Invalidate). The NVMe/TCP binding implements queueTransport and the
// listener interface the same way, in tcp_listener.go and tcp_queue.go.
//
// A command goes through the core in three calls a binding makes:
// queue.begin (on the queue's goroutine: CID and outstanding-command
// checks, the handler's prepare, the data pointer against the length the
// command moves) says whether to respond at once, fetch host data first,
// or execute; queue.execute runs the handler; queue.finish fills in the
// response entry just before the binding sends it.
//
// A namespace may have a VendorHandler (NamespaceConfig.Vendor): it
// serves the vendor-specific I/O opcodes, with the data direction of the
// opcode's bits 1:0. Data moves as for NVM commands; a bidirectional
// command (11b) takes every capsule byte after the SQE as its payload and
// sends its reply into the buffer SGL1 describes, cut to the bytes the
// handler filled. A namespace with a handler and no device has no blocks
// (NSZE 0). A binding hands the capsule bytes after the SQE to the core
// (request.capsuleData) and keeps them until the response is sent; the
// RDMA binding places reply data after them in the capsule buffer.
//
// # The RDMA binding
//
// One RC QP per NVMe queue. The connection request's private data gives
// the QID, HSQSIZE and HRQSIZE; sizes above the admin queue's 32 entries
// or MQES+1, or a QID above the I/O queue limit, are rejected with the
// RDMA_CM_REJECT status the transport specification gives. The accept
// carries CRQSIZE = HSQSIZE+1. The target posts two receives per queue
// entry, each of 64 bytes plus the in-capsule data size (IOCCSZ), so that
// a capsule's buffer can stay in use until its response Send completes
// while the host, which has the response already, sends the next command
// into another.
//
//   - Host-to-controller data (Write, Connect, Dataset Management) is
//     taken from the capsule (SGL Data Block, offset subtype) or read
//     with one RDMA Read from the host's Keyed SGL (40h, or 4Fh: then the
//     response is a Send with Invalidate of that key).
//   - Controller-to-host data (Read, Identify, Get Log Page) goes out as
//     an unsignaled RDMA Write posted in one batch with the Send of the
//     response capsule.
//   - A transfer that fits a capsule buffer (8 KiB by default) uses it
//     as its data buffer; larger ones (up to MDTS, 1 MiB by default on
//     this binding, as nvmet-rdma has it) use registered buffers of MDTS
//     bytes each queue allocates on demand up to a limit
//     (WithLargeBuffersPerQueue, 16: 16 MiB); a command that finds none
//     free waits for one. A 1 MiB read through the file service is then
//     one command: at 256 KiB it was four, whose hand-offs cost a third
//     of its time over shm.
//   - Registered memory outlives its queue: when a queue ends, its capsule,
//     response and large buffers go to its listener's cache (up to 64 MiB),
//     and new queues take them from there, so the burst of connections
//     after hosts reconnect registers nothing new.
//   - A failed work request is fatal to the queue, as the binding says: a
//     key the host's device refuses (RemAccessErr on the RDMA Read or
//     Write) ends the connection, and no data moved. So does a capsule
//     shorter than a 64-byte SQE, which cannot be answered.
//
// # The NVMe/TCP binding
//
// One TCP connection per NVMe queue (TCP_NODELAY). The first PDU must be
// an ICReq (PFV 0, HPDA 0..31, no reserved digest bits), answered with an
// ICResp of PFV 0, CPDA 0, the digests the host asked for (both are
// supported) and MAXH2CDATA the largest transfer (MDTS, 256 KiB by
// default; WithTCPMaxH2CData), so that one H2CData can carry any R2T, as
// hosts that never split one (Linux before 5.16) need: what a Linux host
// insists on. The connection does not name its queue: the Connect
// command does (queue.qidFromConnect).
//
//   - Every PDU's common header is checked before anything else of it is
//     read (nvmeof.TCPReceiver.Check: type and direction, HLEN, flags and
//     the digests negotiated, PDO against CPDA, PLEN against the type and
//     the limits), then the header digest, then the type's own fields.
//   - In-capsule data is read straight into the slot's capsule buffer:
//     up to 8 KiB on every queue (the admin queue's fixed size) or the
//     configured size (IOCCSZ) if larger. Other host data is asked for
//     with one R2T per command (TTAG the slot index, R2TO 0, R2TL all of
//     it) and read from H2CData PDUs straight into the slot's data buffer;
//     they must come in order, within the R2T, LAST_PDU on the last.
//   - Controller data goes out in one C2HData PDU (padded to HPDA) with
//     LAST_PDU, then the CapsuleResp, in one writev. SUCCESS is set, and
//     the CapsuleResp left out, only when the host disabled SQ flow
//     control and the completion has nothing else to say (DW0 and DW1
//     zero), as the specification allows.
//   - Responses the connection's goroutine produces while handling the
//     PDUs of one read go out together in one writev; those of workers
//     and held commands are written at once. Writes are serialized by the
//     queue's write lock.
//   - Fatal errors get a C2HTermReq carrying FES, FEI and the header in
//     error, then the target stops sending, reads for up to a second
//     (so the host sees the TermReq, not a reset) and closes that
//     connection alone: Invalid PDU Header Field (FEI the field's offset)
//     for a bad type, HLEN, FLAGS, PDO or PLEN, DATAL, or a CCCID/TTAG
//     with no R2T outstanding; PDU Sequence Error for anything before the
//     ICReq or a second ICReq; Header Digest Error; Data Transfer Out of
//     Range for data past the R2T or out of order; Data Transfer Limit
//     Exceeded for an H2CData above MAXH2CDATA; Unsupported Parameter
//     for a PFV, HPDA or DGST the target does not take. An H2CTermReq
//     from the host closes the connection.
//   - A data digest error is not fatal: the command completes with
//     Transient Transport Error and does not run (its remaining H2CData
//     PDUs are still taken).
//
// # What the target accepts
//
// The policy: accept what Linux nvmet (drivers/nvme/target) and SPDK's
// nvmf_tgt (lib/nvmf) accept; ignore reserved fields on receive and zero
// them on send; refuse only what the specifications require refusing or
// what would be unsafe (framing that cannot be trusted, data outside
// what a command moves). Where nvmet and SPDK differ, the target takes
// what either takes when that is safe. Every check the target makes on
// what it receives is a row below, with what nvmet and SPDK do (from
// their sources: nvmet's tcp.c, core.c, admin-cmd.c, fabrics-cmd.c, in
// the versions read, which are older than today's for nvmet; SPDK's
// tcp.c and ctrlr.c at its HEAD of late 2026); "refuse" is a TermReq for
// PDUs and an NVMe status for commands, "close" nvmet's fatal error
// without a TermReq. Each row is tested both ways
// (tolerance_test.go, tcp_test.go, badinput_test.go, fabrics_test.go,
// admin_test.go, and nvmeof's TestTCPReceiverCheck).
//
//	Check                                     capsule                    nvmet                     SPDK
//	----------------------------------------  -------------------------  ------------------------  ------------------------
//	NVMe/TCP PDUs (nvmeof.TCPReceiver.Check, tcp_queue.go)
//	PDU type not sent by hosts, unknown       refuse (FEI 0)             close                     refuse (FEI 0)
//	anything before ICReq; a second ICReq     refuse, sequence error     close                     refuse, sequence error
//	HLEN other than the type's                refuse (FEI 2)             close                     refuse (FEI 2)
//	ICReq PLEN other than 128                 refuse (FEI 4)             close                     refuse (FEI 4)
//	ICReq PFV not 0                           refuse, unsupported param  close                     refuse (FEI 8)
//	ICReq HPDA above 31                       refuse, unsupported param  close if not 0            refuse (FEI 10)
//	ICReq DGST reserved bits, FLAGS, PDO      ignore                     ignore                    ignore
//	HDGSTF clear with header digest on        refuse (FEI 1)             close                     not read: framed by the
//	                                                                                               negotiated digests
//	DDGSTF clear on data, data digest on      refuse (FEI 1)             close                     not read
//	digest flag for a digest not negotiated,  ignore                     ignore                    ignore
//	  DDGSTF without data, flags the type
//	  does not define (LAST_PDU, SUCCESS on
//	  H2C PDUs, bits 7:4)
//	PDO of a PDU without data (CapsuleCmd     ignore                     ignore                    ignore with CPDA 0 (ours)
//	  without data, ICReq, TermReq)
//	PDO inside the header or its digest       refuse (FEI 3): unsafe     not read: data taken      checked against CPDA
//	                                                                     after the header          alignment only
//	PDO past the smallest: padding            accept, skip it            not read                  accept, skip it
//	in-capsule data above IOCCSZ (8 KiB+)     refuse (FEI 4)             SGL Offset Invalid        refuse
//	CapsuleResp, R2T, C2HData from a host     refuse (FEI 0)             close                     refuse (FEI 0)
//	H2CData above MAXH2CDATA                  refuse, limit exceeded     not checked               refuse
//	H2CData TTAG, CCCID with no R2T, DATAO    refuse (FEI 8/10,          TTAG indexes commands;    refuse
//	  not where the transfer is, past R2T      out of range)              DATAO: Invalid Field,
//	                                                                     close
//	H2CData DATAL other than its data;        refuse (FEI 16, 1)         not checked               checked against R2T
//	  LAST_PDU wrong
//	header digest mismatch                    refuse, digest error       close                     refuse, digest error
//	data digest mismatch                      Transient Transport Error  close                     refuse (TermReq)
//	                                          (the command does not run)
//	SQEs (queue.go, dispatch.go)
//	opcode or FCTYPE not served               Invalid Command Opcode     Invalid Opcode            Invalid Opcode
//	CID of a command still outstanding        Command ID Conflict        not checked               not checked
//	CID of a held AER (SPDK's host reuses it  run it; the AER is         not checked (runs)        not checked (runs)
//	  for its shutdown)                        dropped unanswered
//	more than SQSIZE outstanding              Command Sequence Error     not checked               not checked
//	command before CC.EN and CSTS.RDY         Command Sequence Error     Command Sequence Error    Command Sequence Error
//	PSDT, FUSE, byte 1 of a Fabrics command   ignore                     PSDT must be SGL (not     ignore
//	                                                                     checked on fabrics)
//	reserved command dwords                   ignore                     ignore                    ignore
//	SGLs (nvmeof.SGLPolicy, dispatch.go)
//	SGL of a command that moves no data       ignore, whatever it holds  ignore if length 0        ignore (opcode without
//	  (Flush, Write Zeroes, Keep Alive...)                                                         data direction)
//	type the transport does not use (Keyed   SGL Descriptor Type        SGL Invalid / Invalid     SGL Descriptor Type
//	  on TCP, Transport on RDMA, Bit Bucket,   Invalid                    Field                     Invalid
//	  Segment, Data Block with an address)
//	length other than what the command moves  Data SGL Length Invalid    transfer length mismatch: Data SGL Length Invalid
//	  (Dataset Management may describe more)                             Data SGL Length Invalid
//	in-capsule offset or length past capsule  SGL Offset Invalid, Data   SGL Offset Invalid        SGL Offset Invalid
//	                                          SGL Length Invalid
//	in-capsule data for controller-to-host    Invalid Field              Invalid Field             Invalid Field
//	Connect (fabrics.go, nvmeof.ConnectData.UnmarshalTolerant)
//	unknown SUBNQN; no NUL in SUBNQN          Invalid Parameters (data   Invalid Parameters        Invalid Parameters
//	                                          offset 256); Controller
//	                                          Busy, no DNR, while
//	                                          WithStarting
//	HOSTNQN empty, not a valid NQN, text      accept; the allow-list     accept; allow-list        accept; allow-list
//	  after its NUL                            decides                    decides                   decides
//	HOSTNQN with no NUL                       Invalid Parameters (512)   cut at byte 255           Invalid Parameters
//	host not on the allow-list                Connect Invalid Host       Invalid Host              Invalid Host
//	static CNTLID on the admin queue; I/O     Invalid Parameters         Invalid Parameters        Invalid Parameters
//	  queue of an unknown or other host's
//	  controller; QID past the queues; SQSIZE
//	  0 or too large
//	second Connect on a queue                 Command Sequence Error     Command Sequence Error    Command Sequence Error
//	Properties (controller.go)
//	unknown offset; NSSR                      Invalid Field              Invalid Field             Invalid Parameter
//	4-byte read of either half of CAP         accept                     Invalid Field             accept
//	8-byte read of a 4-byte property          Invalid Field              Invalid Field             Invalid Parameter
//	Property Set of CAP, VS, CSTS             Invalid Field              Invalid Field             Invalid Parameter
//	CC.CSS 6 (all I/O command sets; hosts     accept (CAP.CSS bit 6),    accept                    accept
//	  following nvme-cli write it, on
//	  discovery controllers too)
//	CC.CSS 7 on a discovery controller        accept                     refuse (CFS)              accept
//	CC.CSS reserved (1-5), 7 on I/O           CFS                        CFS                       accept 1-5 (no check)
//	CC IOSQES, IOCQES, MPS, AMS not supported CFS                        CFS                       refuse the Set
//	CC reserved bits                          ignore                     ignore                    ignore (logged)
//	Admin commands (admin.go)
//	Identify CNS not served                   Invalid Field              Invalid Field             Invalid Field
//	Identify CNS 05h, 06h, 07h for a CSI      Invalid Field (SPDK's      Invalid Field             zeros for 05h, 06h (its
//	  other than NVM                           host asks for KV and ZNS                             host then takes ZNS for
//	                                           and copes with it)                                   supported)
//	Get/Set Features 01h, 02h, 04h, 05h, 0Ah  held and reported back     Invalid Field (compiled   held and reported back
//	                                                                     out: "no useful way")
//	Set Power Management PS not 0; Error      Invalid Field              refused                   Invalid Field
//	  Recovery DULBE; Temperature THSEL > 1
//	Set Features 0Bh: any defined AEC bit     accept (0x11F from SPDK);  accept the defined bits   accept, reserved cleared
//	                                          reserved bits dropped
//	Set Features 81h (Host Identifier)        Command Sequence Error     Command Sequence Error    Command Sequence Error
//	Set Features 83h PTPL 1, Register CPTPL   persist (with a            Set Features 83h: Invalid persist (a JSON file)
//	  11b                                      ReservationStore), else    Field; CPTPL not read;
//	                                           Invalid Field              Report PTPLS 0 (pr.c:
//	                                                                     nothing persists)
//	Get Features 81h without EXHID            Invalid Field              Invalid Field             Invalid Field
//	Set Features with SV                      Feature Not Saveable       not checked               Feature Not Saveable
//	Get Log Page 0Ch: LSP bits but RGO; RAE   ignored; RAE keeps the     ignored; RAE keeps the    ignored; RAE keeps the
//	                                          event masked               event masked              event masked
//	Get Log Page 0Ch offset past the page     zeros up to the largest    offset not read: the      Invalid Field (at its
//	                                          page (NANAGRPID, MNAN),    page from its start       end too)
//	                                          Invalid Field past it
//	I/O to a group Inaccessible, Persistent   the state's Path Related   the same (no DNR)         the same (no DNR)
//	  Loss or Change through the listener       Status, no DNR
//	a fifth AER held                          AER Limit Exceeded         AER Limit Exceeded        AER Limit Exceeded
//
// Every command the target accepts is answered: exactly one completion
// with its CID, or the connection ends with the reason in the log.
// TestEveryCommandAnswered (answered_test.go) holds the target to it with
// random and mutated SQEs (every opcode, SGL type, PSDT and FUSE value,
// reserved bits) on the admin and an I/O queue, over NVMe/TCP and the
// shm and iwarp RDMA providers. The exceptions are by design: an Asynchronous Event
// Request is held until an event, and one whose CID the host reuses is
// dropped (above).
//
// # Bad input
//
// Everything else gets its NVMe status (with DNR) and the connection
// stays. Every check happens before data moves or a device is touched, so
// a refused command changes nothing.
//
//	Invalid Command Opcode        an opcode or FCTYPE the queue does not serve;
//	                              anything but Connect on a queue not connected
//	Invalid Field in Command      reserved or unsupported values (CNS, FID, log
//	                              page offsets, properties, AEC bits), a transfer
//	                              above MDTS, in-capsule data for
//	                              controller-to-host data
//	Invalid Log Page              a log page this controller does not have
//	Feature Not Saveable          Set Features with SV
//	AER Limit Exceeded            a fifth Asynchronous Event Request held
//	Invalid Queue Type            Disconnect on the admin queue
//	Invalid Namespace or Format   an NSID with no namespace
//	LBA Out of Range              blocks past the end (any range of a DSM)
//	ANA Inaccessible, Persistent  an I/O command to a namespace whose ANA group
//	Loss, Transition (SCT 3h)     has that state on the controller's listener
//	                              (no DNR: another path may serve it)
//	Reservation Conflict          a read or write the namespace's reservation
//	                              does not allow the host; a reservation
//	                              command with a wrong key or against
//	                              another holder
//	Data SGL Length Invalid       an SGL that does not describe exactly the
//	                              bytes the command moves (DSM may describe
//	                              more); in-capsule data past the capsule
//	SGL Descriptor Type Invalid   on a command that moves data, any SGL but
//	                              the transport's own (Keyed Data Block on
//	                              RDMA, Transport Data Block on TCP),
//	                              in-capsule Data Block and NULL
//	SGL Offset Invalid            an in-capsule offset past the capsule
//	Command Sequence Error        admin and I/O commands before CC.EN=1 and
//	                              CSTS.RDY=1 or after a shutdown; a second
//	                              Connect; a QID already connected; Number of
//	                              Queues after I/O queues exist; more than SQSIZE
//	                              commands outstanding (SQSIZE is 0's based: a
//	                              queue of SQSIZE+1 entries is full with SQSIZE)
//	Command ID Conflict           a CID still outstanding on the queue (but
//	                              the CID of a held AER: the AER is dropped
//	                              and the new command runs)
//	Connect Invalid Parameters    unknown subsystem, static CNTLID, I/O queue of
//	                              a controller that does not exist or is another
//	                              host's, QID beyond the queues granted, queue
//	                              too large; DW0 has IATTR and IPO
//	Connect Invalid Host (84h)    a host not on the subsystem's allow-list
//
// # Device errors
//
// A command whose namespace device fails it gets the status the error
// carries, if it wraps an nvmeof.Status (errors.As: the device knows best;
// the erasure-coded volumes of nvmeof/blockdev/ecvolume answer Unrecovered Read
// Error or Write Fault when too many devices are lost, and Capacity
// Exceeded when a device is full); otherwise ENOSPC is Capacity Exceeded,
// blockdev.ErrOutOfRange LBA Out of Range, blockdev.ErrClosed Namespace
// Not Ready, and anything else Unrecovered Read Error on a read or Write
// Fault on a write, Write Zeroes, deallocate or Flush (devstatus.go).
// The error is logged; the connection stays.
//
// # Concurrency
//
// Every exported method is safe for concurrent use. Each queue has its
// own goroutine that polls its CQ (RDMA) or reads its connection (TCP)
// and runs commands; commands on
// namespaces whose devices may block (not blockdev.NonBlocking) run on a
// small pool of workers per queue (WithIOWorkersPerQueue). Queues run in
// parallel with each other. Lock order: Target.mu, Subsystem.mu,
// controller.mu, controller.errMu; the I/O path takes none of them: the
// namespace table is an atomic snapshot, the CID table and counters are
// atomics, and a queue's slots belong to whoever is working on them.
// Command slots, buffers and work requests are allocated when a queue is
// set up (large buffers on first use); steady-state reads and writes
// allocate nothing, on the queue goroutine or the workers
// (TestDispatchAllocatesNothing, BenchmarkDispatch): the I/O counters
// are atomics in the Namespace, bumped in queue.finish, and a command's
// latency is two time.Now calls. The WRs a queue's
// goroutine builds while handling one batch of completions go out in one
// PostSend.
//
// # Sharp edges
//
//   - VS and Identify report NVMe 2.0, as SPDK does: CAP.CSS has the NVM
//     command set and "I/O command sets" (bit 6); Identify serves CNS 00h
//     to 03h, 05h to 08h and 1Ch (one command set combination, NVM);
//     namespace identification descriptors carry CSI 0. It has no
//     Commands Supported and Effects log (LPA does not claim one).
//   - ANA is always reported (CMIC bit 3), on every NVM subsystem: hosts
//     that do not use it see every group Optimized. The target never
//     moves a group out of Change by itself (ANATT is a promise the
//     operator keeps). The ANA change counts are per listener; adding or
//     removing a namespace changes the descriptors' NSIDs but no count
//     (the Namespace Attribute Changed event tells of it). A listener
//     disallowed from a subsystem forgets its states; controllers still
//     connected through it keep theirs. Flush to every namespace (NSID
//     FFFFFFFFh) is not checked against ANA states.
//   - Reservations (reservation.go) are per namespace and per host
//     (HOSTID of Connect), every type, with IEKEY ignoring CRKEY. They
//     live in memory unless the namespace has a ReservationStore
//     (NamespaceConfig.Reservations, ptpl.go): then RESCAP claims
//     Persist Through Power Loss, and with PTPL on (Register CPTPL 11b,
//     Set Features 83h) every change is saved before its command
//     completes and comes back when the namespace is added again;
//     without one, PTPL on is refused with Invalid Field. Preempt and Abort aborts
//     nothing (nothing waits in the target). Reservation notices go to
//     the hosts concerned in log page 80h with an Asynchronous Event
//     (type I/O command specific), unless Set Features 82h masks them;
//     83h takes PTPL 0 only. Report answers the
//     extended structure only (EDS 0 gets Host Identifier Inconsistent
//     Format, as nvmet answers). Flush is not a reservation conflict.
//     While no reservation is held, I/O checks one atomic flag.
//   - Identify SGLS claims Keyed SGL Data Blocks only on RDMA
//     controllers, as nvmet does (SPDK claims them on TCP too).
//   - An NVMe/TCP queue keeps twice its largest number of entries in
//     slots, each with a data buffer that grows on first use to the
//     capsule size or to MDTS and stays: a host that keeps many large
//     transfers in flight on many queues makes the target hold up to
//     slots × MDTS per queue (the RDMA binding bounds this with
//     WithLargeBuffersPerQueue and makes commands wait).
//   - The discovery log lists tcp:// listeners with TRTYPE TCP (3),
//     ADRFAM IPv4 or IPv6, TRADDR, TRSVCID and a TSAS of zeros (SECTYPE 0:
//     no TLS); RDMA listeners with TRTYPE RDMA (1).
//   - The discovery log entry of an shm:// listener has TRTYPE RDMA, ADRFAM
//     Intra Host (FEh), TRADDR the shm name and an empty TRSVCID;
//     iwarp:// entries carry PRTYPE iWARP in TSAS and rdma:// entries
//     "not specified", so a host can tell the three apart.
//   - Abort never aborts: commands are not queued inside the target, so
//     the one named is done or running. Abort completes with DW0 bit 0 set,
//     as the specification allows.
//   - The Disconnect command deletes the queue at once; the connection
//     is closed by the host, or by the target a second later.
//   - Shutdown answers the commands the target has received; a capsule
//     still on the wire when a connection closes gets no answer, as on any
//     lost connection.
//   - RemoveNamespace does not wait for commands already running on the
//     namespace; they finish on its device.
//
// # Libraries
//
// The standard library (log/slog for logs, net and bufio for NVMe/TCP),
// package rdma and its providers, the wire package nvmeof,
// and nvmeof/blockdev. Tests that cut NVMe/TCP connections wrap the
// listeners (WithListenerWrapper with internal/netfault's Wrapper); the
// target imports no test code.
package target
