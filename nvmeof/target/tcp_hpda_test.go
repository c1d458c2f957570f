package target

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/capsule-storage/capsule/nvmeof"
)

// TestTCPHPDAAndSuccess asks for HPDA 3 (16-byte data alignment) and
// disables SQ flow control: controller-to-host data then starts at PDO
// 32 behind zero padding, and a successful command with data is answered
// by its C2HData alone, SUCCESS and LAST_PDU set, with no CapsuleResp.
func TestTCPHPDAAndSuccess(t *testing.T) {
	tt := newTestTarget(t, "tcp://127.0.0.1:0")
	x := dialTCPRaw(t, tt.url)
	ic, err := (&nvmeof.TCPICReq{HPDA: 3}).MarshalBinary()
	require.NoError(t, err)
	x.write(ic)
	h, pdu := x.read()
	require.Equal(t, nvmeof.TCPPDUICResp, h.Type)
	require.NoError(t, x.resp.UnmarshalBinary(pdu))

	cmd, data := x.connectCmd(0)
	cmd.CDW11 |= uint32(nvmeof.ConnectDisableSQFlowControl) << 16
	cmd.DPTR = nvmeof.InCapsuleSGL{Length: nvmeof.ConnectDataSize}.Descriptor()
	x.write(x.capsule(cmd, data))
	cqe, _ := x.response()
	require.True(t, cqe.Status.Success(), cqe.Status.String())
	assert.EqualValues(t, nvmeof.SQHDFlowControlDisabled, cqe.SQHD)
	x.cntlid = nvmeof.ParseConnectResponse(cqe.DW0).CNTLID
	x.enable()

	id := nvmeof.Command{Opcode: nvmeof.AdminIdentify, CID: x.nextCID(), DPTR: nvmeof.TransportSGL{Length: nvmeof.IdentifyDataSize}.Descriptor()}
	id.SetIdentify(nvmeof.CNSController, 0)
	x.write(x.capsule(id, nil))
	h, pdu = x.read()
	require.Equal(t, nvmeof.TCPPDUC2HData, h.Type)
	assert.EqualValues(t, 32, h.PDO, "24-byte header padded to 16 bytes")
	assert.Equal(t, make([]byte, 8), pdu[24:32], "zero padding")
	assert.Equal(t, nvmeof.TCPFlagLastPDU|nvmeof.TCPFlagSuccess, h.Flags)
	p, err := nvmeof.ParseTCPDataPDU(pdu)
	require.NoError(t, err)
	assert.Equal(t, id.CID, p.CCCID)
	assert.EqualValues(t, nvmeof.IdentifyDataSize, p.DATAL)
	var ctrl nvmeof.IdentifyController
	require.NoError(t, ctrl.UnmarshalBinary(pdu[32:]))
	assert.Equal(t, x.cntlid, ctrl.CNTLID)

	// No CapsuleResp follows: the next PDU answers the next command.
	get := nvmeof.PropertyGet{CID: x.nextCID(), Size: nvmeof.PropertySize8, Offset: nvmeof.PropertyCAP}
	x.write(x.capsule(get.Command(), nil))
	h, pdu = x.read()
	require.Equal(t, nvmeof.TCPPDUCapsuleResp, h.Type)
	var next nvmeof.Completion
	require.NoError(t, next.UnmarshalBinary(pdu[8:24]))
	assert.Equal(t, get.CID, next.CID)
}
