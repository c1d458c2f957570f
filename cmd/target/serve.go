package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/capsule-storage/capsule/chunkstore"
	"github.com/capsule-storage/capsule/fs/server"
	"github.com/capsule-storage/capsule/internal/admin"
	"github.com/capsule-storage/capsule/internal/cliexit"
	"github.com/capsule-storage/capsule/internal/clusternode"
	"github.com/capsule-storage/capsule/internal/metrics"
	"github.com/capsule-storage/capsule/nvmeof"
	"github.com/capsule-storage/capsule/nvmeof/target"
)

// Defaults of `target serve`, which plain `target` runs.
const (
	defaultNQN       = "nqn.2026-11.io.capsule:default"
	defaultDataDir   = "./data"
	defaultNamespace = "ec:vol0:1GiB"
	defaultBlockSize = 512
	// defaultScrubRate is modest: a 1 GiB volume written full (1.5 GiB of
	// shards at 4+2) is verified in about 100 s, and a busy disk hardly
	// notices 16 MiB/s of reads.
	defaultScrubRate     = 16 << 20
	defaultScrubInterval = 24 * time.Hour
)

// Timings of the background scrubber that are not flags.
const (
	// firstScrubDelay is how long after start-up the first full pass
	// begins, so a restart is not slowed by it.
	firstScrubDelay = time.Minute
	// repairQueuePoll is how often the scrubber looks for stripes that
	// reads found damaged.
	repairQueuePoll = 5 * time.Second
)

// serveConfig is what `target serve` runs with. The zero value is not
// usable; defaultServeConfig is, and Validate says what is wrong with any
// other.
type serveConfig struct {
	// Listeners are tcp://HOST:PORT (NVMe/TCP) or RDMA URLs:
	// iwarp://HOST:PORT, shm://NAME, rdma://HOST:PORT.
	Listeners []string
	// DataDir is where relative file namespace paths live, and the
	// erasure-coded store's devices DATA/dev0 … DATA/dev{K+M-1} unless
	// Devices names them.
	DataDir string
	// Namespaces are the namespaces of the subsystem, NSID 1, 2, … in order.
	Namespaces []namespaceSpec
	// FS names the file namespace served after them when the
	// erasure-coded store is open (fs.go); "" for none.
	FS string
	// NQN names the NVM subsystem.
	NQN string
	// AllowHosts are the host NQNs allowed to connect.
	AllowHosts []string
	// AllowAnyHost lets every host connect.
	AllowAnyHost bool
	// BlockSize is the logical block size of every namespace: 512 or 4096.
	BlockSize int

	// The erasure-coded store that every ec: namespace is a volume of. It
	// is opened (created on first start) only when there is one.

	// Geometry is the store's K+M (--ec); an existing store must match.
	Geometry chunkstore.Geometry
	// Devices are the store's device directories, in order (--device);
	// none means DATA/dev0 … DATA/dev{K+M-1}.
	Devices []string
	// ScrubRate limits the background scrubber's reads, in bytes per
	// second; 0 turns the scrubber off.
	ScrubRate int64
	// ScrubInterval is the time from the end of one full scrub pass to
	// the start of the next.
	ScrubInterval time.Duration
	// OverProvision is the dead space the store's cleaner lets a busy
	// store hold, as a fraction of its live data
	// (chunkstore.WithOverProvision); IdleCompaction the time without I/O
	// after which it compacts the store and gives free space back to the
	// file system (chunkstore.WithIdleCompaction), 0 never.
	OverProvision  float64
	IdleCompaction time.Duration
	// WriteCache is the memory the store's volumes may hold written data
	// in before it goes to the log (chunkstore.WithWriteCache); 0 none.
	WriteCache int64

	// RPCSocket is the admin socket's path; "" is DATA/capsule.sock.
	RPCSocket string
	// ConfigFile is a JSON config in save_config's shape to start from,
	// in place of the flags that describe the target; "" for none.
	ConfigFile string
	// SubsystemFlags names the flags given that describe the target
	// (subsystemFlags): they conflict with ConfigFile and a state file.
	SubsystemFlags []string

	// Metrics is the HOST:PORT /metrics is served on over HTTP, for
	// Prometheus (metrics.go); "" for none.
	Metrics string

	// Cluster makes the target a node of a capsule cluster (cluster.go).
	Cluster clusterConfig
}

// namespaceSpec is one --namespace: mem:SIZE, file:PATH[:SIZE] or
// ec:NAME:SIZE.
type namespaceSpec struct {
	Kind string // "mem", "file" or "ec"
	Path string // file only
	Name string // ec only: the volume's name
	Size int64  // bytes; 0 for a file means its size
}

func (s namespaceSpec) String() string {
	switch s.Kind {
	case "mem":
		return fmt.Sprintf("mem:%d", s.Size)
	case "ec":
		return fmt.Sprintf("ec:%s:%d", s.Name, s.Size)
	}
	if s.Size == 0 {
		return "file:" + s.Path
	}
	return fmt.Sprintf("file:%s:%d", s.Path, s.Size)
}

