package metrics

import (
	"net/http"
	"sort"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/capsule-storage/capsule/chunkstore"
	"github.com/capsule-storage/capsule/fs/server"
	"github.com/capsule-storage/capsule/internal/admin"
	"github.com/capsule-storage/capsule/nvmeof/target"
)

// Prefix starts the name of every metric.
const Prefix = "capsule_"

// Sources are what the metrics are read from, at each scrape. Target is
// required; a nil function, or one that returns nil, leaves its metrics
// out.
type Sources struct {
	Target *target.Target
	// Store returns the erasure-coded store once it is open, or nil.
	Store func() *chunkstore.Store
	// FileSystems returns the open file namespaces by name.
	FileSystems func() map[string]*server.Server
	// Scrub returns the background scrubber's counters, or nil when there
	// is no scrubber.
	Scrub func() *ScrubStats
	// Cluster returns the cluster node's counters, or nil when the target
	// is no cluster node.
	Cluster func() *ClusterStats
}

// ClusterStats are a cluster node's: the volumes it heads, with the I/O
// their stores sent to each shard's device over the network, the
// rebuilds it runs, and its rebuild totals since the daemon started.
type ClusterStats struct {
	Volumes []ClusterVolume
	// RebuildsFinished counts the positions this node rebuilt to the end;
	// RebuiltBytes the data its rebuilds reconstructed, running ones
	// included.
	RebuildsFinished, RebuiltBytes int64
}

// ClusterVolume is a volume the node heads.
type ClusterVolume struct {
	Name   string
	Epoch  int64
	Shards []ClusterShard
	// Rebuild is the position being rebuilt, or nil.
	Rebuild *ClusterRebuild
}

// ClusterShard is the remote I/O of one position of a served volume's
// store since the store was opened, by op (read, write, sync, meta).
type ClusterShard struct {
	Position int
	Device   string // NODE/DEVICE
	Ops      []ClusterShardOps
}

// ClusterShardOps count one kind of command to a shard's device.
type ClusterShardOps struct {
	Op                 string
	Ops, Errors, Bytes uint64
	Seconds            float64 // send to completion, all of them
}

// ClusterRebuild is a running rebuild's progress.
type ClusterRebuild struct {
	Position             int
	To                   string // NODE/DEVICE
	Stripes, Done, Bytes int64
}

// ScrubStats are the background scrubber's state and its counts since
// the daemon started, over full passes and runs of the repair queue.
type ScrubStats struct {
	Running        bool      // a full pass is running
	Passes         int64     // full passes finished
	PassStripes    int64     // of the pass running: stripes to check in all
	PassDone       int64     // and checked so far
	LastPassEnd    time.Time // zero before the first pass ends
	Checked        int64     // stripes checked
	Damaged        int64     // stripes found damaged
	Repaired       int64     // stripes repaired
	Unrecoverable  int64     // stripes found unrecoverable
	ShardsRepaired int64     // shards rewritten
	BytesRead      int64     // bytes read
}

// NewRegistry returns a registry holding capsule's collector over src,
// and nothing else (no Go runtime or process metrics: every name starts
// with Prefix).
func NewRegistry(src Sources) (*prometheus.Registry, error) {
	reg := prometheus.NewRegistry()
	if err := reg.Register(newCollector(src)); err != nil {
		return nil, err
	}
	return reg, nil
}

// Handler serves the registry's metrics in the text exposition format
// (or OpenMetrics, when the scraper asks for it), as /metrics does.
func Handler(reg *prometheus.Registry) http.Handler {
	return promhttp.HandlerFor(reg, promhttp.HandlerOpts{EnableOpenMetrics: true})
}

// desc is one metric family.
type desc struct {
	*prometheus.Desc
	kind prometheus.ValueType // for counters and gauges; histograms ignore it
}

func newDesc(kind prometheus.ValueType, name, help string, labels ...string) desc {
	return desc{prometheus.NewDesc(Prefix+name, help, labels, nil), kind}
}

