package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/urfave/cli/v2"

	"github.com/capsule-storage/capsule/chunkstore"
	"github.com/capsule-storage/capsule/internal/storetest"
)

func TestParseNamespaceSpec(t *testing.T) {
	for in, want := range map[string]namespaceSpec{
		"mem:1GiB":                  {Kind: "mem", Size: 1 << 30},
		"mem:512MiB":                {Kind: "mem", Size: 512 << 20},
		"file:disk.img":             {Kind: "file", Path: "disk.img"},
		"file:disk.img:10GiB":       {Kind: "file", Path: "disk.img", Size: 10 << 30},
		"file:/dev/nvme0n1":         {Kind: "file", Path: "/dev/nvme0n1"},
		"file:/srv/a:b/disk.img":    {Kind: "file", Path: "/srv/a:b/disk.img"},
		"file:/srv/a:b/disk.img:4k": {Kind: "file", Path: "/srv/a:b/disk.img", Size: 4096},
		"ec:vol0:1GiB":              {Kind: "ec", Name: "vol0", Size: 1 << 30},
		"ec:db:logs:64MiB":          {Kind: "ec", Name: "db:logs", Size: 64 << 20},
	} {
		got, err := parseNamespaceSpec(in)
		require.NoError(t, err, in)
		assert.Equal(t, want, got, in)
	}
	for _, bad := range []string{"", "mem", "mem:", "mem:0", "mem:lots", "file:", "nvme:1GiB", "file:x:0", "1GiB",
		"ec:", "ec:vol0", "ec::1GiB", "ec:vol0:0", "ec:vol0:lots", "ec:vol0:2048TiB"} {
		_, err := parseNamespaceSpec(bad)
		assert.Error(t, err, bad)
	}
}

func TestLocalListener(t *testing.T) {
	for url, want := range map[string]bool{
		"shm://capsule":             true,
		"iwarp://127.0.0.1:4420":    true,
		"iwarp://[::1]:4420":        true,
		"iwarp://localhost:4420":    true,
		"fault+iwarp://127.0.0.1:1": true,
		"iwarp://0.0.0.0:4420":      false,
		"iwarp://10.1.2.3:4420":     false,
		"rdma://192.0.2.1:4420":     false,
		"iwarp://target:4420":       false,
		"iwarp://127.0.0.1":         false,
	} {
		assert.Equal(t, want, localListener(url), url)
	}
}

// parseServe runs the serve command's flag handling on args and returns
// the configuration serve would run with.
func parseServe(t *testing.T, args ...string) (serveConfig, error) {
	var got serveConfig
	app := &cli.App{
		Commands:       []*cli.Command{serveCommand(func(_ context.Context, _ io.Writer, cfg serveConfig) error { got = cfg; return nil })},
		Writer:         io.Discard,
		ErrWriter:      io.Discard,
		ExitErrHandler: func(*cli.Context, error) {},
	}
	err := app.Run(append([]string{"target", "serve"}, args...))
	return got, err
}

func TestServeClusterFlags(t *testing.T) {
	cfg, err := parseServe(t, "--listen", "tcp://10.0.0.1:4420", "--listen", "shm://x", "--cluster-node", "n1", "--domain", "rack2",
		"--etcd", "http://10.0.0.9:2379", "--etcd", "http://10.0.0.8:2379", "--cluster-device", "/d0", "--head-ttl", "5s", "--rebuild-rate", "0", "--allow-any-host")
	require.NoError(t, err)
	assert.Equal(t, clusterConfig{Node: "n1", Domain: "rack2", Etcd: []string{"http://10.0.0.9:2379", "http://10.0.0.8:2379"},
		EtcdListen: defaultEtcdListen, Devices: []string{"/d0"}, HeadTTL: 5 * time.Second, RebuildRate: 0}, cfg.Cluster)
	assert.Equal(t, []string{"tcp://10.0.0.1:4420"}, advertised(cfg.Listeners))
	for _, bad := range [][]string{
		{"--etcd", "http://10.0.0.9:2379"},              // no --cluster-node
		{"--cluster-node", "a/b"},                       // not a name
		{"--cluster-node", "n1", "--head-ttl", "1s"},    // shorter than etcd's lease
		{"--cluster-node", "n1", "--listen", "shm://x"}, // nothing peers can reach
		{"--cluster-node", "n1", "--listen", "tcp://0.0.0.0:4420", "--allow-any-host"},
	} {
		_, err := parseServe(t, bad...)
		assert.Error(t, err, "%q", bad)
	}
	_, err = parseServe(t, "--cluster-node", "n1", "--listen", "tcp://0.0.0.0:4420", "--allow-any-host", "--advertise", "tcp://10.0.0.1:4420")
	assert.NoError(t, err)
}