// parseNamespaceSpec reads mem:SIZE, file:PATH[:SIZE] or ec:NAME:SIZE. A
// file path may hold colons: the part after the last one is a size only if
// it reads as one. A volume name may hold colons too: the size is after
// the last one.
func parseNamespaceSpec(s string) (namespaceSpec, error) {
	kind, rest, ok := strings.Cut(s, ":")
	if !ok || rest == "" {
		return namespaceSpec{}, fmt.Errorf("namespace %q: want ec:NAME:SIZE, mem:SIZE or file:PATH[:SIZE]", s)
	}
	switch kind {
	case "ec":
		i := strings.LastIndexByte(rest, ':')
		if i <= 0 {
			return namespaceSpec{}, fmt.Errorf("namespace %q: want ec:NAME:SIZE, such as ec:vol0:1GiB", s)
		}
		size, err := parseSize(rest[i+1:])
		if err != nil {
			return namespaceSpec{}, fmt.Errorf("namespace %q: %w", s, err)
		}
		if size <= 0 || size > chunkstore.MaxVolumeSize {
			return namespaceSpec{}, fmt.Errorf("namespace %q: a volume's size must be above zero and at most 1 PiB", s)
		}
		return namespaceSpec{Kind: "ec", Name: rest[:i], Size: size}, nil
	case "mem":
		size, err := parseSize(rest)
		if err != nil {
			return namespaceSpec{}, fmt.Errorf("namespace %q: %w", s, err)
		}
		if size <= 0 {
			return namespaceSpec{}, fmt.Errorf("namespace %q: a memory namespace needs a size above zero", s)
		}
		return namespaceSpec{Kind: "mem", Size: size}, nil
	case "file":
		spec := namespaceSpec{Kind: "file", Path: rest}
		if i := strings.LastIndexByte(rest, ':'); i > 0 {
			if size, err := parseSize(rest[i+1:]); err == nil {
				if size <= 0 {
					return namespaceSpec{}, fmt.Errorf("namespace %q: size must be above zero", s)
				}
				spec.Path, spec.Size = rest[:i], size
			}
		}
		return spec, nil
	}
	return namespaceSpec{}, fmt.Errorf("namespace %q: kind %q: want ec, mem or file", s, kind)
}

func defaultServeConfig() serveConfig {
	ns, _ := parseNamespaceSpec(defaultNamespace)
	return serveConfig{
		Listeners:      append([]string(nil), defaultListeners...),
		DataDir:        defaultDataDir,
		Namespaces:     []namespaceSpec{ns},
		FS:             defaultFSName,
		NQN:            defaultNQN,
		BlockSize:      defaultBlockSize,
		Geometry:       chunkstore.DefaultGeometry,
		ScrubRate:      defaultScrubRate,
		ScrubInterval:  defaultScrubInterval,
		OverProvision:  chunkstore.DefaultOverProvision,
		WriteCache:     defaultWriteCache(),
		IdleCompaction: chunkstore.DefaultIdleAfter,
		Cluster:        clusterConfig{EtcdListen: defaultEtcdListen, HeadTTL: defaultHeadTTL, RebuildRate: defaultRebuildRate},
	}
}

// hasEC reports whether any namespace is an erasure-coded volume.
func (c *serveConfig) hasEC() bool {
	for _, ns := range c.Namespaces {
		if ns.Kind == "ec" {
			return true
		}
	}
	return false
}

// storeDirs are the erasure-coded store's device directories.
func (c *serveConfig) storeDirs() []string {
	if len(c.Devices) > 0 {
		return c.Devices
	}
	return chunkstore.DeviceDirs(c.DataDir, c.Geometry)
}

