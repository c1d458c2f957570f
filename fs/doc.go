// Package fs will hold capsule's file service: the namespace the target
// keeps (inodes, directories, the map from file ranges to chunks), its
// capsule protocol (vendor-specific I/O opcodes 80h–FFh), the Go file
// client (io/fs plus writes) and the FUSE node tree on hanwen/go-fuse/v2.
//
// Status: not implemented yet; it needs package nvmeof and chunkstore.
package fs
