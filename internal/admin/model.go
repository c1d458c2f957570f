package admin

import (
	"encoding/json"
	"fmt"
	"slices"
	"sort"

	"github.com/capsule-storage/capsule/chunkstore"
	"github.com/capsule-storage/capsule/nvmeof"
	"github.com/capsule-storage/capsule/nvmeof/target"
)

// The model is the target's configuration as data: what save_config
// writes and every change edits. A change is checked against a copy of
// the model (check: the pure part, no I/O), then carried out on the
// running target (apply), and only then does the copy become the model.
// Loading a config checks every entry on an empty model first, so that a
// bad entry fails before anything is created.

// bdevKind is what a bdev name stands for.
type bdevKind string

const (
	kindVolume bdevKind = "volume" // a volume of the erasure-coded store
	kindMalloc bdevKind = "malloc" // memory, lost on exit
	kindAIO    bdevKind = "aio"    // a file or block device
	kindFS     bdevKind = "fs"     // a file namespace (vendor-specific commands)
)

// bdev is a name a namespace can be made of.
type bdev struct {
	Name      string
	Kind      bdevKind
	Size      int64  // bytes; 0 for kindFS, and for kindAIO "the file's size"
	BlockSize int    // the namespace's logical block size
	Path      string // kindAIO
}

// nsModel is a namespace of a subsystem.
type nsModel struct {
	NSID     uint32
	Bdev     string
	ANAGroup uint32 // as given; 0: the NSID's group
}

// subModel is an NVM subsystem.
type subModel struct {
	NQN          string
	SerialNumber string
	AllowAnyHost bool
	Hosts        []string   // sorted
	Namespaces   []nsModel  // by NSID
	Listeners    []string   // the listener URLs that serve it, in order
	ANA          []anaModel // ANA states set on its listeners, in order (ana.go)
}

// model is the whole configuration.
type model struct {
	Bdevs []*bdev // in creation order
	Subs  []*subModel
	// Listeners are the target's listener URLs, in order: the discovery
	// subsystem's, which every listener serves; a subsystem's are some
	// of them.
	Listeners []string
	// Requested maps a listener URL asked for with port 0 to the URL it
	// got, so that later entries naming the same :0 address mean that
	// listener (flags give one URL for the discovery and the NVM
	// subsystem). It lives for one run of the target.
	Requested map[string]string
}

func (m *model) clone() *model {
	c := &model{Listeners: slices.Clone(m.Listeners), Requested: map[string]string{}}
	for k, v := range m.Requested {
		c.Requested[k] = v
	}
	for _, b := range m.Bdevs {
		x := *b
		c.Bdevs = append(c.Bdevs, &x)
	}
	for _, s := range m.Subs {
		x := *s
		x.Hosts = slices.Clone(s.Hosts)
		x.Namespaces = slices.Clone(s.Namespaces)
		x.Listeners = slices.Clone(s.Listeners)
		x.ANA = slices.Clone(s.ANA)
		c.Subs = append(c.Subs, &x)
	}
	return c
}

func (m *model) bdev(name string) *bdev {
	for _, b := range m.Bdevs {
		if b.Name == name {
			return b
		}
	}
	return nil
}

func (m *model) sub(nqn string) *subModel {
	for _, s := range m.Subs {
		if s.NQN == nqn {
			return s
		}
	}
	return nil
}

// user returns the subsystem and NSID a bdev is a namespace of.
func (m *model) user(name string) (string, uint32, bool) {
	for _, s := range m.Subs {
		for _, n := range s.Namespaces {
			if n.Bdev == name {
				return s.NQN, n.NSID, true
			}
		}
	}
	return "", 0, false
}

func (m *model) addBdev(b *bdev) error {
	if b.Name == "" {
		return invalid("name is empty")
	}
	if m.bdev(b.Name) != nil {
		return invalid("name %q is in use", b.Name)
	}
	m.Bdevs = append(m.Bdevs, b)
	return nil
}

