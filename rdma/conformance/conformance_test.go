package conformance

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"sync/atomic"
	"testing"

	"github.com/capsule-storage/capsule/rdma"
	_ "github.com/capsule-storage/capsule/rdma/providers"
)

func TestMain(m *testing.M) {
	PeerMain()
	os.Exit(m.Run())
}

// shmNames makes shm listener names unique within the process; the pid
// makes them unique between test binaries that run at once.
var shmNames atomic.Uint64

// shmURL returns a fresh shm listen URL.
func shmURL() string {
	return fmt.Sprintf("shm://conformance-%d-%d", os.Getpid(), shmNames.Add(1))
}

// rdmaAddrEnv names the environment variable with the host:port of a
// local RDMA device's address, for the rdma (verbs) run of the suite.
const rdmaAddrEnv = "CAPSULE_RDMA_ADDR"

// requireScheme skips t when the provider of scheme is not linked in.
func requireScheme(t testing.TB, scheme string) {
	t.Helper()
	if !slices.Contains(rdma.Schemes(), scheme) {
		t.Skipf("no provider registered for %q (registered: %v)", scheme, rdma.Schemes())
	}
}

func TestConformance(t *testing.T) {
	t.Run("iwarp", func(t *testing.T) {
		requireScheme(t, "iwarp")
		Run(t, Env{
			ListenURL:         func() string { return "iwarp://127.0.0.1:0" },
			CompleteOnHandoff: true,
		})
	})
	t.Run("shm", func(t *testing.T) {
		requireScheme(t, "shm")
		Run(t, Env{ListenURL: shmURL})
	})
	t.Run("rdma", func(t *testing.T) {
		requireScheme(t, "rdma")
		addr := os.Getenv(rdmaAddrEnv)
		if addr == "" {
			addr = "127.0.0.1:0"
		}
		pd, err := rdma.OpenPD("rdma://" + addr)
		if errors.Is(err, rdma.ErrNotSupported) {
			t.Skipf("no RDMA device for %s (set %s to host:port of an address a device owns): %v", addr, rdmaAddrEnv, err)
		}
		if err != nil {
			t.Fatalf("OpenPD(rdma://%s): %v", addr, err)
		}
		pd.Close()
		Run(t, Env{
			ListenURL: func() string { return "rdma://" + addr },
			// The device may be iWARP, whose Writes and Sends complete
			// before the peer checks them.
			CompleteOnHandoff: true,
		})
	})
}