func TestServeFlags(t *testing.T) {
	cfg, err := parseServe(t)
	require.NoError(t, err)
	want := defaultServeConfig()
	want.AllowAnyHost = true // both default listeners are local
	assert.Equal(t, want, cfg)
	assert.Equal(t, []string{"iwarp://127.0.0.1:4420", "shm://capsule"}, cfg.Listeners)
	assert.Equal(t, []namespaceSpec{{Kind: "ec", Name: "vol0", Size: 1 << 30}}, cfg.Namespaces)
	assert.Equal(t, chunkstore.Geometry{Data: 4, Parity: 2}, cfg.Geometry)
	assert.Empty(t, cfg.Devices)
	assert.Equal(t, chunkstore.DeviceDirs("./data", cfg.Geometry), cfg.storeDirs())
	assert.Equal(t, int64(16<<20), cfg.ScrubRate)
	assert.Equal(t, 24*time.Hour, cfg.ScrubInterval)
	assert.Equal(t, "nqn.2026-11.io.capsule:default", cfg.NQN)
	assert.Equal(t, "./data", cfg.DataDir)
	assert.Equal(t, 512, cfg.BlockSize)
	assert.Equal(t, defaultWriteCache(), cfg.WriteCache)
	assert.Positive(t, cfg.WriteCache, "auto: a tenth of the memory")
	assert.LessOrEqual(t, cfg.WriteCache, int64(maxAutoWriteCache))

	cfg, err = parseServe(t, "--listen", "iwarp://0.0.0.0:4420", "--listen", "shm://other",
		"--namespace", "mem:512MiB", "--namespace", "file:disk.img:1GiB", "--data", "/srv/capsule",
		"--nqn", "nqn.2026-11.io.capsule:box", "--allow-host", "nqn.2014-08.org.nvmexpress:uuid:11111111-2222-3333-4444-555555555551",
		"--allow-host", "nqn.2014-08.org.nvmexpress:uuid:11111111-2222-3333-4444-555555555552", "--block-size", "4096", "--namespace", "ec:vol1:2GiB",
		"--ec", "2+1", "--device", "/d0", "--device", "/d1", "--device", "/d2",
		"--scrub-rate", "100MiB/s", "--scrub-interval", "1h", "--over-provision", "0.5", "--idle-compaction", "10s",
		"--write-cache", "512MiB")
	require.NoError(t, err)
	assert.Equal(t, serveConfig{
		Listeners: []string{"iwarp://0.0.0.0:4420", "shm://other"},
		DataDir:   "/srv/capsule",
		Namespaces: []namespaceSpec{{Kind: "mem", Size: 512 << 20}, {Kind: "file", Path: "disk.img", Size: 1 << 30},
			{Kind: "ec", Name: "vol1", Size: 2 << 30}},
		FS:             "files",
		NQN:            "nqn.2026-11.io.capsule:box",
		AllowHosts:     []string{"nqn.2014-08.org.nvmexpress:uuid:11111111-2222-3333-4444-555555555551", "nqn.2014-08.org.nvmexpress:uuid:11111111-2222-3333-4444-555555555552"},
		BlockSize:      4096,
		Geometry:       chunkstore.Geometry{Data: 2, Parity: 1},
		Devices:        []string{"/d0", "/d1", "/d2"},
		ScrubRate:      100 << 20,
		ScrubInterval:  time.Hour,
		OverProvision:  0.5,
		IdleCompaction: 10 * time.Second,
		WriteCache:     512 << 20,
		SubsystemFlags: []string{"listen", "namespace", "nqn", "allow-host"},
		Cluster:        clusterConfig{EtcdListen: defaultEtcdListen, HeadTTL: defaultHeadTTL, RebuildRate: defaultRebuildRate},
	}, cfg, "an allow-list, so not any host")
	assert.Equal(t, []string{"/d0", "/d1", "/d2"}, cfg.storeDirs())

	cfg, err = parseServe(t, "--scrub-rate", "0")
	require.NoError(t, err)
	assert.Zero(t, cfg.ScrubRate, "0 turns the scrubber off")

	cfg, err = parseServe(t, "--listen", "iwarp://0.0.0.0:4420", "--allow-any-host")
	require.NoError(t, err)
	assert.True(t, cfg.AllowAnyHost)

	cfg, err = parseServe(t, "--listen", "tcp://127.0.0.1:4420", "--listen", "tcp://127.0.0.1:8009")
	require.NoError(t, err)
	assert.Equal(t, []string{"tcp://127.0.0.1:4420", "tcp://127.0.0.1:8009"}, cfg.Listeners)
	assert.True(t, cfg.AllowAnyHost, "NVMe/TCP on loopback")
}

