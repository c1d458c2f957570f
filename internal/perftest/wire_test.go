package perftest

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/capsule-storage/capsule/internal/hextest"
)

// unhex decodes field-annotated hex.
var unhex = hextest.Decode

func TestHelloWire(t *testing.T) {
	want := unhex(t, `
		43505246 // magic "CPRF"
		01       // version
		02       // op: read
		0000     // reserved
		00100000 // size: 1 MiB
		00000004 // qd: 4
	`)
	var buf [helloLen]byte
	got := Hello{Op: OpRead, Size: 1 << 20, QD: 4}.MarshalTo(buf[:])
	assert.Equal(t, want, got)

	var h Hello
	require.NoError(t, h.UnmarshalBinary(want))
	assert.Equal(t, Hello{Op: OpRead, Size: 1 << 20, QD: 4}, h)
}

func TestHelloRejects(t *testing.T) {
	good := Hello{Op: OpSend, Size: 4096, QD: 8}.MarshalTo(make([]byte, helloLen))
	for name, mutate := range map[string]func([]byte) []byte{
		"short":     func(b []byte) []byte { return b[:helloLen-1] },
		"magic":     func(b []byte) []byte { b[0] = 'X'; return b },
		"version":   func(b []byte) []byte { b[offVersion] = 9; return b },
		"op":        func(b []byte) []byte { b[offOp] = 7; return b },
		"size zero": func(b []byte) []byte { clear(b[offSize : offSize+4]); return b },
		"qd huge":   func(b []byte) []byte { b[offQD] = 0xff; return b },
		"region":    func(b []byte) []byte { b[offSize+1] = 0xff; b[offQD+2] = 0x03; return b },
	} {
		t.Run(name, func(t *testing.T) {
			var h Hello
			assert.Error(t, h.UnmarshalBinary(mutate(append([]byte(nil), good...))))
		})
	}
}

func TestReplyWire(t *testing.T) {
	want := unhex(t, `
		43505250         // magic "CPRP"
		01 000000        // version, reserved
		00001234         // rkey
		00000000         // reserved
		00007f0000001000 // addr
		0000000000400000 // length: 4 MiB
	`)
	var buf [replyLen]byte
	r := Reply{RKey: 0x1234, Addr: 0x7f0000001000, Len: 4 << 20}
	assert.Equal(t, want, r.MarshalTo(buf[:]))
	var got Reply
	require.NoError(t, got.UnmarshalBinary(want))
	assert.Equal(t, r, got)
	assert.Error(t, got.UnmarshalBinary(want[:replyLen-1]))
}

func FuzzHello(f *testing.F) {
	f.Add(Hello{Op: OpWrite, Size: 4096, QD: 32}.MarshalTo(make([]byte, helloLen)))
	f.Add([]byte("CPRF"))
	f.Fuzz(func(t *testing.T, b []byte) {
		var h Hello
		if h.UnmarshalBinary(b) != nil {
			return
		}
		require.NoError(t, h.Validate())
		var again Hello
		require.NoError(t, again.UnmarshalBinary(h.MarshalTo(make([]byte, helloLen))))
		require.Equal(t, h, again)
	})
}

func FuzzReply(f *testing.F) {
	f.Add(Reply{RKey: 1, Addr: 2, Len: 3}.MarshalTo(make([]byte, replyLen)))
	f.Fuzz(func(t *testing.T, b []byte) {
		var r Reply
		if r.UnmarshalBinary(b) != nil {
			return
		}
		var again Reply
		require.NoError(t, again.UnmarshalBinary(r.MarshalTo(make([]byte, replyLen))))
		require.Equal(t, r, again)
	})
}
