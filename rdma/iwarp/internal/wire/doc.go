// Package wire holds the iWARP wire formats the iwarp provider speaks: MPA
// start-up frames and FPDU framing (RFC 5044), DDP tagged and untagged
// segment headers (RFC 5041), RDMAP control, Read Request and Terminate
// headers (RFC 5040), and the Immediate Data opcodes of RFC 7306.
//
// # Model
//
// Every format is a plain Go value with named offset constants. Decoders
// (Unmarshal, Parse…) validate every length before they touch the bytes
// and never allocate; encoders (MarshalTo) write into a caller buffer and
// never allocate either, so the provider can keep headers in
// pre-allocated scratch space. All multi-byte fields are big-endian
// except the MPA CRC, which is the little-endian image of the CRC32C
// value (the byte order iSCSI, Linux siw and Wireshark use).
//
// # Invariants
//
//   - A decoded value re-encodes to bytes that decode to the same value
//     (the fuzz targets check this round trip).
//   - Decoding errors that a receiver must answer with a Terminate carry
//     the Terminate's layer, error type and code (*HeaderError), so the
//     provider never has to guess which code to send.
//   - Nothing here knows about queue pairs or memory; placement rules
//     (MSN windows, STag checks) belong to the provider.
//
// # Concurrency
//
// Values are not safe for concurrent mutation; the functions are pure.
//
// # Sharp edges
//
//   - MPA markers are not implemented: a Request or Reply with M set
//     decodes, and the provider refuses the connection.
//   - The Terminate decoder sizes the copied DDP header from that header's
//     own T flag, not from the error type (Wireshark uses the error type,
//     which is wrong for RDMAP-layer errors on untagged messages).
//   - RFC 7306 Immediate Data carries 8 opaque bytes. The provider uses
//     the first 4 for the verbs immediate value and the next 4 for a kind
//     word; see ImmData.
//
// # Library
//
// Only the standard library: encoding/binary and hash/crc32 (Castagnoli,
// which uses the SSE4.2/ARMv8 CRC instructions where present).
package wire