func TestServeFlagValidation(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--listen", "iwarp://0.0.0.0:4420"}, "not on loopback"},
		{[]string{"--listen", "iwarp://10.0.0.1:4420", "--listen", "shm://x"}, "--allow-host"},
		{[]string{"--listen", "nvme://127.0.0.1:1"}, "--listen"},
		{[]string{"--listen", "tcp://0.0.0.0:4420"}, "not on loopback"},
		{[]string{"--listen", "tcp://127.0.0.1:http"}, "--listen"},
		{[]string{"--listen", "tcp://127.0.0.1"}, "--listen"},
		{[]string{"--listen", "fault+tcp://127.0.0.1:1"}, "unknown provider scheme"},   // a test-only wrapper, not a transport
		{[]string{"--listen", "fault+iwarp://127.0.0.1:1"}, "unknown provider scheme"}, // rdma/fault is not linked into bin/target
		{[]string{"--namespace", "disk:1GiB"}, "kind"},
		{[]string{"--namespace", "mem:1000"}, "multiple of the 512-byte block"},
		{[]string{"--namespace", "mem:1MiB", "--block-size", "1024"}, "--block-size"},
		{[]string{"--namespace", "mem:6KiB", "--block-size", "4096"}, "multiple of the 4096-byte block"},
		{[]string{"--nqn", ""}, "--nqn"},
		{[]string{"--nqn", "nqn.2014-08.org.nvmexpress.discovery"}, "--nqn"},
		{[]string{"--allow-host", strings.Repeat("x", 300)}, "--allow-host"},
		{[]string{"--allow-host", "foo"}, `--allow-host "foo": not an NQN`},
		{[]string{"--allow-host", "nqn.2014-08.org.nvmexpress:uuid:1"}, "must be followed by a UUID"},
		{[]string{"--nqn", "capsule"}, `--nqn "capsule": not an NQN`},
		{[]string{"stray"}, "no arguments"},
		{[]string{"--namespace", "ec:v:1GiB", "--namespace", "ec:v:1GiB"}, `volume "v" is named twice`},
		{[]string{"--ec", "4-2"}, "--ec"},
		{[]string{"--ec", "0+2"}, "--ec"},
		{[]string{"--device", "/a", "--device", "/b"}, "--ec 4+2 needs 6 --device directories, 2 given"},
		{[]string{"--namespace", "mem:1MiB", "--device", "/a"}, "no --namespace is ec:NAME:SIZE"},
		{[]string{"--scrub-rate", "fast"}, "--scrub-rate"},
		{[]string{"--scrub-interval", "0s"}, "--scrub-interval"},
		{[]string{"--over-provision", "0.01"}, "--over-provision 0.01: want 0.05 to 16"},
		{[]string{"--idle-compaction", "-1s"}, "--idle-compaction"},
		{[]string{"--write-cache", "lots"}, "--write-cache"},
		{[]string{"--metrics", "9464"}, "--metrics 9464: want HOST:PORT"},
		{[]string{"--metrics", "127.0.0.1:http"}, "the port must be a number"},
	} {
		_, err := parseServe(t, tc.args...)
		require.Error(t, err, "%v", tc.args)
		assert.Contains(t, err.Error(), tc.want, "%v", tc.args)
	}
}

func TestServeCommandListed(t *testing.T) {
	assert.NotNil(t, newApp().Command("serve"))
}