// collector reads every source at scrape time.
type collector struct {
	src Sources

	nsOps, nsErrors, nsBytes, nsLatency, nsSize desc

	queueDepth, queueEntries desc

	controllers, ctrlConnections, ctrlConnects, ctrlReconnects, ctrlKeepAlive desc

	devState, devCapacity, devFree desc
	devOps, devErrors, devBytes    desc

	storeDegraded, storeStripesWritten, storeStripesRead, storeDegradedWrites desc
	storeReconstructions, storeReadFailures, storeShardFaults                 desc
	storeCorruptShards, storeShardsRepaired, storeRepairQueue                 desc
	storeAutoCommits, storeLive, storeDead, storeSlotsUsed                    desc
	storeSlotsFree, storeStripesOpen, storeCleanerBytes, storeHostBytes       desc
	storeDeviceBytes, storeWriteAmp                                           desc
	storeIdleBytes, storeCompactions, storeSlotsPunched                       desc
	storeWCBytes, storeWCDestaged                                             desc
	storeJournalRecords, storeJournalBytes                                    desc

	scrubRunning, scrubPasses, scrubPassStripes, scrubPassDone, scrubLastPass desc
	scrubChecked, scrubDamaged, scrubRepaired, scrubUnrecoverable             desc
	scrubShardsRepaired, scrubBytes                                           desc

	fsOps, fsErrors, fsBytes, fsInodes, fsUsed, fsHandles desc

	clVolume, clShardOps, clShardErrors, clShardBytes, clShardSeconds desc
	clRebuildStripes, clRebuildDone, clRebuilds, clRebuiltBytes       desc
}

