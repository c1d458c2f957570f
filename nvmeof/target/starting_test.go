package target

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/capsule-storage/capsule/nvmeof"
)

// TestStarting: a target made WithStarting that listens before its
// subsystem exists (a daemon restoring its state) refuses a Connect to it
// with Connect Controller Busy and no DNR, which a reconnecting host
// retries; after Ready the same Connect to an unknown subsystem gets
// Connect Invalid Parameters with DNR, and one to the subsystem, once
// added, succeeds.
func TestStarting(t *testing.T) {
	forEachTransport(t, func(t *testing.T, listen func() string) {
		tg, err := New(WithLogger(testLogger(t)), WithStarting())
		require.NoError(t, err)
		t.Cleanup(func() { tg.Close() })
		url, err := tg.Listen(context.Background(), listen())
		require.NoError(t, err)

		q, err := dialRaw(t, url, rawDialConfig{qid: 0, hsqsize: 31, hrqsize: 32})
		require.NoError(t, err)
		st := q.connect(31, 0, hostData(testSubNQN, nvmeof.CNTLIDDynamic), false).cqe.Status
		assert.ErrorIs(t, st, nvmeof.StatusConnectControllerBusy)
		assert.False(t, st.DNR(), "a host must retry a Connect refused while the target starts")

		_, err = tg.AddSubsystem(SubsystemConfig{NQN: testSubNQN, Hosts: []string{testHostNQN}})
		require.NoError(t, err)
		tg.Ready()
		q, err = dialRaw(t, url, rawDialConfig{qid: 0, hsqsize: 31, hrqsize: 32})
		require.NoError(t, err)
		st = q.connect(31, 0, hostData("nqn.2026-12.io.capsule:absent", nvmeof.CNTLIDDynamic), false).cqe.Status
		assert.ErrorIs(t, st, nvmeof.StatusConnectInvalidParameters)
		assert.True(t, st.DNR())
		adminQueue(t, url, testSubNQN, 0)
	})
}
