package host

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/capsule-storage/capsule/internal/netfault"
	"github.com/capsule-storage/capsule/rdma/fault"
)

var shmSeq atomic.Int64

// listenURLs are the addresses tests run on: iwarp on a free port and a
// fresh shm name. With fault set, the fault-injecting wrappers.
func listenURLs(fault bool) []string {
	prefix := ""
	if fault {
		prefix = "fault+"
	}
	return []string{
		prefix + "iwarp://127.0.0.1:0",
		fmt.Sprintf("%sshm://host-test-%d-%d", prefix, os.Getpid(), shmSeq.Add(1)),
	}
}

// targetURLs are the addresses tests against the project's target run on:
// those of listenURLs and NVMe/TCP on a free port.
func targetURLs(fault bool) []string {
	prefix := ""
	if fault {
		prefix = "fault+"
	}
	return append(listenURLs(fault), prefix+"tcp://127.0.0.1:0")
}

// forEachTargetTransport runs f once per transport of targetURLs.
func forEachTargetTransport(t *testing.T, fault bool, f func(t *testing.T, url string)) {
	for _, url := range targetURLs(fault) {
		t.Run(schemeOf(url), func(t *testing.T) { f(t, url) })
	}
}

// cutterFor returns what cuts every connection of the fault+ listener at
// addr: rdma/fault's injector, or internal/netfault's for fault+tcp.
func cutterFor(t testing.TB, addr string) (cut func(), count func() int) {
	if strings.HasPrefix(addr, "fault+tcp://") {
		inj := netfault.For(addr)
		require.NotNil(t, inj, "no netfault injector for %s", addr)
		return inj.Cut, inj.Cuts
	}
	inj := fault.For(addr)
	return func() { inj.Cut() }, func() int { return inj.Count(fault.Cut) }
}

// schemeOf names a URL's provider for subtest names.
func schemeOf(url string) string {
	s, _, _ := strings.Cut(url, "://")
	return s
}

// forEachTransport runs f once per provider.
func forEachTransport(t *testing.T, fault bool, f func(t *testing.T, url string)) {
	for _, url := range listenURLs(fault) {
		t.Run(schemeOf(url), func(t *testing.T) { f(t, url) })
	}
}

// testLogger logs through t, at Warn and above unless -v.
func testLogger(t testing.TB) *slog.Logger {
	level := slog.LevelWarn
	if testing.Verbose() {
		level = slog.LevelDebug
	}
	return slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: level}))
}

type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// dialResponder connects a host to r with test defaults and opts.
func dialResponder(t testing.TB, r *responder, opts ...Option) *Controller {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	base := []Option{WithSubsystem(respNQN), WithQueues(2), WithQueueDepth(32), WithLogger(testLogger(t))}
	c, err := Dial(ctx, r.url, append(base, opts...)...)
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	return c
}

// pattern fills b with bytes derived from seed and offset, so any block
// says where it belongs.
func pattern(b []byte, seed, off int64) {
	for i := range b {
		x := uint64(seed)*0x9e3779b97f4a7c15 + uint64(off+int64(i))
		x ^= x >> 29
		b[i] = byte(x*0xbf58476d1ce4e5b9>>56) | 1
	}
}
