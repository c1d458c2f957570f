// Package cluster is capsule's cluster map: the members of a capsule
// cluster, their devices and failure domains, the erasure-coded volumes
// spread over them, and which node serves each volume. It lives in etcd
// (go.etcd.io/etcd/client/v3), which does the agreeing: capsule has no
// consensus of its own. One node with no etcd cluster given runs an
// embedded single-member etcd (StartEmbedded, go.etcd.io/etcd/server/v3's
// embed package).
//
//	cli, _ := cluster.Connect([]string{"http://10.0.0.1:2379"})
//	m := cluster.New(cli, "")                       // keys under /capsule/
//	mb, _ := m.Join(ctx, node, 10*time.Second)      // member, marked live
//	v, _ := m.CreateVolume(ctx, cluster.Volume{Name: "vol0", Geometry: "4+2", Size: 1 << 40})
//	h, _ := m.CampaignHead(ctx, "vol0", node.ID, cluster.HeadOptions{})
//	<-h.Lost()                                      // stop serving vol0
//
// # The map (map.go)
//
// Nodes, volumes, live keys and heads are etcd keys under a prefix (Map
// lists them). Every change is one transaction that compares the
// revisions it read, so concurrent changes never overwrite each other;
// UpdateNode and UpdateVolume retry a read-modify-write until it lands.
// A node leaves the map only drained (Draining), holding no shard and
// serving no volume (RemoveNode). Liveness (Join's live key under a
// member lease) informs operators and the choice of a head; safety never
// depends on it. A head's report of its volume (Head.Report: its store's
// health, a rebuild's progress) lives under the head's lease, so every
// node can answer an operator with it and it goes with the head.
//
// # Placement (placement.go)
//
// A volume is a chunk store of K+M devices; its K+M device positions go
// to devices on K+M distinct nodes (SpreadNode), or in K+M distinct
// failure domains named in the map (SpreadDomain: a rack, say). The
// choice is weighted rendezvous hashing (highest random weight): every
// device of an active node scores capacity / −ln(u), u a hash of the
// volume's and the device's names in (0, 1), and the best-scored devices
// that share no domain are taken in order. Why rendezvous rather than a
// CRUSH-like tree: the map is flat (nodes, optionally one domain level
// above them), the number of devices is small enough to score them all
// for each volume, and rendezvous gives the two properties that matter
// with no tuning: every node computes the same placement from the same
// map, and a change to the map moves only what it must. Adding a node
// moves only the positions its devices win, about (K+M)/N of all
// positions for N nodes of equal weight; removing or draining a node
// moves only the positions it held. Plan keeps every position whose
// device is still chosen and gives each other one a newly chosen device,
// so a move is one position at a time: rebuild it onto the new device
// from the others, then point the volume at it.
//
// # Heads and fencing (head.go)
//
// One node at a time serves a volume: the head, which holds the volume's
// head key under an etcd lease. The key's create revision is the head's
// epoch, larger for every later head. The holder renews the lease itself
// (KeepAliveOnce every TTL/3), timing each renewal from before it was
// sent, and treats the lease as held until that time plus the TTL etcd
// granted, minus a margin; past that, whether or not etcd answers, Valid
// fails and Lost closes. etcd cannot expire the lease, so cannot let
// another node create the key, before the TTL has passed since it
// received the renewal. So a partitioned head stops before its successor
// starts (TestHeadPartition), bounded by the TTL, given clocks that run
// at about the same rate; none needs to agree with another's time of
// day.
//
// # Concurrency
//
// Map and Head methods are safe for concurrent use. A Head runs one
// goroutine (renewals and the watch of its key) and one timer (the
// deadline) until it is lost or released.
//
// # Sharp edges
//
//   - etcd counts lease TTLs in whole seconds and raises a TTL below its
//     minimum (2 s with etcd's default heartbeat and election timeout).
//   - Valid compares the time: call it before each write. A head that
//     pauses longer than its margin between Valid and the write needs the
//     devices to refuse the write by its epoch.
//   - A Member's live key and a Head's key vanish at once on Close or
//     Release, and after the TTL when the process dies.
package cluster
