//go:build race

package shm

import (
	"runtime"
	"unsafe"
)

// raceSync is the address of the happens-before edges the shared memory
// carries (see "Race detector" in the package doc).
var raceSync byte

// raceRelease marks that this goroutine has finished with the WRs it
// posted and with the memory their SGEs name.
func raceRelease() { runtime.RaceReleaseMerge(unsafe.Pointer(&raceSync)) }

// raceAcquire orders what follows after every earlier raceRelease.
func raceAcquire() { runtime.RaceAcquire(unsafe.Pointer(&raceSync)) }