func newCollector(src Sources) *collector {
	C, G := prometheus.CounterValue, prometheus.GaugeValue
	ns := []string{"nqn", "nsid", "op"}
	q := []string{"nqn", "cntlid", "qid"}
	sh := []string{"volume", "position", "device", "op"}
	return &collector{
		src: src,

		nsOps:     newDesc(C, "namespace_ops_total", "I/O commands completed on the namespace, by kind (op), failed ones included.", ns...),
		nsErrors:  newDesc(C, "namespace_errors_total", "I/O commands completed with an error status.", ns...),
		nsBytes:   newDesc(C, "namespace_bytes_total", "Data moved by the I/O commands that succeeded.", ns...),
		nsLatency: newDesc(C, "namespace_latency_seconds", "Time from a command's arrival on its queue to its response being ready.", ns...),
		nsSize:    newDesc(G, "namespace_size_bytes", "Size of the namespace.", "nqn", "nsid"),

		queueDepth:   newDesc(G, "queue_depth", "Commands received on the queue and not yet answered.", q...),
		queueEntries: newDesc(G, "queue_entries", "Entries of the queue (SQSIZE+1 of its Connect).", q...),

		controllers:     newDesc(G, "controllers", "Live controllers of the subsystem.", "nqn"),
		ctrlConnections: newDesc(G, "controller_connections", "Connected queues of the controller, its admin queue included.", "nqn", "cntlid", "hostnqn"),
		ctrlConnects:    newDesc(C, "controller_connects_total", "Controllers the host created on the subsystem.", "nqn", "hostnqn"),
		ctrlReconnects:  newDesc(C, "controller_reconnects_total", "Controllers the host created on the subsystem after its first.", "nqn", "hostnqn"),
		ctrlKeepAlive:   newDesc(C, "controller_keepalive_expiries_total", "Controllers of the host ended by their keep-alive timeout.", "nqn", "hostnqn"),

		devState:    newDesc(G, "device_state", "1 for the state the store's device is in, 0 for the others.", "device", "path", "state"),
		devCapacity: newDesc(G, "device_capacity_bytes", "Size of the file system that holds the device's directory.", "device", "path"),
		devFree:     newDesc(G, "device_free_bytes", "Free bytes of the file system that holds the device's directory.", "device", "path"),
		devOps:      newDesc(C, "device_ops_total", "Read and write calls to the device's shard file since the store was opened.", "device", "path", "op"),
		devErrors:   newDesc(C, "device_errors_total", "Those calls that failed.", "device", "path"),
		devBytes:    newDesc(C, "device_bytes_total", "Bytes read from and written to the device's shard file since the store was opened.", "device", "path", "op"),

		storeDegraded:        newDesc(G, "store_degraded", "1 when a device of the erasure-coded store is not healthy.", "geometry"),
		storeStripesWritten:  newDesc(C, "store_stripes_written_total", "Stripes written since the store was opened."),
		storeStripesRead:     newDesc(C, "store_stripes_read_total", "Stripe reads since the store was opened."),
		storeDegradedWrites:  newDesc(C, "store_degraded_writes_total", "Stripes written with a device unavailable."),
		storeReconstructions: newDesc(C, "store_reconstructions_total", "Stripe reads served by reconstructing from parity."),
		storeReadFailures:    newDesc(C, "store_read_failures_total", "Stripe reads that failed with too few good shards."),
		storeShardFaults:     newDesc(C, "store_shard_faults_total", "Shard faults met by reads, by kind.", "kind"),
		storeCorruptShards:   newDesc(C, "store_corrupt_shards_total", "Shards reads found corrupt (checksum or header)."),
		storeShardsRepaired:  newDesc(C, "store_shards_repaired_total", "Shards rewritten by scrub, the repair queue and rebuild."),
		storeRepairQueue:     newDesc(G, "store_repair_queue_stripes", "Stripes reads found damaged, waiting for repair."),
		storeAutoCommits:     newDesc(C, "store_auto_commits_total", "Checkpoints made in the background."),
		storeLive:            newDesc(G, "store_live_bytes", "Data the volume maps point at."),
		storeDead:            newDesc(G, "store_dead_bytes", "Data space in slots no map points at: what the cleaner can reclaim."),
		storeSlotsUsed:       newDesc(G, "store_slots_used", "Stripe slots holding a stripe."),
		storeSlotsFree:       newDesc(G, "store_slots_free", "Stripe slots below the high-water mark holding none."),
		storeStripesOpen:     newDesc(G, "store_stripes_open", "Log stripes in memory: open, or being written."),
		storeCleanerBytes:    newDesc(C, "store_cleaner_bytes_total", "Data the cleaner moved since the store was opened."),
		storeHostBytes:       newDesc(C, "store_host_bytes_total", "Data written by callers since the store was opened."),
		storeDeviceBytes:     newDesc(C, "store_device_bytes_total", "Bytes written to the shard and journal files since the store was opened."),
		storeWriteAmp:        newDesc(G, "store_write_amplification", "Device bytes written per host byte since the store was opened (0 before any write)."),
		storeIdleBytes:       newDesc(C, "store_idle_cleaner_bytes_total", "Data the cleaner's idle passes moved (part of store_cleaner_bytes_total)."),
		storeWCBytes:         newDesc(G, "store_write_cache_bytes", "Volume data in the write cache, not yet in the log."),
		storeWCDestaged:      newDesc(C, "store_write_cache_destaged_bytes_total", "Data written from the write cache to the log since the store was opened."),
		storeCompactions:     newDesc(C, "store_compactions_total", "Idle passes finished, each with its trimming checkpoint."),
		storeSlotsPunched:    newDesc(C, "store_slots_punched_total", "Free slots whose blocks trimming checkpoints gave back to the file system, counted per device."),
		storeJournalRecords:  newDesc(C, "store_journal_records_total", "Flushes that made the open stripe's data durable in the journal instead of a short stripe."),
		storeJournalBytes:    newDesc(C, "store_journal_bytes_total", "Bytes those journal records wrote, every copy and header included (part of store_device_bytes_total)."),

		scrubRunning:        newDesc(G, "scrub_running", "1 while a full background scrub pass runs."),
		scrubPasses:         newDesc(C, "scrub_passes_total", "Full background scrub passes finished."),
		scrubPassStripes:    newDesc(G, "scrub_pass_stripes", "Stripes the running pass checks in all (0 when none runs)."),
		scrubPassDone:       newDesc(G, "scrub_pass_stripes_done", "Stripes the running pass has checked."),
		scrubLastPass:       newDesc(G, "scrub_last_pass_end_timestamp_seconds", "When the last full pass ended (absent before the first)."),
		scrubChecked:        newDesc(C, "scrub_stripes_checked_total", "Stripes the scrubber checked, in passes and repair-queue runs."),
		scrubDamaged:        newDesc(C, "scrub_stripes_damaged_total", "Stripes the scrubber found damaged: corruption found."),
		scrubRepaired:       newDesc(C, "scrub_stripes_repaired_total", "Stripes the scrubber repaired."),
		scrubUnrecoverable:  newDesc(C, "scrub_stripes_unrecoverable_total", "Stripes the scrubber found unrecoverable."),
		scrubShardsRepaired: newDesc(C, "scrub_shards_repaired_total", "Shards the scrubber rewrote."),
		scrubBytes:          newDesc(C, "scrub_read_bytes_total", "Bytes the scrubber read."),

		fsOps:     newDesc(C, "fs_ops_total", "File operations the file namespace ran, by operation.", "fs", "op"),
		fsErrors:  newDesc(C, "fs_errors_total", "File operations answered with an errno.", "fs", "op"),
		fsBytes:   newDesc(C, "fs_bytes_total", "File data moved by reads and writes that succeeded.", "fs", "op"),
		fsInodes:  newDesc(G, "fs_inodes", "Inodes of the file namespace.", "fs"),
		fsUsed:    newDesc(G, "fs_used_bytes", "File data allocated in the file namespace.", "fs"),
		fsHandles: newDesc(G, "fs_open_handles", "Open file handles of the file namespace.", "fs"),

		clVolume:         newDesc(G, "cluster_volume_epoch", "Epoch of the head lease for each cluster volume this node serves.", "volume"),
		clShardOps:       newDesc(C, "cluster_shard_ops_total", "Commands the served volume's store sent to a shard's device over the network, by kind.", sh...),
		clShardErrors:    newDesc(C, "cluster_shard_errors_total", "Of them, those that failed.", sh...),
		clShardBytes:     newDesc(C, "cluster_shard_bytes_total", "Data they read or wrote.", sh...),
		clShardSeconds:   newDesc(C, "cluster_shard_seconds_total", "Time from their sending to their completion, all together.", sh...),
		clRebuildStripes: newDesc(G, "cluster_rebuild_stripes", "Stripes the running rebuild of a position covers.", "volume", "position", "device"),
		clRebuildDone:    newDesc(G, "cluster_rebuild_stripes_done", "Stripes it has rebuilt.", "volume", "position", "device"),
		clRebuilds:       newDesc(C, "cluster_rebuilds_total", "Positions this node rebuilt to the end."),
		clRebuiltBytes:   newDesc(C, "cluster_rebuilt_bytes_total", "Data this node's rebuilds reconstructed, running ones included."),
	}
}