// subFor finds an NVM subsystem for a change, with SPDK's message.
func (m *model) subFor(nqn string) (*subModel, error) {
	if nqn == nvmeof.DiscoveryNQN {
		return nil, invalid("the discovery subsystem %s cannot be changed this way", nqn)
	}
	s := m.sub(nqn)
	if s == nil {
		return nil, invalid("unable to find subsystem with NQN %s", nqn)
	}
	return s, nil
}

// config renders the model in save_config's shape.
func (m *model) config() Config {
	var c Config
	c.Subsystems = []ConfigSubsystem{
		{Subsystem: SubsystemCapsule, Config: []ConfigEntry{}},
		{Subsystem: SubsystemBdev, Config: []ConfigEntry{}},
		{Subsystem: SubsystemNVMf, Config: []ConfigEntry{}},
	}
	for _, b := range m.Bdevs {
		switch b.Kind {
		case kindVolume:
			c.Add(SubsystemCapsule, "volume_create", volumeCreate{Name: b.Name, Size: Size(b.Size), BlockSize: b.BlockSize})
		case kindFS:
			c.Add(SubsystemCapsule, "fs_create", fsCreate{Name: b.Name})
		case kindMalloc:
			c.Add(SubsystemBdev, "bdev_malloc_create", bdevMallocCreate{Name: b.Name, NumBlocks: uint64(b.Size) / uint64(b.BlockSize), BlockSize: b.BlockSize})
		case kindAIO:
			c.Add(SubsystemBdev, "bdev_aio_create", bdevAIOCreate{Name: b.Name, Filename: b.Path, BlockSize: b.BlockSize, Size: Size(b.Size)})
		}
	}
	for _, u := range m.Listeners {
		a, err := ListenAddressOf(u)
		if err != nil { // every URL in the model was checked
			panic(fmt.Sprintf("admin: listener %s in the model: %v", u, err))
		}
		c.Add(SubsystemNVMf, "nvmf_subsystem_add_listener", listenerChange{NQN: nvmeof.DiscoveryNQN, ListenAddress: &a})
	}
	for _, s := range m.Subs {
		c.Add(SubsystemNVMf, "nvmf_create_subsystem", createSubsystem{NQN: s.NQN, SerialNumber: s.SerialNumber, AllowAnyHost: s.AllowAnyHost})
		for _, u := range s.Listeners {
			a, err := ListenAddressOf(u)
			if err != nil {
				panic(fmt.Sprintf("admin: listener %s in the model: %v", u, err))
			}
			c.Add(SubsystemNVMf, "nvmf_subsystem_add_listener", listenerChange{NQN: s.NQN, ListenAddress: &a})
		}
		for _, h := range s.Hosts {
			c.Add(SubsystemNVMf, "nvmf_subsystem_add_host", hostChange{NQN: s.NQN, Host: h})
		}
		for _, n := range s.Namespaces {
			nsid := n.NSID
			c.Add(SubsystemNVMf, "nvmf_subsystem_add_ns", addNS{NQN: s.NQN, Namespace: addNSNamespace{BdevName: n.Bdev, NSID: &nsid, AnaGrpID: int(n.ANAGroup)}})
		}
		for _, a := range s.ANA {
			c.Add(SubsystemNVMf, "nvmf_subsystem_listener_set_ana_state", anaConfigEntry(s.NQN, a))
		}
	}
	return c
}

func invalid(format string, args ...any) *Error {
	return Errorf(CodeInvalidParams, format, args...)
}

// --- the changes: params as SPDK names them, and their checks ---

// change is one method that changes the configuration. Its params
// struct is the change: decoded strictly, checked against a copy of the
// model (which it edits), then applied to the running target.
type change interface {
	check(m *model, sv *Service) error
	apply(sv *Service, m *model) (result any, err error)
}

