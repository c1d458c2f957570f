package nvmeof

import (
	"bytes"
	"encoding"
	"errors"
	"reflect"
	"testing"

	"github.com/stretchr/testify/require"
)

// Every decoder of bytes that come from a peer has a fuzz target here.
// Each checks that the decoder does not panic, that a refusal is one of
// the package's typed errors, and that what it accepts survives an encode
// and a second decode unchanged (byte for byte for the SQE, the CQE and
// other structures without reserved bytes).
//
// go test runs the seeds; run one target longer with, for example,
//
//	go test -run '^$' -fuzz '^FuzzCommand$' -fuzztime 1m ./nvmeof/

// requireTyped fails unless err wraps one of the package's sentinels or
// statuses.
func requireTyped(t *testing.T, err error) {
	t.Helper()
	for _, s := range []error{ErrShortBuffer, ErrLength, ErrWrongCommand, ErrFieldValue,
		ErrInvalidNQN, ErrInvalidString, ErrInvalidList} {
		if errors.Is(err, s) {
			return
		}
	}
	var st RDMACMStatus
	if errors.As(err, &st) {
		return
	}
	t.Fatalf("untyped error: %v", err)
}

// wireValue is a structure with MarshalBinary and UnmarshalBinary.
type wireValue[T any] interface {
	*T
	encoding.BinaryMarshaler
	encoding.BinaryUnmarshaler
}

// roundTrip decodes b into a T; if that succeeds, it encodes the value,
// decodes the encoding and requires the same value and the same encoding.
// It returns the decoded value, or nil.
func roundTrip[T any, P wireValue[T]](t *testing.T, b []byte) *T {
	t.Helper()
	var x T
	if err := P(&x).UnmarshalBinary(b); err != nil {
		requireTyped(t, err)
		return nil
	}
	enc, err := P(&x).MarshalBinary()
	require.NoError(t, err, "a decoded value must encode")
	var y T
	require.NoError(t, P(&y).UnmarshalBinary(enc), "an encoded value must decode")
	// reflect.DeepEqual and bytes.Equal rather than require.Equal: a diff
	// of two 4 KiB structures takes testify minutes to print.
	if !reflect.DeepEqual(x, y) {
		t.Fatalf("decode(encode(x)) != x:\n x: %+v\n y: %+v", x, y)
	}
	enc2, err := P(&y).MarshalBinary()
	require.NoError(t, err)
	if !bytes.Equal(enc, enc2) {
		t.Fatalf("the encoding changed on a second round trip:\n%x\n%x", enc, enc2)
	}
	return &x
}

// sized returns b cut or zero-padded to n bytes, so that the fuzzer's
// inputs of other lengths still reach the field checks.
func sized(b []byte, n int) []byte {
	out := make([]byte, n)
	copy(out, b)
	return out
}

