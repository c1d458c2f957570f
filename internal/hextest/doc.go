// Package hextest decodes the field-annotated hex that wire tests use:
//
//	want := hextest.Decode(t, `
//		7f       // opcode: Fabrics
//		00       // reserved, PSDT
//		1234     // CID
//	`)
//
// Everything after "//" or "#" on a line is a comment; whitespace between
// hex digits is ignored.
package hextest