// changes are the methods that change the configuration.
var changes = map[string]func() change{
	"volume_create":                         func() change { return &volumeCreate{} },
	"volume_delete":                         func() change { return &volumeDelete{} },
	"fs_create":                             func() change { return &fsCreate{} },
	"bdev_malloc_create":                    func() change { return &bdevMallocCreate{} },
	"bdev_aio_create":                       func() change { return &bdevAIOCreate{} },
	"nvmf_create_subsystem":                 func() change { return &createSubsystem{} },
	"nvmf_delete_subsystem":                 func() change { return &deleteSubsystem{} },
	"nvmf_subsystem_add_ns":                 func() change { return &addNS{} },
	"nvmf_subsystem_remove_ns":              func() change { return &removeNS{} },
	"nvmf_subsystem_add_host":               func() change { return &hostChange{add: true} },
	"nvmf_subsystem_remove_host":            func() change { return &hostChange{} },
	"nvmf_subsystem_allow_any_host":         func() change { return &allowAnyHost{} },
	"nvmf_subsystem_add_listener":           func() change { return &listenerChange{add: true} },
	"nvmf_subsystem_remove_listener":        func() change { return &listenerChange{} },
	"nvmf_subsystem_listener_set_ana_state": func() change { return &anaSetState{} },
	"ana_set_state":                         func() change { return &anaSetState{} },
}

// decodeChange decodes the params of a change method.
func decodeChange(method string, params json.RawMessage) (change, error) {
	mk := changes[method]
	if mk == nil {
		return nil, Errorf(CodeMethodNotFound, "method %q not found", method)
	}
	c := mk()
	if err := DecodeParams(params, c); err != nil {
		return nil, err
	}
	return c, nil
}

// tgtName is SPDK's tgt_name: capsule has one target, so only "" fits.
type tgtName struct {
	TgtName string `json:"tgt_name,omitempty"`
}

func (t tgtName) check() error {
	if t.TgtName != "" {
		return invalid("tgt_name %q: capsule serves one target; leave tgt_name out", t.TgtName)
	}
	return nil
}

// volumeCreate is volume_create: a thin volume of the erasure-coded
// store. On a store that has the volume with the same size, it opens it.
type volumeCreate struct {
	Name      string `json:"name"`
	Size      Size   `json:"size"`
	BlockSize int    `json:"block_size,omitempty"` // of the namespaces made of it; the target's default if 0
}

func (c *volumeCreate) check(m *model, sv *Service) error {
	if c.BlockSize == 0 {
		c.BlockSize = sv.opts.BlockSize
	}
	if err := checkBlockSize(c.BlockSize); err != nil {
		return err
	}
	if c.Size <= 0 || c.Size > chunkstore.MaxVolumeSize {
		return invalid("volume %q: size %d: want above zero and at most 1 PiB", c.Name, c.Size)
	}
	if int64(c.Size)%int64(c.BlockSize) != 0 {
		return invalid("volume %q: size %d is not a multiple of the %d-byte block", c.Name, c.Size, c.BlockSize)
	}
	return m.addBdev(&bdev{Name: c.Name, Kind: kindVolume, Size: int64(c.Size), BlockSize: c.BlockSize})
}

// volumeDelete is volume_delete: the volume and its data go.
type volumeDelete struct {
	Name string `json:"name"`
}

func (c *volumeDelete) check(m *model, _ *Service) error {
	// A volume of the store that no bdev names (one an earlier start's
	// flags made) may be deleted too; apply finds out whether it exists.
	if b := m.bdev(c.Name); b != nil && b.Kind != kindVolume {
		return invalid("%q is a %s bdev, not a volume", c.Name, b.Kind)
	}
	if nqn, nsid, ok := m.user(c.Name); ok {
		return invalid("volume %q is namespace %d of %s: remove the namespace first", c.Name, nsid, nqn)
	}
	m.Bdevs = slices.DeleteFunc(m.Bdevs, func(x *bdev) bool { return x.Name == c.Name })
	return nil
}

