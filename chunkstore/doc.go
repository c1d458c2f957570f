// Package chunkstore will hold the erasure-coded chunk store behind every
// namespace and file: stripes of k data and m parity shards
// (klauspost/reedsolomon) on k+m devices, CRC32C per shard, reconstruction
// on read, no write hole, scrub and repair, metadata in an embedded
// database.
//
// Status: not implemented yet.
package chunkstore
