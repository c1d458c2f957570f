package mapdbbench

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// benchSets are the replica sets the benchmarks share, one per kind and
// layout, built on first use.
var benchSets = map[string]*Set{}

func benchSet(b *testing.B, kind Kind, layout Layout) *Set {
	key := string(kind) + "-" + layout.String()
	if s := benchSets[key]; s != nil {
		return s
	}
	dir := os.Getenv("MAPDBBENCH_DIR")
	if dir == "" {
		dir = "/var/tmp/mapdbbench"
	}
	n := 1 << 20
	if layout == Random {
		n = 1 << 18
	}
	b.Logf("building %d %s pages in 6 %s replicas under %s", n, layout, kind, dir)
	s, err := NewSet(kind, layout, n, 6, filepath.Join(dir, "bench-"+key), 1)
	if err != nil {
		b.Fatal(err)
	}
	benchSets[key] = s
	return s
}

// TestMain removes the benchmarks' replicas when they are done.
func TestMain(m *testing.M) {
	code := m.Run()
	for _, s := range benchSets {
		s.Close()
		s.Remove()
	}
	os.Exit(code)
}

// BenchmarkCheckpoint applies one checkpoint batch per iteration to one
// or six replicas (N as in TestReport); ns/op is the time until every
// replica is durable. It also reports µs per
// page, bytes written per page (wchar, all replicas) and CPU µs per page
// (all replicas, background work included). It writes to
// MAPDBBENCH_DIR (/var/tmp/mapdbbench) and needs a few GB there:
//
//	go test -run '^$' -bench Checkpoint -benchtime 10x
func BenchmarkCheckpoint(b *testing.B) {
	for _, kind := range []Kind{Bolt, Pebble} {
		for _, layout := range []Layout{Sequential, Random} {
			for _, size := range []int{1024, 8192} {
				for _, reps := range []int{1, 6} {
					name := fmt.Sprintf("%s/%s/B=%d/replicas=%d", kind, layout, size, reps)
					b.Run(name, func(b *testing.B) {
						s := benchSet(b, kind, layout)
						batches := make([]*Batch, b.N)
						for i := range batches {
							batches[i] = s.NextBatch(size)
						}
						b.StopTimer() // Measure times the batches itself
						r, err := s.Measure(batches, reps)
						if err != nil {
							b.Fatal(err)
						}
						b.ReportMetric(float64(r.MeanBatch().Nanoseconds()), "ns/op")
						b.ReportMetric(float64(r.MeanBatch().Nanoseconds())/1e3/float64(size), "µs/page")
						b.ReportMetric(float64(r.WChar+r.DrainWChar)/float64(r.Keys), "written-B/page")
						b.ReportMetric(float64((r.CPU+r.DrainCPU).Nanoseconds())/1e3/float64(r.Keys), "cpu-µs/page")
					})
				}
			}
		}
	}
}
