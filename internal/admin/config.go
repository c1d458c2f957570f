package admin

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Config is a configuration in the shape of SPDK's save_config: subsystems,
// each with the calls that rebuild its state, in order. Loading it makes
// those calls (Service.Load); save_config and the state file produce it.
type Config struct {
	Subsystems []ConfigSubsystem `json:"subsystems"`
}

// ConfigSubsystem is one subsystem's part of a Config.
type ConfigSubsystem struct {
	Subsystem string        `json:"subsystem"`
	Config    []ConfigEntry `json:"config"`
}

// ConfigEntry is one call: a method and its params, as on the socket.
type ConfigEntry struct {
	Method string          `json:"method"`
	Params json.RawMessage `json:"params,omitempty"`
	// Origin, if set, names the entry in errors in place of its place
	// in the file: the command-line flag it was made from.
	Origin string `json:"-"`
}

// The subsystems of capsule's config, in the order save_config writes
// them: what a later one refers to comes first.
const (
	SubsystemCapsule = "capsule" // volume_create, fs_create
	SubsystemBdev    = "bdev"    // bdev_malloc_create, bdev_aio_create
	SubsystemNVMf    = "nvmf"    // nvmf_*
)

// configMethods are the methods a config may call, by subsystem.
var configMethods = map[string][]string{
	SubsystemCapsule: {"volume_create", "fs_create"},
	SubsystemBdev:    {"bdev_malloc_create", "bdev_aio_create"},
	SubsystemNVMf: {"nvmf_create_subsystem", "nvmf_subsystem_add_listener", "nvmf_subsystem_add_host",
		"nvmf_subsystem_allow_any_host", "nvmf_subsystem_add_ns", "nvmf_subsystem_listener_set_ana_state", "ana_set_state"},
}

// ParseConfig reads a config, strictly: unknown members are errors.
func ParseConfig(data []byte) (Config, error) {
	var c Config
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		return Config{}, fmt.Errorf("not a config in save_config's shape: %w", err)
	}
	if dec.More() {
		return Config{}, errors.New("not a config in save_config's shape: more than one JSON value")
	}
	return c, nil
}

// ReadConfigFile reads and parses a config file.
func ReadConfigFile(path string) (Config, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Config{}, err
	}
	c, err := ParseConfig(b)
	if err != nil {
		return Config{}, fmt.Errorf("%s: %w", path, err)
	}
	return c, nil
}

// Add appends a call to the subsystem's part, creating it if needed.
func (c *Config) Add(subsystem, method string, params any) { c.AddFrom("", subsystem, method, params) }

// AddFrom is Add with the entry's Origin.
func (c *Config) AddFrom(origin, subsystem, method string, params any) {
	b, err := json.Marshal(params)
	if err != nil {
		panic(fmt.Sprintf("admin: params of %s do not encode: %v", method, err))
	}
	for i := range c.Subsystems {
		if c.Subsystems[i].Subsystem == subsystem {
			c.Subsystems[i].Config = append(c.Subsystems[i].Config, ConfigEntry{Method: method, Params: b, Origin: origin})
			return
		}
	}
	c.Subsystems = append(c.Subsystems, ConfigSubsystem{Subsystem: subsystem, Config: []ConfigEntry{{Method: method, Params: b, Origin: origin}}})
}

// entryName names a config entry in errors: subsystems[i].config[j] and
// its method.
func entryName(i, j int, method string) string {
	return fmt.Sprintf("subsystems[%d].config[%d] (%s)", i, j, method)
}

