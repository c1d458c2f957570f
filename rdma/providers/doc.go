// Package providers links every RDMA provider built into the binary, so
// that rdma.OpenPD, rdma.Listen and rdma.Dial know their schemes:
//
//	import _ "github.com/capsule-storage/capsule/rdma/providers"
package providers
