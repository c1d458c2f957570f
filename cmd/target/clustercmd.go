package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/capsule-storage/capsule/chunkstore"
	"github.com/capsule-storage/capsule/internal/admin"
	"github.com/capsule-storage/capsule/internal/clusternode"
)

func clusterCommand() *cli.Command {
	return &cli.Command{
		Name:  "cluster",
		Usage: "look at a capsule cluster through one node's admin socket",
		Subcommands: []*cli.Command{{
			Name:  "status",
			Usage: "print the cluster's members and volumes, and the progress of rebuilds and moves",
			Description: "Asks one node (cluster_get_status on its admin socket) and prints the members, each volume\n" +
				"with its head, its health as the head reports it, the moves its placement still wants, and a\n" +
				"rebuild's progress: a bar on a terminal, a line every 5 % otherwise.\n\n" +
				"With --wait it keeps watching until every volume is served, whole (no device out of use) and\n" +
				"placed (no move pending), and exits 0 then; 1 if --timeout passes first. Run it between the\n" +
				"steps of a rolling restart, or after node_add or node_remove.",
			Flags: []cli.Flag{
				&cli.StringFlag{Name: "socket", Aliases: []string{"s"}, Value: defaultDataDir + "/" + socketFileName,
					Usage: "the admin socket `PATH` of any node (serve's --rpc-socket)"},
				&cli.BoolFlag{Name: "wait", Usage: "watch until every volume is served, whole and placed"},
				&cli.DurationFlag{Name: "timeout", Value: 30 * time.Minute, Usage: "how long --wait waits"},
			},
			Action: func(c *cli.Context) error {
				if c.NArg() > 0 {
					return cli.Exit("cluster status: no arguments (see target cluster status --help)", 2)
				}
				return clusterStatus(c.Context, c.App.Writer, c.String("socket"), c.Bool("wait"), c.Duration("timeout"))
			},
		}},
	}
}

// clusterStatus prints the status once, or with wait until the cluster
// has settled.
func clusterStatus(ctx context.Context, w io.Writer, sock string, wait bool, timeout time.Duration) error {
	if wait {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	bars := map[string]*progressDisplay{}
	printed := ""
	for {
		st, err := getClusterStatus(ctx, sock)
		if err != nil {
			if wait && ctx.Err() != nil {
				return cli.Exit(fmt.Sprintf("cluster status: not settled within %v", timeout), 1)
			}
			return cli.Exit(oneLine(fmt.Sprintf("cluster status: %s: %v", sock, err)), 1)
		}
		text, pending := formatClusterStatus(st)
		if !wait {
			_, err := io.WriteString(w, text)
			return err
		}
		// Watching: the summary when it changes, the rebuilds as bars.
		if text != printed {
			io.WriteString(w, text)
			printed = text
		}
		for _, v := range st.Volumes {
			if v.Report == nil || v.Report.Rebuild == nil {
				continue
			}
			r := v.Report.Rebuild
			key := fmt.Sprintf("%s/%d/%s", v.Name, r.Position, r.To)
			d := bars[key]
			if d == nil {
				d = newProgressDisplay(w, fmt.Sprintf("rebuild %s position %d on %s", v.Name, r.Position, r.To))
				bars[key] = d
			}
			d.update(chunkstore.Progress{Stripes: r.Stripes, Done: r.Done, Bytes: r.Bytes})
		}
		if len(pending) == 0 {
			for _, d := range bars {
				d.finish()
			}
			fmt.Fprintln(w, "cluster settled: every volume served, whole and placed")
			return nil
		}
		select {
		case <-ctx.Done():
			return cli.Exit(fmt.Sprintf("cluster status: not settled within %v: %s", timeout, strings.Join(pending, "; ")), 1)
		case <-time.After(time.Second):
		}
	}
}

func getClusterStatus(ctx context.Context, sock string) (clusternode.Status, error) {
	var st clusternode.Status
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	res, err := admin.Call(cctx, sock, "cluster_get_status", nil)
	var rerr *admin.Error
	if errors.As(err, &rerr) {
		return st, errors.New(rerr.Message)
	}
	if err != nil {
		return st, err
	}
	return st, json.Unmarshal(res, &st)
}

// formatClusterStatus renders st, and says what keeps the cluster from
// being settled (nothing when every volume is served, whole and placed).
func formatClusterStatus(st clusternode.Status) (text string, pending []string) {
	var b strings.Builder
	live := 0
	for _, m := range st.Members {
		if m.Live {
			live++
		}
	}
	fmt.Fprintf(&b, "asked %s: %d members, %d live, %d volumes\n", st.Node, len(st.Members), live, len(st.Volumes))
	if st.MapError != "" {
		fmt.Fprintf(&b, "the map is out of reach: %s\n", st.MapError)
		pending = append(pending, "the map is out of reach")
	}
	for _, m := range st.Members {
		state := string(m.State)
		if !m.Live {
			state += ", down"
		}
		var devs []string
		for _, d := range m.Devices {
			devs = append(devs, fmt.Sprintf("%s %s", d.ID, formatBytes(int64(d.Capacity))))
		}
		fmt.Fprintf(&b, "  node %-12s %-16s %s  [%s]\n", m.ID, state, strings.Join(m.Addrs, ","), strings.Join(devs, ", "))
	}
	for _, v := range st.Volumes {
		head, health := "no head", "unknown"
		switch {
		case v.Head == nil:
			pending = append(pending, v.Name+" has no head")
		case v.Report == nil:
			head = fmt.Sprintf("head %s (epoch %d)", v.Head.Node, v.Head.Epoch)
			pending = append(pending, v.Name+"'s head has not reported")
		default:
			head = fmt.Sprintf("head %s (epoch %d)", v.Head.Node, v.Head.Epoch)
			health = "whole"
			if len(v.Report.Out) > 0 {
				health = fmt.Sprintf("degraded: positions %v out of use", v.Report.Out)
				pending = append(pending, fmt.Sprintf("%s has %d positions out of use", v.Name, len(v.Report.Out)))
			}
		}
		fmt.Fprintf(&b, "  volume %-10s %s %s, %s, %s\n", v.Name, v.Geometry, formatBytes(int64(v.Size)), head, health)
		if v.Error != "" {
			fmt.Fprintf(&b, "    placement: %s\n", v.Error)
		}
		for _, m := range v.Moves {
			fmt.Fprintf(&b, "    move pending: position %d from %s to %s\n", m.Position, m.From, m.To)
		}
		if len(v.Moves) > 0 {
			pending = append(pending, fmt.Sprintf("%s has %d moves pending", v.Name, len(v.Moves)))
		}
	}
	return b.String(), pending
}