// Validate checks the configuration and settles who may connect: with no
// --allow-host and no --allow-any-host, any host may when every listener
// is on loopback or shm, and the configuration is refused otherwise.
func (c *serveConfig) Validate() error {
	if len(c.Listeners) == 0 {
		return errors.New("no --listen address")
	}
	if err := c.Cluster.validate(c.Listeners); err != nil {
		return err
	}
	for _, u := range c.Listeners {
		if err := admin.CheckListenURL(u); err != nil {
			return fmt.Errorf("--listen %s: %w", u, err)
		}
	}
	if c.NQN == nvmeof.DiscoveryNQN {
		return fmt.Errorf("--nqn %q: the discovery subsystem's NQN, not a usable subsystem NQN", c.NQN)
	}
	if err := admin.CheckNQN(c.NQN); err != nil {
		return fmt.Errorf("--nqn %q: %v", c.NQN, err)
	}
	for _, h := range c.AllowHosts {
		if err := admin.CheckNQN(h); err != nil {
			return fmt.Errorf("--allow-host %q: %v", h, err)
		}
	}
	if c.BlockSize != 512 && c.BlockSize != 4096 {
		return fmt.Errorf("--block-size %d: want 512 or 4096", c.BlockSize)
	}
	if len(c.Namespaces) == 0 {
		return errors.New("no --namespace")
	}
	if len(c.Namespaces) > target.MaxNamespaces {
		return fmt.Errorf("%d namespaces: at most %d", len(c.Namespaces), target.MaxNamespaces)
	}
	volumes := map[string]bool{}
	for _, ns := range c.Namespaces {
		if ns.Size%int64(c.BlockSize) != 0 {
			return fmt.Errorf("--namespace %s: size is not a multiple of the %d-byte block", ns, c.BlockSize)
		}
		if ns.Kind == "file" && ns.Size == 0 {
			p := ns.Path
			if !filepath.IsAbs(p) {
				p = filepath.Join(c.DataDir, p)
			}
			if _, err := os.Stat(p); err != nil {
				return fmt.Errorf("--namespace %s: %s: %s; give a size to create it (file:PATH:SIZE)", ns, p, cliexit.Cause(err))
			}
		}
		if ns.Kind == "ec" {
			if volumes[ns.Name] {
				return fmt.Errorf("--namespace %s: volume %q is named twice; each ec namespace needs its own volume", ns, ns.Name)
			}
			volumes[ns.Name] = true
		}
	}
	if len(c.Devices) > 0 && !c.hasEC() {
		return errors.New("--device is for the erasure-coded store, and no --namespace is ec:NAME:SIZE")
	}
	if c.hasEC() { // the store's settings matter only when there is one
		if err := c.Geometry.Validate(); err != nil {
			return fmt.Errorf("--ec %s: %w", c.Geometry, err)
		}
		if len(c.Devices) > 0 && len(c.Devices) != c.Geometry.Devices() {
			return fmt.Errorf("--ec %s needs %d --device directories, %d given", c.Geometry, c.Geometry.Devices(), len(c.Devices))
		}
		if c.ScrubRate < 0 {
			return fmt.Errorf("--scrub-rate %d: want a rate of 0 (off) or more", c.ScrubRate)
		}
		if c.ScrubRate > 0 && c.ScrubInterval <= 0 {
			return fmt.Errorf("--scrub-interval %s: want a positive duration, such as 24h", c.ScrubInterval)
		}
		if c.OverProvision != 0 && !(c.OverProvision >= 0.05 && c.OverProvision <= 16) {
			return fmt.Errorf("--over-provision %g: want 0.05 to 16", c.OverProvision)
		}
		if c.IdleCompaction < 0 {
			return fmt.Errorf("--idle-compaction %s: want 0 (never) or a positive duration", c.IdleCompaction)
		}
		if c.WriteCache < 0 {
			return fmt.Errorf("--write-cache %d: want 0 (none) or a size such as 1GiB", c.WriteCache)
		}
	}
	if err := checkMetricsAddr(c.Metrics); err != nil {
		return err
	}
	if err := admin.CheckSocketPath(c.socketPath()); err != nil {
		if errors.Is(err, admin.ErrSocketPath) {
			return fmt.Errorf("--rpc-socket: %s; give a shorter path", strings.TrimPrefix(err.Error(), "admin: "))
		}
		if strings.Contains(err.Error(), "not a socket") {
			return fmt.Errorf("--rpc-socket %s: a file that is not a socket is there; give another --rpc-socket", c.socketPath())
		}
		return fmt.Errorf("--rpc-socket %s: another `target serve` answers there; stop it, or give another --rpc-socket or --data", c.socketPath())
	}
	if c.ConfigFile != "" && len(c.SubsystemFlags) > 0 {
		return fmt.Errorf("--config %s describes the target: leave out --%s", c.ConfigFile, strings.Join(c.SubsystemFlags, ", --"))
	}
	if _, err := os.Stat(c.statePath()); err == nil && c.ConfigFile == "" && len(c.SubsystemFlags) > 0 {
		return fmt.Errorf("%s holds the state of changes made over the admin socket: start without --%s, "+
			"or with --config FILE, or remove it", c.statePath(), strings.Join(c.SubsystemFlags, ", --"))
	}
	if len(c.AllowHosts) == 0 && !c.AllowAnyHost {
		for _, u := range c.Listeners {
			if !localListener(u) {
				return fmt.Errorf("--listen %s is not on loopback: name the hosts with --allow-host, or pass --allow-any-host", u)
			}
		}
		c.AllowAnyHost = true
	}
	return nil
}