// syncBuffer is a bytes.Buffer safe to read while serve writes it.
type syncBuffer struct {
	mu sync.Mutex // guards b
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestServeRunsAndStops runs serve in the test process: it opens a file
// namespace under --data, prints the ready line with the real listener
// addresses, and returns nil when its context ends.
func TestServeRunsAndStops(t *testing.T) {
	dataDir := filepath.Join(t.TempDir(), "data")
	shm := fmt.Sprintf("shm://serve-test-%d", os.Getpid())
	cfg := serveConfig{
		Listeners:  []string{"iwarp://127.0.0.1:0", shm},
		DataDir:    dataDir,
		Namespaces: []namespaceSpec{{Kind: "mem", Size: 8 << 20}, {Kind: "file", Path: "ns2.img", Size: 4 << 20}},
		NQN:        "nqn.2026-11.io.capsule:servetest",
		BlockSize:  4096,
	}
	ctx, cancel := context.WithCancel(context.Background())
	out := &syncBuffer{}
	done := make(chan error, 1)
	go func() { done <- serve(ctx, out, cfg) }()
	require.Eventually(t, func() bool { return strings.Contains(out.String(), "\n") }, 30*time.Second, time.Millisecond)
	line := strings.TrimSpace(out.String())
	require.True(t, strings.HasPrefix(line, "capsule target ready "), line)
	fields := map[string]string{}
	for _, f := range strings.Fields(line)[3:] {
		k, v, _ := strings.Cut(f, "=")
		fields[k] = v
	}
	listeners := strings.Split(fields["listeners"], ",")
	require.Len(t, listeners, 2)
	assert.Regexp(t, `^iwarp://127\.0\.0\.1:[1-9][0-9]*$`, listeners[0])
	assert.Equal(t, shm, listeners[1])
	assert.Equal(t, "nqn.2026-11.io.capsule:servetest", fields["nqn"])
	assert.Equal(t, "nqn.2014-08.org.nvmexpress.discovery", fields["discovery"])
	st, err := os.Stat(filepath.Join(dataDir, "ns2.img"))
	require.NoError(t, err)
	assert.Equal(t, int64(4<<20), st.Size())

	cancel()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(30 * time.Second):
		t.Fatal("serve did not return after its context ended")
	}
}

func TestServeRefusesBadNamespace(t *testing.T) {
	cfg := defaultServeConfig()
	cfg.Listeners = []string{fmt.Sprintf("shm://serve-bad-%d", os.Getpid())}
	cfg.Namespaces = []namespaceSpec{{Kind: "file", Path: filepath.Join(t.TempDir(), "missing.img")}}
	err := serve(context.Background(), io.Discard, cfg)
	require.Error(t, err, "a missing file with no size cannot be created")
}

// startServe runs serve in the test process until the returned stop is
// called, and returns its ready line.
func startServe(t *testing.T, cfg serveConfig) (ready string, stop func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	out := &syncBuffer{}
	done := make(chan error, 1)
	go func() { done <- serve(ctx, out, cfg) }()
	require.Eventually(t, func() bool {
		select {
		case err := <-done:
			done <- err
			return true
		default:
			return strings.Contains(out.String(), "\n")
		}
	}, 30*time.Second, time.Millisecond)
	stopped := false
	stop = func() error {
		if stopped {
			return nil
		}
		stopped = true
		cancel()
		select {
		case err := <-done:
			return err
		case <-time.After(30 * time.Second):
			t.Fatal("serve did not return after its context ended")
			return nil
		}
	}
	t.Cleanup(func() { stop() })
	return strings.TrimSpace(out.String()), stop
}

// TestServeErasureCoded runs serve with an ec namespace: the first start
// creates the store and the volume, a second opens them, and a size or
// geometry other than the store's is refused with a message saying what
// to do. While serve runs, `target scrub` on the same data is refused
// with the daemon's alternatives.
func TestServeErasureCoded(t *testing.T) {
	data := filepath.Join(t.TempDir(), "data")
	cfg := defaultServeConfig()
	cfg.Listeners = []string{fmt.Sprintf("shm://serve-ec-%d", os.Getpid())}
	cfg.DataDir = data
	cfg.Namespaces = []namespaceSpec{{Kind: "ec", Name: "vol0", Size: 8 << 20}, {Kind: "mem", Size: 1 << 20}}
	cfg.AllowAnyHost = true

	for start := range 2 {
		ready, stop := startServe(t, cfg)
		require.True(t, strings.HasPrefix(ready, "capsule target ready "), "start %d: %s", start, ready)
		if start == 1 {
			res := run("scrub", "--data", data)
			require.Error(t, res.err)
			assert.ErrorIs(t, res.err, chunkstore.ErrDeviceBusy)
			assert.Contains(t, res.err.Error(), "running `target serve`")
			assert.Contains(t, res.err.Error(), "kill -USR1")
		}
		require.NoError(t, stop(), "start %d", start)
	}

	s, err := chunkstore.OpenDirs(chunkstore.DeviceDirs(data, chunkstore.DefaultGeometry))
	require.NoError(t, err, "SIGTERM closed the store: it opens here")
	vols := s.Volumes()
	require.Len(t, vols, 1)
	assert.Equal(t, "vol0", vols[0].Name)
	assert.Equal(t, int64(8<<20), vols[0].Size)
	require.NoError(t, s.Close())

	bigger := cfg
	bigger.Namespaces = []namespaceSpec{{Kind: "ec", Name: "vol0", Size: 16 << 20}}
	err = serve(context.Background(), io.Discard, bigger)
	require.Error(t, err)
	assert.Contains(t, err.Error(), `volume "vol0" is 8388608 bytes, not 16777216`)

	other := cfg
	other.Geometry = chunkstore.Geometry{Data: 2, Parity: 1}
	err = serve(context.Background(), io.Discard, other)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "--ec must be the geometry the store was created with")
}

