package clusternode

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/capsule-storage/capsule/internal/admin"
	"github.com/capsule-storage/capsule/internal/cluster"
	"github.com/capsule-storage/capsule/nvmeof/host"
)

// call sends one request to srv and returns its result or error.
func call(t *testing.T, srv *admin.Server, method string, params any) (json.RawMessage, *admin.Error) {
	t.Helper()
	p, err := json.Marshal(params)
	require.NoError(t, err)
	req := fmt.Sprintf(`{"jsonrpc":"2.0","id":1,"method":%q,"params":%s}`, method, p)
	var resp struct {
		Result json.RawMessage `json:"result"`
		Error  *admin.Error    `json:"error"`
	}
	require.NoError(t, json.Unmarshal(srv.Handle(context.Background(), json.RawMessage(req)), &resp))
	return resp.Result, resp.Error
}

func TestClusterRPC(t *testing.T) {
	e, err := cluster.StartEmbedded(cluster.EmbedOptions{Dir: t.TempDir()})
	require.NoError(t, err)
	t.Cleanup(e.Close)
	dir := t.TempDir()
	var nodes []*testNode
	for i := range 3 {
		nodes = append(nodes, startNode(t, e.Endpoints(), fmt.Sprintf("n%d", i), dir))
	}
	srv := admin.NewServer(nil)
	nodes[0].node.Register(srv)

	_, rerr := call(t, srv, "cluster_volume_create", map[string]any{"name": "v", "geometry": "2+1", "size": 8 << 20})
	require.Nil(t, rerr)
	_, rerr = call(t, srv, "cluster_volume_create", map[string]any{"name": "w", "geometry": "4+2", "size": 8 << 20})
	require.NotNil(t, rerr, "six shards on three nodes")
	assert.Equal(t, admin.CodeInvalidParams, rerr.Code)
	_, rerr = call(t, srv, "cluster_volume_create", map[string]any{"name": "v", "bogus": 1})
	require.NotNil(t, rerr, "unknown parameter")

	head := headOf(t, nodes, "v", "")
	// Every node's status carries the head's report of the volume.
	var st Status
	require.Eventually(t, func() bool {
		res, rerr := call(t, srv, "cluster_get_status", map[string]any{})
		require.Nil(t, rerr)
		st = Status{}
		require.NoError(t, json.Unmarshal(res, &st))
		return len(st.Volumes) == 1 && st.Volumes[0].Report != nil
	}, 10*time.Second, 50*time.Millisecond)
	assert.Equal(t, head.id, st.Volumes[0].Report.Node)
	assert.False(t, st.Volumes[0].Report.Degraded)
	assert.Empty(t, st.Volumes[0].Report.Out)
	require.Len(t, st.Members, 3)
	for _, m := range st.Members {
		assert.True(t, m.Live, m.ID)
	}
	require.Len(t, st.Volumes, 1)
	require.NotNil(t, st.Volumes[0].Head)
	assert.Len(t, st.Volumes[0].Shards, 3)
	assert.Empty(t, st.Volumes[0].Moves)

	// A volume's hosts: only they may connect, on every node.
	const h1 = "nqn.2026-12.io.example:h1"
	_, rerr = call(t, srv, "cluster_volume_set_hosts", map[string]any{"name": "v", "hosts": []string{"not an nqn"}})
	require.NotNil(t, rerr)
	_, rerr = call(t, srv, "cluster_volume_set_hosts", map[string]any{"name": "v", "hosts": []string{h1}})
	require.Nil(t, rerr)
	dialAs := func(n *testNode, hostNQN string) error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		c, err := host.Dial(ctx, n.addr, host.WithSubsystem(VolumeNQN("v")), host.WithHostNQN(hostNQN))
		if err == nil {
			c.Close()
		}
		return err
	}
	for _, n := range nodes {
		require.Eventually(t, func() bool { return dialAs(n, "nqn.2026-12.io.example:h2") != nil }, 5*time.Second, 50*time.Millisecond,
			"%s refuses another host", n.id)
		require.NoError(t, dialAs(n, h1), "%s lets the volume's host in", n.id)
	}
	_, rerr = call(t, srv, "cluster_volume_set_hosts", map[string]any{"name": "v", "hosts": []string{}})
	require.Nil(t, rerr)
	require.Eventually(t, func() bool { return dialAs(nodes[1], "nqn.2026-12.io.example:h2") == nil }, 5*time.Second, 50*time.Millisecond,
		"no hosts: any host")

	res, rerr := call(t, srv, "volume_get_placement", map[string]any{"name": "v"})
	require.Nil(t, rerr)
	assert.Contains(t, string(res), `"moves":[]`)

	// A node is drained first; one that holds shards stays.
	res, rerr = call(t, srv, "node_remove", map[string]any{"id": "n2"})
	require.Nil(t, rerr)
	assert.Contains(t, string(res), "draining")
	_, rerr = call(t, srv, "node_remove", map[string]any{"id": "n2"})
	require.NotNil(t, rerr, "removed while it holds a shard")
	// With n2 draining, 2+1 has nowhere to go: the placement says so.
	_, rerr = call(t, srv, "volume_get_placement", map[string]any{"name": "v"})
	require.NotNil(t, rerr)

	// A node added ahead of its start takes the placement's shard.
	_, rerr = call(t, srv, "node_add", map[string]any{"id": "n3", "addrs": []string{"tcp://127.0.0.1:9"},
		"state": "active", "devices": []map[string]any{{"id": "d0", "capacity": 1 << 40}}})
	require.Nil(t, rerr)
	res, rerr = call(t, srv, "volume_get_placement", map[string]any{"name": "v"})
	require.Nil(t, rerr)
	assert.Contains(t, string(res), `"to":{"node":"n3","device":"d0"}`)
	_, rerr = call(t, srv, "node_add", map[string]any{"id": "n3", "addrs": []string{"tcp://127.0.0.1:9"}, "state": "active"})
	require.NotNil(t, rerr, "a node twice")
}
