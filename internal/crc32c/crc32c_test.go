package crc32c

import (
	"hash/crc32"
	"math/rand/v2"
	"testing"
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

func randomBytes(n int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// TestKnownValue: the CRC32C check value of RFC 3720 section B.4 (32
// bytes of zeros) and of "123456789", and a long buffer of zeros and of
// ones, which the folding path takes.
func TestKnownValue(t *testing.T) {
	zeros := make([]byte, 32)
	if got := Checksum(zeros); got != 0x8a9136aa {
		t.Errorf("32 zero bytes: %#08x, want 0x8a9136aa", got)
	}
	if got := Checksum([]byte("123456789")); got != 0xe3069283 {
		t.Errorf("123456789: %#08x, want 0xe3069283", got)
	}
	for _, v := range []byte{0, 0xff} {
		b := make([]byte, 1<<20)
		for i := range b {
			b[i] = v
		}
		if got, want := Checksum(b), crc32.Checksum(b, castagnoli); got != want {
			t.Errorf("1 MiB of %#x: %#08x, want %#08x", v, got, want)
		}
	}
}

// TestEveryLength compares Update with hash/crc32 for every length up to
// 4 KiB plus a few large ones, at every alignment in a 64-byte window,
// from a random initial value; and the folding path on its own (every
// length it accepts) without the dispatch threshold.
func TestEveryLength(t *testing.T) {
	buf := randomBytes(8<<10+64, 1)
	r := rand.New(rand.NewPCG(2, 3))
	lengths := make([]int, 0, 4200)
	for n := 0; n <= 4<<10; n++ {
		lengths = append(lengths, n)
	}
	lengths = append(lengths, 8<<10, 65512, 65536, 1<<20+13)
	big := randomBytes(1<<20+13+64, 4)
	for _, n := range lengths {
		src := buf
		if n+64 > len(buf) {
			src = big
		}
		for align := 0; align < 64; align++ {
			if n > 4<<10 && align%7 != 0 {
				continue
			}
			p := src[align : align+n]
			init := r.Uint32()
			if got, want := Update(init, p), crc32.Update(init, castagnoli, p); got != want {
				t.Fatalf("Update(%#x, len %d align %d) = %#08x, want %#08x", init, n, align, got, want)
			}
			if hasFolding && n >= 128 && n%16 == 0 {
				if got, want := ^fold(^init, p), crc32.Update(init, castagnoli, p); got != want {
					t.Fatalf("fold(%#x, len %d align %d) = %#08x, want %#08x", init, n, align, got, want)
				}
			}
		}
	}
}

// TestBlockBoundaries compares Update with hash/crc32 around multiples
// of the interleaved path's block, where it hands over to the plain
// folding path and then to hash/crc32.
func TestBlockBoundaries(t *testing.T) {
	const block = 16384 + 3*5120
	buf := randomBytes(3*block+300, 10)
	r := rand.New(rand.NewPCG(11, 12))
	for k := 1; k <= 3; k++ {
		for d := -130; d <= 140; d++ {
			n := k*block + d
			for _, align := range []int{0, 1, 8, 31} {
				p := buf[align : align+n]
				init := r.Uint32()
				if got, want := Update(init, p), crc32.Update(init, castagnoli, p); got != want {
					t.Fatalf("Update(%#x, len %d align %d) = %#08x, want %#08x", init, n, align, got, want)
				}
			}
		}
	}
}

// TestSplit: continuing from a partial CRC gives the CRC of the whole.
func TestSplit(t *testing.T) {
	b := randomBytes(70000, 5)
	want := crc32.Checksum(b, castagnoli)
	for _, cut := range []int{0, 1, 15, 16, 127, 128, 511, 512, 513, 4096, 65512, 69999, 70000} {
		if got := Update(Update(0, b[:cut]), b[cut:]); got != want {
			t.Errorf("split at %d: %#08x, want %#08x", cut, got, want)
		}
	}
}

// FuzzUpdate: Update agrees with hash/crc32 on any input and initial
// value, and so does the folding path on the prefix it accepts; and on
// the input repeated past two blocks of the interleaved path, so that
// arbitrary bytes reach every part of it.
func FuzzUpdate(f *testing.F) {
	f.Add(uint32(0), []byte("123456789"))
	f.Add(uint32(0xffffffff), make([]byte, 600))
	f.Add(uint32(0x12345678), randomBytes(1000, 7))
	f.Add(uint32(1), randomBytes(128, 8))
	f.Fuzz(func(t *testing.T, init uint32, p []byte) {
		if got, want := Update(init, p), crc32.Update(init, castagnoli, p); got != want {
			t.Fatalf("Update(%#x, %d bytes) = %#08x, want %#08x", init, len(p), got, want)
		}
		if n := len(p) &^ 15; hasFolding && n >= 128 {
			if got, want := ^fold(^init, p[:n]), crc32.Update(init, castagnoli, p[:n]); got != want {
				t.Fatalf("fold(%#x, %d bytes) = %#08x, want %#08x", init, n, got, want)
			}
		}
		if len(p) == 0 {
			return
		}
		long := make([]byte, 0, 2*(16384+3*5120)+len(p)+int(init%512))
		for len(long) < cap(long)-len(p) {
			long = append(long, p...)
		}
		if got, want := Update(init, long), crc32.Update(init, castagnoli, long); got != want {
			t.Fatalf("Update(%#x, %d bytes of a %d-byte pattern) = %#08x, want %#08x", init, len(long), len(p), got, want)
		}
	})
}

func BenchmarkUpdate(b *testing.B) {
	for _, n := range []int{512, 4096, 65512, 1 << 20} {
		buf := randomBytes(n, 9)
		b.Run(sizeName(n)+"/crc32c", func(b *testing.B) {
			b.SetBytes(int64(n))
			for b.Loop() {
				Update(0, buf)
			}
		})
		b.Run(sizeName(n)+"/hash-crc32", func(b *testing.B) {
			b.SetBytes(int64(n))
			for b.Loop() {
				crc32.Update(0, castagnoli, buf)
			}
		})
	}
}

func sizeName(n int) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return itoa(n>>20) + "MiB"
	case n >= 1<<10 && n%(1<<10) == 0:
		return itoa(n>>10) + "KiB"
	}
	return itoa(n) + "B"
}

func itoa(n int) string {
	if n < 10 {
		return string(rune('0' + n))
	}
	return itoa(n/10) + string(rune('0'+n%10))
}
