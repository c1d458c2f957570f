package hextest

import (
	"encoding/hex"
	"fmt"
	"strings"
	"testing"
)

// Decode returns the bytes the annotated hex s spells, failing t if it is
// not hex.
func Decode(t testing.TB, s string) []byte {
	t.Helper()
	b, err := parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// MustDecode is Decode for package-level tables: it panics on bad hex.
func MustDecode(s string) []byte {
	b, err := parse(s)
	if err != nil {
		panic(err)
	}
	return b
}

func parse(s string) ([]byte, error) {
	var clean strings.Builder
	for line := range strings.SplitSeq(s, "\n") {
		if i := strings.Index(line, "//"); i >= 0 {
			line = line[:i]
		}
		if i := strings.IndexByte(line, '#'); i >= 0 {
			line = line[:i]
		}
		clean.WriteString(strings.Join(strings.Fields(line), ""))
	}
	b, err := hex.DecodeString(clean.String())
	if err != nil {
		return nil, fmt.Errorf("hextest: %w", err)
	}
	return b, nil
}