func (c *collector) descs() []desc {
	return []desc{
		c.nsOps, c.nsErrors, c.nsBytes, c.nsLatency, c.nsSize,
		c.queueDepth, c.queueEntries,
		c.controllers, c.ctrlConnections, c.ctrlConnects, c.ctrlReconnects, c.ctrlKeepAlive,
		c.devState, c.devCapacity, c.devFree, c.devOps, c.devErrors, c.devBytes,
		c.storeDegraded, c.storeStripesWritten, c.storeStripesRead, c.storeDegradedWrites,
		c.storeReconstructions, c.storeReadFailures, c.storeShardFaults,
		c.storeCorruptShards, c.storeShardsRepaired, c.storeRepairQueue,
		c.storeAutoCommits, c.storeLive, c.storeDead, c.storeSlotsUsed,
		c.storeSlotsFree, c.storeStripesOpen, c.storeCleanerBytes, c.storeHostBytes,
		c.storeDeviceBytes, c.storeWriteAmp, c.storeIdleBytes, c.storeCompactions, c.storeSlotsPunched,
		c.storeWCBytes, c.storeWCDestaged,
		c.storeJournalRecords, c.storeJournalBytes,
		c.scrubRunning, c.scrubPasses, c.scrubPassStripes, c.scrubPassDone, c.scrubLastPass,
		c.scrubChecked, c.scrubDamaged, c.scrubRepaired, c.scrubUnrecoverable,
		c.scrubShardsRepaired, c.scrubBytes,
		c.fsOps, c.fsErrors, c.fsBytes, c.fsInodes, c.fsUsed, c.fsHandles,
		c.clVolume, c.clShardOps, c.clShardErrors, c.clShardBytes, c.clShardSeconds,
		c.clRebuildStripes, c.clRebuildDone, c.clRebuilds, c.clRebuiltBytes,
	}
}

// Describe implements prometheus.Collector.
func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range c.descs() {
		ch <- d.Desc
	}
}

// Collect implements prometheus.Collector.
func (c *collector) Collect(ch chan<- prometheus.Metric) {
	emit := func(d desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d.Desc, d.kind, v, labels...)
	}
	c.collectTarget(ch, emit)
	if c.src.Store != nil {
		if s := c.src.Store(); s != nil {
			c.collectStore(s, emit)
		}
	}
	if c.src.Scrub != nil {
		if st := c.src.Scrub(); st != nil {
			c.collectScrub(st, emit)
		}
	}
	if c.src.FileSystems != nil {
		c.collectFS(c.src.FileSystems(), emit)
	}
	if c.src.Cluster != nil {
		if st := c.src.Cluster(); st != nil {
			c.collectCluster(st, emit)
		}
	}
}

