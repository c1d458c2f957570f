package main

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/capsule-storage/capsule/internal/cluster"
	"github.com/capsule-storage/capsule/internal/clusternode"
)

func TestFormatClusterStatus(t *testing.T) {
	st := clusternode.Status{Node: "n0",
		Members: []clusternode.MemberStatus{
			{Node: cluster.Node{ID: "n0", State: cluster.Active, Addrs: []string{"tcp://10.0.0.1:4420"},
				Devices: []cluster.Device{{ID: "d0", Capacity: 1 << 40}}}, Live: true},
			{Node: cluster.Node{ID: "n1", State: cluster.Draining}, Live: false},
		},
		Volumes: []clusternode.VolumeStatus{
			{Volume: cluster.Volume{Name: "a", Geometry: "2+1", Size: 1 << 30}, Head: &cluster.HeadInfo{Node: "n0", Epoch: 7},
				Report: &clusternode.VolumeReport{Node: "n0"}},
		},
	}
	text, pending := formatClusterStatus(st)
	assert.Empty(t, pending, "served, whole and placed")
	assert.Contains(t, text, "asked n0: 2 members, 1 live, 1 volumes")
	assert.Contains(t, text, "node n1           draining, down")
	assert.Contains(t, text, "d0 1.0 TiB")
	assert.Contains(t, text, "volume a          2+1 1.0 GiB, head n0 (epoch 7), whole")

	st.Volumes[0].Report.Out = []int{1}
	st.Volumes[0].Moves = []cluster.Move{{Volume: "a", Position: 1, From: cluster.DeviceRef{Node: "n1", Device: "d0"},
		To: cluster.DeviceRef{Node: "n0", Device: "d0"}}}
	st.Volumes = append(st.Volumes, clusternode.VolumeStatus{Volume: cluster.Volume{Name: "b", Geometry: "4+2", Size: 1 << 20}})
	st.MapError = "context deadline exceeded"
	text, pending = formatClusterStatus(st)
	assert.Contains(t, text, "degraded: positions [1] out of use")
	assert.Contains(t, text, "move pending: position 1 from n1/d0 to n0/d0")
	assert.Contains(t, text, "volume b          4+2 1.0 MiB, no head, unknown")
	assert.Equal(t, []string{"the map is out of reach", "a has 1 positions out of use", "a has 1 moves pending", "b has no head"}, pending)
}