func FuzzCommand(f *testing.F) {
	for _, seed := range [][]byte{
		readCommandBytes, connectAdminBytes, propertyGetCAPBytes, propertySetCCBytes,
		append(append([]byte{}, readCommandBytes[:39]...), append([]byte{0x01}, readCommandBytes[40:]...)...),
		append(append([]byte{}, connectAdminBytes...), connectDataBytes(f)...),
		{},
	} {
		f.Add(seed, uint8(0x13))
	}
	f.Fuzz(func(t *testing.T, b []byte, policyBits uint8) {
		c, rest, err := ParseCapsule(b)
		if err != nil {
			require.ErrorIs(t, err, ErrShortBuffer)
			require.Less(t, len(b), CommandSize)
			return
		}
		out, err := c.MarshalBinary()
		require.NoError(t, err)
		require.Equal(t, b[:CommandSize], out, "an SQE round-trips byte for byte")
		var d Command
		require.NoError(t, d.UnmarshalBinary(out))
		require.Equal(t, c, d)

		if x, err := ParseConnect(&c); err == nil {
			cc := x.Command()
			y, err := ParseConnect(&cc)
			require.NoError(t, err)
			require.Equal(t, x, y)
		} else {
			requireTyped(t, err)
		}
		if x, err := ParsePropertyGet(&c); err == nil {
			cc := x.Command()
			y, err := ParsePropertyGet(&cc)
			require.NoError(t, err)
			require.Equal(t, x, y)
		} else {
			requireTyped(t, err)
		}
		if x, err := ParsePropertySet(&c); err == nil {
			cc := x.Command()
			y, err := ParsePropertySet(&cc)
			require.NoError(t, err)
			require.Equal(t, x, y)
		} else {
			requireTyped(t, err)
		}
		if x, err := ParseDisconnect(&c); err == nil {
			cc := x.Command()
			y, err := ParseDisconnect(&cc)
			require.NoError(t, err)
			require.Equal(t, x, y)
		} else {
			requireTyped(t, err)
		}

		// Derived values stay within their ranges.
		require.GreaterOrEqual(t, c.Blocks(), uint32(1))
		require.LessOrEqual(t, c.Blocks(), uint32(65536))
		require.GreaterOrEqual(t, c.DSMRanges(), 1)
		require.LessOrEqual(t, c.DSMRanges(), MaxDSMRanges)
		require.Equal(t, c.LogPageDwords()*4, c.LogPageLength())
		require.GreaterOrEqual(t, c.LogPageDwords(), uint64(1))

		checkSGLDecode(t, c.DPTR, policyFromBits(policyBits, len(rest)))
	})
}

func policyFromBits(bits uint8, inCapsule int) SGLPolicy {
	return SGLPolicy{
		Keyed:         bits&1 != 0,
		Transport:     bits&2 != 0,
		InCapsuleSize: inCapsule,
		MaxDataBlocks: int(bits >> 4),
	}
}

// checkSGLDecode decodes d under p and checks that an accepted
// descriptor is one p allows and that every typed view round-trips.
func checkSGLDecode(t *testing.T, d SGLDescriptor, p SGLPolicy) {
	t.Helper()
	dp, st := p.Decode(d)
	require.Equal(t, d.Kind(), dp.Kind)
	require.True(t, st == StatusSuccess || st.SCT() == SCTGeneric, "SGL statuses are generic: %v", st)
	if st == StatusSuccess {
		switch dp.Kind {
		case SGLKindNull:
		case SGLKindKeyed:
			require.True(t, p.Keyed)
		case SGLKindTransport:
			require.True(t, p.Transport)
		case SGLKindInCapsule:
			if dp.InCapsule.Length > 0 {
				require.LessOrEqual(t, dp.InCapsule.Offset+uint64(dp.InCapsule.Length), uint64(p.InCapsuleSize))
			}
		case SGLKindLastSegment:
			require.Greater(t, p.MaxDataBlocks, 1)
			require.NotZero(t, dp.Segment.Length)
			require.Zero(t, dp.Segment.Length%SGLDescriptorSize)
			require.True(t, dp.Segment.Offset)
			require.LessOrEqual(t, dp.Segment.Address+uint64(dp.Segment.Length), uint64(p.InCapsuleSize))
		default:
			t.Fatalf("accepted a %v descriptor", dp.Kind)
		}
	}
	if k, ok := d.Keyed(); ok {
		e, err := k.Descriptor()
		require.NoError(t, err)
		require.Equal(t, d, e, "a keyed descriptor has no reserved bytes")
	}
	if v, ok := d.InCapsule(); ok {
		w, ok := v.Descriptor().InCapsule()
		require.True(t, ok)
		require.Equal(t, v, w)
	}
	if v, ok := d.Transport(); ok {
		w, ok := v.Descriptor().Transport()
		require.True(t, ok)
		require.Equal(t, v, w)
	}
	if v, ok := d.Segment(); ok {
		w, ok := v.Descriptor().Segment()
		require.True(t, ok)
		require.Equal(t, v, w)
	}
}

