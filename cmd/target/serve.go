package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/capsule-storage/capsule/nvmeof"
	"github.com/capsule-storage/capsule/nvmeof/blockdev"
	"github.com/capsule-storage/capsule/nvmeof/target"
	"github.com/capsule-storage/capsule/rdma"
)

// Defaults of `target serve`, which plain `target` runs.
const (
	defaultNQN       = "nqn.2026-11.io.capsule:default"
	defaultDataDir   = "./data"
	defaultNamespace = "mem:1GiB"
	defaultBlockSize = 512
)

// serveConfig is what `target serve` runs with. The zero value is not
// usable; defaultServeConfig is, and Validate says what is wrong with any
// other.
type serveConfig struct {
	// Listeners are RDMA URLs: iwarp://HOST:PORT, shm://NAME, rdma://HOST:PORT.
	Listeners []string
	// DataDir is where relative file namespace paths live.
	DataDir string
	// Namespaces are the namespaces of the subsystem, NSID 1, 2, … in order.
	Namespaces []namespaceSpec
	// NQN names the NVM subsystem.
	NQN string
	// AllowHosts are the host NQNs allowed to connect.
	AllowHosts []string
	// AllowAnyHost lets every host connect.
	AllowAnyHost bool
	// BlockSize is the logical block size of every namespace: 512 or 4096.
	BlockSize int
}

// namespaceSpec is one --namespace: mem:SIZE or file:PATH[:SIZE].
type namespaceSpec struct {
	Kind string // "mem" or "file"
	Path string // file only
	Size int64  // bytes; 0 for a file means its size
}

func (s namespaceSpec) String() string {
	if s.Kind == "mem" {
		return fmt.Sprintf("mem:%d", s.Size)
	}
	if s.Size == 0 {
		return "file:" + s.Path
	}
	return fmt.Sprintf("file:%s:%d", s.Path, s.Size)
}

