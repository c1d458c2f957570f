package admin

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"github.com/google/uuid"

	"github.com/capsule-storage/capsule/chunkstore"
	"github.com/capsule-storage/capsule/fs/server"
	"github.com/capsule-storage/capsule/internal/resstore"
	"github.com/capsule-storage/capsule/nvmeof"
	"github.com/capsule-storage/capsule/nvmeof/blockdev"
	"github.com/capsule-storage/capsule/nvmeof/blockdev/ecvolume"
	"github.com/capsule-storage/capsule/nvmeof/target"
	"github.com/capsule-storage/capsule/rdma"
)

// Options are what a Service works on. Target is required; the rest have
// the defaults their comments give.
type Options struct {
	// Context bounds the listeners the Service starts (Target.Listen).
	// Default: context.Background().
	Context context.Context
	// Target is the running target the changes apply to.
	Target *target.Target
	// OpenStore returns the erasure-coded store, opening (or creating) it
	// on first use; it is called when a volume or a file namespace is
	// first needed. The caller closes the store, after Service.Close.
	// Nil: there is no store, and volume_create and fs_create fail.
	OpenStore func() (*chunkstore.Store, error)
	// OpenFS opens (or creates) the file namespace name on store.
	OpenFS func(name string, store *chunkstore.Store) (*server.Server, error)
	// DataDir is where a relative bdev_aio_create filename lives, and
	// reservations.db, the bbolt database (internal/resstore) that keeps
	// the reservations hosts asked to persist through power loss, opened
	// when the first namespace is added. "" keeps reservations in memory
	// only (RESCAP then claims no PTPL).
	DataDir string
	// StatePath is the file every change is written to, in save_config's
	// shape; "" keeps changes in memory only.
	StatePath string
	// BlockSize is the block size of volumes and files that name none:
	// 512 (the default) or 4096.
	BlockSize int
	// ScrubStatus, if set, is reported by store_get_status as "scrub".
	ScrubStatus func() any
	// Logger gets one line per change. Default: discard.
	Logger *slog.Logger
}

// Service is capsule's admin methods over a running target (service.go,
// model.go): it keeps the configuration model, the devices behind the
// namespaces, and the state file. Its methods are safe for concurrent
// use; changes run one at a time.
type Service struct {
	opts Options
	log  *slog.Logger

	// mu serializes changes and guards the fields below. Lock order:
	// Service.mu, then the target's locks.
	mu    sync.Mutex
	model *model
	devs  map[string]blockdev.Device // open devices of volume, malloc and aio bdevs
	fss   map[string]*server.Server  // open file namespaces
	store *chunkstore.Store          // once OpenStore succeeded
	res   *resstore.Store            // DataDir/reservations.db, once a namespace was added
}

