package fs_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	capfs "github.com/capsule-storage/capsule/fs"
	"github.com/capsule-storage/capsule/fs/internal/fstest"
	"github.com/capsule-storage/capsule/fs/internal/proto"
	"github.com/capsule-storage/capsule/fs/server"
	"github.com/capsule-storage/capsule/internal/netfault"
	"github.com/capsule-storage/capsule/nvmeof"
	"github.com/capsule-storage/capsule/nvmeof/host"
	"github.com/capsule-storage/capsule/rdma/fault"
)

// TestBadInput sends what the client itself never sends: names the
// server must refuse with their errno, and malformed capsules it must
// refuse with an NVMe status. The target keeps serving this client and
// another one.
func TestBadInput(t *testing.T) {
	forEachTransport(t, server.Options{}, func(t *testing.T, tt *fstest.Target, c *capfs.Client) {
		ctx := context.Background()
		other := dial(t, tt)
		ctrl := c.Controller()
		raw := func(p *host.Passthru) error {
			p.Cmd.NSID = 1
			p.ReplyLenInDW1 = p.Cmd.Opcode.Direction()&nvmeof.ControllerToHost != 0
			return ctrl.Exec(ctx, p)
		}
		// Names, as the server judges them.
		for name, want := range map[string]syscall.Errno{
			"a/b": syscall.EINVAL, "a\x00b": syscall.EINVAL, strings.Repeat("n", 256): syscall.ENAMETOOLONG,
		} {
			buf := make([]byte, proto.AttrSize)
			p := &host.Passthru{Cmd: nvmeof.Command{Opcode: proto.OpMkdir, CDW10: 1, CDW14: 0o755}, Payload: []byte(name), Data: buf}
			require.NoError(t, raw(p))
			require.Equal(t, uint32(want), p.CQE.DW0, "mkdir %q", name)
			p = &host.Passthru{Cmd: nvmeof.Command{Opcode: proto.OpUnlink, CDW10: 1}, Data: []byte(name)}
			require.NoError(t, raw(p))
			require.Equal(t, uint32(want), p.CQE.DW0, "unlink %q", name)
			// The client refuses them before sending.
			_, err := c.Mkdir(ctx, capfs.RootIno, name, 0o755, uid, gid)
			requireErrno(t, want, err)
		}
		// Malformed commands get an NVMe status, and change nothing.
		for what, c := range map[string]struct {
			p    *host.Passthru
			want nvmeof.Status
		}{
			"unknown opcode": {&host.Passthru{Cmd: nvmeof.Command{Opcode: 0xfe}, Data: make([]byte, 64)}, nvmeof.StatusInvalidOpcode},
			"reserved CDW13": {&host.Passthru{Cmd: nvmeof.Command{Opcode: proto.OpGetAttr, CDW10: 1, CDW13: 1}, Data: make([]byte, proto.AttrSize)}, nvmeof.StatusInvalidField},
			"WRITE flags":    {&host.Passthru{Cmd: nvmeof.Command{Opcode: proto.OpWrite, CDW10: 1, CDW14: 2}, Data: []byte("x")}, nvmeof.StatusInvalidField},
			"reserved CDW2":  {&host.Passthru{Cmd: nvmeof.Command{Opcode: proto.OpGetAttr, CDW10: 1, CDW2: 1}, Data: make([]byte, proto.AttrSize)}, nvmeof.StatusInvalidField},
			"small reply":    {&host.Passthru{Cmd: nvmeof.Command{Opcode: proto.OpGetAttr, CDW10: 1}, Data: make([]byte, proto.AttrSize-1)}, nvmeof.StatusInvalidField},
			"short SetAttr":  {&host.Passthru{Cmd: nvmeof.Command{Opcode: proto.OpSetAttr, CDW10: 1}, Payload: make([]byte, 39), Data: make([]byte, proto.AttrSize)}, nvmeof.StatusInvalidField},
			"long READ":      {&host.Passthru{Cmd: nvmeof.Command{Opcode: proto.OpRead, CDW10: 1, CDW14: 4097}, Data: make([]byte, 4096)}, nvmeof.StatusInvalidField},
			"name length":    {&host.Passthru{Cmd: nvmeof.Command{Opcode: proto.OpRename, CDW10: 1, CDW12: 1, CDW15: 9}, Data: []byte("abcd")}, nvmeof.StatusInvalidField},
			"CDW15 high":     {&host.Passthru{Cmd: nvmeof.Command{Opcode: proto.OpSymlink, CDW10: 1, CDW15: 1 << 16}, Payload: []byte("ab"), Data: make([]byte, proto.AttrSize)}, nvmeof.StatusInvalidField},
		} {
			err := raw(c.p)
			require.ErrorIs(t, err, c.want.WithDNR(), what)
		}
		// Both clients still work.
		_, err := c.Mkdir(ctx, capfs.RootIno, "still", 0o755, uid, gid)
		require.NoError(t, err)
		_, err = other.Lookup(ctx, capfs.RootIno, "still")
		require.NoError(t, err)
		var names []string
		require.NoError(t, c.ReadDir(ctx, capfs.RootIno, 0, false, func(e capfs.DirEntry) bool { names = append(names, e.Name); return true }))
		require.Equal(t, []string{".", "..", "still"}, names, "no refused command made anything")
	})
}