// fsCreate is fs_create: a file namespace (its metadata DATA/fs-NAME.db,
// its file data chunks of the store).
type fsCreate struct {
	Name string `json:"name"`
}

func (c *fsCreate) check(m *model, _ *Service) error {
	if c.Name == "" || c.Name != baseName(c.Name) {
		return invalid("file namespace %q: want a plain name such as \"files\"", c.Name)
	}
	return m.addBdev(&bdev{Name: c.Name, Kind: kindFS})
}

// bdevMallocCreate is SPDK's bdev_malloc_create: a memory namespace.
type bdevMallocCreate struct {
	Name      string `json:"name"`
	NumBlocks uint64 `json:"num_blocks"`
	BlockSize int    `json:"block_size"`
	UUID      string `json:"uuid,omitempty"`
}

func (c *bdevMallocCreate) check(m *model, _ *Service) error {
	if err := checkBlockSize(c.BlockSize); err != nil {
		return err
	}
	if c.UUID != "" {
		return invalid("bdev_malloc_create: uuid is not supported (namespace UUIDs derive from the subsystem and NSID)")
	}
	if c.NumBlocks == 0 || c.NumBlocks > (1<<40)/uint64(c.BlockSize) {
		return invalid("bdev_malloc_create %q: num_blocks %d: want 1 block to 1 TiB", c.Name, c.NumBlocks)
	}
	return m.addBdev(&bdev{Name: c.Name, Kind: kindMalloc, Size: int64(c.NumBlocks) * int64(c.BlockSize), BlockSize: c.BlockSize})
}

// bdevAIOCreate is SPDK's bdev_aio_create: a file or block device (a
// missing file is created with size, capsule's own param; a relative
// filename is under the data directory).
type bdevAIOCreate struct {
	Name      string `json:"name"`
	Filename  string `json:"filename"`
	BlockSize int    `json:"block_size,omitempty"`
	Size      Size   `json:"size,omitempty"`
}

func (c *bdevAIOCreate) check(m *model, sv *Service) error {
	if c.BlockSize == 0 {
		c.BlockSize = sv.opts.BlockSize
	}
	if err := checkBlockSize(c.BlockSize); err != nil {
		return err
	}
	if c.Filename == "" {
		return invalid("bdev_aio_create %q: filename is empty", c.Name)
	}
	if c.Size < 0 || int64(c.Size)%int64(c.BlockSize) != 0 {
		return invalid("bdev_aio_create %q: size %d is not a multiple of the %d-byte block", c.Name, c.Size, c.BlockSize)
	}
	return m.addBdev(&bdev{Name: c.Name, Kind: kindAIO, Path: c.Filename, Size: int64(c.Size), BlockSize: c.BlockSize})
}

func checkBlockSize(bs int) error {
	if bs != 512 && bs != 4096 {
		return invalid("block_size %d: want 512 or 4096", bs)
	}
	return nil
}

// createSubsystem is nvmf_create_subsystem. SPDK's options capsule has no
// use for are taken when they ask for nothing (false or absent).
type createSubsystem struct {
	tgtName
	NQN           string `json:"nqn"`
	SerialNumber  string `json:"serial_number,omitempty"`
	ModelNumber   string `json:"model_number,omitempty"`
	AllowAnyHost  bool   `json:"allow_any_host"`
	MaxNamespaces int    `json:"max_namespaces,omitempty"`
	AnaReporting  bool   `json:"ana_reporting,omitempty"` // ANA is always reported: taken either way
	MinCntlid     int    `json:"min_cntlid,omitempty"`
	MaxCntlid     int    `json:"max_cntlid,omitempty"`
	Passthrough   bool   `json:"passthrough,omitempty"`
	EnableNSSR    bool   `json:"enable_nssr,omitempty"`
	DMRSL         int    `json:"dmrsl,omitempty"`
	WZSL          int    `json:"wzsl,omitempty"`
	AdminLabel    string `json:"admin_label,omitempty"`
}

