package hextest

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestDecode(t *testing.T) {
	got := Decode(t, `
		7f 00    // opcode, flags
		1234     # CID
		dead beef
	`)
	assert.Equal(t, []byte{0x7f, 0x00, 0x12, 0x34, 0xde, 0xad, 0xbe, 0xef}, got)
	assert.Empty(t, Decode(t, "// nothing"))
	_, err := parse("7")
	require.Error(t, err)
	_, err = parse("zz")
	require.Error(t, err)
	assert.Panics(t, func() { MustDecode("xyz") })
}
