package nvmeof

import (
	"encoding/binary"
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestCAPBits places each CAP field at the bits NVMe Base 2.x 3.1.4.1
// gives it.
func TestCAPBits(t *testing.T) {
	// 63:56 00 | 55:52 MPSMAX 4 | 51:48 MPSMIN 0 | 47:45 0 | 44:37 CSS 01h |
	// 36 NSSRS 1 | 35:32 DSTRD 0 | 31:24 TO 1Eh | 23:19 0 | 18:17 AMS 01b |
	// 16 CQR 1 | 15:0 MQES 03FFh
	const raw = CAP(0x0040_0030_1E03_03FF)
	assert.Equal(t, uint16(0x3ff), raw.MQES())
	assert.True(t, raw.CQR())
	assert.Equal(t, uint8(1), raw.AMS())
	assert.Equal(t, uint8(0x1e), raw.TO())
	assert.Equal(t, uint8(0), raw.DSTRD())
	assert.True(t, raw.NSSRS())
	assert.Equal(t, CAPCSSNVM, raw.CSS())
	assert.False(t, raw.BPS())
	assert.Equal(t, uint8(0), raw.MPSMIN())
	assert.Equal(t, uint8(4), raw.MPSMAX())
	assert.False(t, raw.CMBS())

	built := CAP(0).WithMQES(0x3ff).WithCQR(true).WithAMS(1).WithTO(0x1e).
		WithNSSRS(true).WithCSS(CAPCSSNVM).WithMPSMIN(0).WithMPSMAX(4)
	assert.Equal(t, raw, built)
	assert.Equal(t, raw.WithCQR(false), raw&^(1<<16))
	assert.Equal(t, CAP(0x00ff_ffff_ffff_ffff).WithMQES(0).MQES(), uint16(0), "setters keep to their field")
	assert.Equal(t, "CAP{MQES:1023 CQR:true AMS:1 TO:30 CSS:0x1 MPSMIN:0 MPSMAX:4}", raw.String())

	// A Discovery controller reports only "no I/O command set".
	assert.Equal(t, CAPCSSNoIO, CAP(1<<44).CSS())
}

// TestCCBits checks CC against the value a Linux host writes to enable a
// controller: EN, CSS NVM, MPS 4 KiB, round robin, IOSQES 6, IOCQES 4
// (NVMe Base 2.x 3.1.4.5).
func TestCCBits(t *testing.T) {
	const linuxEnable = CC(0x0046_0001)
	assert.True(t, linuxEnable.EN())
	assert.Equal(t, CCCSSNVM, linuxEnable.CSS())
	assert.Equal(t, uint8(0), linuxEnable.MPS())
	assert.Equal(t, uint8(0), linuxEnable.AMS())
	assert.Equal(t, ShutdownNone, linuxEnable.SHN())
	assert.Equal(t, uint8(6), linuxEnable.IOSQES())
	assert.Equal(t, uint8(4), linuxEnable.IOCQES())
	assert.False(t, linuxEnable.CRIME())
	assert.Equal(t, linuxEnable, CC(0).WithEN(true).WithIOSQES(6).WithIOCQES(4))

	// Normal shutdown notification: SHN 01b in bits 15:14.
	shn := linuxEnable.WithSHN(ShutdownNormal)
	assert.Equal(t, CC(0x0046_4001), shn)
	assert.Equal(t, ShutdownNormal, shn.SHN())
	assert.Equal(t, CC(0x0046_0000), linuxEnable.WithEN(false))

	all := CC(0).WithCSS(CCCSSAllIO).WithMPS(0xf).WithAMS(7)
	assert.Equal(t, CC(6<<4|0xf<<7|7<<11), all)
	assert.Equal(t, uint8(7), all.AMS())
	assert.Equal(t, uint8(0xf), all.MPS())
	assert.True(t, CC(1<<24).CRIME())
	assert.Contains(t, linuxEnable.String(), "IOSQES:6")
}

// TestCSTSBits checks CSTS (NVMe Base 2.x 3.1.4.6).
func TestCSTSBits(t *testing.T) {
	s := CSTS(0).WithRDY(true).WithSHST(ShutdownStatusComplete)
	assert.Equal(t, CSTS(0b1001), s)
	assert.True(t, s.RDY())
	assert.False(t, s.CFS())
	assert.Equal(t, ShutdownStatusComplete, s.SHST())
	assert.True(t, CSTS(0).WithCFS(true).CFS())
	assert.Equal(t, CSTS(2), CSTS(0).WithCFS(true))
	assert.True(t, CSTS(1<<4).NSSRO())
	assert.True(t, CSTS(1<<5).PP())
	assert.Equal(t, CSTS(0), s.WithRDY(false).WithSHST(ShutdownStatusNormal))
	assert.Equal(t, "CSTS{RDY:true CFS:false SHST:2}", s.String())
}

func TestVersion(t *testing.T) {
	// VS of NVMe 1.4: 00010400h (NVMe Base 2.x 3.1.4.2).
	assert.Equal(t, Version(0x00010400), Version1_4)
	assert.Equal(t, Version(0x00020000), Version2_0)
	v := NewVersion(2, 1, 3)
	assert.Equal(t, uint16(2), v.Major())
	assert.Equal(t, uint8(1), v.Minor())
	assert.Equal(t, uint8(3), v.Tertiary())
	assert.Equal(t, "2.1.3", v.String())
	assert.Equal(t, "1.2.1", Version1_2_1.String())
}

func TestPropertySizes(t *testing.T) {
	for off, want := range map[uint32]PropertySize{
		PropertyCAP: PropertySize8, PropertyVS: PropertySize4, PropertyCC: PropertySize4,
		PropertyCSTS: PropertySize4, PropertyNSSR: PropertySize4,
	} {
		got, ok := PropertySizeAt(off)
		assert.True(t, ok)
		assert.Equal(t, want, got, "offset %#x", off)
	}
	_, ok := PropertySizeAt(0x0c) // INTMS: not on fabrics
	assert.False(t, ok)
	assert.Equal(t, 4, PropertySize4.Bytes())
	assert.Equal(t, 8, PropertySize8.Bytes())
	assert.Equal(t, 0, PropertySize(2).Bytes())
	assert.Equal(t, uint32(0x1c), PropertyCSTS)
	var nssr [4]byte
	be.PutUint32(nssr[:], NSSRReset)
	assert.Equal(t, "NVMe", string(nssr[:]))
}

var be = binary.BigEndian
