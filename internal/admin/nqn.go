package admin

import (
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/capsule-storage/capsule/nvmeof"
)

// uuidNQNPrefix begins an NQN made from a UUID (NVMe Base 4.5).
const uuidNQNPrefix = "nqn.2014-08.org.nvmexpress:uuid:"

// CheckNQN checks that s is an NVMe Qualified Name as NVMe Base 4.5 writes
// them, the check SPDK's nvmf_subsystem_add_host and nvmf_create_subsystem
// make: at most 223 bytes of UTF-8, and either
// "nqn.2014-08.org.nvmexpress:uuid:" and a UUID (8-4-4-4-12 hex digits),
// or "nqn.", a date yyyy-mm, ".", a reverse domain name (labels of
// letters, digits and hyphens), and optionally ":" and any string.
//
// It is for names an operator gives (an allow-list, a subsystem): the
// target's wire side accepts what hosts send more leniently
// (nvmeof.ValidateNQN).
func CheckNQN(s string) error {
	if err := nvmeof.ValidateNQN(s); err != nil {
		if len(s) > nvmeof.MaxNQNLength {
			return fmt.Errorf("not an NQN: longer than %d bytes", nvmeof.MaxNQNLength)
		}
		return errors.New("not an NQN: empty, not UTF-8, or holds a NUL")
	}
	if !utf8.ValidString(s) {
		return errors.New("not an NQN: not UTF-8")
	}
	if u, ok := strings.CutPrefix(s, uuidNQNPrefix); ok {
		if !isUUID(u) {
			return fmt.Errorf("not an NQN: %q must be followed by a UUID such as 5c1d9d5a-3f47-4c5e-9d3b-2b8f2f6f1a01", uuidNQNPrefix)
		}
		return nil
	}
	const want = "want nqn.yyyy-mm.reverse.domain[:name], such as nqn.2026-11.io.capsule:default, or " + uuidNQNPrefix + "UUID"
	rest, ok := strings.CutPrefix(s, "nqn.")
	if !ok || len(rest) < 8 || !digits(rest[0:4]) || rest[4] != '-' || !digits(rest[5:7]) || rest[7] != '.' {
		return errors.New("not an NQN: " + want)
	}
	if m := (rest[5]-'0')*10 + rest[6] - '0'; m < 1 || m > 12 {
		return errors.New("not an NQN: the month of its date is not 01 to 12")
	}
	domain, _, _ := strings.Cut(rest[8:], ":")
	if domain == "" {
		return errors.New("not an NQN: no domain after the date; " + want)
	}
	for _, label := range strings.Split(domain, ".") {
		if !domainLabel(label) {
			return fmt.Errorf("not an NQN: %q is not a domain name label (letters, digits and inner hyphens); %s", label, want)
		}
	}
	return nil
}

func digits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return s != ""
}

func isUUID(s string) bool {
	if len(s) != 36 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch i {
		case 8, 13, 18, 23:
			if c != '-' {
				return false
			}
		default:
			if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F') {
				return false
			}
		}
	}
	return true
}

// domainLabel reports whether l is a label of a domain name: 1 to 63
// letters, digits and hyphens, not beginning or ending with a hyphen.
func domainLabel(l string) bool {
	if l == "" || len(l) > 63 || l[0] == '-' || l[len(l)-1] == '-' {
		return false
	}
	for i := 0; i < len(l); i++ {
		c := l[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-') {
			return false
		}
	}
	return true
}
