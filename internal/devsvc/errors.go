package devsvc

import "errors"

var (
	// ErrProtocol: bytes from the peer break the protocol (a record of
	// the wrong size, reserved bytes set, a name list not terminated).
	ErrProtocol = errors.New("devsvc: protocol error")
	// ErrStaleEpoch: the device has seen a newer head of the volume; the
	// command came from a head that was replaced, and did nothing. On the
	// wire it is EKEYREVOKED.
	ErrStaleEpoch = errors.New("devsvc: stale head epoch")
)
