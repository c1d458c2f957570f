// Command fusebench holds the baselines of capsule's FUSE benchmarks (R6′
// and R12 in shared/PERFORMANCE.md) and its metadata workload;
// scripts/fusebench.sh drives it with fio, tar and the workload beside
// bin/mount.
//
//	fusebench null [--size BYTES] [--splice] [--max-readahead BYTES] MOUNTPOINT
//	    mounts the null file system: one regular file, "data", whose
//	    reads are answered from a buffer in memory and whose writes are
//	    dropped, opened with direct_io, with MaxWrite 1 MiB as capsule's
//	    mount. It is the FUSE ceiling of the machine.
//	fusebench loopback [--splice] DIR MOUNTPOINT
//	    mounts go-fuse's loopback file system of DIR: the baseline of the
//	    metadata, write and untar workloads, of a tmpfs directory and of
//	    a directory on the disk that holds the target's data (R12).
//	fusebench meta [--files N] DIR
//	    creates N files in DIR, then stats them (after the attribute
//	    timeout, so that each stat asks the file system), then unlinks
//	    them, and prints each phase's rate per second and the rate of
//	    whole create+stat+unlink cycles (N over the three phases' time):
//	    "meta create=R stat=R unlink=R create-stat-unlink=R".
//	fusebench client --target URL [--nqn NQN] [--rw randread|read] [--bs BYTES] [--runtime D] [--create BYTES] FILE
//	    reads FILE (a name in the root directory) through the Go file
//	    client alone, one request at a time, and prints "IOPS BYTES/s":
//	    the mount's cost is the difference to fio through the mount.
//
// The mount modes print "fusebench mounted at MOUNTPOINT" once the mount
// is live and unmount on SIGINT or SIGTERM. The node types here exist
// for the benchmark only and serve no other purpose.
//
// It lives in cmd/ beside the binaries it measures, as a command of its
// own (go build ./cmd/fusebench, which scripts/fusebench.sh does), but
// `make build` does not build it: it is a tool of the benchmark, not
// part of what capsule ships.
package main
