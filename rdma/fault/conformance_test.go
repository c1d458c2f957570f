package fault

import (
	"os"
	"testing"

	"github.com/capsule-storage/capsule/rdma/conformance"
)

func TestMain(m *testing.M) {
	conformance.PeerMain()
	os.Exit(m.Run())
}

// TestConformance runs the shared suite through the wrapper with no rule:
// a fault provider without faults must behave as the provider it wraps.
func TestConformance(t *testing.T) {
	t.Run("iwarp", func(t *testing.T) {
		conformance.Run(t, conformance.Env{
			ListenURL:         func() string { l, _ := urls("iwarp"); return l },
			CompleteOnHandoff: true,
		})
	})
	t.Run("shm", func(t *testing.T) {
		conformance.Run(t, conformance.Env{ListenURL: func() string { l, _ := urls("shm"); return l }})
	})
}
