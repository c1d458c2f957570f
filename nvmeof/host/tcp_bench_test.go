package host

import (
	"io"
	"net"
	"testing"

	"github.com/stretchr/testify/require"
)

// BenchmarkSeqRead1MiB reads a 64 MiB memory namespace of the project's
// target in this process front to back in 1 MiB ReadAt calls (each one a
// request of several commands in flight on one queue), over every
// transport of targetURLs, beside two same-run baselines: a 1 MiB memory
// copy and a loopback TCP stream of 1 MiB writes (the most an NVMe/TCP or
// iwarp byte stream can carry here).
func BenchmarkSeqRead1MiB(b *testing.B) {
	const size = 1 << 20
	b.Run("memcpy", func(b *testing.B) {
		src, dst := make([]byte, size), make([]byte, size)
		b.SetBytes(size)
		b.ReportAllocs()
		b.ResetTimer()
		for range b.N {
			copy(dst, src)
		}
	})
	b.Run("tcp-stream", func(b *testing.B) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(b, err)
		defer ln.Close()
		done := make(chan error, 1)
		go func() {
			c, err := ln.Accept()
			if err != nil {
				done <- err
				return
			}
			defer c.Close()
			buf := make([]byte, size)
			for {
				if _, err := c.Write(buf); err != nil {
					done <- nil
					return
				}
			}
		}()
		c, err := net.Dial("tcp", ln.Addr().String())
		require.NoError(b, err)
		buf := make([]byte, size)
		b.SetBytes(size)
		b.ReportAllocs()
		b.ResetTimer()
		for range b.N {
			if _, err := io.ReadFull(c, buf); err != nil {
				b.Fatal(err)
			}
		}
		b.StopTimer()
		c.Close()
		<-done
	})
	for _, url := range targetURLs(false) {
		b.Run(schemeOf(url), func(b *testing.B) {
			ns := benchNamespace(b, url)
			buf := make([]byte, size)
			var off int64
			read := func() {
				if _, err := ns.ReadAt(buf, off); err != nil {
					b.Fatal(err)
				}
				off = (off + size) % benchNSSize
			}
			for range 64 {
				read()
			}
			b.SetBytes(size)
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				read()
			}
		})
	}
}
