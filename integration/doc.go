// Package integration holds end-to-end tests that start the real binaries
// (bin/target, bin/mount) as separate processes and drive them over
// loopback or network namespaces the tests make themselves.
package integration
