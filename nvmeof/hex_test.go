package nvmeof

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/capsule-storage/capsule/internal/hextest"
)

// annotated decodes hex written field by field: whitespace separates
// bytes or groups of bytes, and '#' starts a comment that runs to the end
// of the line. It panics on bad hex, so it serves fuzz seeds as well as
// tests.
func annotated(s string) []byte { return hextest.MustDecode(s) }

// place writes annotated hex into b at off, for structures too large to
// spell out byte by byte: the test places each field it checks at the
// offset the specification gives.
func place(t testing.TB, b []byte, off int, s string) {
	t.Helper()
	v := annotated(s)
	require.LessOrEqual(t, off+len(v), len(b), "field at %d overruns the structure", off)
	copy(b[off:], v)
}

// nqnField returns a 256-byte NUL-padded NQN field holding s.
func nqnField(s string) []byte {
	f := make([]byte, NQNFieldSize)
	copy(f, s)
	return f
}

func TestAnnotated(t *testing.T) {
	got := annotated(`
		01 02   # two bytes
		0304    # a group
		# a comment line
	`)
	require.Equal(t, []byte{1, 2, 3, 4}, got)
	require.Panics(t, func() { annotated("zz") })
}