// TestTwoClients: what one client writes and closes, another opens and
// reads; renames and removals show at once (the server is the authority).
func TestTwoClients(t *testing.T) {
	forEachTransport(t, server.Options{}, func(t *testing.T, tt *fstest.Target, c1 *capfs.Client) {
		c2 := dial(t, tt)
		f1, f2 := c1.FS(), c2.FS()
		w, err := f1.Create("shared")
		require.NoError(t, err)
		_, err = w.Write([]byte("version 1"))
		require.NoError(t, err)
		require.NoError(t, w.Close())
		data, err := f2.ReadFile("shared")
		require.NoError(t, err)
		require.Equal(t, "version 1", string(data))

		w, err = f2.OpenFile("shared", syscall.O_WRONLY|syscall.O_TRUNC, 0)
		require.NoError(t, err)
		_, err = w.Write([]byte("version 2, longer"))
		require.NoError(t, err)
		require.NoError(t, w.Close())
		data, err = f1.ReadFile("shared")
		require.NoError(t, err)
		require.Equal(t, "version 2, longer", string(data))

		require.NoError(t, f1.Rename("shared", "moved"))
		_, err = f2.Stat("shared")
		require.ErrorIs(t, err, syscall.ENOENT)
		st, err := f2.Stat("moved")
		require.NoError(t, err)
		require.Equal(t, int64(17), st.Size())
	})
}

// TestReconnect: operations wait for a target that comes back, and fail
// with EIO, never hang, when it stays away longer than the reconnect
// timeout; the client works again once it is back.
func TestReconnect(t *testing.T) {
	forEachTransport(t, server.Options{}, func(t *testing.T, tt *fstest.Target, _ *capfs.Client) {
		ctx := context.Background()
		c := dial(t, tt, capfs.WithReconnectTimeout(5*time.Second))
		a, h, err := c.Create(ctx, capfs.RootIno, "f", 0o644, uid, gid, 0)
		require.NoError(t, err)
		_, err = c.Write(ctx, a.Ino, h, []byte("before"), 0)
		require.NoError(t, err)
		require.NoError(t, c.Fsync(ctx, a.Ino, h, false))

		tt.Stop()
		done := make(chan error, 1)
		go func() {
			buf := make([]byte, 6)
			_, err := c.Read(ctx, a.Ino, h, buf, 0)
			if err == nil && string(buf) != "before" {
				err = syscall.EBADMSG
			}
			done <- err
		}()
		time.Sleep(300 * time.Millisecond)
		tt.Restart(t, server.Options{})
		require.NoError(t, <-done, "the read waited for the target")

		// Away for good: EIO within the timeout (and some slack), no hang.
		short := dial(t, tt, capfs.WithReconnectTimeout(time.Second))
		_, err = short.GetAttr(ctx, capfs.RootIno)
		require.NoError(t, err)
		tt.Stop()
		errc := make(chan error, 1)
		go func() {
			_, err := short.GetAttr(ctx, capfs.RootIno)
			errc <- err
		}()
		select {
		case err := <-errc:
			requireErrno(t, syscall.EIO, err)
		case <-time.After(30 * time.Second):
			t.Fatal("an operation hung while the target was away")
		}
		// Back again: the next operation dials anew.
		tt.Restart(t, server.Options{})
		_, err = short.GetAttr(ctx, capfs.RootIno)
		require.NoError(t, err)
		t.Cleanup(tt.Stop)
	})
}