// TestBackgroundScrub runs serve's scrubber on a store with two damaged
// shards: one a read meets (a data shard: the read is rebuilt and the
// stripe queued), which the repair loop fixes, and one no read touches (a
// parity shard), which the full pass SIGUSR1 starts finds and fixes.
func TestBackgroundScrub(t *testing.T) {
	data := t.TempDir()
	td := storetest.Make(t, data, testVolSize, 21)
	dirs := chunkstore.DeviceDirs(data, chunkstore.DefaultGeometry)
	r := rand.New(rand.NewPCG(21, 1))
	// Shard i of slot p is on device (p+i) mod (K+M); the volume's stripe
	// p is in slot p, and shards 0 … K-1 hold data.
	storetest.FlipShard(t, r, dirs[5], 5) // slot 5, shard 0: data
	storetest.FlipShard(t, r, dirs[1], 9) // slot 9, shard 4: parity

	s, err := chunkstore.OpenDirs(dirs)
	require.NoError(t, err)
	v, err := s.OpenVolume("vol")
	require.NoError(t, err)
	got := make([]byte, testVolSize)
	_, err = v.ReadAt(got, 0)
	require.NoError(t, err)
	require.True(t, bytes.Equal(td.Vol, got), "reads are rebuilt around the damage")
	require.Equal(t, 1, s.Stats().RepairQueue)

	logs := &syncBuffer{}
	trigger := make(chan os.Signal, 1)
	b := &backgroundScrub{store: s, rate: 1 << 30, first: time.Hour, interval: time.Hour, poll: time.Millisecond,
		trigger: trigger, log: slog.New(slog.NewTextHandler(logs, nil))}
	stop := b.start(context.Background())
	// The summary comes first, then a line per damaged stripe.
	require.Eventually(t, func() bool {
		return strings.Contains(logs.String(), "found damaged done: damaged shards repaired") &&
			strings.Contains(logs.String(), `damaged: volume \"vol\" stripe 5, bad shards on devices [5]`)
	}, 30*time.Second, time.Millisecond, "the repair loop drains the queue and says what it repaired")
	assert.Zero(t, s.Stats().RepairQueue)

	trigger <- syscall.SIGUSR1
	require.Eventually(t, func() bool { return strings.Contains(logs.String(), "scrub pass done") },
		30*time.Second, time.Millisecond, "SIGUSR1 starts a full pass")
	stop()
	assert.Contains(t, logs.String(), `damaged: volume \"vol\" stripe 9, bad shards on devices [1]`)
	assert.EqualValues(t, 2, s.Stats().ShardsRepaired)
	require.NoError(t, s.Close())

	res := run("scrub", "--data", data)
	require.NoError(t, res.err, res.stderr)
	sum := res.summary(t, "scrub:")
	assert.Zero(t, sum["damaged"], "the scrubber left nothing to repair")
	assert.EqualValues(t, testStripes, sum["checked"])
}

// TestBackgroundScrubOff: with a zero rate nothing runs, and SIGUSR1 gets
// a warning in the log.
func TestBackgroundScrubOff(t *testing.T) {
	logs := &syncBuffer{}
	trigger := make(chan os.Signal, 1)
	b := &backgroundScrub{trigger: trigger, log: slog.New(slog.NewTextHandler(logs, nil))}
	stop := b.start(context.Background())
	trigger <- syscall.SIGUSR1
	require.Eventually(t, func() bool { return strings.Contains(logs.String(), "the background scrubber is off") },
		30*time.Second, time.Millisecond)
	stop()
	assert.Contains(t, logs.String(), "background scrubber off (--scrub-rate 0)")
}