func (c *collector) collectCluster(st *ClusterStats, emit emitFunc) {
	emit(c.clRebuilds, float64(st.RebuildsFinished))
	emit(c.clRebuiltBytes, float64(st.RebuiltBytes))
	for _, v := range st.Volumes {
		emit(c.clVolume, float64(v.Epoch), v.Name)
		for _, sh := range v.Shards {
			pos := strconv.Itoa(sh.Position)
			for _, o := range sh.Ops {
				emit(c.clShardOps, float64(o.Ops), v.Name, pos, sh.Device, o.Op)
				emit(c.clShardErrors, float64(o.Errors), v.Name, pos, sh.Device, o.Op)
				emit(c.clShardBytes, float64(o.Bytes), v.Name, pos, sh.Device, o.Op)
				emit(c.clShardSeconds, o.Seconds, v.Name, pos, sh.Device, o.Op)
			}
		}
		if r := v.Rebuild; r != nil {
			pos := strconv.Itoa(r.Position)
			emit(c.clRebuildStripes, float64(r.Stripes), v.Name, pos, r.To)
			emit(c.clRebuildDone, float64(r.Done), v.Name, pos, r.To)
		}
	}
}

type emitFunc func(d desc, v float64, labels ...string)

// latencyBounds are the upper bounds of target's latency buckets in
// seconds.
var latencyBounds = func() []float64 {
	b := make([]float64, target.LatencyBuckets)
	for i := range b {
		b[i] = target.LatencyBucketBound(i).Seconds()
	}
	return b
}()

func (c *collector) collectTarget(ch chan<- prometheus.Metric, emit emitFunc) {
	t := c.src.Target
	subs := append([]*target.Subsystem{t.DiscoverySubsystem()}, t.Subsystems()...)
	for _, s := range subs {
		nqn := s.NQN()
		infos := s.ControllerInfos()
		emit(c.controllers, float64(len(infos)), nqn)
		for _, ci := range infos {
			cntlid := strconv.Itoa(int(ci.CNTLID))
			emit(c.ctrlConnections, float64(len(ci.Queues)), nqn, cntlid, ci.HostNQN)
			for _, qi := range ci.Queues {
				qid := strconv.Itoa(int(qi.QID))
				emit(c.queueDepth, float64(qi.Outstanding), nqn, cntlid, qid)
				emit(c.queueEntries, float64(qi.Entries), nqn, cntlid, qid)
			}
		}
		for _, h := range s.HostStats() {
			emit(c.ctrlConnects, float64(h.Connects), nqn, h.HostNQN)
			emit(c.ctrlReconnects, float64(max(h.Connects, 1)-1), nqn, h.HostNQN)
			emit(c.ctrlKeepAlive, float64(h.KeepAliveExpiries), nqn, h.HostNQN)
		}
		for _, n := range s.Namespaces() {
			nsid := strconv.FormatUint(uint64(n.NSID()), 10)
			emit(c.nsSize, float64(n.Blocks()*uint64(n.BlockSize())), nqn, nsid)
			for k := range target.IOKind(target.NumIOKinds) {
				st := n.IOStats(k)
				op := k.String()
				emit(c.nsOps, float64(st.Ops), nqn, nsid, op)
				emit(c.nsErrors, float64(st.Errors), nqn, nsid, op)
				emit(c.nsBytes, float64(st.Bytes), nqn, nsid, op)
				buckets := make(map[float64]uint64, len(latencyBounds))
				var cum uint64
				for i, le := range latencyBounds {
					cum += st.Latency[i]
					buckets[le] = cum
				}
				ch <- prometheus.MustNewConstHistogram(c.nsLatency.Desc, st.Ops, st.LatencySum.Seconds(), buckets, nqn, nsid, op)
			}
		}
	}
}

