package chunkstore

import (
	"fmt"
	"strconv"
	"strings"
)

// MaxDevices bounds K+M: per-stripe device sets are 64-bit masks.
const MaxDevices = 64

// Geometry is an erasure code K+M: every stripe has Data data shards and
// Parity parity shards on Data+Parity distinct devices, and survives the
// loss of any Parity of them. 1+0 is plain storage on one device.
type Geometry struct {
	Data   int // K ≥ 1
	Parity int // M ≥ 0
}

// DefaultGeometry is 4+2: 50 % overhead, survives two lost devices.
var DefaultGeometry = Geometry{Data: 4, Parity: 2}

// Devices returns K+M, the number of devices the store needs.
func (g Geometry) Devices() int { return g.Data + g.Parity }

// String returns "K+M".
func (g Geometry) String() string { return fmt.Sprintf("%d+%d", g.Data, g.Parity) }

// Validate checks the ranges: K ≥ 1, M ≥ 0, K+M ≤ MaxDevices.
func (g Geometry) Validate() error {
	switch {
	case g.Data < 1:
		return fmt.Errorf("%w %s: need at least one data shard (K ≥ 1)", ErrInvalidGeometry, g)
	case g.Parity < 0:
		return fmt.Errorf("%w %s: parity shards cannot be negative", ErrInvalidGeometry, g)
	case g.Data+g.Parity > MaxDevices:
		return fmt.Errorf("%w %s: K+M is %d, at most %d devices", ErrInvalidGeometry, g, g.Data+g.Parity, MaxDevices)
	}
	return nil
}

// ParseGeometry parses "K+M" ("4+2", "1+0"), as given to --ec.
func ParseGeometry(s string) (Geometry, error) {
	ks, ms, ok := strings.Cut(strings.TrimSpace(s), "+")
	if !ok {
		return Geometry{}, fmt.Errorf("%w %q: want K+M, for example 4+2 (K data and M parity devices)", ErrInvalidGeometry, s)
	}
	k, err := strconv.Atoi(ks)
	if err != nil || ks == "" || ks[0] == '+' || ks[0] == '-' {
		return Geometry{}, fmt.Errorf("%w %q: K (%q) is not a whole number", ErrInvalidGeometry, s, ks)
	}
	m, err := strconv.Atoi(ms)
	if err != nil || ms == "" || ms[0] == '+' || ms[0] == '-' {
		return Geometry{}, fmt.Errorf("%w %q: M (%q) is not a whole number", ErrInvalidGeometry, s, ms)
	}
	g := Geometry{Data: k, Parity: m}
	return g, g.Validate()
}
