// Package integration holds end-to-end tests that start the real binaries
// (bin/target, bin/mount) as separate processes and drive them over
// loopback or network namespaces the tests make themselves.
//
// TestNBDSeveralHosts runs its hosts over each of netnsTransports, NVMe/RDMA
// on iwarp:// and NVMe/TCP on tcp://. TestLoadNBDAndFUSE is the bounded
// load case: one target serves an erasure-coded namespace through an NBD
// bridge (over tcp://) to fio on 16 connections and its file namespace to
// two FUSE mounts (over shm:// and iwarp://), all at once for about 15 s;
// afterwards every block fio wrote and every file the mounts wrote is
// checked through the bridge and through both mounts. Its long variant,
// TestNBDSoak, runs only with -nbd.soak DURATION (go test ./integration
// -run Soak -args -nbd.soak 10m): fio on 16 connections, run after run,
// each run checking every block it wrote.
package integration
