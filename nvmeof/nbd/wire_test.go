package nbd

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/capsule-storage/capsule/internal/hextest"
)

// The layouts below are written from doc/proto.md of the NBD project,
// field by field.

func TestRequestWire(t *testing.T) {
	wire := hextest.Decode(t, `
		25609513          // NBD_REQUEST_MAGIC
		0001              // command flags: NBD_CMD_FLAG_FUA
		0001              // type: NBD_CMD_WRITE
		0102030405060708  // cookie
		0000000100000200  // offset: 4 GiB + 512
		00001000          // length: 4096
	`)
	var r Request
	require.NoError(t, r.UnmarshalBinary(wire))
	assert.Equal(t, Request{Flags: CmdFlagFUA, Type: CmdWrite, Cookie: 0x0102030405060708, Offset: 1<<32 + 512, Length: 4096}, r)
	b, err := r.MarshalBinary()
	require.NoError(t, err)
	assert.Equal(t, wire, b)

	bad := hextest.Decode(t, `
		25609514          // wrong magic
		0000 0000 0000000000000000 0000000000000000 00000000
	`)
	require.ErrorIs(t, r.UnmarshalBinary(bad), ErrBadMagic)
	require.ErrorIs(t, r.UnmarshalBinary(wire[:27]), ErrLength)
	_, err = r.MarshalTo(make([]byte, 27))
	require.ErrorIs(t, err, ErrShortBuffer)
}

func TestReplyWire(t *testing.T) {
	b := make([]byte, SimpleReplySize)
	putSimpleReply(b, EINVAL, 0xa1a2a3a4a5a6a7a8)
	assert.Equal(t, hextest.Decode(t, `
		67446698          // NBD_SIMPLE_REPLY_MAGIC
		00000016          // error: NBD_EINVAL (22)
		a1a2a3a4a5a6a7a8  // cookie
	`), b)

	b = make([]byte, StructuredReplyHeaderSize)
	putChunkHeader(b, ReplyFlagDone, ReplyTypeOffsetData, 7, 8+4096)
	assert.Equal(t, hextest.Decode(t, `
		668e33ef          // NBD_STRUCTURED_REPLY_MAGIC
		0001              // flags: NBD_REPLY_FLAG_DONE
		0001              // type: NBD_REPLY_TYPE_OFFSET_DATA
		0000000000000007  // cookie
		00001008          // length: 8 bytes of offset + 4096 of data
	`), b)
}

func TestOptionWire(t *testing.T) {
	wire := hextest.Decode(t, `
		49484156454f5054  // IHAVEOPT
		00000007          // option: NBD_OPT_GO
		0000000b          // length: 11
	`)
	var h OptionHeader
	require.NoError(t, h.UnmarshalBinary(wire))
	assert.Equal(t, OptionHeader{Option: OptGo, Length: 11}, h)
	b, err := h.MarshalBinary()
	require.NoError(t, err)
	assert.Equal(t, wire, b)
	require.ErrorIs(t, h.UnmarshalBinary(append([]byte{0}, wire[1:]...)), ErrBadMagic)

	data := hextest.Decode(t, `
		00000003          // length of name
		766f6c            // name: "vol"
		0002              // two information requests
		0003              // NBD_INFO_BLOCK_SIZE
		0001              // NBD_INFO_NAME
	`)
	var q InfoRequest
	require.NoError(t, q.UnmarshalBinary(data))
	assert.Equal(t, "vol", q.Name)
	assert.Equal(t, []uint16{InfoBlockSize, InfoName}, q.Infos)
	b, err = q.MarshalBinary()
	require.NoError(t, err)
	assert.Equal(t, data, b)

	for name, bad := range map[string]string{
		"name longer than the data": `00000009 766f6c 0000`,
		"count beyond the data":     `00000000 0002 0003`,
		"trailing byte":             `00000000 0000 ff`,
		"too short for a count":     `00000000 00`,
	} {
		require.ErrorIs(t, q.UnmarshalBinary(hextest.Decode(t, bad)), ErrLength, name)
	}

	assert.Equal(t, hextest.Decode(t, `
		0003e889045565a9  // option reply magic
		00000003          // option: NBD_OPT_LIST
		00000002          // reply type: NBD_REP_SERVER
		00000007          // length
		00000003 766f6c   // name length, name "vol"
	`), appendOptionReply(nil, OptList, RepServer, hextest.Decode(t, `00000003 766f6c`)))
	assert.Equal(t, hextest.Decode(t, `
		0003e889045565a9  // option reply magic
		00000063          // option: 99
		80000001          // reply type: NBD_REP_ERR_UNSUP
		00000000          // no data
	`), appendOptionReply(nil, Option(99), RepErrUnsup, nil))
}