// writeFileAtomic replaces path with data (making its directory): a
// temporary file beside it, synced, renamed over it, and the directory
// synced.
func writeFileAtomic(path string, data []byte) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	_, err = f.Write(data)
	if err == nil {
		err = f.Chmod(0o600)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
		return err
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// ListenAddress is SPDK's listen_address: transport, address family,
// address and service ID. capsule's listener URLs map to it so:
//
//	tcp://HOST:PORT    trtype TCP, adrfam IPv4 or IPv6
//	rdma://HOST:PORT   trtype RDMA, adrfam IPv4 or IPv6
//	iwarp://HOST:PORT  trtype iWARP (capsule's own), adrfam IPv4 or IPv6
//	shm://NAME         trtype RDMA, adrfam INTRA_HOST, traddr NAME, no trsvcid
//
// as the discovery log describes them; a fault+ wrapper prefixes trtype
// with "fault+". trtype and adrfam are read without regard to case.
type ListenAddress struct {
	TrType  string `json:"trtype"`
	AdrFam  string `json:"adrfam,omitempty"`
	TrAddr  string `json:"traddr"`
	TrSvcID string `json:"trsvcid,omitempty"`
}

// URL returns the listener URL the address names.
func (a ListenAddress) URL() (string, error) {
	tr := strings.ToLower(a.TrType)
	prefix := ""
	if rest, ok := strings.CutPrefix(tr, "fault+"); ok {
		prefix, tr = "fault+", rest
	}
	fam := strings.ToLower(a.AdrFam)
	if a.TrAddr == "" {
		return "", errors.New("listen_address: traddr is empty")
	}
	if fam == "intra_host" {
		if tr != "rdma" {
			return "", fmt.Errorf("listen_address: adrfam INTRA_HOST is for trtype RDMA (shm://), not %q", a.TrType)
		}
		return prefix + "shm://" + a.TrAddr, nil
	}
	var scheme string
	switch tr {
	case "tcp":
		scheme = "tcp"
	case "rdma":
		scheme = "rdma"
	case "iwarp":
		scheme = "iwarp"
	default:
		return "", fmt.Errorf("listen_address: trtype %q: want TCP, RDMA or iWARP", a.TrType)
	}
	switch fam {
	case "", "ipv4", "ipv6":
	default:
		return "", fmt.Errorf("listen_address: adrfam %q: want IPv4, IPv6 or INTRA_HOST", a.AdrFam)
	}
	if a.TrSvcID == "" {
		return "", fmt.Errorf("listen_address: trtype %s needs a trsvcid (a port)", a.TrType)
	}
	if _, err := strconv.ParseUint(a.TrSvcID, 10, 16); err != nil {
		return "", fmt.Errorf("listen_address: trsvcid %q is not a port number", a.TrSvcID)
	}
	return prefix + scheme + "://" + net.JoinHostPort(a.TrAddr, a.TrSvcID), nil
}

// ListenAddressOf is the listen_address of a listener URL.
func ListenAddressOf(url string) (ListenAddress, error) {
	scheme, rest, ok := strings.Cut(url, "://")
	if !ok {
		return ListenAddress{}, fmt.Errorf("listener %q is not a URL", url)
	}
	prefix := ""
	if s, ok := strings.CutPrefix(scheme, "fault+"); ok {
		prefix, scheme = "fault+", s
	}
	if scheme == "shm" {
		if rest == "" {
			return ListenAddress{}, fmt.Errorf("listener %q has no name", url)
		}
		return ListenAddress{TrType: prefix + "RDMA", AdrFam: "INTRA_HOST", TrAddr: rest}, nil
	}
	tr := map[string]string{"tcp": "TCP", "rdma": "RDMA", "iwarp": "iWARP"}[scheme]
	if tr == "" {
		return ListenAddress{}, fmt.Errorf("listener %q: scheme %q: want tcp, iwarp, shm or rdma", url, scheme)
	}
	host, port, err := net.SplitHostPort(rest)
	if err != nil {
		return ListenAddress{}, fmt.Errorf("listener %q: %v", url, err)
	}
	if _, err := strconv.ParseUint(port, 10, 16); err != nil {
		return ListenAddress{}, fmt.Errorf("listener %q: port %q is not a number from 0 to 65535", url, port)
	}
	fam := "IPv4"
	if ip := net.ParseIP(host); ip != nil && ip.To4() == nil {
		fam = "IPv6"
	}
	return ListenAddress{TrType: prefix + tr, AdrFam: fam, TrAddr: host, TrSvcID: port}, nil
}

// Size is a byte count in params: a JSON number, or a string with an
// optional binary unit (KiB, MiB, GiB, TiB; K, M, G, T mean the same).
type Size int64

// UnmarshalJSON reads a number or a string.
func (s *Size) UnmarshalJSON(b []byte) error {
	var n int64
	if err := json.Unmarshal(b, &n); err == nil {
		*s = Size(n)
		return nil
	}
	var str string
	if err := json.Unmarshal(b, &str); err != nil {
		return errors.New("a size is a number of bytes or a string such as \"1GiB\"")
	}
	v, err := ParseSize(str)
	if err != nil {
		return err
	}
	*s = Size(v)
	return nil
}

// ParseSize reads a size such as 4096, 512MiB or 1G.
func ParseSize(s string) (int64, error) {
	t := strings.TrimSpace(s)
	mult := int64(1)
	for _, u := range []struct {
		suffix string
		shift  uint
	}{{"KiB", 10}, {"MiB", 20}, {"GiB", 30}, {"TiB", 40}, {"K", 10}, {"M", 20}, {"G", 30}, {"T", 40}} {
		if v, ok := strings.CutSuffix(t, u.suffix); ok {
			t, mult = strings.TrimSpace(v), int64(1)<<u.shift
			break
		}
	}
	n, err := strconv.ParseInt(t, 10, 64)
	if err != nil || n < 0 || n > (1<<62)/mult {
		return 0, fmt.Errorf("size %q: want a number of bytes, optionally with KiB, MiB, GiB or TiB", s)
	}
	return n * mult, nil
}
