package host

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/capsule-storage/capsule/nvmeof"
)

func TestReservations(t *testing.T) {
	forEachTargetTransport(t, false, func(t *testing.T, url string) {
		rt := newTarget(t, url, 1<<20, 512, nil)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		a := dialTarget(t, rt, WithSubsystem(targetNQN), WithHostID([16]byte{0xa}))
		b := dialTarget(t, rt, WithSubsystem(targetNQN), WithHostID([16]byte{0xb}))
		na, err := a.Namespace(1)
		require.NoError(t, err)
		nb, err := b.Namespace(1)
		require.NoError(t, err)
		block := make([]byte, 512)

		require.NoError(t, na.ReservationRegister(ctx, nvmeof.ReservationRegister, false, nvmeof.CPTPLNoChange, 0, 0xaa))
		require.NoError(t, nb.ReservationRegister(ctx, nvmeof.ReservationRegister, false, nvmeof.CPTPLNoChange, 0, 0xbb))
		require.NoError(t, na.ReservationAcquire(ctx, nvmeof.ReservationAcquire, nvmeof.ReservationWriteExclusive, 0xaa, 0))

		_, err = nb.WriteAt(block, 0)
		require.Error(t, err)
		assert.True(t, errors.Is(err, nvmeof.StatusReservationConflict), "%v", err)
		_, err = nb.ReadAt(block, 0)
		require.NoError(t, err, "reads stay allowed under Write Exclusive")
		_, err = na.WriteAt(block, 0)
		require.NoError(t, err, "the holder writes")
		err = nb.ReservationAcquire(ctx, nvmeof.ReservationAcquire, nvmeof.ReservationWriteExclusive, 0xbb, 0)
		assert.True(t, errors.Is(err, nvmeof.StatusReservationConflict), "%v", err)

		st, err := nb.ReservationReport(ctx)
		require.NoError(t, err)
		assert.Equal(t, nvmeof.ReservationWriteExclusive, st.RTYPE)
		require.Len(t, st.Registrants, 2)
		assert.Equal(t, [16]byte{0xa}, st.Registrants[0].HostID)
		assert.True(t, st.Registrants[0].Holds)
		assert.Equal(t, uint64(0xbb), st.Registrants[1].RKey)

		// B preempts A: A's registration is gone and B holds.
		require.NoError(t, nb.ReservationAcquire(ctx, nvmeof.ReservationPreempt, nvmeof.ReservationWriteExclusive, 0xbb, 0xaa))
		_, err = na.WriteAt(block, 0)
		assert.True(t, errors.Is(err, nvmeof.StatusReservationConflict), "%v", err)
		require.NoError(t, nb.ReservationRelease(ctx, nvmeof.ReservationRelease, nvmeof.ReservationWriteExclusive, 0xbb))
		_, err = na.WriteAt(block, 0)
		require.NoError(t, err)
		require.NoError(t, nb.ReservationRelease(ctx, nvmeof.ReservationClear, 0, 0xbb))
		st, err = na.ReservationReport(ctx)
		require.NoError(t, err)
		assert.Empty(t, st.Registrants)
	})
}
