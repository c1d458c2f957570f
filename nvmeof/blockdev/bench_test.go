package blockdev

import (
	"testing"
)

// BenchmarkReadAt4KiB reads 4 KiB blocks from each device, against a
// same-run memcpy of 4 KiB as the baseline.
func BenchmarkReadAt4KiB(b *testing.B) {
	const size = 64 << 20
	buf := make([]byte, 4096)
	for _, dc := range deviceCases() {
		b.Run(dc.name, func(b *testing.B) {
			d := dc.make(b, size)
			if _, err := d.WriteAt(pattern(1, size), 0); err != nil {
				b.Fatal(err)
			}
			b.SetBytes(4096)
			b.ReportAllocs()
			off := int64(0)
			for b.Loop() {
				if _, err := d.ReadAt(buf, off); err != nil {
					b.Fatal(err)
				}
				off = (off + 4096*7) % size
			}
		})
	}
	b.Run("baseline/memcpy", func(b *testing.B) {
		src := make([]byte, 4096)
		b.SetBytes(4096)
		for b.Loop() {
			copy(buf, src)
		}
	})
}

// BenchmarkWriteAt4KiB writes 4 KiB blocks, against memcpy.
func BenchmarkWriteAt4KiB(b *testing.B) {
	const size = 64 << 20
	p := pattern(2, 4096)
	for _, dc := range deviceCases() {
		b.Run(dc.name, func(b *testing.B) {
			d := dc.make(b, size)
			b.SetBytes(4096)
			b.ReportAllocs()
			off := int64(0)
			for b.Loop() {
				if _, err := d.WriteAt(p, off); err != nil {
					b.Fatal(err)
				}
				off = (off + 4096*7) % size
			}
		})
	}
	b.Run("baseline/memcpy", func(b *testing.B) {
		dst := make([]byte, 4096)
		b.SetBytes(4096)
		for b.Loop() {
			copy(dst, p)
		}
	})
}