func FuzzSGLDescriptor(f *testing.F) {
	for _, d := range []SGLDescriptor{keyedSGL, keyedInvalidateSGL, inCapsuleSGL, transportSGL,
		lastSegmentSGL, segmentSGL, dataBlockSGL, bitBucketSGL, nullSGL} {
		f.Add(d[:], uint8(0x43), 8192)
	}
	f.Fuzz(func(t *testing.T, b []byte, policyBits uint8, inCapsule int) {
		var d SGLDescriptor
		copy(d[:], b)
		checkSGLDecode(t, d, policyFromBits(policyBits, inCapsule))
	})
}

func FuzzCompletion(f *testing.F) {
	f.Add(lbaOutOfRangeBytes)
	f.Add(annotated("00 01 01 00 00000000 0000 0000 0000 0483"))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		var c Completion
		if err := c.UnmarshalBinary(b); err != nil {
			require.ErrorIs(t, err, ErrLength)
			require.NotEqual(t, CompletionSize, len(b))
			return
		}
		out, err := c.MarshalBinary()
		require.NoError(t, err)
		require.Equal(t, b, out, "a CQE round-trips byte for byte")
		require.Equal(t, c.Status, c.Status&0x7fff)
		require.Equal(t, ParseConnectResponse(c.DW0).DW0(), c.DW0)
		p := ParseInvalidParameter(c.DW0)
		require.Equal(t, p, ParseInvalidParameter(p.DW0()))
		e := ParseAsyncEvent(c.DW0)
		require.Equal(t, e, ParseAsyncEvent(e.DW0()))
	})
}

func FuzzConnectData(f *testing.F) {
	f.Add(connectDataBytes(f))
	f.Add(make([]byte, ConnectDataSize))
	f.Fuzz(func(t *testing.T, b []byte) {
		roundTrip[ConnectData](t, b)
		if d := roundTrip[ConnectData](t, sized(b, ConnectDataSize)); d != nil {
			require.NoError(t, ValidateNQN(d.SubNQN))
			require.NoError(t, ValidateNQN(d.HostNQN))
		} else {
			var d ConnectData
			err := d.UnmarshalBinary(sized(b, ConnectDataSize))
			require.ErrorIs(t, err, StatusConnectInvalidParameters, "every refusal answers the Connect")
		}
		// The tolerant decoder a controller uses takes everything the
		// strict one takes, the same way, and refuses only with Connect
		// Invalid Parameters.
		for _, in := range [][]byte{b, sized(b, ConnectDataSize)} {
			var strict, tolerant ConnectData
			serr, terr := strict.UnmarshalBinary(in), tolerant.UnmarshalTolerant(in)
			switch {
			case serr == nil:
				require.NoError(t, terr)
				require.Equal(t, strict, tolerant)
			case terr != nil && len(in) == ConnectDataSize:
				require.ErrorIs(t, terr, StatusConnectInvalidParameters)
			}
		}
	})
}

func FuzzIdentifyController(f *testing.F) {
	f.Add(identifyControllerBytes(f))
	f.Add(make([]byte, IdentifyDataSize))
	f.Fuzz(func(t *testing.T, b []byte) {
		roundTrip[IdentifyController](t, b)
		roundTrip[IdentifyController](t, sized(b, IdentifyDataSize))
	})
}

func FuzzIdentifyNamespace(f *testing.F) {
	f.Add(identifyNamespaceBytes(f))
	f.Add(make([]byte, IdentifyDataSize))
	f.Fuzz(func(t *testing.T, b []byte) {
		roundTrip[IdentifyNamespace](t, b)
		if ns := roundTrip[IdentifyNamespace](t, sized(b, IdentifyDataSize)); ns != nil {
			require.LessOrEqual(t, ns.NUSE, ns.NCAP)
			require.LessOrEqual(t, ns.NCAP, ns.NSZE)
			require.LessOrEqual(t, ns.FormatIndex(), int(ns.NLBAF))
			if ns.NSZE != 0 {
				bs, err := ns.BlockSize()
				require.NoError(t, err)
				require.GreaterOrEqual(t, bs, uint32(512))
			}
		}
	})
}