func (c *createSubsystem) check(m *model, _ *Service) error {
	if err := c.tgtName.check(); err != nil {
		return err
	}
	if c.NQN == nvmeof.DiscoveryNQN {
		return invalid("nqn %q: the discovery subsystem's NQN, not a usable subsystem NQN", c.NQN)
	}
	if err := CheckNQN(c.NQN); err != nil {
		return invalid("nqn %q: %v", c.NQN, err)
	}
	switch {
	case c.ModelNumber != "":
		return invalid("model_number is not supported: every controller reports capsule's")
	case c.MaxNamespaces != 0 && c.MaxNamespaces != target.MaxNamespaces:
		return invalid("max_namespaces %d is not supported: every subsystem has %d", c.MaxNamespaces, target.MaxNamespaces)
	case c.MinCntlid > 1 || (c.MaxCntlid != 0 && c.MaxCntlid != int(nvmeof.MaxCNTLID)):
		return invalid("min_cntlid and max_cntlid are not supported: CNTLIDs are 1 to %d", nvmeof.MaxCNTLID)
	case c.Passthrough, c.EnableNSSR:
		return invalid("passthrough and enable_nssr are not supported")
	case c.DMRSL != 0 || c.WZSL != 0 || c.AdminLabel != "":
		return invalid("dmrsl, wzsl and admin_label are not supported")
	}
	if m.sub(c.NQN) != nil {
		return invalid("subsystem %s already exists", c.NQN)
	}
	m.Subs = append(m.Subs, &subModel{NQN: c.NQN, SerialNumber: c.SerialNumber, AllowAnyHost: c.AllowAnyHost})
	return nil
}

// deleteSubsystem is nvmf_delete_subsystem. Its namespaces' bdevs stay.
type deleteSubsystem struct {
	tgtName
	NQN string `json:"nqn"`
}

func (c *deleteSubsystem) check(m *model, _ *Service) error {
	if err := c.tgtName.check(); err != nil {
		return err
	}
	if _, err := m.subFor(c.NQN); err != nil {
		return err
	}
	m.Subs = slices.DeleteFunc(m.Subs, func(s *subModel) bool { return s.NQN == c.NQN })
	return nil
}

// addNS is nvmf_subsystem_add_ns: namespace.bdev_name names a volume (or
// another bdev); namespace.nsid 0 or absent takes the lowest free one.
// Its result is the NSID.
type addNS struct {
	tgtName
	NQN       string         `json:"nqn"`
	Namespace addNSNamespace `json:"namespace"`
}

type addNSNamespace struct {
	BdevName      string  `json:"bdev_name"`
	NSID          *uint32 `json:"nsid,omitempty"`
	PtplFile      string  `json:"ptpl_file,omitempty"`
	NGUID         string  `json:"nguid,omitempty"`
	EUI64         string  `json:"eui64,omitempty"`
	UUID          string  `json:"uuid,omitempty"`
	AnaGrpID      int     `json:"anagrpid,omitempty"`
	NoAutoVisible bool    `json:"no_auto_visible,omitempty"`
	HideMetadata  bool    `json:"hide_metadata,omitempty"`
}

