package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/capsule-storage/capsule/internal/admin"
	"github.com/capsule-storage/capsule/internal/cluster"
	"github.com/capsule-storage/capsule/internal/clusternode"
	"github.com/capsule-storage/capsule/nvmeof/target"
)

// clusterConfig is `serve`'s cluster part: with a node ID, the target is
// a member of a capsule cluster (internal/clusternode).
type clusterConfig struct {
	// Node is this node's ID in the cluster map; "" runs no cluster.
	Node string
	// Domain is its failure domain above the node (a rack), if any.
	Domain string
	// Etcd are the endpoints of the cluster's etcd; none runs an
	// embedded single-member etcd in DATA/etcd on EtcdListen.
	Etcd       []string
	EtcdListen string
	// Devices are the device directories the node contributes; none
	// means DATA/cluster/d0.
	Devices []string
	// Advertise are the URLs peers reach this node at; none means the
	// listeners that name a host (not shm, not 0.0.0.0), with the ports
	// they were given (for port 0).
	Advertise []string
	// HeadTTL is the lease of each volume this node serves.
	HeadTTL time.Duration
	// RebuildRate limits the reads of the rebuilds and moves this node
	// runs as a head, bytes per second; 0 is unlimited.
	RebuildRate int64
}

const (
	defaultEtcdListen  = "http://127.0.0.1:2379"
	defaultHeadTTL     = 10 * time.Second
	defaultRebuildRate = 64 << 20
)

func clusterFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "cluster-node", Usage: "join a capsule cluster as node `ID`: contribute the --cluster-device directories and serve volumes of the cluster map"},
		&cli.StringFlag{Name: "domain", Usage: "the node's failure domain `NAME` (a rack) for volumes spread by domain"},
		&cli.StringSliceFlag{Name: "etcd", Usage: "the cluster's etcd endpoint `URL` (repeatable); none runs an embedded single-member etcd in DATA/etcd"},
		&cli.StringFlag{Name: "etcd-listen", Value: defaultEtcdListen, Usage: "client `URL` of the embedded etcd"},
		&cli.StringSliceFlag{Name: "cluster-device", Usage: "a device `DIR` the node contributes to the cluster (repeatable; default DATA/cluster/d0)"},
		&cli.StringSliceFlag{Name: "advertise", Usage: "`URL` peers reach this node at (repeatable; default the --listen URLs with a host)"},
		&cli.StringFlag{Name: "rebuild-rate", Value: "64MiB", Usage: "limit the reads of a rebuild or move this node runs as a head, per second (0: unlimited)"},
		&cli.DurationFlag{Name: "head-ttl", Value: defaultHeadTTL, Usage: "lease of each volume this node serves: a failed node's volumes move after about this long"},
	}
}

func clusterConfigFromFlags(c *cli.Context) (clusterConfig, error) {
	cc := clusterConfig{
		Node: c.String("cluster-node"), Domain: c.String("domain"), Etcd: c.StringSlice("etcd"),
		EtcdListen: c.String("etcd-listen"), Devices: c.StringSlice("cluster-device"),
		Advertise: c.StringSlice("advertise"), HeadTTL: c.Duration("head-ttl"),
	}
	rate, err := parseSize(strings.TrimSuffix(strings.TrimSpace(c.String("rebuild-rate")), "/s"))
	if err != nil {
		return cc, fmt.Errorf("--rebuild-rate: %v (for example 64MiB, or 0 for no limit)", err)
	}
	cc.RebuildRate = rate
	return cc, nil
}

