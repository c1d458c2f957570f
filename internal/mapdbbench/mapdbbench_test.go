package mapdbbench

import (
	"bytes"
	"testing"
)

func TestValue(t *testing.T) {
	for _, l := range []Layout{Sequential, Random} {
		v := makeValue(l, newRand(1), 4096)
		if len(v) != ValueSize(l.Runs()) {
			t.Fatalf("%v: %d bytes, want %d", l, len(v), ValueSize(l.Runs()))
		}
		if n, ok := CheckValue(v); !ok || n != l.Runs() {
			t.Fatalf("%v: CheckValue = %d, %v", l, n, ok)
		}
		v[5] ^= 1
		if _, ok := CheckValue(v); ok {
			t.Fatalf("%v: a flipped bit passed the CRC", l)
		}
	}
	if got := ValueSize(Sequential.Runs()); got != 32 {
		t.Errorf("sequential value is %d bytes, want 32", got)
	}
	if k := Key(1, 2); !bytes.Equal(k, []byte{0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 2}) {
		t.Errorf("Key(1, 2) = %x", k)
	}
}

// TestSet runs every workload on a small map of each kind, so that the
// report's code is checked by a plain go test.
func TestSet(t *testing.T) {
	for _, kind := range []Kind{Bolt, Pebble} {
		for _, l := range []Layout{Sequential, Random} {
			t.Run(string(kind)+"/"+l.String(), func(t *testing.T) {
				const n = 3000
				s, err := NewSet(kind, l, n, 2, t.TempDir(), 7)
				if err != nil {
					t.Fatal(err)
				}
				defer s.Close()
				batches := []*Batch{s.NextBatch(1024), s.NextBatch(1024), s.NextBatch(1024)}
				for _, b := range batches {
					for i := 1; i < b.Len(); i++ {
						if bytes.Compare(b.Keys[i-1], b.Keys[i]) >= 0 {
							t.Fatalf("batch keys not sorted and distinct at %d", i)
						}
					}
				}
				r, err := s.Measure(batches, 2)
				if err != nil {
					t.Fatal(err)
				}
				if r.Keys != 3*1024 || len(r.Times) != 3 {
					t.Fatalf("measured %d keys in %d batches", r.Keys, len(r.Times))
				}
				for _, rep := range s.Reps {
					if err := Verify(rep, Owner, n); err != nil {
						t.Fatal(err)
					}
				}
				if err := s.Close(); err != nil {
					t.Fatal(err)
				}
				for _, cold := range []bool{false, true} {
					ld, err := MeasureLoad(kind, s.Dirs[1], cold)
					if err != nil {
						t.Fatal(err)
					}
					if ld.Pages != n {
						t.Fatalf("loaded %d pages, want %d", ld.Pages, n)
					}
				}
			})
		}
	}
}