// localListener reports whether only this machine can reach url: shm://,
// or a loopback address.
func localListener(url string) bool {
	scheme, rest, _ := strings.Cut(url, "://")
	if i := strings.LastIndexByte(scheme, '+'); i >= 0 {
		scheme = scheme[i+1:]
	}
	if scheme == "shm" {
		return true
	}
	host, _, err := net.SplitHostPort(rest)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

func serveCommand(run func(context.Context, io.Writer, serveConfig) error) *cli.Command {
	d := defaultServeConfig()
	return &cli.Command{
		Name:  "serve",
		Usage: "serve NVMe-oF: one subsystem with its namespaces, and discovery, on every listener",
		Description: "Serves one NVM subsystem (--nqn) and the discovery subsystem over NVMe/RDMA on every\n" +
			"--listen URL (tcp://HOST:PORT for NVMe/TCP, iwarp://HOST:PORT, shm://NAME, rdma://HOST:PORT). Each --namespace adds a\n" +
			"namespace, NSID 1 first:\n" +
			"  ec:NAME:SIZE      volume NAME of the erasure-coded store: created thin on first start,\n" +
			"                    opened after (with the same SIZE: a volume's size never changes)\n" +
			"  mem:SIZE          memory, lost on exit\n" +
			"  file:PATH[:SIZE]  a file or block device (a missing file is created; a relative\n" +
			"                    PATH is under --data)\n" +
			"With no --namespace it serves " + defaultNamespace + ".\n" +
			"\n" +
			"The erasure-coded store keeps every ec: volume on K+M device directories (--ec, 4+2 by\n" +
			"default): DATA/dev0 … DATA/dev{K+M-1}, or the --device directories, ideally on distinct\n" +
			"disks. The first start creates them with their identity records; later starts check\n" +
			"them. Up to M devices may be lost, corrupted or gone while it runs: reads are rebuilt\n" +
			"from parity and writes continue; past M, I/O fails with media errors, never wrong data.\n" +
			"Writes are cached until a Flush (the namespace has a volatile write cache); FUA writes\n" +
			"are durable when they complete.\n" +
			"\n" +
			"A background scrubber reads every shard at most --scrub-rate bytes/s: a full pass a\n" +
			"minute after start and then --scrub-interval after the previous one ends, and, every few\n" +
			"seconds, the stripes that reads found damaged. It repairs what it finds and logs each\n" +
			"pass. SIGUSR1 starts a full pass now. --scrub-rate 0 turns it off. `target scrub` and\n" +
			"`target repair` need the store to themselves: stop serve first.\n" +
			"\n" +
			"Any host may connect when every listener is on loopback or shm and no --allow-host is\n" +
			"given; otherwise only the --allow-host NQNs (or everyone, with --allow-any-host).\n" +
			"\n" +
			"The admin socket (--rpc-socket, DATA/" + socketFileName + " by default, mode 0600) serves JSON-RPC 2.0 with\n" +
			"SPDK's nvmf_* methods, so SPDK's rpc.py works against it, and capsule's own (`target rpc --help`).\n" +
			"Changes apply live (hosts are told by Asynchronous Event) and are written to DATA/" + stateFileName + "\n" +
			"in save_config's shape; a later start without --listen, --namespace, --fs, --nqn or the host flags\n" +
			"comes back to that state. --config FILE starts from a file of that shape instead of those flags;\n" +
			"a bad one fails, naming the entry at fault, before anything is created.\n" +
			"\n" +
			"--cluster-node ID joins a capsule cluster (README, \"A cluster\"): the node contributes its\n" +
			"--cluster-device directories and serves, one node at a time, the cluster's volumes, each as\n" +
			"namespace 1 of nqn.2026-12.io.capsule:volume:NAME. The map lives in etcd (--etcd URL; with none,\n" +
			"an embedded etcd in DATA/etcd on --etcd-listen); the admin socket gains cluster_get_status,\n" +
			"node_add, node_remove, cluster_volume_create, cluster_volume_delete and volume_get_placement.\n" +
			"\n" +
			"--metrics HOST:PORT serves Prometheus metrics at http://HOST:PORT/metrics (every name begins capsule_:\n" +
			"I/O per namespace, queues, controllers, devices, the store, the scrubber, the file service).\n" +
			"\n" +
			"Once every listener is up it prints one line, `capsule target ready listeners=... nqn=... rpc=...`\n" +
			"(and metrics=HOST:PORT with --metrics, and degraded=N when N devices of the store are out of use).\n" +
			"SIGINT or SIGTERM: finish the commands in flight, flush the namespaces, close the store,\n" +
			"exit 0.\n" +
			"\n" +
			"Every flag (listeners, namespaces, --nqn and --allow-host, which must be NQNs such as\n" +
			"nqn.2014-08.org.nvmexpress:uuid:UUID, the store's geometry and devices, the admin socket) and the\n" +
			"whole configuration are checked, and the listeners opened, before anything is created under --data.\n" +
			"Exit status: 0 stopped by a signal; 1 the target could not start (a bad --config or state\n" +
			"file included) or failed; 2 bad flags or arguments. An error is one line on stderr.\n\n" +
			"Example: target serve --listen iwarp://0.0.0.0:4420 --namespace ec:vol0:100GiB \\\n" +
			"           --device /mnt/d0/capsule ... --device /mnt/d5/capsule \\\n" +
			"           --allow-host nqn.2014-08.org.nvmexpress:uuid:...",
		Flags: append([]cli.Flag{
			&cli.StringSliceFlag{Name: "listen", Value: cli.NewStringSlice(d.Listeners...),
				Usage: "URL to listen on (repeatable)"},
			&cli.StringFlag{Name: "data", Value: d.DataDir,
				Usage: "data `DIR`: relative file namespace paths, and the store's devices DIR/dev0 … unless --device"},
			&cli.StringSliceFlag{Name: "namespace", Value: cli.NewStringSlice(defaultNamespace),
				Usage: "ec:NAME:SIZE, mem:SIZE or file:PATH[:SIZE], sizes such as 512MiB or 1GiB (repeatable)"},
			&cli.StringFlag{Name: "fs", Value: d.FS, Usage: fsHelp},
			&cli.StringFlag{Name: "ec", Value: d.Geometry.String(),
				Usage: "geometry `K+M` of the erasure-coded store: K data and M parity devices; an existing store must match"},
			&cli.StringSliceFlag{Name: "device", Usage: "a device `DIR` of the erasure-coded store, once per device (K+M) in order, in place of DATA/dev0 …"},
			&cli.StringFlag{Name: "scrub-rate", Value: formatRate(d.ScrubRate),
				Usage: "background scrub reads at most `BYTES` per second, e.g. 16MiB; 0 turns the scrubber off"},
			&cli.DurationFlag{Name: "scrub-interval", Value: d.ScrubInterval,
				Usage: "time from the end of one full background scrub pass to the start of the next"},
			&cli.Float64Flag{Name: "over-provision", Value: d.OverProvision,
				Usage: "dead space the store's cleaner lets a busy store hold, as a `FRACTION` of its live data (0.05 to 16): more saves writes, less saves space"},
			&cli.StringFlag{Name: "write-cache", Value: "auto",
				Usage: "memory in `BYTES` (e.g. 1GiB) that ec: namespaces may hold written data in until a flush or " + chunkstore.DefaultWriteCacheExpire.String() + " pass; 0 none; auto is a tenth of the machine's memory, at most 4GiB"},
			&cli.DurationFlag{Name: "idle-compaction", Value: d.IdleCompaction,
				Usage: "after this long without I/O, compact the store to 1.1 × its live data and punch its free space out of the shard files; 0 never"},
			&cli.StringFlag{Name: "nqn", Value: d.NQN, Usage: "NQN of the subsystem"},
			&cli.StringSliceFlag{Name: "allow-host", Usage: "host NQN allowed to connect (repeatable)"},
			&cli.BoolFlag{Name: "allow-any-host", Usage: "let every host connect, on any listener"},
			&cli.IntFlag{Name: "block-size", Value: d.BlockSize, Usage: "logical block size of the namespaces: 512 or 4096"},
			&cli.StringFlag{Name: "rpc-socket", Usage: "serve JSON-RPC 2.0 (SPDK's rpc.py works) on the Unix socket `PATH`, mode 0600 (default: DATA/" + socketFileName + ")"},
			&cli.StringFlag{Name: "metrics", Usage: "serve Prometheus metrics (capsule_*) at http://`HOST:PORT`/metrics, e.g. 127.0.0.1:9464 (:0 picks a port)"},
			&cli.StringFlag{Name: "config", Usage: "start from the JSON config `FILE` (save_config's shape) in place of --listen, --namespace, --nqn and the host flags"},
		}, clusterFlags()...),
		Action: func(c *cli.Context) error {
			if c.NArg() > 0 {
				return cli.Exit(fmt.Sprintf("serve takes no arguments, got %q", c.Args().Slice()), 2)
			}
			cfg, err := serveConfigFromFlags(c)
			if err != nil {
				return cli.Exit(err.Error(), 2)
			}
			return run(c.Context, c.App.Writer, cfg)
		},
	}
}

// formatRate writes a rate the way --scrub-rate reads it.
func formatRate(n int64) string {
	if n > 0 && n%(1<<20) == 0 {
		return fmt.Sprintf("%dMiB", n>>20)
	}
	return fmt.Sprint(n)
}

// serveConfigFromFlags reads and validates the flags of `target serve`.
func serveConfigFromFlags(c *cli.Context) (serveConfig, error) {
	cfg := serveConfig{
		Listeners:      c.StringSlice("listen"),
		DataDir:        c.String("data"),
		NQN:            c.String("nqn"),
		AllowHosts:     c.StringSlice("allow-host"),
		AllowAnyHost:   c.Bool("allow-any-host"),
		BlockSize:      c.Int("block-size"),
		Devices:        c.StringSlice("device"),
		ScrubInterval:  c.Duration("scrub-interval"),
		OverProvision:  c.Float64("over-provision"),
		IdleCompaction: c.Duration("idle-compaction"),
		FS:             c.String("fs"),
		RPCSocket:      c.String("rpc-socket"),
		ConfigFile:     c.String("config"),
		Metrics:        c.String("metrics"),
	}
	var err error
	if cfg.Cluster, err = clusterConfigFromFlags(c); err != nil {
		return cfg, err
	}
	if cfg.WriteCache, err = parseWriteCache(c.String("write-cache")); err != nil {
		return cfg, err
	}
	for _, f := range subsystemFlags {
		if c.IsSet(f) {
			cfg.SubsystemFlags = append(cfg.SubsystemFlags, f)
		}
	}
	for _, s := range c.StringSlice("namespace") {
		ns, err := parseNamespaceSpec(s)
		if err != nil {
			return cfg, err
		}
		cfg.Namespaces = append(cfg.Namespaces, ns)
	}
	g, err := chunkstore.ParseGeometry(c.String("ec"))
	if err != nil {
		return cfg, fmt.Errorf("--ec %q: %v (for example 4+2)", c.String("ec"), err)
	}
	cfg.Geometry = g
	rate := strings.TrimSpace(c.String("scrub-rate"))
	cfg.ScrubRate, err = parseSize(strings.TrimSuffix(strings.TrimSuffix(rate, "/s"), "/S"))
	if err != nil {
		return cfg, fmt.Errorf("--scrub-rate: %v (for example 16MiB for 16 MiB/s, 0 to turn the scrubber off)", err)
	}
	return cfg, cfg.Validate()
}

// serve runs the target until ctx ends, then drains, flushes and closes:
// the admin socket closes, the scrubber stops, the target finishes the
// commands in flight and syncs every namespace, and the erasure-coded
// store is closed (a final Sync, then the devices).
//
// What it serves comes from --config FILE, else from DATA/capsule.json
// (the changes made over the admin socket), else from the flags
// (config.go); the whole configuration is checked before anything is
// created.
func serve(ctx context.Context, out io.Writer, cfg serveConfig) (err error) {
	if err := cfg.Validate(); err != nil {
		return err
	}
	log := slog.Default()
	start, save, err := startConfig(cfg)
	if err != nil {
		return err
	}
	var store *chunkstore.Store
	var scrubber atomic.Pointer[backgroundScrub] // once the store is open and serve runs
	defer func() {
		if store == nil {
			return
		}
		if cerr := store.Close(); cerr != nil {
			log.Error("closing the erasure-coded store", "err", cerr)
			if err == nil {
				err = fmt.Errorf("closing the erasure-coded store: %w", cerr)
			}
			return
		}
		log.Info("erasure-coded store synced and closed")
	}()
	// Starting: the config may open listeners before it creates the
	// subsystems, and a host reconnecting meanwhile must be told to retry.
	t, err := target.New(target.WithLogger(log), target.WithStarting())
	if err != nil {
		return err
	}
	svc, err := admin.NewService(admin.Options{
		Context: ctx,
		Target:  t,
		OpenStore: func() (*chunkstore.Store, error) {
			s, err := openServeStore(cfg, log)
			if err == nil {
				store = s
			}
			return s, err
		},
		OpenFS: func(name string, s *chunkstore.Store) (*server.Server, error) {
			return openFileNamespace(name, cfg.DataDir, s, log)
		},
		DataDir:   cfg.DataDir,
		StatePath: cfg.statePath(),
		BlockSize: cfg.BlockSize,
		ScrubStatus: func() any {
			if sc := scrubber.Load(); sc != nil {
				return sc.Status()
			}
			return scrubStatus{State: "off"}
		},
		Logger: log.With("component", "admin"),
	})
	if err != nil {
		return err
	}
	defer func() { // after the target's Close: the devices no namespace holds
		if cerr := svc.Close(); cerr != nil && err == nil {
			err = cerr
		}
	}()
	defer func() {
		if cerr := t.Close(); cerr != nil && err == nil {
			err = cerr
		}
	}()
	if err := svc.Check(start); err != nil {
		return configError(cfg, err)
	}
	if err := svc.Load(start, save); err != nil {
		return configError(cfg, err)
	}
	t.Ready()
	rpcSrv := admin.NewServer(log.With("component", "rpc"))
	svc.Register(rpcSrv)
	sock := cfg.socketPath()
	if cfg.RPCSocket == "" {
		if err := os.MkdirAll(cfg.DataDir, 0o755); err != nil {
			return fmt.Errorf("--data %s: %w", cfg.DataDir, err)
		}
	}
	ln, err := admin.ListenUnix(sock)
	if err != nil {
		return fmt.Errorf("--rpc-socket %s: %s", sock, cliexit.Cause(err))
	}
	rpcDone := make(chan struct{})
	go func() {
		defer close(rpcDone)
		if err := rpcSrv.Serve(ln); err != nil {
			log.Error("admin socket stopped", "err", err)
		}
	}()
	defer func() {
		rpcSrv.Close()
		<-rpcDone
		os.Remove(sock)
	}()
	if store != nil {
		sc := &backgroundScrub{
			store:    store,
			rate:     cfg.ScrubRate,
			first:    firstScrubDelay,
			interval: cfg.ScrubInterval,
			poll:     repairQueuePoll,
			log:      log.With("component", "scrub"),
		}
		usr1 := make(chan os.Signal, 1)
		signal.Notify(usr1, syscall.SIGUSR1)
		defer signal.Stop(usr1)
		sc.trigger = usr1
		defer sc.start(ctx)() // stops before the target closes
		scrubber.Store(sc)
	}
	metricsAddr := ""
	var node atomic.Pointer[clusternode.Node] // set once the node has joined
	if cfg.Metrics != "" {
		addr, stop, err := serveMetrics(cfg.Metrics, t, svc, &scrubber, &node, log.With("component", "metrics"))
		if err != nil {
			return err
		}
		defer stop() // before the scrubber, the target and the store close
		metricsAddr = " metrics=" + addr
	}
	clusterField := ""
	if cfg.Cluster.Node != "" {
		field, stop, err := startCluster(ctx, cfg.Cluster, cfg.DataDir, t, rpcSrv, &node, log.With("component", "cluster"))
		if err != nil {
			return err
		}
		defer stop() // before the target closes: the volumes it heads go first
		clusterField = field
	}
	nqn := ""
	if subs := t.Subsystems(); len(subs) > 0 {
		nqn = subs[0].NQN()
	}
	fmt.Fprintf(out, "capsule target ready listeners=%s nqn=%s discovery=%s rpc=%s%s%s%s\n",
		strings.Join(t.Listeners(), ","), nqn, nvmeof.DiscoveryNQN, sock, metricsAddr, degradedField(store), clusterField)
	<-ctx.Done()
	log.Info("signal received: draining")
	return nil
}

// degradedField is the ready line's " degraded=N": how many of the
// store's devices are out of use, when any is ("" otherwise, and with no
// store).
func degradedField(s *chunkstore.Store) string {
	if s == nil {
		return ""
	}
	n := 0
	for _, d := range s.Info().Devices {
		if d.State != chunkstore.DeviceHealthy {
			n++
		}
	}
	if n == 0 {
		return ""
	}
	return fmt.Sprintf(" degraded=%d", n)
}

// configError says where a configuration that failed came from.
func configError(cfg serveConfig, err error) error {
	switch {
	case cfg.ConfigFile != "":
		return fmt.Errorf("--config %s: %w", cfg.ConfigFile, err)
	case len(cfg.SubsystemFlags) == 0:
		if _, serr := os.Stat(cfg.statePath()); serr == nil {
			return fmt.Errorf("state file %s: %w", cfg.statePath(), err)
		}
	}
	return err
}

// openServeStore opens the erasure-coded store of the ec: namespaces, or
// creates it when none of its devices holds any part of a store yet.
func openServeStore(cfg serveConfig, log *slog.Logger) (*chunkstore.Store, error) {
	dirs := cfg.storeDirs()
	opts := []chunkstore.Option{chunkstore.WithGeometry(cfg.Geometry), chunkstore.WithLogger(log)}
	if cfg.OverProvision != 0 {
		opts = append(opts, chunkstore.WithOverProvision(cfg.OverProvision))
	}
	opts = append(opts, chunkstore.WithIdleCompaction(chunkstore.DefaultIdleOverProvision, cfg.IdleCompaction),
		chunkstore.WithWriteCache(cfg.WriteCache))
	s, err := chunkstore.OpenOrCreateDirs(dirs, opts...)
	if errors.Is(err, chunkstore.ErrFormatV1) {
		return nil, formatV1Error(cfg.DataDir)
	}
	if err != nil {
		var hint string
		switch {
		case errors.Is(err, chunkstore.ErrDeviceBusy):
			hint = "another process has the store open: another `target serve` on the same --data, or `target scrub` or `target repair`"
		case errors.Is(err, chunkstore.ErrGeometryMismatch):
			hint = "--ec must be the geometry the store was created with"
		case errors.Is(err, chunkstore.ErrDeviceSwapped):
			hint = "give the --device directories in the order the store was created with"
		case errors.Is(err, chunkstore.ErrForeignDevice):
			hint = "a device belongs to another store or was replaced; leave it out (or empty it and run `target repair`)"
		case errors.Is(err, chunkstore.ErrTooManyFailures):
			hint = "more devices are missing than the parity covers; bring them back, or run `target repair` for each replaced one"
		}
		msg := fmt.Sprintf("erasure-coded store on %s: %s", strings.Join(dirs, ", "), storeError(err))
		if hint != "" {
			msg += "; " + hint
		}
		return nil, &lineError{msg: msg, err: err}
	}
	in := s.Info()
	log.Info("erasure-coded store open", "id", in.ID, "ec", in.Geometry, "stripe_unit", in.StripeUnit,
		"simd", in.SIMD, "degraded", in.Degraded, "devices", strings.Join(dirs, ","))
	for _, d := range in.Devices {
		if d.State != chunkstore.DeviceHealthy {
			log.Warn("store device not in use: reads are rebuilt from parity; replace it and run `target repair`",
				"pos", d.Pos, "device", d.Name, "state", d.State, "err", d.Err)
		}
	}
	return s, nil
}

// backgroundScrub is serve's scrubber. Two loops run beside the I/O, each
// reading at most rate bytes per second: full passes (chunkstore's Scrub:
// every shard of every stripe), the first one first after start-up and
// each later one interval after the previous ended or when trigger fires;
// and every poll, the repair queue (RepairQueued: the stripes reads found
// damaged and rebuilt from parity). Results go to log: Info when all is
// well, Warn with each damaged stripe, Error when data is lost.
type backgroundScrub struct {
	store           *chunkstore.Store
	rate            int64
	first, interval time.Duration
	poll            time.Duration
	trigger         <-chan os.Signal // a full pass now; nil: never
	log             *slog.Logger

	mu     sync.Mutex // guards status and totals
	status scrubStatus
	totals chunkstore.ScrubReport // of every pass and repair-queue run, without Problems
}

// scrubStatus is what store_get_status reports as "scrub".
type scrubStatus struct {
	State    string     `json:"state"` // "off", "waiting" or "running"
	Passes   int        `json:"passes"`
	Stripes  int64      `json:"stripes,omitempty"` // of the pass running: to do in all
	Done     int64      `json:"done,omitempty"`    // and done so far
	Started  *time.Time `json:"started,omitempty"`
	LastPass *scrubPass `json:"last_pass,omitempty"`
	Rate     int64      `json:"bytes_per_second"`
}

// scrubPass is the outcome of a finished full pass.
type scrubPass struct {
	Finished      time.Time `json:"finished"`
	Seconds       float64   `json:"seconds"`
	Checked       int64     `json:"checked"`
	Damaged       int64     `json:"damaged"`
	Repaired      int64     `json:"repaired"`
	Unrecoverable int64     `json:"unrecoverable"`
	Degraded      int64     `json:"degraded"`
	Error         string    `json:"error,omitempty"`
}

// Status is the scrubber's state now.
func (b *backgroundScrub) Status() any {
	b.mu.Lock()
	defer b.mu.Unlock()
	st := b.status
	st.Rate = b.rate
	if b.rate <= 0 {
		st.State = "off"
	} else if st.State == "" {
		st.State = "waiting"
	}
	return st
}

// start runs the loops until ctx ends or the returned stop is called;
// stop waits for them to return (chunkstore wants its scrubs cancelled
// before the store closes). With a zero rate it only answers trigger with
// a warning.
func (b *backgroundScrub) start(ctx context.Context) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	if b.rate <= 0 {
		b.log.Info("background scrubber off (--scrub-rate 0)")
		wg.Go(func() {
			for {
				select {
				case <-ctx.Done():
					return
				case <-b.trigger:
					b.log.Warn("SIGUSR1: no scrub, the background scrubber is off (--scrub-rate 0); stop serve and run `target scrub`")
				}
			}
		})
	} else {
		wg.Go(func() { b.passes(ctx) })
		wg.Go(func() { b.repairs(ctx) })
		b.log.Info("background scrubber on", "rate", formatRate(b.rate)+"/s", "first_pass_in", b.first, "interval", b.interval)
	}
	return func() {
		cancel()
		wg.Wait()
	}
}