// parseNamespaceSpec reads mem:SIZE or file:PATH[:SIZE]. A file path may
// hold colons: the part after the last one is a size only if it reads as
// one.
func parseNamespaceSpec(s string) (namespaceSpec, error) {
	kind, rest, ok := strings.Cut(s, ":")
	if !ok || rest == "" {
		return namespaceSpec{}, fmt.Errorf("namespace %q: want mem:SIZE or file:PATH[:SIZE]", s)
	}
	switch kind {
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
	return namespaceSpec{}, fmt.Errorf("namespace %q: kind %q: want mem or file", s, kind)
}

func defaultServeConfig() serveConfig {
	ns, _ := parseNamespaceSpec(defaultNamespace)
	return serveConfig{
		Listeners:  append([]string(nil), defaultListeners...),
		DataDir:    defaultDataDir,
		Namespaces: []namespaceSpec{ns},
		NQN:        defaultNQN,
		BlockSize:  defaultBlockSize,
	}
}

// Validate checks the configuration and settles who may connect: with no
// --allow-host and no --allow-any-host, any host may when every listener
// is on loopback or shm, and the configuration is refused otherwise.
func (c *serveConfig) Validate() error {
	if len(c.Listeners) == 0 {
		return errors.New("no --listen address")
	}
	for _, u := range c.Listeners {
		if _, _, err := rdma.ParseURL(u); err != nil {
			return fmt.Errorf("--listen %s: %w", u, err)
		}
	}
	if err := nvmeof.ValidateNQN(c.NQN); err != nil || c.NQN == nvmeof.DiscoveryNQN {
		return fmt.Errorf("--nqn %q: not a usable subsystem NQN", c.NQN)
	}
	for _, h := range c.AllowHosts {
		if err := nvmeof.ValidateNQN(h); err != nil {
			return fmt.Errorf("--allow-host %q: not a valid NQN", h)
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
	for _, ns := range c.Namespaces {
		if ns.Size%int64(c.BlockSize) != 0 {
			return fmt.Errorf("--namespace %s: size is not a multiple of the %d-byte block", ns, c.BlockSize)
		}
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
			"--listen URL (iwarp://HOST:PORT, shm://NAME, rdma://HOST:PORT). Each --namespace adds a\n" +
			"namespace, NSID 1 first: mem:SIZE is memory (lost on exit), file:PATH[:SIZE] a file or\n" +
			"block device (a missing file is created; a relative PATH is under --data).\n" +
			"Any host may connect when every listener is on loopback or shm and no --allow-host is\n" +
			"given; otherwise only the --allow-host NQNs (or everyone, with --allow-any-host).\n" +
			"Once every listener is up it prints one line, `capsule target ready listeners=... nqn=...`.\n" +
			"SIGINT or SIGTERM: finish the commands in flight, flush the namespaces, exit 0.\n\n" +
			"Example: target serve --listen iwarp://0.0.0.0:4420 --namespace file:disk.img:10GiB \\\n" +
			"           --allow-host nqn.2014-08.org.nvmexpress:uuid:...",
		Flags: []cli.Flag{
			&cli.StringSliceFlag{Name: "listen", Value: cli.NewStringSlice(d.Listeners...),
				Usage: "URL to listen on (repeatable)"},
			&cli.StringFlag{Name: "data", Value: d.DataDir, Usage: "directory for relative file namespace paths"},
			&cli.StringSliceFlag{Name: "namespace", Value: cli.NewStringSlice(defaultNamespace),
				Usage: "mem:SIZE or file:PATH[:SIZE], sizes such as 512MiB or 1GiB (repeatable)"},
			&cli.StringFlag{Name: "nqn", Value: d.NQN, Usage: "NQN of the subsystem"},
			&cli.StringSliceFlag{Name: "allow-host", Usage: "host NQN allowed to connect (repeatable)"},
			&cli.BoolFlag{Name: "allow-any-host", Usage: "let every host connect, on any listener"},
			&cli.IntFlag{Name: "block-size", Value: d.BlockSize, Usage: "logical block size of the namespaces: 512 or 4096"},
		},
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

// serveConfigFromFlags reads and validates the flags of `target serve`.
func serveConfigFromFlags(c *cli.Context) (serveConfig, error) {
	cfg := serveConfig{
		Listeners:    c.StringSlice("listen"),
		DataDir:      c.String("data"),
		NQN:          c.String("nqn"),
		AllowHosts:   c.StringSlice("allow-host"),
		AllowAnyHost: c.Bool("allow-any-host"),
		BlockSize:    c.Int("block-size"),
	}
	for _, s := range c.StringSlice("namespace") {
		ns, err := parseNamespaceSpec(s)
		if err != nil {
			return cfg, err
		}
		cfg.Namespaces = append(cfg.Namespaces, ns)
	}
	return cfg, cfg.Validate()
}

// serve runs the target until ctx ends, then drains, flushes and closes.
func serve(ctx context.Context, out io.Writer, cfg serveConfig) (err error) {
	if err := cfg.Validate(); err != nil {
		return err
	}
	log := slog.Default()
	t, err := target.New(target.WithLogger(log))
	if err != nil {
		return err
	}
	defer func() {
		if cerr := t.Close(); cerr != nil && err == nil {
			err = cerr
		}
	}()
	sub, err := t.AddSubsystem(target.SubsystemConfig{NQN: cfg.NQN, AllowAnyHost: cfg.AllowAnyHost, Hosts: cfg.AllowHosts})
	if err != nil {
		return err
	}
	for i, spec := range cfg.Namespaces {
		dev, err := openNamespace(spec, cfg.DataDir)
		if err != nil {
			return err
		}
		if _, err := sub.AddNamespace(target.NamespaceConfig{NSID: uint32(i + 1), Device: dev, BlockSize: cfg.BlockSize}); err != nil {
			if c, ok := dev.(io.Closer); ok {
				c.Close()
			}
			return fmt.Errorf("namespace %s: %w", spec, err)
		}
	}
	for _, u := range cfg.Listeners {
		if _, err := t.Listen(ctx, u); err != nil {
			return err
		}
	}
	fmt.Fprintf(out, "capsule target ready listeners=%s nqn=%s discovery=%s\n",
		strings.Join(t.Listeners(), ","), cfg.NQN, nvmeof.DiscoveryNQN)
	<-ctx.Done()
	log.Info("signal received: draining")
	return nil
}

// openNamespace opens the device of one namespace.
func openNamespace(spec namespaceSpec, dataDir string) (blockdev.Device, error) {
	if spec.Kind == "mem" {
		return blockdev.NewMemory(spec.Size)
	}
	path := spec.Path
	if !filepath.IsAbs(path) {
		if err := os.MkdirAll(dataDir, 0o755); err != nil {
			return nil, fmt.Errorf("--data %s: %w", dataDir, err)
		}
		path = filepath.Join(dataDir, path)
	}
	return blockdev.OpenFile(path, spec.Size)
}