// validate checks the cluster flags against the listeners.
func (cc *clusterConfig) validate(listeners []string) error {
	if cc.Node == "" {
		if cc.Domain != "" || len(cc.Etcd) > 0 || len(cc.Devices) > 0 || len(cc.Advertise) > 0 {
			return errors.New("--domain, --etcd, --cluster-device and --advertise need --cluster-node")
		}
		return nil
	}
	probe := cluster.Node{ID: cc.Node, Domain: cc.Domain, Addrs: []string{"x"}, State: cluster.Active}
	if err := probe.Validate(); err != nil {
		return fmt.Errorf("--cluster-node/--domain: %v", err)
	}
	if cc.HeadTTL < 2*time.Second {
		return fmt.Errorf("--head-ttl %v: at least 2s (etcd's shortest lease)", cc.HeadTTL)
	}
	for _, e := range cc.Etcd {
		if _, err := url.Parse(e); err != nil {
			return fmt.Errorf("--etcd %s: %v", e, err)
		}
	}
	if len(cc.Advertise) == 0 && len(advertised(listeners)) == 0 {
		return errors.New("--cluster-node: no --listen URL names a host peers can reach (shm, 0.0.0.0): give --advertise URL")
	}
	for _, a := range cc.Advertise {
		if err := admin.CheckListenURL(a); err != nil {
			return fmt.Errorf("--advertise %s: %w", a, err)
		}
	}
	return nil
}

// advertised keeps the listener URLs that name a host.
func advertised(listeners []string) []string {
	var out []string
	for _, l := range listeners {
		scheme, rest, ok := strings.Cut(l, "://")
		if !ok || scheme == "shm" {
			continue
		}
		host, _, err := net.SplitHostPort(rest)
		if err != nil {
			continue
		}
		if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
			continue
		}
		out = append(out, l)
	}
	return out
}

// rebuildRate is the node's RebuildRate for the flag's: 0 is no limit.
func rebuildRate(flag int64) int64 {
	if flag == 0 {
		return -1
	}
	return flag
}

// startCluster joins the cluster: etcd (embedded when none is given),
// the map, and the node. It returns what the ready line adds and how to
// stop, in reverse order.
func startCluster(ctx context.Context, cc clusterConfig, dataDir string, t *target.Target, rpc *admin.Server,
	node *atomic.Pointer[clusternode.Node], log *slog.Logger) (string, func(), error) {
	var stops []func()
	stop := func() {
		for i := len(stops) - 1; i >= 0; i-- {
			stops[i]()
		}
	}
	endpoints := cc.Etcd
	if len(endpoints) == 0 {
		e, err := cluster.StartEmbedded(cluster.EmbedOptions{Dir: filepath.Join(dataDir, "etcd"), Name: cc.Node, ClientURL: cc.EtcdListen})
		if err != nil {
			return "", stop, fmt.Errorf("embedded etcd (--etcd-listen %s): %w", cc.EtcdListen, err)
		}
		stops = append(stops, e.Close)
		endpoints = e.Endpoints()
	}
	cli, err := cluster.Connect(endpoints)
	if err != nil {
		stop()
		return "", func() {}, fmt.Errorf("etcd %s: %w", strings.Join(endpoints, ","), err)
	}
	stops = append(stops, func() { cli.Close() })
	devs := cc.Devices
	if len(devs) == 0 {
		devs = []string{filepath.Join(dataDir, "cluster", "d0")}
	}
	var devices []clusternode.Device
	for i, d := range devs {
		devices = append(devices, clusternode.Device{ID: fmt.Sprintf("d%d", i), Dir: d})
	}
	addrs := cc.Advertise
	if len(addrs) == 0 {
		addrs = advertised(t.Listeners())
	}
	jctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	n, err := clusternode.Start(jctx, clusternode.Config{
		Map: cluster.New(cli, ""), ID: cc.Node, Domain: cc.Domain, Devices: devices,
		Target: t, Addrs: addrs, HeadTTL: cc.HeadTTL, Log: log, RebuildRate: rebuildRate(cc.RebuildRate),
	})
	if err != nil {
		stop()
		return "", func() {}, fmt.Errorf("joining the cluster as %s (etcd %s): %w", cc.Node, strings.Join(endpoints, ","), err)
	}
	stops = append(stops, func() {
		if err := n.Close(); err != nil {
			log.Warn("leaving the cluster", "err", err)
		}
	})
	n.Register(rpc)
	node.Store(n)
	return fmt.Sprintf(" cluster=%s etcd=%s", cc.Node, strings.Join(endpoints, ",")), stop, nil
}