func (b *backgroundScrub) passes(ctx context.Context) {
	next := time.NewTimer(b.first)
	defer next.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-next.C:
		case <-b.trigger:
			b.log.Info("SIGUSR1: full scrub pass now")
		}
		start := time.Now()
		b.mu.Lock()
		b.status.State, b.status.Started, b.status.Stripes, b.status.Done = "running", &start, 0, 0
		b.mu.Unlock()
		rep, err := b.store.Scrub(ctx, chunkstore.ScrubOptions{BytesPerSecond: b.rate, Progress: func(p chunkstore.Progress) {
			b.mu.Lock()
			b.status.Stripes, b.status.Done = p.Stripes, p.Done
			b.mu.Unlock()
		}})
		took := time.Since(start)
		b.add(rep)
		b.report(ctx, "scrub pass", rep, err, took)
		pass := &scrubPass{Finished: time.Now().UTC(), Seconds: took.Seconds(), Checked: rep.Checked, Damaged: rep.Damaged,
			Repaired: rep.Repaired, Unrecoverable: rep.Unrecoverable, Degraded: rep.Degraded}
		if err != nil {
			pass.Error = err.Error()
		}
		b.mu.Lock()
		b.status = scrubStatus{State: "waiting", Passes: b.status.Passes + 1, LastPass: pass}
		b.mu.Unlock()
		next.Reset(b.interval)
	}
}

