//go:build !linux

package mapdbbench

import (
	"errors"
	"time"
)

// IOCounters are the process's storage byte counters (Linux only).
type IOCounters struct{ Read, Write, WChar int64 }

// ReadIO is available on Linux only.
func ReadIO() (IOCounters, error) {
	return IOCounters{}, errors.New("mapdbbench: /proc/self/io is Linux only")
}

// CPUTime is available on Linux only.
func CPUTime() time.Duration { return 0 }

// FSType is available on Linux only.
func FSType(string) string { return "unknown" }

func dropFile(string) error { return nil }

// DiskCounters is available on Linux only.
func DiskCounters(string) (IOCounters, error) {
	return IOCounters{}, errors.New("mapdbbench: disk counters are Linux only")
}
