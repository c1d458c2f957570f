// Package clusternode runs a capsule cluster node inside `target serve`:
// it exports the node's devices to its peers, keeps its membership in
// the cluster map (package cluster), and serves the volumes whose head
// lease it holds.
//
//	n, _ := clusternode.Start(ctx, clusternode.Config{Map: m, ID: "n1",
//		Devices: []clusternode.Device{{ID: "d0", Dir: "/srv/d0"}},
//		Target: tgt, Addrs: []string{"tcp://10.0.0.1:4420"}})
//	defer n.Close()
//
// # Devices
//
// Each device directory is a namespace (NSID = its index + 1) of the
// node's internal subsystem, InternalNQN(ID), served by a device service
// (package devsvc). Only members may connect: the subsystem allows the
// host NQN of every node in the map (HostNQN(ID)), read again every
// second, and no other host. A device holds a directory per volume with
// a shard position on it.
//
// # Volumes
//
// Every node campaigns for every volume in the map. The live nodes are
// ranked for each volume by the rendezvous hash placement uses; the
// first campaigns at once and each other waits its rank times the head
// TTL first, so a volume is served by its preferred node whenever that
// node is up, and by the next one within about a TTL when it is not.
// The node that gets the head lease (cluster.Head) opens the volume's
// chunk store on the K+M devices the map places it on, each through its
// node's device service (over NVMe-oF; this node's own devices through
// their device services directly, devsvc.NewLocal, so that every change
// passes the device's fence all the same), with the
// metadata replicas as meta.log (chunkstore.WithMetaLog: a device
// service has no host path). It creates the store on first use and
// serves the store's volume "data"; when the lease is lost it stops: the
// volume's I/O drains, the store syncs and closes. A device whose node
// cannot be reached within DeviceTimeout is counted out, and the store
// serves degraded (up to M such devices).
//
// # Paths, ANA and discovery (export.go)
//
// Every node serves every volume of the map as namespace 1 of
// VolumeNQN(name), with the same NGUID and UUID (the volume's UUID) and
// size everywhere: one path per node, as an NVMe subsystem with several
// controllers. The namespace's ANA group is Optimized on the head's
// listeners and Inaccessible on every other node's, so a multipath host
// (Linux native multipath, SPDK's bdev_nvme, host.DialMultipath) sends
// its I/O to the head, is told by an ANA Change event when the head
// moves, and retries on the new head what the old one refused. A head
// turns Inaccessible before it drains and closes the store; a new one
// turns Optimized once its store is open. Each node gives out controller
// IDs from a range of its own (cluster.CNTLIDRange, by the node's number
// in the map), since hosts refuse one CNTLID on two paths of a
// subsystem. A node's discovery log lists its own paths, then every
// other live node's paths to every volume and a referral to its
// discovery subsystem, so that `nvme connect-all` or host.Discover at
// any one node finds them all.

// # Maintenance (maintain.go)
//
// The head looks after its volumes every MaintainEvery (2 s), one step
// at a time: a position the map gives a device other than the one the
// store uses is moved there; a position out of use whose device's node
// is live again is rebuilt in place (the volume's directory there
// emptied first: its shards are stale); and a move of the volume's plan
// (cluster.Plan: a node added, a node draining) is written to the map and
// carried out in the next step: the move of a position out of use (a dead
// node drained) at once, any other only when every position is in use. A move takes the old device out of use (chunkstore's Retire),
// empties the volume's directory on the new one and rebuilds the
// position there (Rebuild, at most RebuildRate bytes per second of
// reads), so the volume is degraded by one device while it runs. The map
// names the new device before the rebuild starts, so a head that dies
// midway leaves the next one to resume it. cluster_get_status lists the
// rebuilds a node runs, with their progress.
//
// # Fencing
//
// Two layers keep a replaced head from writing. The namespace's device
// checks Head.Valid before each write, FUA write, Write Zeroes, Discard
// and Flush, and fails it with ANA Transition (a path error: the host
// retries it, on the next head) once the lease is not known to be held;
// and every change it sends to a device carries the
// head's epoch, which the device refuses once a newer head has written
// (devsvc, "Fencing").
//
// # Hosts
//
// A volume's subsystem lets in the hosts the map lists for it
// (Volume.Hosts; cluster_volume_create's "hosts", changed with
// cluster_volume_set_hosts), on every node within a second of a change,
// or any host when it lists none. As with nvmf_subsystem_remove_host, a
// host taken off the list keeps the controllers it has.
//
// # What protects the internal subsystem
//
// A host NQN names a host; it does not prove who the host is, and
// capsule has no in-band authentication (DH-HMAC-CHAP) or TLS yet. So the
// allow-list keeps out hosts that are not members by mistake, not
// attackers: anyone who can reach a node's listener and presents a
// member's NQN can read and write its devices. What else protects them:
//
//   - The network. Run the cluster's listeners (--listen, --advertise)
//     on a private network or VLAN, or let a firewall admit only the
//     nodes' addresses and the hosts' to the NVMe-oF port; etcd likewise.
//   - The device service confines every name to the device's directory
//     (no "..", nothing absolute, nothing outside a volume's directory),
//     so a client reaches only volumes' shard files, never the node's
//     other files.
//   - The epoch fence refuses changes from a head older than the newest
//     that wrote; it stops a stale head, not a forger, who can send any
//     epoch.
//
// # Sharp edges
//
//   - A host that connects to one node alone (no multipath) reaches the
//     volume only while that node heads it.
//   - Controller IDs of nodes numbered 66 and up repeat those of nodes
//     1 to 65.
//   - A move makes the volume degraded by one device until it ends;
//     copying the position while the old device still serves would not.
//   - A device that fails for good on a live node is rebuilt in place
//     again, at longer and longer intervals after three rebuilds in an
//     hour (the head warns each time); drain its node to move the
//     position away. Nothing drains it by itself.
//   - A new node can be refused by a peer's internal subsystem for up
//     to a second, until that peer reads the map again.
package clusternode
