// Package nvmeof is the NVMe over Fabrics wire: the bytes of submission
// and completion queue entries, SGL descriptors, the Fabrics, admin and
// NVM commands, the data structures they carry, and the RDMA_CM private
// data of the RDMA transport and the PDUs of the TCP transport (tcp.go),
// byte-exact to the specifications. The target, the host library and the
// RDMA and TCP transport bindings are built on it; this package does no
// I/O and keeps no state. NVMe/TCP digests are CRC32C from
// internal/crc32c (hash/crc32's Castagnoli, with carry-less-multiply
// folding for buffers of 2 KiB and more where the CPU has VPCLMULQDQ).
//
// # The model
//
// A command capsule is a 64-byte submission queue entry (Command),
// optionally followed by SGL descriptors and in-capsule data (ParseCapsule
// splits them). A response capsule is a 16-byte completion queue entry
// (Completion). Both are plain value types in which every byte of the
// entry has a field, so decoding and encoding round-trip byte for byte
// (reserved bits included), and neither allocates: they are meant to sit
// in pre-allocated command slots on the I/O path.
//
// The command-specific dwords are read and written through methods named
// after the specification's fields: SLBA, NLB (0's based) and Blocks,
// FUA, DEAC and the Dataset Management fields for NVM commands (nvm.go);
// CNS and CNTID, the Get Log Page fields with LogPageLength and
// LogPageOffset, FID, SEL and the feature values, the Abort target, for
// admin commands (admin.go). Fabrics commands have typed views (Connect,
// PropertyGet, PropertySet, Disconnect) with a Parse function that checks
// the command and a Command method that encodes it (fabrics.go).
//
// SGL1 is an SGLDescriptor, 16 raw bytes, read through typed views
// (KeyedSGL, InCapsuleSGL, TransportSGL, SegmentSGL) and decoded for a
// controller by an SGLPolicy, which says what the transport accepts and
// returns the Status to refuse a descriptor with.
//
// The data structures (ConnectData, IdentifyController, IdentifyNamespace,
// NamespaceIDs, the log pages, the discovery log, RDMA_CM private data)
// have MarshalTo, which writes into a caller's buffer and clears reserved
// bytes, MarshalBinary and UnmarshalBinary. The byte offset of every
// field is an exported constant carrying the specification's field name
// (CommandOffsetCID, ConnectDataOffsetSUBNQN, IDCtrlOffsetMSDBD).
//
// # Outcomes
//
// A command's outcome is a Status: SCT, SC, CRD, M and DNR in the 15 bits
// the completion queue entry carries (the phase tag stays in the
// Completion). Status implements error; errors.Is matches it on SCT and
// SC, so a Status wrapped anywhere in an error chain, with or without DNR,
// is found by errors.Is(err, StatusInvalidField), and StatusOf(err)
// turns any error a handler returns into the status to complete with. The
// sentinel errors are in errors.go; a decoder refuses a field with a
// *FieldError that names the structure, the field and its byte offset and
// wraps the sentinel and, for a command a controller received, the Status
// to answer with. For Connect, FieldError.InvalidParameter gives the IATTR
// and IPO of a Connect Invalid Parameters response. RDMA_CM rejects carry
// an RDMACMStatus, also an error.
//
// # What a decoder guarantees
//
//   - It checks the length before it reads a byte. A structure of fixed
//     size is decoded from exactly that many bytes (ErrLength otherwise),
//     so that a truncated or padded message is not taken for a whole one;
//     the exceptions are said where they are (a capsule is an SQE plus
//     whatever follows; RDMA_CM private data may be padded by the
//     connection manager; Dataset Management data may be longer than its
//     ranges; ANALog.UnmarshalPrefix takes the ANA log page from the start
//     of the larger buffer a host reads it into). A count read from the
//     wire (NUMREC, NR, NIDL, the ANA log's descriptors and NSIDs) is checked
//     against the bytes that carry it before anything is allocated for it.
//   - Strings are validated. An NQN must be nonempty, at most 223 bytes,
//     valid UTF-8 and NUL-terminated in its 256-byte field, with nothing
//     but NULs after the terminator (no interior NUL). ASCII fields (SN,
//     MN, FR, TRSVCID, TRADDR, firmware revisions) may hold only 20h..7Eh;
//     trailing spaces and NULs are padding and are removed; a NUL followed
//     by text is refused. Encoders apply the same rules and pad ASCII with
//     spaces and NQNs with NULs, as the specification says. The one
//     tolerant decoder is ConnectData.UnmarshalTolerant, for a controller
//     receiving Connect: NQN fields are the text before their NUL, as
//     Linux nvmet and SPDK take them (empty included).
//   - Values the specification constrains are checked: record formats,
//     property sizes, SQSIZE 0, NUSE <= NCAP <= NSZE, the LBA format in use,
//     namespace lists in increasing order, namespace identification
//     descriptors of the length their type requires and not repeated.
//   - It never panics, whatever the input; every decoder of bytes from a
//     peer has a fuzz target (fuzz_test.go; the TCP PDUs in tcp_fuzz_test.go)
//     with a round-trip property.
//   - It does not keep the input: values are copied out. ParseCapsule's
//     second result is the one slice that aliases its argument.
//
// Values are not safe for concurrent mutation; distinct values are
// independent and every function is safe to call from many goroutines.
//
// # Sharp edges
//
//   - Admin and I/O opcodes overlap (02h is Get Log Page and Read): the
//     queue a command arrived on says which set applies. Command-specific
//     status codes 80h..BFh also mean different things for Fabrics and NVM
//     commands; String names the Fabrics meaning.
//   - Byte 1 of a Fabrics command is reserved in NVMe over Fabrics 1.1,
//     but Linux hosts set PSDT 01b there: do not refuse it. The phase tag
//     of a Fabrics response is reserved.
//   - SGLPolicy counts in-capsule offsets from the end of the SQE: ICDOFF
//     0, the only value Linux hosts accept. Whether in-capsule data suits
//     the command's direction is the caller's check.
//   - Decoding ASCII removes padding, so a string with trailing spaces does
//     not survive a round trip with them; compare decoded values.
//   - Decoding data structures with strings allocates the strings; the
//     SQE, CQE and SGL paths do not allocate.
//   - Figure and section numbers below follow NVMe Base revision 2.3;
//     other 2.x revisions number some of them differently, the titles
//     are stable.
//
// # Where each part of the specifications is
//
//	Specification and section                          File
//	------------------------------------------------   -------------
//	NVMe Base 2.x
//	  1.4.2 ASCII and UTF-8 strings; 4.7 NQNs          text.go
//	  3.1.4 Controller Properties (CAP, VS, CC, CSTS,  properties.go
//	        NSSR)
//	  3.3.2.1.3.1 Data and SGL Locations within a      sgl.go
//	        Command Capsule
//	  4.1 Submission Queue Entry (4.1.1, 4.1.2)        command.go
//	  4.2 Completion Queue Entry (4.2.1, 4.2.2)        completion.go
//	  4.2.3 Status Field Definition                    status.go
//	  4.3.2 Scatter Gather List (SGL)                  sgl.go
//	  5.2.1 Abort; 5.2.2 Asynchronous Event Request;   admin.go
//	        5.2.11 Get Features; 5.2.12 Get Log Page
//	        (command fields, offset semantics);
//	        5.2.14 Keep Alive; 5.2.26 Set Features
//	        (5.2.26.1.4 Volatile Write Cache,
//	        5.2.26.1.5 Asynchronous Event Configuration,
//	        5.2.26.1.8 Keep Alive Timer,
//	        5.2.26.2.1 Number of Queues)
//	  5.2.12.1.2 Error Information, 5.2.12.1.3 SMART / logpage.go
//	        Health, 5.2.12.1.4 Firmware Slot,
//	        5.2.12.1.5 Changed Attached Namespace List
//	  5.2.12.3.3 Discovery log page (70h)              discovery.go
//	  5.2.13 Identify: 5.2.13.2.1 Identify Controller, identify.go
//	        5.2.13.2.2 Active Namespace ID list,
//	        5.2.13.2.3 Namespace Identification
//	        Descriptor list
//	  5.2.13.2 Identify CNS 05h-08h and 1Ch: I/O      identify_iocs.go
//	        command set specific and independent
//	        structures, I/O Command Set data structure
//	  6 Fabrics Command Set: 6.3 Connect, 6.4          fabrics.go
//	        Disconnect, 6.5 Property Get, 6.6 Property
//	        Set; Figure 105 Fabrics status values      status.go
//	  Asymmetric Namespace Access Reporting (ANA       ana.go
//	        states, ANACAP), the Asymmetric Namespace
//	        Access log page (0Ch, RGO), Path Related
//	        Status (SCT 3h)
//	  8.19 Reservations: Reservation Register,         reservation.go
//	        Acquire, Release, Report (command fields,
//	        keys, extended reservation status), RESCAP
//	NVM Command Set 1.0
//	  Read, Write, Flush, Write Zeroes, Dataset        nvm.go
//	        Management (range definition)
//	  Identify Namespace (CNS 00h), LBA Format         identify.go
//	  NVM command set Identify Namespace and           identify_iocs.go
//	        Identify Controller (CNS 05h, 06h)
//	NVMe over Fabrics 1.1 (titles; now part of Base 2.x)
//	  Capsules; SGLs in capsules; ICDOFF               command.go, sgl.go
//	  Fabrics Command Set: Connect (command, data,     fabrics.go
//	        response, Invalid Parameters), Property
//	        Get, Property Set, Disconnect
//	  Fabrics command status values                    status.go
//	  Identify Controller fabrics fields (IOCCSZ,      identify.go
//	        IORCSZ, ICDOFF, FCATT, MSDBD, OFCS)
//	  Discovery Log Page and entries                   discovery.go
//	NVMe RDMA Transport 1.0 (RDMA binding of NVMe-oF 1.1)
//	  RDMA_CM_REQUEST, RDMA_CM_ACCEPT, RDMA_CM_REJECT  rdmacm.go
//	        private data and reject status codes
//	  Keyed SGL Data Block, Invalidate Key subtype     sgl.go
//	  Discovery TSAS for RDMA (QPTYPE, PRTYPE, CMS)    discovery.go
//	NVMe TCP Transport 1.0 (and the TCP transport specification of NVMe 2.x)
//	  Transport SGL Data Block (5Ah)                   sgl.go
//	  3.3 PDU common header (PDU-Type, FLAGS, HLEN,    tcp.go
//	        PDO, PLEN); 3.6.2 PDU types: ICReq,
//	        ICResp, H2CTermReq, C2HTermReq (FES, FEI),
//	        CapsuleCmd, CapsuleResp, H2CData, C2HData,
//	        R2T; HPDA/CPDA data alignment; header and
//	        data digests (CRC32C)
//	  The receiver's checks of a common header, with   tcp.go (TCPReceiver)
//	        the FES and FEI each violation gets
//	  Discovery TSAS for TCP (SECTYPE)                 discovery.go, tcp.go
//
// The behaviour the specifications ask of each side lives in the
// subpackages (paths relative to nvmeof/):
//
//	Specification and section                          File
//	------------------------------------------------   -------------
//	Controller side (package target)
//	  Fabrics Connect, queue sizes, CNTLID allocation,  target/fabrics.go
//	        Property Get/Set, Disconnect
//	  Controller properties: CC.EN and shutdown         target/controller.go
//	        handshakes, Keep Alive Timer expiry
//	  Admin commands: Identify, Get Log Page, Features, target/admin.go
//	        Async Event Request, Abort, Keep Alive
//	  ANA groups, states per listener, the ANA log     target/ana.go
//	        page, ANA Change events, Path Related
//	        Status on I/O
//	  NVM commands: Read, Write (FUA), Flush, Write     target/nvm.go
//	        Zeroes, Dataset Management deallocate
//	  Command dispatch, the "I/O before CC.EN" rule    target/dispatch.go
//	  SQ flow control (SQHD, at most SQSIZE commands)   target/queue.go
//	  Subsystems, namespaces (NGUID, UUID), host        target/subsystem.go,
//	        allow-lists                                  target/namespace.go
//	  Discovery controller and log page entries         target/discovery.go
//	  Media and data-integrity statuses from devices    target/devstatus.go
//	  RDMA binding: RDMA_CM private data and rejects    target/rdma_listener.go
//	  RDMA binding: capsules by Send, data by RDMA      target/rdma_queue.go
//	        Read/Write, Send with Invalidate
//	  TCP binding: listener, ICReq/ICResp negotiation   target/tcp_listener.go,
//	        (digests, HPDA, MAXH2CDATA), in-capsule      target/tcp_queue.go
//	        data, R2T/H2CData, C2HData (SUCCESS),
//	        C2HTermReq on fatal errors, Transient
//	        Transport Error on data digest errors
//	Host side (package host)
//	  Controller initialisation (Connect, CAP, CC.EN,   host/controller.go
//	        CSTS.RDY, Identify checks, Number of
//	        Queues), Keep Alive, reconnect
//	  ANA log page reads, ANA states, ANA Change        host/ana.go,
//	        events; multipath over several controllers  host/multipath.go
//	        (path choice by ANA state, failover on
//	        Path Related Status or a lost path)
//	  Discovery                                         host/discover.go
//	  Admin commands                                    host/admin.go
//	  I/O queues (slots, requests, failure handling)    host/queue.go
//	  RDMA binding (CM private data, keyed and          host/rdma_queue.go
//	        in-capsule SGLs)
//	  TCP binding (ICReq/ICResp, CapsuleCmd, H2CData    host/tcp_queue.go
//	        answering R2T, C2HData, H2CTermReq)
//	  NVM commands, MDTS splitting                      host/namespace.go,
//	                                                     host/request.go
package nvmeof
