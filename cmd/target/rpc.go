package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/capsule-storage/capsule/internal/admin"
)

func rpcCommand() *cli.Command {
	return &cli.Command{
		Name:      "rpc",
		Usage:     "call a JSON-RPC method of a running `target serve` over its admin socket",
		ArgsUsage: "METHOD [JSON-PARAMS]",
		Description: "Sends one JSON-RPC 2.0 request to the admin socket and prints the result as indented JSON.\n" +
			"The methods keep SPDK's names and parameters (SPDK's rpc.py works against the same socket):\n" +
			"  nvmf_get_subsystems, nvmf_create_subsystem, nvmf_delete_subsystem, nvmf_subsystem_add_ns,\n" +
			"  nvmf_subsystem_remove_ns, nvmf_subsystem_add_host, nvmf_subsystem_remove_host,\n" +
			"  nvmf_subsystem_allow_any_host, nvmf_subsystem_add_listener, nvmf_subsystem_remove_listener,\n" +
			"  nvmf_subsystem_get_controllers, nvmf_subsystem_get_listeners,\n" +
			"  nvmf_subsystem_listener_set_ana_state, nvmf_get_stats, save_config, bdev_malloc_create,\n" +
			"  bdev_aio_create;\n" +
			"and capsule's own: volume_create, volume_list, volume_delete, fs_create, store_get_status,\n" +
			"fs_get_status, ana_set_state (nvmf_subsystem_listener_set_ana_state by another name);\n" +
			"and on a cluster node (serve --cluster-node): cluster_get_status, node_add, node_remove,\n" +
			"cluster_volume_create, cluster_volume_set_hosts, cluster_volume_delete, volume_get_placement.\n" +
			"`target rpc rpc_get_methods` lists them. Every change applies to the running\n" +
			"target at once and is written to DATA/" + stateFileName + ", which the next start begins from.\n" +
			"A JSON-RPC error is printed in one line and exits 1.\n\n" +
			"Examples:\n" +
			"  target rpc volume_create '{\"name\":\"vol1\",\"size\":\"1GiB\"}'\n" +
			"  target rpc nvmf_subsystem_add_ns '{\"nqn\":\"" + defaultNQN + "\",\"namespace\":{\"bdev_name\":\"vol1\",\"nsid\":5}}'\n" +
			"  target rpc nvmf_subsystem_remove_ns '{\"nqn\":\"" + defaultNQN + "\",\"nsid\":5}'\n" +
			"  target rpc save_config > capsule-config.json   # then: target serve --config capsule-config.json",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "socket", Aliases: []string{"s"}, Value: defaultDataDir + "/" + socketFileName,
				Usage: "the admin socket `PATH` (serve's --rpc-socket)"},
			&cli.DurationFlag{Name: "timeout", Value: 60 * time.Second, Usage: "how long to wait for the answer"},
		},
		Action: func(c *cli.Context) error {
			if c.NArg() < 1 || c.NArg() > 2 {
				return cli.Exit("rpc: want METHOD [JSON-PARAMS] (see target rpc --help)", 2)
			}
			var params json.RawMessage
			if c.NArg() == 2 {
				p := strings.TrimSpace(c.Args().Get(1))
				if !json.Valid([]byte(p)) || (p[0] != '{' && p[0] != '[') {
					return cli.Exit(fmt.Sprintf("rpc: JSON-PARAMS %q is not a JSON object or array", c.Args().Get(1)), 2)
				}
				params = json.RawMessage(p)
			}
			ctx, cancel := context.WithTimeout(c.Context, c.Duration("timeout"))
			defer cancel()
			res, err := admin.Call(ctx, c.String("socket"), c.Args().First(), params)
			var rerr *admin.Error
			switch {
			case errors.As(err, &rerr):
				return cli.Exit(oneLine(rerr.Message), 1)
			case err != nil:
				return cli.Exit(oneLine(fmt.Sprintf("rpc: %s: %v (is `target serve` running?)", c.String("socket"), err)), 1)
			}
			var out bytes.Buffer
			if err := json.Indent(&out, res, "", "  "); err != nil {
				return cli.Exit(fmt.Sprintf("rpc: the answer is not JSON: %v", err), 1)
			}
			out.WriteByte('\n')
			_, err = c.App.Writer.Write(out.Bytes())
			return err
		},
	}
}

// oneLine joins the lines of a message.
func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }
