package admin

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestCheckNQN(t *testing.T) {
	for _, good := range []string{
		"nqn.2026-11.io.capsule:default",
		"nqn.2014-08.org.nvmexpress.discovery",
		"nqn.2014-08.org.nvmexpress:uuid:11111111-2222-3333-4444-555555555555",
		"nqn.2014-08.org.nvmexpress:uuid:5C1D9D5A-3F47-4C5E-9D3B-2B8F2F6F1A01",
		"nqn.2016-06.io.spdk:cnode1",
		"nqn.2026-11.io.capsule:a:b/c d", // anything after the first colon
		"nqn.2026-01.x-y.z0",
		"nqn.2026-11.io.capsule:" + strings.Repeat("x", 223-len("nqn.2026-11.io.capsule:")),
	} {
		assert.NoError(t, CheckNQN(good), good)
	}
	for _, bad := range []string{
		"", "foo", "nqn", "nqn.", "nqn.2026-11", "nqn.2026-11.", "nqn.2026-11.:x", "nqn.26-11.io.capsule",
		"nqn.2026-13.io.capsule:x", "nqn.2026-00.io.capsule", "nqn.2026_11.io.capsule", "NQN.2026-11.io.capsule",
		"nqn.2026-11.io..capsule", "nqn.2026-11.-io.capsule", "nqn.2026-11.io_x.capsule", "nqn.2026-11.io.capsule-:x",
		"nqn.2014-08.org.nvmexpress:uuid:1", "nqn.2014-08.org.nvmexpress:uuid:11111111-2222-3333-4444-55555555555g",
		"nqn.2026-11.io.capsule:\x00", "nqn.2026-11.io.capsule:\xff",
		"nqn.2026-11.io.capsule:" + strings.Repeat("x", 224-len("nqn.2026-11.io.capsule:")),
	} {
		assert.Error(t, CheckNQN(bad), "%q", bad)
	}
}