func (b *backgroundScrub) repairs(ctx context.Context) {
	tick := time.NewTicker(b.poll)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		if b.store.Stats().RepairQueue == 0 {
			continue
		}
		start := time.Now()
		rep, err := b.store.RepairQueued(ctx, chunkstore.ScrubOptions{BytesPerSecond: b.rate})
		b.add(rep)
		b.report(ctx, "repair of stripes reads found damaged", rep, err, time.Since(start))
	}
}

// add counts a pass or repair-queue run in the totals.
func (b *backgroundScrub) add(rep chunkstore.ScrubReport) {
	b.mu.Lock()
	defer b.mu.Unlock()
	t := &b.totals
	t.Checked += rep.Checked
	t.Damaged += rep.Damaged
	t.Repaired += rep.Repaired
	t.ShardsRepaired += rep.ShardsRepaired
	t.Unrecoverable += rep.Unrecoverable
	t.Degraded += rep.Degraded
	t.Bytes += rep.Bytes
}

// Metrics is the scrubber's state and totals for metrics.
func (b *backgroundScrub) Metrics() *metrics.ScrubStats {
	b.mu.Lock()
	defer b.mu.Unlock()
	st := &metrics.ScrubStats{
		Running: b.status.State == "running", Passes: int64(b.status.Passes),
		PassStripes: b.status.Stripes, PassDone: b.status.Done,
		Checked: b.totals.Checked, Damaged: b.totals.Damaged, Repaired: b.totals.Repaired,
		Unrecoverable: b.totals.Unrecoverable, ShardsRepaired: b.totals.ShardsRepaired, BytesRead: b.totals.Bytes,
	}
	if lp := b.status.LastPass; lp != nil {
		st.LastPassEnd = lp.Finished
	}
	return st
}

