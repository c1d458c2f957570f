package nvmeof

import (
	"errors"
	"fmt"
)

// Errors about sizes. Decoders and encoders wrap them with the name of the
// structure and the sizes involved; errors.Is finds them.
var (
	// ErrShortBuffer: a buffer is smaller than the structure to decode from
	// it or to encode into it (MarshalTo), or a list's count runs past the
	// end of the bytes that carry it.
	ErrShortBuffer = errors.New("nvmeof: buffer too short")
	// ErrLength: a structure of fixed size was given bytes of another
	// length. UnmarshalBinary takes exactly the wire size, so that a
	// truncated or padded message is never taken for a whole one.
	ErrLength = errors.New("nvmeof: wrong length for a fixed-size structure")
)

// Errors about field values. A decoder wraps them in a *FieldError that
// names the field and, for a command a controller received, the Status to
// complete it with.
var (
	// ErrWrongCommand: a parser for one command was given another (the
	// opcode or the Fabrics command type does not match).
	ErrWrongCommand = errors.New("nvmeof: not the expected command")
	// ErrFieldValue: a field holds a reserved value or one out of range
	// (an unsupported record format, a property size of 3, a 0's based
	// count that cannot be represented).
	ErrFieldValue = errors.New("nvmeof: field value reserved or out of range")
	// ErrInvalidNQN: an NVMe Qualified Name is empty, longer than 223
	// bytes, not UTF-8, holds a NUL inside the name, or its field is not
	// NUL-padded after it.
	ErrInvalidNQN = errors.New("nvmeof: invalid NQN")
	// ErrInvalidString: an ASCII field holds a byte outside 20h..7Eh, a NUL
	// followed by text, or a string longer than its field.
	ErrInvalidString = errors.New("nvmeof: invalid ASCII string")
	// ErrInvalidList: a list (namespace list, namespace identification
	// descriptors, Dataset Management ranges, discovery log) is malformed:
	// entries out of order, duplicated, too many, or a descriptor length
	// that does not match its type.
	ErrInvalidList = errors.New("nvmeof: malformed list")
)

// FieldError reports the field of a wire structure that a decoder or
// encoder refused. It wraps one of the sentinel errors above and, when the
// structure is a command (or a command's data) a controller received, the
// Status the controller completes that command with; errors.Is finds both
// and errors.As finds the *FieldError and the Status.
//
// For a Connect command refused with Connect Invalid Parameters, Offset and
// InData are the IPO and IATTR values of the response:
// InvalidParameter() builds them.
type FieldError struct {
	// Structure names the wire structure ("Connect command", "Connect data").
	Structure string
	// Field is the field's name as the specification spells it ("SUBNQN").
	Field string
	// Offset is the byte offset of the field from the start of Structure.
	Offset int
	// InData is true when Structure is the data of a command rather than
	// its submission queue entry.
	InData bool
	// Status is the status to complete the command with, or StatusSuccess
	// (zero) when the structure is not a received command.
	Status Status
	// Err is the sentinel error that says what is wrong.
	Err error
}

func (e *FieldError) Error() string {
	if e.Status != StatusSuccess {
		return fmt.Sprintf("nvmeof: %s: %s at byte %d: %v (%v)", e.Structure, e.Field, e.Offset, e.Err, e.Status.String())
	}
	return fmt.Sprintf("nvmeof: %s: %s at byte %d: %v", e.Structure, e.Field, e.Offset, e.Err)
}

// Unwrap returns the sentinel error and, if set, the Status.
func (e *FieldError) Unwrap() []error {
	if e.Status != StatusSuccess {
		return []error{e.Err, e.Status}
	}
	return []error{e.Err}
}

// InvalidParameter returns the location of the field in the form a Connect
// response with Connect Invalid Parameters carries in DW0.
func (e *FieldError) InvalidParameter() InvalidParameter {
	return InvalidParameter{InData: e.InData, Offset: uint16(e.Offset)}
}

// sizeError reports a buffer of the wrong size for structure name.
func sizeError(name string, got, want int, err error) error {
	return fmt.Errorf("nvmeof: %s: %d bytes, want %d: %w", name, got, want, err)
}

// needExactly checks that b is exactly size bytes long.
func needExactly(name string, b []byte, size int) error {
	if len(b) != size {
		return sizeError(name, len(b), size, ErrLength)
	}
	return nil
}

// needAtLeast checks that b holds at least size bytes.
func needAtLeast(name string, b []byte, size int) error {
	if len(b) < size {
		return sizeError(name, len(b), size, ErrShortBuffer)
	}
	return nil
}
