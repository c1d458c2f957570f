package rdma

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestUnknownSchemeSaysHowToFix: with no provider linked in, the error
// names the import that fixes it; with some, it lists them.
func TestUnknownSchemeSaysHowToFix(t *testing.T) {
	providersMu.Lock()
	saved := providers
	providers = map[string]Provider{}
	providersMu.Unlock()
	t.Cleanup(func() {
		providersMu.Lock()
		providers = saved
		providersMu.Unlock()
	})

	_, _, err := ParseURL("iwarp://127.0.0.1:4420")
	require.ErrorIs(t, err, ErrUnknownScheme)
	assert.Contains(t, err.Error(), `import _ "github.com/capsule-storage/capsule/rdma/providers"`)
	assert.Contains(t, err.Error(), "no provider is linked")

	providersMu.Lock()
	providers = saved
	providersMu.Unlock()
	_, _, err = ParseURL("nvme://127.0.0.1:4420")
	require.ErrorIs(t, err, ErrUnknownScheme)
	assert.Contains(t, err.Error(), "registered: [")
	assert.Contains(t, err.Error(), "iwarp")
}
