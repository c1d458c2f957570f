package cluster

import "errors"

// Errors of the cluster map.
var (
	// ErrInvalid: a node, device or volume record breaks a rule of the
	// model (an empty or malformed name, a device without capacity, a
	// geometry that does not parse).
	ErrInvalid = errors.New("cluster: invalid record")
	// ErrExists: the node or volume is already in the map.
	ErrExists = errors.New("cluster: already in the map")
	// ErrNotFound: no such node or volume in the map.
	ErrNotFound = errors.New("cluster: not in the map")
	// ErrConflict: the record changed in the map since it was read; read
	// it again and retry.
	ErrConflict = errors.New("cluster: changed since read")
	// ErrInUse: the node still holds shards of a volume or serves one;
	// drain it first.
	ErrInUse = errors.New("cluster: node in use")
)

// Errors of placement.
var (
	// ErrTooFewDomains: fewer eligible failure domains (nodes, or the
	// domains above them) than the volume has shards.
	ErrTooFewDomains = errors.New("cluster: too few failure domains for the volume's shards")
)

// Errors of heads (leases).
var (
	// ErrHeld: another node holds the volume's head lease.
	ErrHeld = errors.New("cluster: volume served by another node")
	// ErrLeaseLost: the head's lease was not renewed in time, or its key
	// was removed; the holder must not serve the volume any more.
	ErrLeaseLost = errors.New("cluster: head lease lost")
)