func (c *addNS) check(m *model, _ *Service) error {
	if err := c.tgtName.check(); err != nil {
		return err
	}
	s, err := m.subFor(c.NQN)
	if err != nil {
		return err
	}
	ns := c.Namespace
	switch {
	case ns.PtplFile != "", ns.NGUID != "", ns.EUI64 != "", ns.UUID != "", ns.NoAutoVisible:
		return invalid("namespace: only bdev_name, nsid and anagrpid are supported (identifiers derive from the subsystem and NSID)")
	case ns.AnaGrpID < 0 || ns.AnaGrpID > target.MaxANAGroups:
		return invalid("namespace: anagrpid %d: want 1 to %d, or none for the NSID's group", ns.AnaGrpID, target.MaxANAGroups)
	}
	b := m.bdev(ns.BdevName)
	if b == nil {
		return invalid("no bdev (volume) named %q (volume_create makes one, or opens one of the store's)", ns.BdevName)
	}
	if nqn, nsid, ok := m.user(ns.BdevName); ok {
		return invalid("%q is already namespace %d of %s", ns.BdevName, nsid, nqn)
	}
	var nsid uint32
	if ns.NSID != nil {
		nsid = *ns.NSID
	}
	if nsid > target.MaxNamespaces {
		return invalid("nsid %d: want 1 to %d", nsid, target.MaxNamespaces)
	}
	used := map[uint32]bool{}
	for _, n := range s.Namespaces {
		used[n.NSID] = true
	}
	if nsid == 0 {
		for id := uint32(1); id <= target.MaxNamespaces && nsid == 0; id++ {
			if !used[id] {
				nsid = id
			}
		}
		if nsid == 0 {
			return invalid("%s has no free NSID", c.NQN)
		}
	} else if used[nsid] {
		return invalid("nsid %d is in use in %s", nsid, c.NQN)
	}
	c.Namespace.NSID = &nsid
	s.Namespaces = append(s.Namespaces, nsModel{NSID: nsid, Bdev: ns.BdevName, ANAGroup: uint32(ns.AnaGrpID)})
	sort.Slice(s.Namespaces, func(i, j int) bool { return s.Namespaces[i].NSID < s.Namespaces[j].NSID })
	return nil
}

// removeNS is nvmf_subsystem_remove_ns. The bdev stays.
type removeNS struct {
	tgtName
	NQN  string `json:"nqn"`
	NSID uint32 `json:"nsid"`
}

func (c *removeNS) check(m *model, _ *Service) error {
	if err := c.tgtName.check(); err != nil {
		return err
	}
	s, err := m.subFor(c.NQN)
	if err != nil {
		return err
	}
	i := slices.IndexFunc(s.Namespaces, func(n nsModel) bool { return n.NSID == c.NSID })
	if i < 0 {
		return invalid("no namespace %d in %s", c.NSID, c.NQN)
	}
	s.Namespaces = slices.Delete(s.Namespaces, i, i+1)
	return nil
}

// hostChange is nvmf_subsystem_add_host and nvmf_subsystem_remove_host.
// Removing a host also ends the controllers it has, as SPDK does.
type hostChange struct {
	add bool
	tgtName
	NQN            string `json:"nqn"`
	Host           string `json:"host"`
	PSK            string `json:"psk,omitempty"`
	DHChapKey      string `json:"dhchap_key,omitempty"`
	DHChapCtrlrKey string `json:"dhchap_ctrlr_key,omitempty"`
	TimeoutMS      int    `json:"timeout_ms,omitempty"`
}

func (c *hostChange) check(m *model, _ *Service) error {
	if err := c.tgtName.check(); err != nil {
		return err
	}
	s, err := m.subFor(c.NQN)
	if err != nil {
		return err
	}
	if c.PSK != "" || c.DHChapKey != "" || c.DHChapCtrlrKey != "" {
		return invalid("psk and dhchap keys are not supported: capsule has no TLS or DH-HMAC-CHAP")
	}
	if err := CheckNQN(c.Host); err != nil {
		return invalid("host %q: %v", c.Host, err)
	}
	i, found := slices.BinarySearch(s.Hosts, c.Host)
	switch {
	case c.add && found:
		return invalid("host %s is already allowed in %s", c.Host, c.NQN)
	case c.add:
		s.Hosts = slices.Insert(s.Hosts, i, c.Host)
	case !found:
		return invalid("host %s is not on the allow-list of %s", c.Host, c.NQN)
	default:
		s.Hosts = slices.Delete(s.Hosts, i, i+1)
	}
	return nil
}