func FuzzNamespaceIDs(f *testing.F) {
	seed := make([]byte, IdentifyDataSize)
	copy(seed, annotated("01 08 00 00 a1a2a3a4a5a6a7a8 03 10 00 00 6ba7b8109dad11d180b400c04fd430c8 04 01 00 00 00"))
	f.Add(seed)
	f.Add(annotated("f0 ff 00 00"))
	f.Fuzz(func(t *testing.T, b []byte) {
		roundTrip[NamespaceIDs](t, b)
		roundTrip[NamespaceIDs](t, sized(b, IdentifyDataSize))
	})
}

func FuzzNamespaceList(f *testing.F) {
	f.Add(annotated("01000000 02000000 0a000000"))
	f.Add(annotated("ffffffff"))
	f.Add(annotated("05000000 03000000"))
	f.Fuzz(func(t *testing.T, b []byte) {
		b = sized(b, NamespaceListSize)
		ids, err := AppendNamespaceList(nil, b)
		if err != nil {
			requireTyped(t, err)
		} else {
			out := make([]byte, NamespaceListSize)
			_, err := MarshalNamespaceList(out, ids)
			require.NoError(t, err)
			require.Equal(t, b, out, "a namespace list has one encoding")
		}
		ids, overflow, err := AppendChangedNamespaceList(nil, b)
		if err != nil {
			requireTyped(t, err)
			return
		}
		if overflow {
			require.Empty(t, ids)
			ids = make([]uint32, NamespaceListEntries+1)
		}
		out := make([]byte, NamespaceListSize)
		_, err = MarshalChangedNamespaceList(out, ids)
		require.NoError(t, err)
		require.Equal(t, b, out)
	})
}

func FuzzErrorLogEntry(f *testing.F) {
	f.Add(errorLogEntryBytes)
	f.Fuzz(func(t *testing.T, b []byte) {
		roundTrip[ErrorLogEntry](t, b)
		roundTrip[ErrorLogEntry](t, sized(b, ErrorLogEntrySize))
	})
}

func FuzzSMARTLog(f *testing.F) {
	f.Add(make([]byte, SMARTLogSize))
	f.Fuzz(func(t *testing.T, b []byte) {
		roundTrip[SMARTLog](t, b)
		roundTrip[SMARTLog](t, sized(b, SMARTLogSize))
	})
}

func FuzzFirmwareSlotLog(f *testing.F) {
	seed := make([]byte, FirmwareSlotLogSize)
	copy(seed, annotated("21 00000000000000 312e302020202020"))
	f.Add(seed)
	f.Fuzz(func(t *testing.T, b []byte) {
		roundTrip[FirmwareSlotLog](t, b)
		roundTrip[FirmwareSlotLog](t, sized(b, FirmwareSlotLogSize))
	})
}

func FuzzDiscoveryLog(f *testing.F) {
	f.Add(discoveryLogBytes(f))
	f.Add(make([]byte, DiscoveryLogHeaderSize))
	f.Fuzz(func(t *testing.T, b []byte) {
		if d := roundTrip[DiscoveryLog](t, b); d != nil {
			require.Equal(t, len(b), d.Size())
		}
		if len(b) > DiscoveryLogHeaderSize {
			roundTrip[DiscoveryLogEntry](t, sized(b[DiscoveryLogHeaderSize:], DiscoveryLogEntrySize))
		}
	})
}

func FuzzDSMRanges(f *testing.F) {
	f.Add(annotated("00000000 00010000 0010000000000000 00000000 08000000 0000000001000000"), 2)
	f.Add([]byte{}, 0)
	f.Fuzz(func(t *testing.T, b []byte, nr int) {
		ranges, err := AppendDSMRanges(nil, b, nr)
		if err != nil {
			requireTyped(t, err)
			return
		}
		require.Len(t, ranges, nr)
		out := make([]byte, nr*DSMRangeSize)
		n, err := MarshalDSMRanges(out, ranges)
		require.NoError(t, err)
		require.Equal(t, b[:n], out)
	})
}

