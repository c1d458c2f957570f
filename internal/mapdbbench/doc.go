// Package mapdbbench measures go.etcd.io/bbolt against
// github.com/cockroachdb/pebble/v2 as the store for chunkstore's
// logical-to-physical map on the log-structured write path.
//
// The map is persisted as "map pages": a 16-byte key (owner u64
// big-endian, page index u64 big-endian; a page covers 64 logical 4 KiB
// sectors) and a value that lists the page's runs (12 bytes each) behind
// a 4-byte header and before a 4-byte CRC32C. Every one of the store's
// K+M = 6 devices holds a full replica, and a checkpoint applies the
// same batch of changed pages to all six, one fsynced transaction each,
// in parallel.
//
// It is a module of its own so that pebble stays out of the main
// module's build; `go test ./...` at the top of the repository does not
// see it. The measurements run only when asked:
//
//	cd internal/mapdbbench
//	MAPDBBENCH=1 go test -run TestReport -v -timeout 30m
//
// README.md beside this file says what each workload is and records the
// results.
package mapdbbench
