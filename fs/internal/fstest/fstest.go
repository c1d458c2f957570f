// Package fstest starts a capsule target with a file namespace in the
// test's process, for the file client's and the FUSE mount's tests.
package fstest

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/capsule-storage/capsule/chunkstore"
	"github.com/capsule-storage/capsule/fs/server"
	"github.com/capsule-storage/capsule/internal/netfault"
	"github.com/capsule-storage/capsule/nvmeof/target"
	_ "github.com/capsule-storage/capsule/rdma/providers"
)

// NQN is the subsystem the test target serves.
const NQN = "nqn.2026-11.io.capsule:fs-test"

// Target is a running target with a file namespace (NSID 1).
type Target struct {
	Addr   string
	Dir    string
	Store  *chunkstore.Store
	Server *server.Server
	T      *target.Target
}

var shmSeq atomic.Int64

// URLs are the listen addresses tests run on: iwarp and NVMe/TCP on free
// loopback ports and a fresh shm name.
func URLs() []string {
	return []string{"iwarp://127.0.0.1:0", fmt.Sprintf("shm://fs-test-%d-%d", os.Getpid(), shmSeq.Add(1)), "tcp://127.0.0.1:0"}
}

// Scheme names a URL's provider, for subtest names.
func Scheme(url string) string { s, _, _ := strings.Cut(url, "://"); return s }

// Logger logs through t at Warn and above (Debug with -v).
func Logger(t testing.TB) *slog.Logger {
	level := slog.LevelWarn
	if testing.Verbose() {
		level = slog.LevelDebug
	}
	return slog.New(slog.NewTextHandler(writer{t}, &slog.HandlerOptions{Level: level}))
}

type writer struct{ t testing.TB }

func (w writer) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// Start starts a target listening at url with a file namespace on a
// fresh 2+1 chunkstore in a temporary directory. opt configures the
// file server (its Logger defaults to the test's).
func Start(t testing.TB, url string, opt server.Options) *Target {
	t.Helper()
	tt := start(t, t.TempDir(), url, opt)
	t.Cleanup(func() { tt.Stop() })
	return tt
}

// Restart starts the stopped target again on the same files and address.
func (tt *Target) Restart(t testing.TB, opt server.Options) {
	t.Helper()
	*tt = *start(t, tt.Dir, tt.Addr, opt)
}

func start(t testing.TB, dir, url string, opt server.Options) *Target {
	store, err := chunkstore.OpenOrCreateDirs(chunkstore.DeviceDirs(filepath.Join(dir, "data"), chunkstore.Geometry{Data: 2, Parity: 1}),
		chunkstore.WithGeometry(chunkstore.Geometry{Data: 2, Parity: 1}), chunkstore.WithStripeUnit(64<<10), chunkstore.WithLogger(Logger(t)))
	require.NoError(t, err)
	if opt.Logger == nil {
		opt.Logger = Logger(t)
	}
	if opt.RootUID == 0 && opt.RootGID == 0 {
		// The tests' client runs as this process: let it own the root.
		opt.RootUID, opt.RootGID = uint32(os.Getuid()), uint32(os.Getgid())
	}
	srv, err := server.Open(store, opt)
	require.NoError(t, err)
	opts := []target.Option{target.WithLogger(Logger(t))}
	listen, cut := url, false
	if rest, ok := strings.CutPrefix(url, "fault+tcp://"); ok {
		// A TCP listener whose connections tests cut: netfault wraps it.
		listen, cut = "tcp://"+rest, true
		opts = append(opts, target.WithListenerWrapper(netfault.Wrapper))
	}
	tgt, err := target.New(opts...)
	require.NoError(t, err)
	sub, err := tgt.AddSubsystem(target.SubsystemConfig{NQN: NQN, AllowAnyHost: true})
	require.NoError(t, err)
	_, err = sub.AddNamespace(target.NamespaceConfig{NSID: 1, Vendor: srv})
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	addr, err := tgt.Listen(ctx, listen)
	require.NoError(t, err)
	if cut {
		addr = "fault+" + addr
	}
	return &Target{Addr: addr, Dir: dir, Store: store, Server: srv, T: tgt}
}

// Stop closes the target, the file server and the store. Safe to call
// more than once.
func (tt *Target) Stop() {
	if tt.T == nil {
		return
	}
	tt.T.Close() // closes the server through the namespace
	tt.Store.Close()
	tt.T = nil
}
