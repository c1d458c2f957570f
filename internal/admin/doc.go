// Package admin is capsule's operator surface: a JSON-RPC 2.0 server on
// a Unix socket, the methods `target serve` answers there, and the
// configuration they edit, in the shape of SPDK's save_config, so that
// SPDK's own scripts/rpc.py drives capsule as it drives nvmf_tgt.
//
//	srv := admin.NewServer(log)
//	svc, _ := admin.NewService(admin.Options{Target: t, OpenStore: ..., StatePath: "data/capsule.json"})
//	svc.Load(cfg, false) // the start configuration: --config, the state file, or the flags
//	svc.Register(srv)
//	ln, _ := admin.ListenUnix("data/capsule.sock") // mode 0600
//	go srv.Serve(ln)
//	...
//	srv.Close(); t.Close(); svc.Close(); store.Close()
//
// Namespaces the Service adds get Options.DataDir's reservations.db
// (internal/resstore, a bbolt database the Service opens with the first
// namespace and closes in Close) as their target.ReservationStore, so
// reservations a host asked to persist through power loss survive a
// restart of `target serve`.
//
// It is internal: the methods are the API (the socket, and `target rpc`),
// and the Go types behind them follow the daemon rather than a library
// user's needs.
//
// # Framing (jsonrpc.go)
//
// A connection carries a stream of JSON values with or without whitespace
// between them: SPDK's rpc.py writes one indented request object and no
// newline, then reads one response with a raw JSON decode; nc users end
// lines. The server reads the stream with encoding/json's Decoder (which
// finds where each value ends), answers each request in order with one
// compact JSON value and a newline, and runs one request of a connection
// at a time. Batches (arrays) and notifications (no "id") are as JSON-RPC
// 2.0 says. A request must have "jsonrpc": "2.0", a method string, params
// an object or array, an id string, number or null, and nothing else
// (CodeInvalidRequest otherwise, answered with the id when it could be
// read). Bytes that are not JSON get one parse error and the connection
// closes, as a stream cannot be resynchronized; so does a request over
// MaxRequestSize. A panic in a method is an internal error for that
// request only. ParseRequest is fuzzed (FuzzParseRequest). The framing is
// hand-written on encoding/json: JSON-RPC 2.0 is small, and the libraries
// for it frame messages by lines or HTTP, which rpc.py does not.
//
// # Methods (service.go, model.go)
//
// Methods SPDK also has keep its names, its parameter names and its
// result shapes: nvmf_get_subsystems, nvmf_create_subsystem,
// nvmf_delete_subsystem, nvmf_subsystem_add_ns (namespace.bdev_name is a
// capsule volume, or another bdev; namespace.nsid is optional),
// nvmf_subsystem_remove_ns, nvmf_subsystem_add_host,
// nvmf_subsystem_remove_host, nvmf_subsystem_allow_any_host,
// nvmf_subsystem_add_listener (ana_state included),
// nvmf_subsystem_remove_listener, nvmf_subsystem_get_controllers,
// nvmf_subsystem_get_listeners (with each listener's ana_states),
// nvmf_subsystem_listener_set_ana_state, nvmf_get_stats, save_config,
// bdev_malloc_create, bdev_aio_create, framework_get_subsystems and
// framework_get_config (what rpc.py's save_config calls), rpc_get_methods.
// capsule's own: volume_create, volume_delete, volume_list, fs_create,
// store_get_status, fs_get_status, and ana_set_state, which is
// nvmf_subsystem_listener_set_ana_state by capsule's name (the same
// params: nqn, listen_address, ana_state, an optional anagrpid; without
// one, or with 0, every group). ana_state is SPDK's optimized,
// non_optimized or inaccessible, or persistent_loss or change, which
// SPDK's method does not take. The listener must be one of the
// subsystem's. A namespace's group is nvmf_subsystem_add_ns's
// namespace.anagrpid (the NSID's by default, as in SPDK);
// nvmf_create_subsystem's ana_reporting is taken either way (capsule
// always reports ANA). The states set are part of the model: save_config
// writes them, after the subsystem's listeners and namespaces, as
// nvmf_subsystem_listener_set_ana_state entries (a state for every group
// replaces the listener's earlier ones, and Optimized for every group,
// what a listener starts with, leaves none), so they persist in the
// state file like every other change; removing a listener from a
// subsystem forgets its states, as the target does. Params are decoded
// strictly: an unknown parameter is an error. SPDK parameters that ask
// for something capsule does not have (TLS keys, passthrough, a
// tgt_name) are refused when set, and taken when false or absent, which
// is what rpc.py sends by default.
//
// Every change goes the same way: its params are checked against a copy
// of the model (the configuration as data: bdevs, subsystems with their
// hosts and namespaces, listeners), with no I/O; then it is carried out
// on the running target (nvmeof/target applies namespace, host,
// subsystem and listener changes live and tells connected hosts by
// Asynchronous Event); then the copy becomes the model and is written to
// the state file (StatePath, atomically: temporary file, fsync, rename).
// A change that fails leaves the model as it was. Load runs a whole config
// this way after checking every entry first, so a bad config fails before
// anything is created, with the entry named: "subsystems[2].config[4]
// (nvmf_subsystem_add_ns): no bdev (volume) named \"vol9\"". It then
// opens the discovery subsystem's listeners (every listener of a saved
// config) before the other entries, so an address in use fails before a
// volume or file exists; a listener a config names only on another
// subsystem is opened in its place. Host and subsystem NQNs are checked as
// SPDK checks them (CheckNQN: nqn.yyyy-mm.domain[:name], or the UUID
// form), more strictly than the wire side takes what hosts send.
//
// A config is the list of calls that rebuild the state, in three
// subsystems: "capsule" (volume_create, fs_create), "bdev"
// (bdev_malloc_create, bdev_aio_create), "nvmf" (listeners, then each
// subsystem with its hosts and namespaces). volume_create of a volume the
// store already has, with the same size, opens it: loading a config is
// how a restart comes back.
//
// # Sharp edges
//
//   - A subsystem is served on the listeners added to it, as in SPDK
//     (target.SubsystemConfig.OwnListeners); the discovery subsystem on
//     every listener the target has. Adding an address to any subsystem
//     makes the target listen there; removing it from a subsystem leaves
//     the listener (discovery still has it); removing it from the
//     discovery NQN stops it, once no subsystem has it. Connections made
//     through a listener stay when it is removed.
//   - A listener given with port 0 is saved with the port it got, so a
//     restart listens there again; within one load, a later entry that
//     names the same :0 address means that listener.
//   - The erasure-coded store opens when a volume or file namespace first
//     needs it; a store first opened by volume_create on a running target
//     has no background scrubber until the next start.
//   - nvmf_subsystem_remove_ns and volume_delete do not wait for commands
//     already running on the namespace (nvmeof/target's RemoveNamespace);
//     remove the namespace, let hosts see the event, then delete.
//   - bdev_malloc_create namespaces come back empty after a restart.
//   - iWARP listeners are saved with trtype "iWARP", which SPDK does not
//     know; shm listeners as RDMA with adrfam INTRA_HOST, as the
//     discovery log describes them.
//
// # Concurrency
//
// Server and Service methods are safe for concurrent use. Service.mu
// serializes changes and guards the model and the open devices; it is
// taken before the target's locks, never inside them. Reporting methods
// read the target's live state (controllers, counters) under it too.
// The counters nvmf_get_stats and store_get_status report are the ones
// a metrics exporter would read (target.Namespace.Stats,
// target.Subsystem.ControllerInfos, chunkstore.Store.Stats).
//
// # Libraries
//
// The standard library (encoding/json, net, log/slog), golang.org/x/sys
// for statfs, github.com/google/uuid for UUID text.
package admin
