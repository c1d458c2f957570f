package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/capsule-storage/capsule/nvmeof"
	"github.com/capsule-storage/capsule/nvmeof/host"
)

// TestANAMultipath: `target serve` with two NVMe/TCP listeners (127.0.0.1
// and 127.0.0.2: one :0 address twice is one listener) for one
// subsystem; a host dials both (host.DialMultipath) and writes and reads
// back while `target rpc` changes the ANA states. The host is told by
// an ANA Change event and the log page it reads has the new state; the
// I/O moves to the Optimized path, goes on through the other when one
// listener is set Inaccessible and then removed from the subsystem and
// closed, and no error reaches the caller. nvmf_subsystem_get_listeners
// reports the states; the state file keeps them. The namespace is a
// file: a write through one connection and a read through the other are
// ordered by the host alone, which the race detector of the target cannot
// see in a memory namespace (see queuesFor in nvmeof/host), and cannot
// mistake in pread and pwrite.
func TestANAMultipath(t *testing.T) {
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	sock := filepath.Join(dir, "admin.sock")
	d := startDaemon(t, "capsule target ready", "serve", "--listen", "tcp://127.0.0.1:0", "--listen", "tcp://127.0.0.2:0",
		"--namespace", "file:"+filepath.Join(dir, "ns1.img")+":16MiB", "--data", data, "--rpc-socket", sock)
	urls := strings.Split(field(d.ready, "listeners"), ",")
	require.Len(t, urls, 2, d.ready)
	address := func(u string) string {
		hostPort := strings.TrimPrefix(u, "tcp://")
		i := strings.LastIndexByte(hostPort, ':')
		return fmt.Sprintf(`{"trtype":"TCP","adrfam":"IPv4","traddr":"%s","trsvcid":"%s"}`, hostPort[:i], hostPort[i+1:])
	}
	setANA := func(method string, i int, state string) {
		t.Helper()
		assert.Equal(t, "true", mustRPC(t, sock, method,
			`{"nqn":"`+adminNQN+`","listen_address":`+address(urls[i])+`,"ana_state":"`+state+`","anagrpid":1}`))
	}
	setANA("ana_set_state", 1, "non_optimized")

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	events := make(chan host.AsyncEvent, 64)
	m, err := host.DialMultipath(ctx, urls, host.WithSubsystem(adminNQN), host.WithQueues(1),
		host.WithReconnectDelay(20*time.Millisecond, 200*time.Millisecond), host.WithConnectTimeout(2*time.Second),
		host.WithAsyncEvents(func(ev host.AsyncEvent) {
			if ev.LogPage == nvmeof.LogANA {
				events <- ev
			}
		}))
	require.NoError(t, err)
	defer m.Close()
	mn, err := m.Namespace(1)
	require.NoError(t, err)
	current := func() string { u, _ := mn.CurrentPath(); return u }
	require.Equal(t, urls[0], current(), "the optimized path")

	// Writers and readers, each on blocks of its own, check every block.
	var (
		stop   = make(chan struct{})
		wg     sync.WaitGroup
		ops    atomic.Int64
		mu     sync.Mutex
		ioErrs []error
	)
	for w := range 4 {
		wg.Go(func() {
			buf, got := make([]byte, 4096), make([]byte, 4096)
			for i := int64(0); ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				off := ((int64(w) + 4*i) % 4096) * 4096
				for j := range buf {
					buf[j] = byte(i + int64(j) + int64(w))
				}
				_, err := mn.WriteAt(buf, off)
				if err == nil {
					_, err = mn.ReadAt(got, off)
				}
				if err == nil && string(got) != string(buf) {
					err = fmt.Errorf("block at %d read back other bytes", off)
				}
				if err != nil {
					mu.Lock()
					ioErrs = append(ioErrs, err)
					mu.Unlock()
					return
				}
				ops.Add(1)
			}
		})
	}
	progress := func(what string) {
		t.Helper()
		start := ops.Load()
		deadline := time.Now().Add(30 * time.Second)
		for ops.Load() < start+100 {
			mu.Lock()
			failed := append([]error(nil), ioErrs...)
			mu.Unlock()
			require.Empty(t, failed, "an error reached the caller")
			require.True(t, time.Now().Before(deadline), "no progress: %s", what)
			time.Sleep(10 * time.Millisecond)
		}
	}
	waitEvent := func(i int, want nvmeof.ANAState) {
		t.Helper()
		for {
			select {
			case ev := <-events:
				require.NoError(t, ev.Err)
				require.NotNil(t, ev.ANA)
				require.NotEmpty(t, ev.ANA.Groups)
				if st, _ := m.Paths()[i].Controller.ANAState(1); st == want {
					return
				}
			case <-time.After(20 * time.Second):
				t.Fatalf("no ANA Change event saying path %d is %v", i, want)
			}
		}
	}
	progress("I/O on path 0")

	// SPDK's method: path 1 Optimized, path 0 Non-Optimized.
	setANA("nvmf_subsystem_listener_set_ana_state", 1, "optimized")
	setANA("nvmf_subsystem_listener_set_ana_state", 0, "non_optimized")
	waitEvent(1, nvmeof.ANAOptimized)
	waitEvent(0, nvmeof.ANANonOptimized)
	require.Eventually(t, func() bool { return current() == urls[1] }, 20*time.Second, 10*time.Millisecond)
	progress("I/O on path 1")

	// Path 1 Inaccessible: the event, the log page, and the I/O moves.
	setANA("ana_set_state", 1, "inaccessible")
	waitEvent(1, nvmeof.ANAInaccessible)
	l, err := m.Paths()[1].Controller.ANALog(ctx)
	require.NoError(t, err)
	require.Len(t, l.Groups, 1)
	assert.Equal(t, nvmeof.ANAInaccessible, l.Groups[0].State)
	assert.Equal(t, []uint32{1}, l.Groups[0].NSIDs)
	require.Eventually(t, func() bool { return current() == urls[0] }, 20*time.Second, 10*time.Millisecond)
	progress("I/O on path 0, non-optimized")

	var listeners []struct {
		Address struct {
			TrSvcID string `json:"trsvcid"`
		} `json:"address"`
		ANAStates []struct {
			Group uint32 `json:"ana_group"`
			State string `json:"ana_state"`
		} `json:"ana_states"`
	}
	require.NoError(t, json.Unmarshal([]byte(mustRPC(t, sock, "nvmf_subsystem_get_listeners", `{"nqn":"`+adminNQN+`"}`)), &listeners))
	require.Len(t, listeners, 2)
	assert.Equal(t, "non_optimized", listeners[0].ANAStates[0].State)
	assert.Equal(t, "inaccessible", listeners[1].ANAStates[0].State)

	// Then listener 1 is removed from the subsystem and closed: the I/O
	// goes on through path 0.
	mustRPC(t, sock, "nvmf_subsystem_remove_listener", `{"nqn":"`+adminNQN+`","listen_address":`+address(urls[1])+`}`)
	mustRPC(t, sock, "nvmf_subsystem_remove_listener", `{"nqn":"`+nvmeof.DiscoveryNQN+`","listen_address":`+address(urls[1])+`}`)
	progress("I/O with listener 1 closed")
	close(stop)
	wg.Wait()
	require.Empty(t, ioErrs, "no error reaches the caller")
	require.NoError(t, mn.Flush())

	// The state file keeps path 0's state.
	saved := mustRPC(t, sock, "save_config")
	assert.Contains(t, saved, "nvmf_subsystem_listener_set_ana_state")
	assert.Contains(t, saved, `"non_optimized"`)
	assert.NotContains(t, saved, `"inaccessible"`, "listener 1's states went with it")
}
