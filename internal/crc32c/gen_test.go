package crc32c

import (
	"math/bits"
	"testing"
)

// The folding constants of crc32c_amd64.s, derived here from the
// polynomial; the same formulas give hash/crc32's IEEE constants, which
// checks the formulas.

// polyMod returns a mod p over GF(2), p with its top bit set.
func polyMod(a, p uint64) uint64 {
	dp := 63 - bits.LeadingZeros64(p)
	for a != 0 && 63-bits.LeadingZeros64(a) >= dp {
		a ^= p << (63 - bits.LeadingZeros64(a) - dp)
	}
	return a
}

// xPowMod returns x^e mod p.
func xPowMod(e int, p uint64) uint64 {
	r := uint64(1)
	for range e {
		r = polyMod(r<<1, p)
	}
	return r
}

// xPowDiv64 returns floor(x^64 / p) for p of degree 32.
func xPowDiv64(p uint64) uint64 {
	// The quotient's top term is x^32; what remains of x^64 after taking
	// x^32 * p away has degree below 64.
	q := uint64(1) << 32
	r := (p ^ 1<<32) << 32
	for i := 31; i >= 0; i-- {
		if r&(1<<(32+i)) != 0 {
			q |= 1 << i
			r ^= p << i
		}
	}
	return q
}

func reflect(v uint64, n int) uint64 { return bits.Reverse64(v) >> (64 - n) }

func foldConst(e int, p uint64) uint64 { return reflect(xPowMod(e, p), 32) << 1 }

func TestConstants(t *testing.T) {
	cases := []struct {
		name string
		p    uint64
		want map[string]uint64
	}{
		{"ieee (hash/crc32's values)", 0x104C11DB7, map[string]uint64{
			"k512a": 0x154442bd4, "k512b": 0x1c6e41596, "k128a": 0x1751997d0, "k128b": 0x0ccaa009e,
			"k64": 0x163cd6124, "poly": 0x1db710641, "mu": 0x1f7011641}},
		{"castagnoli (crc32c_amd64.s)", 0x11EDC6F41, map[string]uint64{
			"k1024a": 0x06992cea2, "k1024b": 0x00d3b6092, "k128a": 0x0f20c0dfe, "k128b": 0x14cd00bd6,
			"k64": 0x0dd45aab8, "poly": 0x105ec76f1, "mu": 0x0dea713f1}},
	}
	for _, c := range cases {
		got := map[string]uint64{
			"k1024a": foldConst(1024+32, c.p), "k1024b": foldConst(1024-32, c.p),
			"k512a": foldConst(512+32, c.p), "k512b": foldConst(512-32, c.p),
			"k128a": foldConst(128+32, c.p), "k128b": foldConst(128-32, c.p),
			"k64": foldConst(64, c.p), "poly": reflect(c.p, 33), "mu": reflect(xPowDiv64(c.p), 33),
		}
		for k, want := range c.want {
			if got[k] != want {
				t.Errorf("%s: %s = %#x, want %#x", c.name, k, got[k], want)
			}
		}
	}
}