func (c *collector) collectStore(s *chunkstore.Store, emit emitFunc) {
	in := s.Info()
	for _, d := range in.Devices {
		dev := strconv.Itoa(d.Pos)
		for _, state := range []chunkstore.DeviceState{chunkstore.DeviceHealthy, chunkstore.DeviceRebuilding,
			chunkstore.DeviceMissing, chunkstore.DeviceFailed} {
			emit(c.devState, boolValue(d.State == state), dev, d.Name, state.String())
		}
		emit(c.devOps, float64(d.Reads), dev, d.Name, "read")
		emit(c.devOps, float64(d.Writes), dev, d.Name, "write")
		emit(c.devErrors, float64(d.Errors), dev, d.Name)
		emit(c.devBytes, float64(d.ReadBytes), dev, d.Name, "read")
		emit(c.devBytes, float64(d.WriteBytes), dev, d.Name, "write")
		if total, free := admin.DiskSpace(d.Name); total > 0 {
			emit(c.devCapacity, float64(total), dev, d.Name)
			emit(c.devFree, float64(free), dev, d.Name)
		}
	}
	emit(c.storeDegraded, boolValue(in.Degraded), in.Geometry.String())
	st := s.Stats()
	emit(c.storeStripesWritten, float64(st.StripesWritten))
	emit(c.storeStripesRead, float64(st.StripesRead))
	emit(c.storeDegradedWrites, float64(st.DegradedWrites))
	emit(c.storeReconstructions, float64(st.Reconstructions))
	emit(c.storeReadFailures, float64(st.ReadFailures))
	emit(c.storeShardFaults, float64(st.ShardUnavailable), "unavailable")
	emit(c.storeShardFaults, float64(st.ShardIOErrors), "io_error")
	emit(c.storeShardFaults, float64(st.ShardChecksum), "checksum")
	emit(c.storeShardFaults, float64(st.ShardHeader), "header")
	emit(c.storeCorruptShards, float64(st.ShardChecksum+st.ShardHeader))
	emit(c.storeShardsRepaired, float64(st.ShardsRepaired))
	emit(c.storeRepairQueue, float64(st.RepairQueue))
	emit(c.storeAutoCommits, float64(st.AutoCommits))
	emit(c.storeLive, float64(st.LiveBytes))
	emit(c.storeDead, float64(st.DeadBytes))
	emit(c.storeSlotsUsed, float64(st.SlotsUsed))
	emit(c.storeSlotsFree, float64(st.SlotsFree))
	emit(c.storeStripesOpen, float64(st.StripesOpen))
	emit(c.storeCleanerBytes, float64(st.CleanerBytes))
	emit(c.storeHostBytes, float64(st.HostBytes))
	emit(c.storeDeviceBytes, float64(st.DeviceBytes))
	emit(c.storeWriteAmp, st.WriteAmplification)
	emit(c.storeIdleBytes, float64(st.IdleBytes))
	emit(c.storeCompactions, float64(st.Compactions))
	emit(c.storeSlotsPunched, float64(st.SlotsPunched))
	emit(c.storeJournalRecords, float64(st.JournalRecords))
	emit(c.storeJournalBytes, float64(st.JournalBytes))
	emit(c.storeWCBytes, float64(st.WriteCacheBytes))
	emit(c.storeWCDestaged, float64(st.WriteCacheDestaged))
}

func (c *collector) collectScrub(st *ScrubStats, emit emitFunc) {
	emit(c.scrubRunning, boolValue(st.Running))
	emit(c.scrubPasses, float64(st.Passes))
	emit(c.scrubPassStripes, float64(st.PassStripes))
	emit(c.scrubPassDone, float64(st.PassDone))
	if !st.LastPassEnd.IsZero() {
		emit(c.scrubLastPass, float64(st.LastPassEnd.UnixNano())/1e9)
	}
	emit(c.scrubChecked, float64(st.Checked))
	emit(c.scrubDamaged, float64(st.Damaged))
	emit(c.scrubRepaired, float64(st.Repaired))
	emit(c.scrubUnrecoverable, float64(st.Unrecoverable))
	emit(c.scrubShardsRepaired, float64(st.ShardsRepaired))
	emit(c.scrubBytes, float64(st.BytesRead))
}

func (c *collector) collectFS(fss map[string]*server.Server, emit emitFunc) {
	names := make([]string, 0, len(fss))
	for name := range fss {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		f := fss[name]
		st := f.Stats()
		emit(c.fsInodes, float64(st.Inodes), name)
		emit(c.fsUsed, float64(st.UsedBytes), name)
		emit(c.fsHandles, float64(st.Handles), name)
		for _, o := range f.OpStats() {
			emit(c.fsOps, float64(o.Ops), name, o.Op)
			emit(c.fsErrors, float64(o.Errors), name, o.Op)
			if o.Op == "read" || o.Op == "write" {
				emit(c.fsBytes, float64(o.Bytes), name, o.Op)
			}
		}
	}
}

func boolValue(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
