package target

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/capsule-storage/capsule/nvmeof"
)

func TestSmokeConnectIdentifyReadWrite(t *testing.T) {
	forEachTransport(t, func(t *testing.T, listen func() string) {
		tt := newTestTarget(t, listen())
		admin := adminQueue(t, tt.url, testSubNQN, 5000)
		var id nvmeof.IdentifyController
		require.NoError(t, id.UnmarshalBinary(admin.identify(nvmeof.CNSController, 0)))
		require.Equal(t, admin.cntlid, id.CNTLID)
		io := ioQueue(t, tt.url, admin, 1, 32)
		copy(io.data.Bytes()[4096:], []byte("hello, namespace"))
		r := io.do(io.writeCmd(1, 8, 1, 4096, 512), nil)
		require.NoError(t, r.cqe.Status.Err())
		r = io.do(io.readCmd(1, 8, 1, 8192, 512), nil)
		require.NoError(t, r.cqe.Status.Err())
		require.Equal(t, "hello, namespace", string(io.data.Bytes()[8192:8192+16]))
	})
}
