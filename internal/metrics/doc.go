// Package metrics exports capsule's counters to Prometheus: the glue
// between the Stats of the packages that count (nvmeof/target,
// chunkstore, fs/server, the daemon's scrubber) and
// github.com/prometheus/client_golang, which no other package imports.
// `target serve --metrics ADDR` serves them at http://ADDR/metrics.
//
//	reg, _ := metrics.NewRegistry(metrics.Sources{Target: t, Store: svc.Store, FileSystems: svc.FileSystems, Scrub: ...})
//	http.Handle("/metrics", metrics.Handler(reg))
//
// # The model
//
// One collector reads every source at scrape time and builds constant
// metrics from what it finds, so a namespace, controller, device or file
// namespace that appears or goes away while the target runs appears in or
// leaves the next scrape. The packages below keep their own counters as
// atomics (the I/O path of nvmeof/target allocates nothing for them:
// TestDispatchAllocatesNothing); nothing here runs on the I/O path.
// Counters count since the thing they belong to was created: the daemon's
// start for the target's and the scrubber's, the store's Open for the
// store's, the namespace's addition for a namespace's. Prometheus takes a
// restart as a counter reset.
//
// The registry holds this collector alone: no Go runtime or process
// metrics, so every name starts with capsule_. The output passes
// `promtool check metrics` (TestLint here, and the integration test
// TestMetricsPrometheus, which also has a real Prometheus server scrape
// it).
//
// # The metrics
//
// Labels: nqn is a subsystem's NQN (the discovery subsystem's too), nsid
// a namespace ID, op the kind of I/O command (read, write, flush,
// write_zeroes, dataset_management, vendor: the file service's commands),
// cntlid and qid a controller's and a queue's IDs, hostnqn a host's NQN
// (the empty one gathers the hosts past a subsystem's first 1024), device
// a store device's position and path its directory, fs a file namespace's
// name.
//
//	capsule_namespace_ops_total{nqn,nsid,op}            counter    I/O commands completed, failed ones included
//	capsule_namespace_errors_total{nqn,nsid,op}         counter    of them, completed with an error status
//	capsule_namespace_bytes_total{nqn,nsid,op}          counter    data moved by those that succeeded
//	capsule_namespace_latency_seconds{nqn,nsid,op}      histogram  arrival on the queue to response ready; buckets 1 µs·2^i up to 8.4 s
//	capsule_namespace_size_bytes{nqn,nsid}              gauge
//	capsule_queue_depth{nqn,cntlid,qid}                 gauge      commands received and not yet answered
//	capsule_queue_entries{nqn,cntlid,qid}               gauge      the queue's size (SQSIZE+1)
//	capsule_controllers{nqn}                            gauge      live controllers
//	capsule_controller_connections{nqn,cntlid,hostnqn}  gauge      connected queues of a controller, admin queue included
//	capsule_controller_connects_total{nqn,hostnqn}      counter    controllers a host created
//	capsule_controller_reconnects_total{nqn,hostnqn}    counter    those after its first
//	capsule_controller_keepalive_expiries_total{nqn,hostnqn} counter controllers ended by the keep-alive timeout
//	capsule_device_state{device,path,state}             gauge      1 for the device's state (healthy, rebuilding, missing, failed), 0 for the others
//	capsule_device_capacity_bytes{device,path}          gauge      size of the file system under the device's directory
//	capsule_device_free_bytes{device,path}              gauge      its free bytes
//	capsule_device_ops_total{device,path,op}            counter    read and write calls to the device's shard file
//	capsule_device_errors_total{device,path}            counter    those that failed
//	capsule_device_bytes_total{device,path,op}          counter    bytes they read and wrote
//	capsule_store_degraded{geometry}                    gauge      1 when any device is not healthy
//	capsule_store_stripes_written_total                 counter
//	capsule_store_stripes_read_total                    counter
//	capsule_store_degraded_writes_total                 counter    stripes written with a device unavailable
//	capsule_store_reconstructions_total                 counter    EC reconstructions: reads served from parity
//	capsule_store_read_failures_total                   counter    reads with too few good shards
//	capsule_store_shard_faults_total{kind}              counter    faults reads met: unavailable, io_error, checksum, header
//	capsule_store_corrupt_shards_total                  counter    corruption reads found (checksum and header faults)
//	capsule_store_shards_repaired_total                 counter    shards rewritten by scrub, the repair queue and rebuild
//	capsule_store_repair_queue_stripes                  gauge      stripes waiting for the repair queue
//	capsule_store_auto_commits_total                    counter    checkpoints made in the background
//	capsule_store_live_bytes, capsule_store_dead_bytes  gauge      data the maps point at; what the cleaner can reclaim
//	capsule_store_slots_used, capsule_store_slots_free  gauge      stripe slots
//	capsule_store_stripes_open                          gauge      log stripes in memory
//	capsule_store_cleaner_bytes_total                   counter    cleaner activity: data it moved
//	capsule_store_host_bytes_total                      counter    data written by callers
//	capsule_store_device_bytes_total                    counter    bytes written to the shard files
//	capsule_store_write_amplification                   gauge      device bytes per host byte since Open
//	capsule_store_idle_cleaner_bytes_total              counter    data the cleaner's idle passes moved
//	capsule_store_compactions_total                     counter    idle passes finished (each with a trimming checkpoint)
//	capsule_store_slots_punched_total                   counter    free slots given back to the file system, per device
//	capsule_store_write_cache_bytes                     gauge      volume data in the write cache, not yet in the log
//	capsule_store_write_cache_destaged_bytes_total      counter    data written from the write cache to the log
//	capsule_scrub_running                               gauge      1 while a full pass runs
//	capsule_scrub_passes_total                          counter    full passes finished
//	capsule_scrub_pass_stripes, capsule_scrub_pass_stripes_done gauge  scrub progress: of the running pass, stripes in all and checked
//	capsule_scrub_last_pass_end_timestamp_seconds       gauge      absent before the first pass ends
//	capsule_scrub_stripes_checked_total                 counter    passes and repair-queue runs together
//	capsule_scrub_stripes_damaged_total                 counter    corruption the scrubber found
//	capsule_scrub_stripes_repaired_total                counter    and repaired
//	capsule_scrub_stripes_unrecoverable_total           counter
//	capsule_scrub_shards_repaired_total                 counter
//	capsule_scrub_read_bytes_total                      counter
//	capsule_fs_ops_total{fs,op}                         counter    file operations run (lookup, create, read, write, ...)
//	capsule_fs_errors_total{fs,op}                      counter    of them, answered with an errno (ENOENT included)
//	capsule_fs_bytes_total{fs,op}                       counter    file data of reads and writes that succeeded
//	capsule_fs_inodes{fs}, capsule_fs_used_bytes{fs}, capsule_fs_open_handles{fs} gauge
//	capsule_cluster_volume_epoch{volume}                gauge      head lease epoch of each cluster volume this node serves
//	capsule_cluster_shard_ops_total{volume,position,device,op} counter  commands a served volume's store sent to a shard's device over the network (op: read, write, sync, meta)
//	capsule_cluster_shard_errors_total{volume,position,device,op} counter  of them, failed
//	capsule_cluster_shard_bytes_total{volume,position,device,op} counter  data they read or wrote
//	capsule_cluster_shard_seconds_total{volume,position,device,op} counter  their time from send to completion, summed (÷ ops: mean latency)
//	capsule_cluster_rebuild_stripes{volume,position,device}, capsule_cluster_rebuild_stripes_done{...} gauge  the running rebuild of a position onto device
//	capsule_cluster_rebuilds_total                      counter    positions this node rebuilt to the end
//	capsule_cluster_rebuilt_bytes_total                 counter    data its rebuilds reconstructed, running ones included
//
// The store's, scrubber's and device metrics appear once the store is
// open (a target with only mem: and file: namespaces has none); the
// cluster's on a cluster node (`serve --cluster-node`), the shard
// counters counting since the node last opened the volume's store. In a
// cluster device is NODE/DEVICE.
//
// # Sharp edges
//
//   - A broadcast Flush (NSID FFFFFFFFh) belongs to no namespace and is
//     not counted.
//   - Latency leaves out the response's trip back to the host (and a
//     read's data): it ends when the response is ready to be sent.
//   - Per-device bytes and errors are not exported: chunkstore counts
//     reads, writes and errors per device internally but does not expose
//     them in Info or Stats.
//   - Labels carry host NQNs, which a host chooses: a subsystem counts
//     at most 1024 of them separately.
//
// # Libraries
//
// github.com/prometheus/client_golang (prometheus for the collector and
// registry, promhttp for the handler).
package metrics
