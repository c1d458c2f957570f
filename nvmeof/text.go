package nvmeof

import (
	"bytes"
	"unicode/utf8"
)

// NQN limits and well-known names (NVMe Base 2.x, 4.7 NVMe Qualified Names).
const (
	// NQNFieldSize is the size of every NQN field on the wire (Connect
	// data, Identify Controller SUBNQN, discovery log entries).
	NQNFieldSize = 256
	// MaxNQNLength is the longest NQN in bytes, without its terminating NUL.
	MaxNQNLength = 223
	// DiscoveryNQN is the well-known NQN of a Discovery subsystem.
	DiscoveryNQN = "nqn.2014-08.org.nvmexpress.discovery"
)

// ValidateNQN checks what the wire needs of an NQN: nonempty, at most 223
// bytes, valid UTF-8, and no NUL (the field's terminator) inside it. It
// does not check the "nqn.yyyy-mm.reverse-domain:" shape.
func ValidateNQN(s string) error {
	switch {
	case s == "", len(s) > MaxNQNLength, !utf8.ValidString(s):
		return ErrInvalidNQN
	}
	for i := 0; i < len(s); i++ {
		if s[i] == 0 {
			return ErrInvalidNQN
		}
	}
	return nil
}

// putNQN writes s into the NQN field f, NUL-padded. An empty s leaves the
// field all zero when allowEmpty is set.
func putNQN(f []byte, s string, allowEmpty bool) error {
	clear(f)
	if s == "" && allowEmpty {
		return nil
	}
	if err := ValidateNQN(s); err != nil {
		return err
	}
	copy(f, s)
	return nil
}

// getNQN decodes the NUL-terminated, NUL-padded NQN in field f. An all-zero
// field decodes to "" when allowEmpty is set.
func getNQN(f []byte, allowEmpty bool) (string, error) {
	n := bytes.IndexByte(f, 0)
	if n < 0 {
		return "", ErrInvalidNQN // no terminator: longer than the field allows
	}
	for _, c := range f[n:] {
		if c != 0 {
			return "", ErrInvalidNQN // interior NUL: text after the terminator
		}
	}
	if n == 0 && allowEmpty {
		return "", nil
	}
	s := string(f[:n])
	if err := ValidateNQN(s); err != nil {
		return "", err
	}
	return s, nil
}

// validASCII reports whether s holds only the code values 20h..7Eh that the
// specification allows in an ASCII string.
func validASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			return false
		}
	}
	return true
}

// putASCII writes s into f left-justified and padded with spaces, as the
// specification pads ASCII strings.
func putASCII(f []byte, s string) error {
	if len(s) > len(f) || !validASCII(s) {
		return ErrInvalidString
	}
	n := copy(f, s)
	for i := n; i < len(f); i++ {
		f[i] = ' '
	}
	return nil
}

// getASCII decodes a left-justified ASCII string from f. Trailing spaces
// and trailing NULs are padding and are removed (the specification pads
// with spaces; some implementations pad with NULs). Any other byte outside
// 20h..7Eh, or a NUL followed by text, is an error.
func getASCII(f []byte) (string, error) {
	end := len(f)
	for end > 0 && (f[end-1] == ' ' || f[end-1] == 0) {
		end--
	}
	for _, c := range f[:end] {
		if c < 0x20 || c > 0x7e {
			return "", ErrInvalidString
		}
	}
	return string(f[:end]), nil
}