// report logs one scrub or repair-queue run.
func (b *backgroundScrub) report(ctx context.Context, what string, rep chunkstore.ScrubReport, err error, took time.Duration) {
	attrs := []any{"checked", rep.Checked, "damaged", rep.Damaged, "repaired", rep.Repaired,
		"unrecoverable", rep.Unrecoverable, "degraded", rep.Degraded, "shards_repaired", rep.ShardsRepaired,
		"bytes", rep.Bytes, "took", took.Round(time.Millisecond)}
	level, msg := slog.LevelInfo, what+" done"
	switch {
	case err != nil && ctx.Err() != nil:
		msg = what + " stopped by shutdown"
	case err != nil:
		level, msg = slog.LevelError, what+" failed"
		attrs = append(attrs, "err", err)
	case rep.Unrecoverable > 0:
		level, msg = slog.LevelError, what+" done: data lost in unrecoverable stripes (reads of them fail)"
	case rep.Degraded > 0:
		level, msg = slog.LevelWarn, what+" done: shards on devices out of use; replace them and run `target repair`"
	case rep.Damaged > 0:
		level, msg = slog.LevelWarn, what+" done: damaged shards repaired"
	}
	b.log.Log(context.Background(), level, msg, attrs...)
	if rep.Degraded > 0 && rep.Unrecoverable == 0 {
		return // every stripe of a missing device: the line above says it
	}
	for _, p := range rep.Problems {
		b.log.Warn(describeProblem(p))
	}
}