// TestCutsDuringChanges cuts the connection again and again while one
// client creates, renames and removes files: every operation succeeds
// exactly once (those that are not idempotent carry request IDs, so a
// command resent after a cut is answered, not run twice), and the
// directory ends as the operations say.
func TestCutsDuringChanges(t *testing.T) {
	for _, url := range []string{"fault+iwarp://127.0.0.1:0", "fault+tcp://127.0.0.1:0"} {
		t.Run(fstest.Scheme(url), func(t *testing.T) {
			tt := fstest.Start(t, url, server.Options{})
			cut := cutFunc(t, tt.Addr)
			c := dial(t, tt, capfs.WithReconnectTimeout(20*time.Second))
			ctx := context.Background()
			stop := make(chan struct{})
			cutterDone := make(chan struct{})
			var cuts atomic.Int32
			cutEvery := 15 * time.Millisecond
			if raceEnabled {
				cutEvery = 50 * time.Millisecond
			}
			go func() {
				defer close(cutterDone)
				for {
					select {
					case <-stop:
						return
					case <-time.After(cutEvery):
					}
					// The next cut waits for the host to have come back
					// from the last (or 2 s, if that cut reached no
					// connection in use): on a loaded machine a reconnect
					// can take longer than cutEvery, and cuts that always
					// land inside the setup would test nothing but the
					// reconnect timeout.
					last := c.Controller().Stats().Reconnects
					cut()
					cuts.Add(1)
					deadline := time.Now().Add(2 * time.Second)
					for c.Controller().Stats().Reconnects == last && time.Now().Before(deadline) {
						select {
						case <-stop:
							return
						case <-time.After(5 * time.Millisecond):
						}
					}
				}
			}()
			// At least this many files, and on until the connection has
			// been cut a few times (a fast transport can finish the
			// minimum before the first cut).
			files := 60
			if raceEnabled {
				files = 16
			}
			const minCuts, maxFiles = 3, 5000
			n := 0
			for ; n < maxFiles && (n < files || cuts.Load() < minCuts); n++ {
				name := fmt.Sprintf("f%04d", n)
				a, h, err := c.Create(ctx, capfs.RootIno, name, 0o644, uid, gid, syscall.O_RDWR|syscall.O_EXCL)
				require.NoError(t, err, "create %s", name)
				_, err = c.WriteAppend(ctx, a.Ino, h, []byte(name))
				require.NoError(t, err, "append %s", name)
				require.NoError(t, c.Release(ctx, a.Ino, h))
				require.NoError(t, c.Rename(ctx, capfs.RootIno, name, capfs.RootIno, "r"+name, capfs.RenameNoReplace), "rename %s", name)
				if n%2 == 1 {
					require.NoError(t, c.Unlink(ctx, capfs.RootIno, "r"+name), "unlink %s", name)
				}
			}
			close(stop)
			<-cutterDone
			require.GreaterOrEqual(t, int(cuts.Load()), minCuts)
			reconnects := c.Controller().Stats().Reconnects
			t.Logf("%d files, %d cuts, %d reconnects", n, cuts.Load(), reconnects)
			require.Positive(t, reconnects, "the cuts reached the connections")
			var names []string
			require.NoError(t, c.ReadDir(ctx, capfs.RootIno, 0, false, func(e capfs.DirEntry) bool {
				if e.Name != "." && e.Name != ".." {
					names = append(names, e.Name)
				}
				return true
			}))
			require.Len(t, names, (n+1)/2)
			buf := make([]byte, 16)
			for _, n := range names {
				a, err := c.Lookup(ctx, capfs.RootIno, n)
				require.NoError(t, err)
				k, err := c.Read(ctx, a.Ino, 0, buf, 0)
				require.NoError(t, err)
				require.Equal(t, n[1:], string(buf[:k]), "appended once")
			}
		})
	}
}

// cutFunc returns what cuts every connection of the listener at addr: the
// RDMA fault wrapper's injector, or internal/netfault's for fault+tcp://.
func cutFunc(t *testing.T, addr string) func() {
	if strings.HasPrefix(addr, "fault+tcp://") {
		inj := netfault.For(addr)
		require.NotNil(t, inj, "no netfault injector for %s", addr)
		return inj.Cut
	}
	inj := fault.For(addr)
	require.NotNil(t, inj, "no fault injector for %s", addr)
	return func() { inj.Cut() }
}
