package integration

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/capsule-storage/capsule/nvmeof"
	"github.com/capsule-storage/capsule/nvmeof/host"
)

// TestReservationsPTPL registers two hosts on a `target serve`
// namespace, one of them with Persist Through Power Loss, lets it take a
// Write Exclusive reservation, kills the target (SIGKILL: no orderly
// shutdown) and starts it again on the same data directory: the
// reservation and both registrations are there, kept in
// DATA/reservations.db, and still keep the other host from writing.
func TestReservationsPTPL(t *testing.T) {
	data := filepath.Join(t.TempDir(), "data")
	args := []string{"serve", "--listen", "tcp://127.0.0.1:0", "--namespace", "file:vol.img:16MiB", "--fs", "",
		"--data", data, "--scrub-rate", "0"}
	d := startDaemon(t, "capsule target ready", args...)
	url := strings.Split(field(d.ready, "listeners"), ",")[0]
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dial := func(url string, id byte) (*host.Controller, *host.Namespace) {
		c, err := host.Dial(ctx, url, host.WithHostID([16]byte{id}), host.WithQueues(1))
		require.NoError(t, err)
		ns, err := c.Namespace(1)
		require.NoError(t, err)
		return c, ns
	}
	ca, a := dial(url, 0xa)
	cb, b := dial(url, 0xb)
	require.NoError(t, a.ReservationRegister(ctx, nvmeof.ReservationRegister, false, nvmeof.CPTPLSet, 0, 0xaa))
	require.NoError(t, b.ReservationRegister(ctx, nvmeof.ReservationRegister, false, nvmeof.CPTPLNoChange, 0, 0xbb))
	require.NoError(t, a.ReservationAcquire(ctx, nvmeof.ReservationAcquire, nvmeof.ReservationWriteExclusive, 0xaa, 0))
	ca.Close()
	cb.Close()
	d.kill9(t)

	d = startDaemon(t, "capsule target ready", args...)
	url = strings.Split(field(d.ready, "listeners"), ",")[0]
	ca, a = dial(url, 0xa)
	defer ca.Close()
	cb, b = dial(url, 0xb)
	defer cb.Close()
	st, err := b.ReservationReport(ctx)
	require.NoError(t, err)
	assert.True(t, st.PTPLS)
	assert.Equal(t, nvmeof.ReservationWriteExclusive, st.RTYPE)
	require.Len(t, st.Registrants, 2)
	block := make([]byte, 512)
	_, err = b.WriteAt(block, 0)
	assert.True(t, errors.Is(err, nvmeof.StatusReservationConflict), "%v", err)
	_, err = a.WriteAt(block, 0)
	require.NoError(t, err)
}