// allowAnyHost is nvmf_subsystem_allow_any_host.
type allowAnyHost struct {
	tgtName
	NQN          string `json:"nqn"`
	AllowAnyHost bool   `json:"allow_any_host"`
}

func (c *allowAnyHost) check(m *model, _ *Service) error {
	if err := c.tgtName.check(); err != nil {
		return err
	}
	s, err := m.subFor(c.NQN)
	if err != nil {
		return err
	}
	s.AllowAnyHost = c.AllowAnyHost
	return nil
}

// listenerChange is nvmf_subsystem_add_listener and _remove_listener.
// As in SPDK, a subsystem is served on the listeners added to it; the
// target listens on every address any subsystem (or the discovery one)
// was given, and every listener serves discovery. Adding an address the
// target does not listen on yet starts a listener; removing it from the
// discovery subsystem stops it, once no subsystem has it.
type listenerChange struct {
	add bool
	tgtName
	NQN           string         `json:"nqn"`
	ListenAddress *ListenAddress `json:"listen_address"`
	SecureChannel bool           `json:"secure_channel,omitempty"`
	AnaState      string         `json:"ana_state,omitempty"`
	SockImpl      string         `json:"sock_impl,omitempty"`
	NumaID        *int           `json:"numa_id,omitempty"`

	// Set by check.
	url    string // the listener's URL (a :0 one already opened: the URL it got)
	listen bool   // add: the target is to listen there first
	stop   bool   // remove from discovery: the target stops listening there
}

func (c *listenerChange) check(m *model, _ *Service) error {
	if err := c.tgtName.check(); err != nil {
		return err
	}
	var sub *subModel
	if c.NQN != nvmeof.DiscoveryNQN {
		if sub = m.sub(c.NQN); sub == nil {
			return invalid("unable to find subsystem with NQN %s", c.NQN)
		}
	}
	if c.SecureChannel || c.SockImpl != "" {
		return invalid("secure_channel and sock_impl are not supported")
	}
	if c.AnaState != "" {
		if sub == nil || !c.add {
			return invalid("ana_state is for a listener added to an NVM subsystem")
		}
		if _, err := ParseANAState(c.AnaState); err != nil {
			return invalid("%v", err)
		}
	}
	if c.ListenAddress == nil {
		return invalid("listen_address is missing")
	}
	u, err := c.ListenAddress.URL()
	if err != nil {
		return invalid("%v", err)
	}
	if err := CheckListenURL(u); err != nil {
		return invalid("listen_address: %v", err)
	}
	if real, ok := m.Requested[u]; ok {
		u = real
	}
	c.url, c.listen, c.stop = u, false, false
	listening := slices.Contains(m.Listeners, u)
	switch {
	case c.add && sub == nil && listening:
		return invalid("already listening on %s", u)
	case c.add && sub == nil:
		c.listen = true
		m.Listeners = append(m.Listeners, u)
	case c.add && slices.Contains(sub.Listeners, u):
		return invalid("%s is already a listener of %s", u, c.NQN)
	case c.add:
		if !listening {
			c.listen = true
			m.Listeners = append(m.Listeners, u)
		}
		sub.Listeners = append(sub.Listeners, u)
	case sub == nil && !listening:
		return invalid("not listening on %s", u)
	case sub == nil:
		for _, s := range m.Subs {
			if slices.Contains(s.Listeners, u) {
				return invalid("%s is a listener of %s: remove it there first", u, s.NQN)
			}
		}
		c.stop = true
		m.Listeners = slices.DeleteFunc(m.Listeners, func(x string) bool { return x == u })
		for asked, got := range m.Requested {
			if got == u {
				delete(m.Requested, asked) // a new :0 listener gets a new port
			}
		}
	case !slices.Contains(sub.Listeners, u):
		return invalid("%s is not a listener of %s", u, c.NQN)
	default:
		sub.Listeners = slices.DeleteFunc(sub.Listeners, func(x string) bool { return x == u })
		sub.forgetANA(u)
	}
	return nil
}