func FuzzRDMACMPrivateData(f *testing.F) {
	f.Add(rdmacmRequestBytes)
	f.Add(annotated("0000 8000"))
	f.Add(annotated("0000 0900"))
	f.Add(annotated("0100"))
	f.Fuzz(func(t *testing.T, b []byte) {
		if r := roundTrip[RDMACMRequest](t, b); r != nil {
			require.GreaterOrEqual(t, len(b), RDMACMRequestSize)
			st := r.CheckQueueSizes(int(b[0]))
			require.Contains(t, []RDMACMStatus{0, RDMACMInvalidHSQSIZE, RDMACMInvalidHRQSIZE}, st)
			if st == 0 {
				require.LessOrEqual(t, int(r.HSQSize)+1, int(b[0]))
			}
		} else {
			var r RDMACMRequest
			st := RDMACMStatusOf(r.UnmarshalBinary(b))
			require.True(t, st == RDMACMInvalidPrivateDataLength || st == RDMACMInvalidRECFMT, "reject with %v", st)
		}
		roundTrip[RDMACMAccept](t, b)
		roundTrip[RDMACMReject](t, b)
	})
}

func FuzzIdentifyCommandSet(f *testing.F) {
	seed := make([]byte, IdentifyDataSize)
	copy(seed, annotated("06 00 00 00 00000000 0000000000000000 # WZSL 6"))
	f.Add(seed)
	list := make([]byte, IdentifyDataSize)
	copy(list, annotated("0100000000000000 # NVM alone"))
	f.Add(list)
	f.Add(annotated("01 01 00 00"))
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, in := range [][]byte{b, sized(b, IdentifyDataSize)} {
			roundTrip[IdentifyNamespaceNVM](t, in)
			roundTrip[IdentifyControllerNVM](t, in)
			roundTrip[IdentifyNamespaceIndependent](t, in)
			roundTrip[CommandSetList](t, in)
		}
	})
}

func FuzzReservation(f *testing.F) {
	st := ReservationStatus{GEN: 3, RTYPE: ReservationWriteExclusive,
		Registrants: []Registrant{{CNTLID: 1, Holds: true, RKey: 0xa, HostID: [16]byte{1}}, {CNTLID: 2, RKey: 0xb}}}
	seed, _ := st.MarshalBinary()
	f.Add(seed)
	f.Add(annotated("0a00000000000000 0b00000000000000 # CRKEY, NRKEY"))
	f.Add(annotated("0a00000000000000 # CRKEY"))
	f.Fuzz(func(t *testing.T, b []byte) {
		roundTrip[ReservationKeys](t, b)
		roundTrip[ReservationNotice](t, b)
		roundTrip[ReservationNotice](t, sized(b, ResNoticeLogSize))
		if s := roundTrip[ReservationStatus](t, b); s != nil {
			require.Equal(t, len(b), s.Size())
			// A short buffer gets a prefix of the whole.
			whole, _ := s.MarshalBinary()
			part := make([]byte, len(b)/2)
			n, err := s.MarshalTo(part)
			require.NoError(t, err)
			require.Equal(t, whole[:n], part[:n])
		}
	})
}

func FuzzANALog(f *testing.F) {
	f.Add(anaLogBytes)
	f.Add(make([]byte, ANALogHeaderSize))
	f.Add(append(append([]byte(nil), anaLogBytes...), make([]byte, 64)...))
	f.Fuzz(func(t *testing.T, b []byte) {
		if l := roundTrip[ANALog](t, b); l != nil {
			require.Equal(t, len(b), l.Size())
		}
		// The prefix a host decodes from a larger buffer is the page
		// UnmarshalBinary takes whole.
		var l ANALog
		n, err := l.UnmarshalPrefix(b)
		if err != nil {
			requireTyped(t, err)
			return
		}
		require.Equal(t, l.Size(), n)
		var whole ANALog
		require.NoError(t, whole.UnmarshalBinary(b[:n]))
		require.Equal(t, l, whole)
	})
}
