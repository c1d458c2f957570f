package proto

import (
	"bytes"
	"testing"

	"github.com/capsule-storage/capsule/internal/hextest"
)

// Every decoder of bytes from the network has a fuzz target whose
// property is that what decodes re-encodes to the same bytes.

func FuzzAttr(f *testing.F) {
	f.Add(hextest.MustDecode(attrHex))
	f.Add(make([]byte, AttrSize))
	f.Fuzz(func(t *testing.T, b []byte) {
		var a Attr
		if a.Unmarshal(b) != nil {
			return
		}
		out := make([]byte, AttrSize)
		a.MarshalTo(out)
		if !bytes.Equal(out, b[:AttrSize]) {
			t.Fatalf("round trip: %x != %x", out, b[:AttrSize])
		}
	})
}

func FuzzSetAttr(f *testing.F) {
	b := make([]byte, SetAttrSize)
	(&SetAttr{Valid: SetSize | SetMode, Mode: 0o600, Size: 5}).MarshalTo(b)
	f.Add(b)
	f.Fuzz(func(t *testing.T, b []byte) {
		var s SetAttr
		if s.Unmarshal(b) != nil {
			return
		}
		out := make([]byte, SetAttrSize)
		s.MarshalTo(out)
		if !bytes.Equal(out, b) {
			t.Fatalf("round trip: %x != %x", out, b)
		}
	})
}

func FuzzCopyRange(f *testing.F) {
	b := make([]byte, CopyRangeSize)
	(&CopyRange{Ino: 7, Off: 4096, Length: 1 << 20}).MarshalTo(b)
	f.Add(b)
	f.Fuzz(func(t *testing.T, b []byte) {
		var r CopyRange
		if r.Unmarshal(b) != nil {
			return
		}
		out := make([]byte, CopyRangeSize)
		r.MarshalTo(out)
		if !bytes.Equal(out, b) {
			t.Fatalf("round trip: %x != %x", out, b)
		}
	})
}

func FuzzStatFS(f *testing.F) {
	b := make([]byte, StatFSSize)
	(&StatFS{Blocks: 9, Bsize: 4096, NameLen: 255}).MarshalTo(b)
	f.Add(b)
	f.Fuzz(func(t *testing.T, b []byte) {
		var s StatFS
		if s.Unmarshal(b) != nil {
			return
		}
		out := make([]byte, StatFSSize)
		s.MarshalTo(out)
		if !bytes.Equal(out, b[:StatFSSize]) {
			t.Fatalf("round trip: %x != %x", out, b[:StatFSSize])
		}
	})
}

func FuzzDirents(f *testing.F) {
	for _, plus := range []bool{false, true} {
		buf := make([]byte, 1024)
		w := NewDirentWriter(buf, plus)
		w.Add(&Dirent{Ino: 1, Cookie: 1, Mode: 0o40000, Name: []byte(".")})
		w.Add(&Dirent{Ino: 9, Cookie: 5, Mode: 0o100000, Name: []byte("some-file")})
		n := w.Finish(plus)
		f.Add(buf[:n], plus)
	}
	f.Fuzz(func(t *testing.T, b []byte, plus bool) {
		var entries []Dirent
		eof, err := ParseDirents(b, plus, func(e *Dirent) error {
			c := *e
			c.Name = append([]byte(nil), e.Name...)
			entries = append(entries, c)
			return nil
		})
		if err != nil {
			return
		}
		out := make([]byte, len(b))
		w := NewDirentWriter(out, plus)
		for i := range entries {
			if !w.Add(&entries[i]) {
				t.Fatalf("entry %d does not fit again", i)
			}
		}
		if n := w.Finish(eof); !bytes.Equal(out[:n], b) {
			t.Fatalf("round trip: %x != %x", out[:n], b)
		}
	})
}

func FuzzSplitPair(f *testing.F) {
	f.Add([]byte("oldnew"), uint32(3))
	f.Fuzz(func(t *testing.T, b []byte, cdw15 uint32) {
		a, c, err := SplitPair(b, cdw15)
		if err != nil {
			return
		}
		out, n := AppendPair(nil, string(a), string(c))
		if !bytes.Equal(out, b) || n != cdw15 {
			t.Fatalf("round trip")
		}
	})
}

func FuzzNames(f *testing.F) {
	f.Add([]byte("user.a\x00user.b\x00"))
	f.Fuzz(func(t *testing.T, b []byte) {
		names, err := ParseNames(b)
		if err != nil {
			return
		}
		var out []byte
		for _, n := range names {
			out = append(append(out, n...), 0)
		}
		if !bytes.Equal(out, b) {
			t.Fatalf("round trip")
		}
	})
}

func FuzzCred(f *testing.F) {
	c := Cred{UID: 1000, GID: 1000, Groups: []uint32{4, 27}}
	b := make([]byte, c.Size())
	c.MarshalTo(b)
	f.Add(b)
	f.Add(make([]byte, CredFixed))
	f.Fuzz(func(t *testing.T, b []byte) {
		var c Cred
		if c.Unmarshal(b) != nil {
			return
		}
		out := make([]byte, c.Size())
		c.MarshalTo(out)
		if !bytes.Equal(out, b) {
			t.Fatalf("round trip: %x != %x", out, b)
		}
	})
}
