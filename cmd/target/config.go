package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/capsule-storage/capsule/internal/admin"
	"github.com/capsule-storage/capsule/nvmeof"
)

// stateFileName is the file in DATA that every change over the admin
// socket is written to, in save_config's shape; serve starts from it
// when it is there.
const stateFileName = "capsule.json"

// socketFileName is the admin socket's default name in DATA.
const socketFileName = "capsule.sock"

// subsystemFlags are the serve flags that describe what the config
// describes; they cannot be combined with --config, nor with a state
// file from earlier changes.
var subsystemFlags = []string{"listen", "namespace", "fs", "nqn", "allow-host", "allow-any-host"}

// statePath is DATA/capsule.json.
func (c *serveConfig) statePath() string { return filepath.Join(c.DataDir, stateFileName) }

// socketPath is --rpc-socket, or DATA/capsule.sock.
func (c *serveConfig) socketPath() string {
	if c.RPCSocket != "" {
		return c.RPCSocket
	}
	return filepath.Join(c.DataDir, socketFileName)
}

// startConfig is the configuration serve starts from, and whether it is
// written to the state file at once: --config FILE (written: the state
// file follows it from now on); else the state file of earlier changes;
// else the flags.
func startConfig(cfg serveConfig) (admin.Config, bool, error) {
	if cfg.ConfigFile != "" {
		c, err := admin.ReadConfigFile(cfg.ConfigFile)
		if err != nil {
			return admin.Config{}, false, fmt.Errorf("--config: %v", err)
		}
		return c, true, nil
	}
	state := cfg.statePath()
	c, err := admin.ReadConfigFile(state)
	switch {
	case err == nil && len(cfg.SubsystemFlags) == 0:
		return c, false, nil
	case err == nil:
		// Validate refuses this; a state file that appeared since is ignored.
	case !errors.Is(err, os.ErrNotExist):
		return admin.Config{}, false, fmt.Errorf("state file %v", err)
	}
	return flagsConfig(cfg), false, nil
}

// flagsConfig is the configuration the flags describe: the bdevs of the
// namespaces (volume_create for ec:, bdev_malloc_create for mem:,
// bdev_aio_create for file:, fs_create for the file namespace), the
// listeners, one subsystem served on all of them with its hosts and the
// namespaces NSID 1, 2, … in order, the file namespace last.
func flagsConfig(cfg serveConfig) admin.Config {
	var c admin.Config
	type ns struct {
		bdev   string
		nsid   uint32
		origin string
	}
	var nss []ns
	for i, spec := range cfg.Namespaces {
		nsid := uint32(i + 1)
		switch spec.Kind {
		case "ec":
			c.AddFrom("--namespace "+spec.String(), admin.SubsystemCapsule, "volume_create", map[string]any{"name": spec.Name, "size": spec.Size, "block_size": cfg.BlockSize})
			nss = append(nss, ns{spec.Name, nsid, "--namespace " + spec.String()})
		case "mem":
			name := fmt.Sprintf("mem%d", nsid)
			c.AddFrom("--namespace "+spec.String(), admin.SubsystemBdev, "bdev_malloc_create", map[string]any{"name": name,
				"num_blocks": spec.Size / int64(cfg.BlockSize), "block_size": cfg.BlockSize})
			nss = append(nss, ns{name, nsid, "--namespace " + spec.String()})
		case "file":
			name := fmt.Sprintf("file%d", nsid)
			p := map[string]any{"name": name, "filename": spec.Path, "block_size": cfg.BlockSize}
			if spec.Size > 0 {
				p["size"] = spec.Size
			}
			c.AddFrom("--namespace "+spec.String(), admin.SubsystemBdev, "bdev_aio_create", p)
			nss = append(nss, ns{name, nsid, "--namespace " + spec.String()})
		}
	}
	if cfg.hasEC() && cfg.FS != "" {
		c.AddFrom("--fs "+cfg.FS, admin.SubsystemCapsule, "fs_create", map[string]any{"name": cfg.FS})
		nss = append(nss, ns{cfg.FS, uint32(len(cfg.Namespaces) + 1), "--fs " + cfg.FS})
	}
	for _, u := range cfg.Listeners {
		a, err := admin.ListenAddressOf(u)
		if err != nil { // Validate checked every URL
			panic(fmt.Sprintf("listener %s: %v", u, err))
		}
		c.AddFrom("--listen "+u, admin.SubsystemNVMf, "nvmf_subsystem_add_listener", map[string]any{"nqn": nvmeof.DiscoveryNQN, "listen_address": a})
	}
	c.AddFrom("--nqn "+cfg.NQN, admin.SubsystemNVMf, "nvmf_create_subsystem", map[string]any{"nqn": cfg.NQN, "allow_any_host": cfg.AllowAnyHost})
	for _, u := range cfg.Listeners { // every listener serves the subsystem
		a, _ := admin.ListenAddressOf(u)
		c.AddFrom("--listen "+u, admin.SubsystemNVMf, "nvmf_subsystem_add_listener", map[string]any{"nqn": cfg.NQN, "listen_address": a})
	}
	for _, h := range cfg.AllowHosts {
		c.AddFrom("--allow-host "+h, admin.SubsystemNVMf, "nvmf_subsystem_add_host", map[string]any{"nqn": cfg.NQN, "host": h})
	}
	for _, n := range nss {
		c.AddFrom(n.origin, admin.SubsystemNVMf, "nvmf_subsystem_add_ns", map[string]any{"nqn": cfg.NQN,
			"namespace": map[string]any{"bdev_name": n.bdev, "nsid": n.nsid}})
	}
	return c
}