// NewService returns a Service with an empty model: the target's
// configuration is what Load (or the change methods) put in it.
func NewService(opts Options) (*Service, error) {
	if opts.Target == nil {
		return nil, errors.New("admin: Options.Target is nil")
	}
	if opts.Context == nil {
		opts.Context = context.Background()
	}
	if opts.BlockSize == 0 {
		opts.BlockSize = 512
	}
	if err := checkBlockSize(opts.BlockSize); err != nil {
		return nil, fmt.Errorf("admin: Options.BlockSize: %w", err)
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	return &Service{opts: opts, log: opts.Logger, model: &model{},
		devs: map[string]blockdev.Device{}, fss: map[string]*server.Server{}}, nil
}

// Check checks a config as Load would, without touching anything: the
// first entry at fault is named in the error.
func (sv *Service) Check(cfg Config) error {
	sv.mu.Lock()
	defer sv.mu.Unlock()
	_, err := sv.checkConfig(cfg)
	return err
}

type step struct {
	name string
	ch   change
}

func (sv *Service) checkConfig(cfg Config) ([]step, error) {
	m := sv.model.clone()
	var steps []step
	for i, sub := range cfg.Subsystems {
		allowed, ok := configMethods[sub.Subsystem]
		if !ok {
			return nil, fmt.Errorf("subsystems[%d]: unknown subsystem %q: want capsule, bdev or nvmf", i, sub.Subsystem)
		}
		for j, e := range sub.Config {
			name := entryName(i, j, e.Method)
			if e.Origin != "" {
				name = e.Origin
			}
			if !contains(allowed, e.Method) {
				return nil, fmt.Errorf("%s: not a method of subsystem %q here (it takes %s)", name, sub.Subsystem, strings.Join(allowed, ", "))
			}
			ch, err := decodeChange(e.Method, e.Params)
			if err != nil {
				return nil, fmt.Errorf("%s: %v", name, err)
			}
			if err := ch.check(m, sv); err != nil {
				return nil, fmt.Errorf("%s: %v", name, err)
			}
			steps = append(steps, step{name, ch})
		}
	}
	return steps, nil
}

// Load carries out a config on the running target: every entry is
// checked first (nothing is created if one is bad), then each is applied
// in order. save writes the state file afterwards (a config given on the
// command line); otherwise the state file is left as it is.
func (sv *Service) Load(cfg Config, save bool) error {
	sv.mu.Lock()
	defer sv.mu.Unlock()
	steps, err := sv.checkConfig(cfg)
	if err != nil {
		return err
	}
	for _, st := range listenersFirst(steps) {
		if _, err := sv.runLocked(st.ch); err != nil {
			return fmt.Errorf("%s: %v", st.name, err)
		}
	}
	if save {
		return sv.saveLocked()
	}
	return nil
}

// listenersFirst moves the steps that open a listener of the discovery
// subsystem (every listener of a saved config) before the others, so that
// an address in use or not on this machine fails before a volume or file
// is created. It moves those before the first step that removes a
// listener only; the order among them stays.
func listenersFirst(steps []step) []step {
	var first, rest []step
	moving := true
	for _, st := range steps {
		lc, ok := st.ch.(*listenerChange)
		switch {
		case ok && !lc.add:
			moving = false
			rest = append(rest, st)
		case ok && moving && lc.NQN == nvmeof.DiscoveryNQN:
			first = append(first, st)
		default:
			rest = append(rest, st)
		}
	}
	return append(first, rest...)
}

// Config returns the configuration in save_config's shape.
func (sv *Service) Config() Config {
	sv.mu.Lock()
	defer sv.mu.Unlock()
	return sv.model.config()
}

// runLocked checks a change on a copy of the model, applies it, and
// makes the copy the model.
func (sv *Service) runLocked(ch change) (any, error) {
	next := sv.model.clone()
	if err := ch.check(next, sv); err != nil {
		return nil, err
	}
	res, err := ch.apply(sv, next)
	if err != nil {
		return nil, err
	}
	sv.model = next
	return res, nil
}

// saveLocked writes the state file.
func (sv *Service) saveLocked() error {
	if sv.opts.StatePath == "" {
		return nil
	}
	b, err := json.MarshalIndent(sv.model.config(), "", "  ")
	if err != nil {
		return err
	}
	if err := writeFileAtomic(sv.opts.StatePath, append(b, '\n')); err != nil {
		return fmt.Errorf("writing the state file: %w", err)
	}
	return nil
}

// Close closes the devices and file namespaces that are no namespace of
// the target (the target closes its own), and the reservations database. Call it after the target's
// Close and before the store's.
func (sv *Service) Close() error {
	sv.mu.Lock()
	defer sv.mu.Unlock()
	var errs []error
	for name, d := range sv.devs {
		if _, _, used := sv.model.user(name); !used {
			if c, ok := d.(io.Closer); ok {
				if err := c.Close(); err != nil {
					errs = append(errs, fmt.Errorf("closing %s: %w", name, err))
				}
			}
		}
	}
	for name, f := range sv.fss {
		if _, _, used := sv.model.user(name); !used {
			if err := f.Close(); err != nil {
				errs = append(errs, fmt.Errorf("closing file namespace %s: %w", name, err))
			}
		}
	}
	sv.devs, sv.fss = map[string]blockdev.Device{}, map[string]*server.Server{}
	if sv.res != nil {
		if err := sv.res.Close(); err != nil {
			errs = append(errs, fmt.Errorf("closing the reservations database: %w", err))
		}
		sv.res = nil
	}
	return errors.Join(errs...)
}

// Store returns the erasure-coded store once it is open, or nil.
func (sv *Service) Store() *chunkstore.Store {
	sv.mu.Lock()
	defer sv.mu.Unlock()
	return sv.store
}

// FileSystems returns the open file namespaces by name (a copy).
func (sv *Service) FileSystems() map[string]*server.Server {
	sv.mu.Lock()
	defer sv.mu.Unlock()
	return maps.Clone(sv.fss)
}

// Register adds every method to srv.
func (sv *Service) Register(srv *Server) {
	for name := range changes {
		srv.Register(name, func(_ context.Context, params json.RawMessage) (any, error) {
			ch, err := decodeChange(name, params)
			if err != nil {
				return nil, err
			}
			sv.mu.Lock()
			defer sv.mu.Unlock()
			res, err := sv.runLocked(ch)
			if err != nil {
				return nil, err
			}
			sv.log.Info("rpc change", "method", name)
			if err := sv.saveLocked(); err != nil {
				return nil, Errorf(CodeInternal, "%s applied, but %v", name, err)
			}
			return res, nil
		})
	}
	srv.Register("nvmf_get_subsystems", sv.getSubsystems)
	srv.Register("nvmf_subsystem_get_controllers", sv.getControllers)
	srv.Register("nvmf_subsystem_get_listeners", sv.getListeners)
	srv.Register("nvmf_get_stats", sv.getStats)
	srv.Register("save_config", func(context.Context, json.RawMessage) (any, error) { return sv.Config(), nil })
	srv.Register("framework_get_subsystems", func(context.Context, json.RawMessage) (any, error) {
		return []map[string]any{
			{"subsystem": SubsystemCapsule, "depends_on": []string{}},
			{"subsystem": SubsystemBdev, "depends_on": []string{}},
			{"subsystem": SubsystemNVMf, "depends_on": []string{SubsystemCapsule, SubsystemBdev}},
		}, nil
	})
	srv.Register("framework_get_config", sv.frameworkGetConfig)
	srv.Register("volume_list", sv.volumeList)
	srv.Register("store_get_status", sv.storeStatus)
	srv.Register("fs_get_status", sv.fsStatus)
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func baseName(s string) string { return filepath.Base(s) }

// CheckListenURL checks a listener URL's syntax, as Listen will read it:
// tcp://HOST:PORT (NVMe/TCP), or an RDMA URL of a provider the program
// links (fault+ RDMA wrappers only where a test imports rdma/fault; TCP
// listeners are wrapped only in tests, through target.WithListenerWrapper).
func CheckListenURL(u string) error {
	if rest, ok := strings.CutPrefix(u, "tcp://"); ok {
		_, port, err := net.SplitHostPort(rest)
		if err != nil {
			return err
		}
		if _, err := strconv.ParseUint(port, 10, 16); err != nil {
			return fmt.Errorf("port %q is not a number from 0 to 65535", port)
		}
		return nil
	}
	_, _, err := rdma.ParseURL(u)
	return err
}

// storeLocked returns the store, opening it on first use.
func (sv *Service) storeLocked() (*chunkstore.Store, error) {
	if sv.store != nil {
		return sv.store, nil
	}
	if sv.opts.OpenStore == nil {
		return nil, invalid("this target has no erasure-coded store")
	}
	s, err := sv.opts.OpenStore()
	if err != nil {
		return nil, err
	}
	sv.store = s
	return s, nil
}

// --- apply: the changes carried out on the running target ---

func (c *volumeCreate) apply(sv *Service, _ *model) (any, error) {
	s, err := sv.storeLocked()
	if err != nil {
		return nil, err
	}
	d, err := ecvolume.OpenOrCreate(s, c.Name, int64(c.Size))
	if err != nil {
		return nil, invalid("volume %q: %v", c.Name, err)
	}
	sv.devs[c.Name] = d
	return c.Name, nil
}

func (c *volumeDelete) apply(sv *Service, _ *model) (any, error) {
	s, err := sv.storeLocked()
	if err != nil {
		return nil, err
	}
	if err := s.DeleteVolume(c.Name); errors.Is(err, chunkstore.ErrNotFound) {
		return nil, invalid("no volume %q", c.Name)
	} else if err != nil {
		return nil, invalid("volume %q: %v", c.Name, err)
	}
	delete(sv.devs, c.Name)
	return true, nil
}

func (c *fsCreate) apply(sv *Service, _ *model) (any, error) {
	s, err := sv.storeLocked()
	if err != nil {
		return nil, err
	}
	if sv.opts.OpenFS == nil {
		return nil, invalid("this target serves no file namespaces")
	}
	f, err := sv.opts.OpenFS(c.Name, s)
	if err != nil {
		return nil, err
	}
	sv.fss[c.Name] = f
	return c.Name, nil
}

func (c *bdevMallocCreate) apply(sv *Service, _ *model) (any, error) {
	d, err := blockdev.NewMemory(int64(c.NumBlocks) * int64(c.BlockSize))
	if err != nil {
		return nil, invalid("%v", err)
	}
	sv.devs[c.Name] = d
	return c.Name, nil
}

func (c *bdevAIOCreate) apply(sv *Service, _ *model) (any, error) {
	path := c.Filename
	if !filepath.IsAbs(path) {
		if err := os.MkdirAll(sv.opts.DataDir, 0o755); err != nil {
			return nil, err
		}
		path = filepath.Join(sv.opts.DataDir, path)
	}
	d, err := blockdev.OpenFile(path, int64(c.Size))
	if err != nil {
		return nil, invalid("%v", err)
	}
	sv.devs[c.Name] = d
	return c.Name, nil
}

func (c *createSubsystem) apply(sv *Service, _ *model) (any, error) {
	_, err := sv.opts.Target.AddSubsystem(target.SubsystemConfig{NQN: c.NQN, AllowAnyHost: c.AllowAnyHost,
		SerialNumber: c.SerialNumber, OwnListeners: true})
	if err != nil {
		return nil, invalid("%v", err)
	}
	return true, nil
}

func (c *deleteSubsystem) apply(sv *Service, _ *model) (any, error) {
	if _, err := sv.opts.Target.RemoveSubsystem(c.NQN); err != nil {
		return nil, invalid("%v", err)
	}
	return true, nil
}

func (c *addNS) apply(sv *Service, m *model) (any, error) {
	sub := sv.opts.Target.Subsystem(c.NQN)
	b := m.bdev(c.Namespace.BdevName)
	cfg := target.NamespaceConfig{NSID: *c.Namespace.NSID, BlockSize: b.BlockSize, ANAGroupID: uint32(c.Namespace.AnaGrpID)}
	if sv.opts.DataDir != "" {
		if sv.res == nil {
			if err := os.MkdirAll(sv.opts.DataDir, 0o755); err != nil {
				return nil, err
			}
			res, err := resstore.Open(filepath.Join(sv.opts.DataDir, "reservations.db"))
			if err != nil {
				return nil, Errorf(CodeInternal, "%v", err)
			}
			sv.res = res
		}
		cfg.Reservations = sv.res
	}
	if b.Kind == kindFS {
		cfg.Vendor = sv.fss[b.Name]
	} else {
		cfg.Device = sv.devs[b.Name]
	}
	if _, err := sub.AddNamespace(cfg); err != nil {
		return nil, invalid("%v", err)
	}
	return *c.Namespace.NSID, nil
}

func (c *removeNS) apply(sv *Service, _ *model) (any, error) {
	if _, err := sv.opts.Target.Subsystem(c.NQN).RemoveNamespace(c.NSID); err != nil {
		return nil, Errorf(CodeInternal, "%v", err)
	}
	return true, nil
}

func (c *hostChange) apply(sv *Service, _ *model) (any, error) {
	sub := sv.opts.Target.Subsystem(c.NQN)
	if c.add {
		if err := sub.AllowHost(c.Host); err != nil {
			return nil, invalid("%v", err)
		}
		return true, nil
	}
	sub.DisallowHost(c.Host)
	sub.DisconnectHost(c.Host)
	return true, nil
}

func (c *allowAnyHost) apply(sv *Service, _ *model) (any, error) {
	sv.opts.Target.Subsystem(c.NQN).SetAllowAnyHost(c.AllowAnyHost)
	return true, nil
}

func (c *listenerChange) apply(sv *Service, m *model) (any, error) {
	t := sv.opts.Target
	if c.stop {
		if err := t.StopListening(c.url); err != nil {
			return nil, invalid("%v", err)
		}
		return true, nil
	}
	if c.listen {
		real, err := t.Listen(sv.opts.Context, c.url)
		if err != nil {
			return nil, invalid("cannot listen: %s", listenCause(err))
		}
		if real != c.url { // the port a :0 listener got
			m.Requested[c.url] = real
			for i, u := range m.Listeners {
				if u == c.url {
					m.Listeners[i] = real
				}
			}
			if s := m.sub(c.NQN); s != nil {
				for i, u := range s.Listeners {
					if u == c.url {
						s.Listeners[i] = real
					}
				}
			}
			c.url = real
		}
	}
	if c.NQN == nvmeof.DiscoveryNQN {
		return true, nil
	}
	if !c.add {
		t.Subsystem(c.NQN).DisallowListener(c.url)
		return true, nil
	}
	t.Subsystem(c.NQN).AllowListener(c.url)
	if c.AnaState != "" {
		st, _ := ParseANAState(c.AnaState) // checked
		if err := t.Subsystem(c.NQN).SetANAState(c.url, 0, st); err != nil {
			return nil, invalid("%v", err)
		}
		m.sub(c.NQN).setANA(anaModel{Listener: c.url, State: st})
	}
	return true, nil
}

// listenCause is why a listener could not be opened, without the layers
// that wrapped it ("target: listen on URL: listen tcp ADDR: bind: ..."):
// the system error when there is one ("address already in use").
func listenCause(err error) string {
	var errno syscall.Errno
	for e := err; e != nil; e = errors.Unwrap(e) {
		if en, ok := e.(syscall.Errno); ok {
			errno = en
		}
	}
	if errno != 0 {
		return errno.Error()
	}
	return strings.TrimPrefix(err.Error(), "target: ")
}

// --- the methods that report ---

// listenAddresses are the listen_addresses of nvmf_get_subsystems.
func listenAddresses(urls []string) []ListenAddress {
	out := []ListenAddress{}
	for _, u := range urls {
		if a, err := ListenAddressOf(u); err == nil {
			out = append(out, a)
		}
	}
	return out
}

type spdkHost struct {
	NQN string `json:"nqn"`
}

type spdkNamespace struct {
	NSID     uint32 `json:"nsid"`
	BdevName string `json:"bdev_name"`
	Name     string `json:"name"`
	NGUID    string `json:"nguid,omitempty"`
	UUID     string `json:"uuid,omitempty"`
}

type spdkSubsystem struct {
	NQN             string          `json:"nqn"`
	Subtype         string          `json:"subtype"`
	ListenAddresses []ListenAddress `json:"listen_addresses"`
	AllowAnyHost    bool            `json:"allow_any_host"`
	Hosts           []spdkHost      `json:"hosts"`
	SerialNumber    string          `json:"serial_number,omitempty"`
	ModelNumber     string          `json:"model_number,omitempty"`
	MaxNamespaces   int             `json:"max_namespaces,omitempty"`
	MinCntlid       int             `json:"min_cntlid,omitempty"`
	MaxCntlid       int             `json:"max_cntlid,omitempty"`
	Namespaces      []spdkNamespace `json:"namespaces,omitempty"`
}

// getSubsystems is nvmf_get_subsystems: the discovery subsystem first,
// then the NVM subsystems, or the one nqn names.
func (sv *Service) getSubsystems(_ context.Context, params json.RawMessage) (any, error) {
	var p struct {
		tgtName
		NQN string `json:"nqn,omitempty"`
	}
	if err := DecodeParams(params, &p); err != nil {
		return nil, err
	}
	if err := p.tgtName.check(); err != nil {
		return nil, err
	}
	sv.mu.Lock()
	defer sv.mu.Unlock()
	out := []spdkSubsystem{{NQN: nvmeof.DiscoveryNQN, Subtype: "Discovery", ListenAddresses: listenAddresses(sv.model.Listeners),
		AllowAnyHost: true, Hosts: []spdkHost{}}}
	for _, s := range sv.model.Subs {
		live := sv.opts.Target.Subsystem(s.NQN)
		x := spdkSubsystem{NQN: s.NQN, Subtype: "NVMe", ListenAddresses: listenAddresses(s.Listeners), AllowAnyHost: s.AllowAnyHost,
			Hosts: []spdkHost{}, MaxNamespaces: target.MaxNamespaces, MinCntlid: 1, MaxCntlid: int(nvmeof.MaxCNTLID),
			ModelNumber: target.DefaultModelNumber, Namespaces: []spdkNamespace{}}
		if live != nil {
			x.SerialNumber = live.SerialNumber()
		}
		for _, h := range s.Hosts {
			x.Hosts = append(x.Hosts, spdkHost{h})
		}
		for _, n := range s.Namespaces {
			ns := spdkNamespace{NSID: n.NSID, BdevName: n.Bdev, Name: n.Bdev}
			if live != nil {
				if l := live.Namespace(n.NSID); l != nil {
					id := l.UUID()
					ns.UUID = uuid.UUID(id).String()
					g := l.NGUID()
					ns.NGUID = strings.ToUpper(hex.EncodeToString(g[:]))
				}
			}
			x.Namespaces = append(x.Namespaces, ns)
		}
		out = append(out, x)
	}
	if p.NQN == "" {
		return out, nil
	}
	for _, x := range out {
		if x.NQN == p.NQN {
			return []spdkSubsystem{x}, nil
		}
	}
	return nil, invalid("unable to find subsystem with NQN %s", p.NQN)
}

// getControllers is nvmf_subsystem_get_controllers.
func (sv *Service) getControllers(_ context.Context, params json.RawMessage) (any, error) {
	var p struct {
		tgtName
		NQN string `json:"nqn"`
	}
	if err := DecodeParams(params, &p); err != nil {
		return nil, err
	}
	if err := p.tgtName.check(); err != nil {
		return nil, err
	}
	sub := sv.opts.Target.Subsystem(p.NQN)
	if p.NQN == nvmeof.DiscoveryNQN {
		sub = sv.opts.Target.DiscoverySubsystem()
	}
	if sub == nil {
		return nil, invalid("unable to find subsystem with NQN %s", p.NQN)
	}
	type ctrl struct {
		CNTLID       uint16 `json:"cntlid"`
		HostNQN      string `json:"hostnqn"`
		HostID       string `json:"hostid"`
		NumIOQPairs  int    `json:"num_io_qpairs"`
		KeepAliveMS  int64  `json:"keep_alive_timeout_ms"`
		AdminQPairID int    `json:"admin_qpair_id,omitempty"`
	}
	out := []ctrl{}
	for _, c := range sub.ControllerInfos() {
		out = append(out, ctrl{CNTLID: c.CNTLID, HostNQN: c.HostNQN, HostID: uuid.UUID(c.HostID).String(),
			NumIOQPairs: c.IOQueues, KeepAliveMS: c.KeepAlive.Milliseconds()})
	}
	return out, nil
}

// getStats is nvmf_get_stats: one poll group (capsule has no poll
// groups: every queue has its goroutine) with the controllers' queues,
// and capsule's per-namespace counters.
func (sv *Service) getStats(context.Context, json.RawMessage) (any, error) {
	type nsStats struct {
		NQN          string `json:"nqn"`
		NSID         uint32 `json:"nsid"`
		ReadOps      uint64 `json:"read_ops"`
		WriteOps     uint64 `json:"write_ops"`
		BytesRead    uint64 `json:"bytes_read"`
		BytesWritten uint64 `json:"bytes_written"`
	}
	t := sv.opts.Target
	var admin, io int
	var completed uint64
	namespaces := []nsStats{}
	for _, c := range t.DiscoverySubsystem().ControllerInfos() {
		admin++
		io += c.IOQueues
	}
	for _, s := range t.Subsystems() {
		for _, c := range s.ControllerInfos() {
			admin++
			io += c.IOQueues
		}
		for _, ns := range s.Namespaces() {
			st := ns.Stats()
			completed += st.ReadCommands + st.WriteCommands
			namespaces = append(namespaces, nsStats{NQN: s.NQN(), NSID: ns.NSID(), ReadOps: st.ReadCommands,
				WriteOps: st.WriteCommands, BytesRead: st.BytesRead, BytesWritten: st.BytesWritten})
		}
	}
	return map[string]any{
		"tick_rate": 1_000_000_000,
		"poll_groups": []map[string]any{{
			"name": "capsule", "admin_qpairs": admin, "io_qpairs": io,
			"current_admin_qpairs": admin, "current_io_qpairs": io,
			"pending_bdev_io": 0, "completed_nvme_io": completed, "transports": []any{},
		}},
		"namespaces": namespaces,
	}, nil
}

func (sv *Service) frameworkGetConfig(_ context.Context, params json.RawMessage) (any, error) {
	var p struct {
		Name        string `json:"name"`
		WithBatches bool   `json:"with_batches,omitempty"`
	}
	if err := DecodeParams(params, &p); err != nil {
		return nil, err
	}
	for _, s := range sv.Config().Subsystems {
		if s.Subsystem == p.Name {
			return s.Config, nil
		}
	}
	return nil, invalid("no subsystem %q", p.Name)
}

// volumeList is volume_list: every volume of the store, with the
// namespace it is, if any.
func (sv *Service) volumeList(context.Context, json.RawMessage) (any, error) {
	sv.mu.Lock()
	defer sv.mu.Unlock()
	type vol struct {
		Name      string `json:"name"`
		Size      int64  `json:"size"`
		Allocated int64  `json:"allocated"`
		Created   string `json:"created"`
		NQN       string `json:"nqn,omitempty"`
		NSID      uint32 `json:"nsid,omitempty"`
	}
	out := []vol{}
	if sv.store == nil && (sv.opts.OpenStore == nil || !sv.hasKindLocked(kindVolume)) {
		return out, nil
	}
	s, err := sv.storeLocked()
	if err != nil {
		return nil, err
	}
	for _, v := range s.Volumes() {
		x := vol{Name: v.Name, Size: v.Size, Allocated: v.Allocated, Created: v.Created.UTC().Format("2006-01-02T15:04:05Z")}
		x.NQN, x.NSID, _ = sv.model.user(v.Name)
		out = append(out, x)
	}
	return out, nil
}

func (sv *Service) hasKindLocked(k bdevKind) bool {
	for _, b := range sv.model.Bdevs {
		if b.Kind == k {
			return true
		}
	}
	return false
}

// storeStatus is store_get_status.
func (sv *Service) storeStatus(context.Context, json.RawMessage) (any, error) {
	sv.mu.Lock()
	s := sv.store
	sv.mu.Unlock()
	if s == nil {
		return nil, invalid("the erasure-coded store is not open: no volume or file namespace uses it")
	}
	in := s.Info()
	st := s.Stats()
	type dev struct {
		Pos        int    `json:"pos"`
		Name       string `json:"name"`
		ID         string `json:"id,omitempty"`
		State      string `json:"state"`
		Error      string `json:"error,omitempty"`
		TotalBytes uint64 `json:"total_bytes,omitempty"`
		FreeBytes  uint64 `json:"free_bytes,omitempty"`
	}
	devs := []dev{}
	var smallest uint64
	for _, d := range in.Devices {
		x := dev{Pos: d.Pos, Name: d.Name, State: d.State.String()}
		if d.ID != (uuid.UUID{}) {
			x.ID = d.ID.String()
		}
		if d.Err != nil {
			x.Error = d.Err.Error()
		}
		x.TotalBytes, x.FreeBytes = DiskSpace(d.Name)
		if x.TotalBytes > 0 && (smallest == 0 || x.TotalBytes < smallest) {
			smallest = x.TotalBytes
		}
		devs = append(devs, x)
	}
	out := map[string]any{
		"id":          in.ID.String(),
		"geometry":    in.Geometry.String(),
		"data_shards": in.Geometry.Data, "parity_shards": in.Geometry.Parity,
		"stripe_unit": in.StripeUnit,
		"simd":        in.SIMD,
		"degraded":    in.Degraded,
		"devices":     devs,
		// Capacity: the data the smallest device's file system holds,
		// times K; used: the data bytes the log's stripes hold, live or
		// dead (the cleaner reclaims the dead).
		"capacity_bytes": smallest * uint64(in.Geometry.Data),
		"used_bytes":     st.LiveBytes + st.DeadBytes,
		"slots":          in.Slots, "slots_in_use": in.SlotsInUse, "slots_reserved": in.Reserved,
		"volumes": len(s.Volumes()),
		"stats":   statsJSON(st),
	}
	if sv.opts.ScrubStatus != nil {
		out["scrub"] = sv.opts.ScrubStatus()
	}
	return out, nil
}

// statsJSON names chunkstore.Stats's fields in snake case.
func statsJSON(st chunkstore.Stats) map[string]any {
	return map[string]any{
		"stripes_written": st.StripesWritten, "stripes_read": st.StripesRead, "degraded_writes": st.DegradedWrites,
		"reconstructions": st.Reconstructions, "read_failures": st.ReadFailures,
		"shard_unavailable": st.ShardUnavailable, "shard_io_errors": st.ShardIOErrors,
		"shard_checksum": st.ShardChecksum, "shard_header": st.ShardHeader,
		"shards_repaired": st.ShardsRepaired, "repair_queue": st.RepairQueue, "auto_commits": st.AutoCommits,
		"live_bytes": st.LiveBytes, "dead_bytes": st.DeadBytes, "slots_used": st.SlotsUsed, "slots_free": st.SlotsFree,
		"stripes_open": st.StripesOpen, "cleaner_bytes": st.CleanerBytes, "host_bytes": st.HostBytes,
		"device_bytes": st.DeviceBytes, "write_amplification": st.WriteAmplification,
		"idle_bytes": st.IdleBytes, "compactions": st.Compactions, "slots_punched": st.SlotsPunched,
		"journal_records": st.JournalRecords, "journal_bytes": st.JournalBytes,
		"write_cache_bytes": st.WriteCacheBytes, "write_cache_destaged": st.WriteCacheDestaged,
	}
}

// fsStatus is fs_get_status: every file namespace.
func (sv *Service) fsStatus(context.Context, json.RawMessage) (any, error) {
	sv.mu.Lock()
	defer sv.mu.Unlock()
	type fsx struct {
		Name      string `json:"name"`
		NQN       string `json:"nqn,omitempty"`
		NSID      uint32 `json:"nsid,omitempty"`
		Inodes    int64  `json:"inodes"`
		UsedBytes int64  `json:"used_bytes"`
		Handles   int    `json:"open_handles"`
	}
	out := []fsx{}
	for _, b := range sv.model.Bdevs {
		f := sv.fss[b.Name]
		if b.Kind != kindFS || f == nil {
			continue
		}
		st := f.Stats()
		x := fsx{Name: b.Name, Inodes: st.Inodes, UsedBytes: st.UsedBytes, Handles: st.Handles}
		x.NQN, x.NSID, _ = sv.model.user(b.Name)
		out = append(out, x)
	}
	return out, nil
}
