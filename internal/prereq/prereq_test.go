package prereq

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// recorder is a testing.TB that records how the test ended.
type recorder struct {
	testing.TB
	skipped, failed bool
	msg             string
}

func (r *recorder) Helper() {}
func (r *recorder) Skip(args ...any) {
	r.skipped, r.msg = true, args[0].(string)
}
func (r *recorder) Fatal(args ...any) {
	r.failed, r.msg = true, args[0].(string)
}

// TestMissing: a missing prerequisite skips, and fails under CI=true.
func TestMissing(t *testing.T) {
	t.Setenv("CI", "")
	r := &recorder{TB: t}
	Tool(r, "capsule-no-such-program")
	assert.True(t, r.skipped)
	assert.False(t, r.failed)
	assert.Contains(t, r.msg, "capsule-no-such-program is not installed")

	t.Setenv("CI", "true")
	r = &recorder{TB: t}
	Tool(r, "capsule-no-such-program")
	assert.True(t, r.failed)
	assert.False(t, r.skipped)

	r = &recorder{TB: t}
	assert.NotEmpty(t, Tool(r, "sh"))
	assert.False(t, r.failed || r.skipped, "sh is there")
}
