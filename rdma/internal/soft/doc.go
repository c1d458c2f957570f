// Package soft holds the parts of a software RDMA provider that the iwarp
// and shm providers share: a completion queue (CQ), a key table that maps
// lkeys and rkeys to registered memory (KeyTable).
//
// # Keys
//
// A key is index<<8 | generation. The index picks a slot of the KeyTable;
// the generation (never 0) changes each time the slot is reused, so a key
// used after Deregister finds a different generation or an empty slot and
// fails. lkey and rkey are the same value.
//
// # Concurrency
//
// KeyTable lookups take no lock: slots are atomic pointers. A Region's
// accessors hold its read lock for the duration of the access, and
// Deregister takes the write lock, so no access is in progress once
// Deregister returns and none starts after.
//
// CQ is a bounded ring guarded by a mutex. Push is safe from any goroutine;
// Poll and Wait are for one consumer at a time. Overflow puts the CQ into
// a sticky ErrCQOverrun state, as a hardware CQ overrun does. Wait polls
// an empty CQ DefaultSpin times before it sleeps on a channel; a provider
// changes that with SetSpin when its CQs are created (iwarp sets 0: its
// completions come from receiver goroutines that a spinning consumer
// keeps waiting for the processor).
package soft
