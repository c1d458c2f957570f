package admin

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/capsule-storage/capsule/nvmeof"
)

// TestANAStates: nvmf_subsystem_listener_set_ana_state (SPDK's params)
// and ana_set_state set the states on the running target, are refused as
// SPDK refuses them, are reported by nvmf_subsystem_get_listeners, and
// persist: the state file rebuilds them on a new target.
func TestANAStates(t *testing.T) {
	dir := t.TempDir()
	state := filepath.Join(dir, "capsule.json")
	sv := newTestService(t, Options{StatePath: state})
	srv := NewServer(nil)
	sv.Register(srv)
	call := func(method, params string) (json.RawMessage, *Error) {
		t.Helper()
		out := srv.Handle(context.Background(), json.RawMessage(`{"jsonrpc":"2.0","id":1,"method":"`+method+`","params":`+params+`}`))
		var rsp Response
		require.NoError(t, json.Unmarshal(out, &rsp))
		return rsp.Result, rsp.Error
	}
	must := func(method, params string) json.RawMessage {
		t.Helper()
		res, e := call(method, params)
		require.Nil(t, e, "%s %s", method, params)
		return res
	}
	nqn := "nqn.2026-11.io.capsule:ana"
	must("nvmf_create_subsystem", `{"nqn":"`+nqn+`","allow_any_host":true,"ana_reporting":true}`)
	must("bdev_malloc_create", `{"name":"m1","num_blocks":64,"block_size":512}`)
	must("bdev_malloc_create", `{"name":"m2","num_blocks":64,"block_size":512}`)
	must("nvmf_subsystem_add_ns", `{"nqn":"`+nqn+`","namespace":{"bdev_name":"m1","nsid":1}}`)
	must("nvmf_subsystem_add_ns", `{"nqn":"`+nqn+`","namespace":{"bdev_name":"m2","nsid":2,"anagrpid":5}}`)
	must("nvmf_subsystem_add_listener", `{"nqn":"`+nqn+`","listen_address":{"trtype":"TCP","adrfam":"IPv4","traddr":"127.0.0.1","trsvcid":"0"}}`)
	tg := sv.opts.Target
	sub := tg.Subsystem(nqn)
	assert.Equal(t, uint32(5), sub.Namespace(2).ANAGroupID())
	url := tg.Listeners()[0]
	port := strings.TrimPrefix(url, "tcp://127.0.0.1:")
	addr := `{"trtype":"TCP","adrfam":"IPv4","traddr":"127.0.0.1","trsvcid":"` + port + `"}`

	// SPDK's method and params: one group.
	assert.Equal(t, "true", string(must("nvmf_subsystem_listener_set_ana_state",
		`{"nqn":"`+nqn+`","listen_address":`+addr+`,"ana_state":"inaccessible","anagrpid":5}`)))
	assert.Equal(t, nvmeof.ANAInaccessible, sub.ANAState(url, 5))
	assert.Equal(t, nvmeof.ANAOptimized, sub.ANAState(url, 1))
	// capsule's name, no anagrpid: every group.
	must("ana_set_state", `{"nqn":"`+nqn+`","listen_address":`+addr+`,"ana_state":"non_optimized"}`)
	assert.Equal(t, nvmeof.ANANonOptimized, sub.ANAState(url, 5))
	assert.Equal(t, nvmeof.ANANonOptimized, sub.ANAState(url, 1))
	must("ana_set_state", `{"nqn":"`+nqn+`","listen_address":`+addr+`,"ana_state":"persistent_loss","anagrpid":1}`)
	assert.Equal(t, nvmeof.ANAPersistentLoss, sub.ANAState(url, 1))

	var listeners []struct {
		Address   ListenAddress `json:"address"`
		ANAStates []struct {
			Group uint32 `json:"ana_group"`
			State string `json:"ana_state"`
		} `json:"ana_states"`
	}
	require.NoError(t, json.Unmarshal(must("nvmf_subsystem_get_listeners", `{"nqn":"`+nqn+`"}`), &listeners))
	require.Len(t, listeners, 1)
	assert.Equal(t, port, listeners[0].Address.TrSvcID)
	require.Len(t, listeners[0].ANAStates, 2)
	assert.Equal(t, uint32(1), listeners[0].ANAStates[0].Group)
	assert.Equal(t, "persistent_loss", listeners[0].ANAStates[0].State)
	assert.Equal(t, uint32(5), listeners[0].ANAStates[1].Group)
	assert.Equal(t, "non_optimized", listeners[0].ANAStates[1].State)

	// Refused: a state, group or listener that is not one.
	for params, want := range map[string]string{
		`{"nqn":"` + nqn + `","listen_address":` + addr + `,"ana_state":"sleepy"}`:                                                        "ana_state",
		`{"nqn":"` + nqn + `","listen_address":` + addr + `,"ana_state":"change","anagrpid":2000}`:                                        "anagrpid 2000",
		`{"nqn":"` + nqn + `","listen_address":{"trtype":"TCP","adrfam":"IPv4","traddr":"127.0.0.1","trsvcid":"1"},"ana_state":"change"}`: "is not a listener of",
		`{"nqn":"` + nvmeof.DiscoveryNQN + `","listen_address":` + addr + `,"ana_state":"change"}`:                                        "discovery",
		`{"nqn":"` + nqn + `","ana_state":"change"}`:                                                                                      "listen_address is missing",
		`{"nqn":"` + nqn + `","listen_address":` + addr + `,"ana_state":"change","colour":1}`:                                             "unknown parameter",
	} {
		_, e := call("nvmf_subsystem_listener_set_ana_state", params)
		require.NotNil(t, e, params)
		assert.Equal(t, CodeInvalidParams, e.Code, params)
		assert.Contains(t, e.Message, want, params)
	}
	assert.Equal(t, nvmeof.ANAPersistentLoss, sub.ANAState(url, 1), "a refused change changes nothing")

	// The state file has them under SPDK's name; a new target built from
	// it has the same states.
	saved, err := os.ReadFile(state)
	require.NoError(t, err)
	assert.Contains(t, string(saved), `"nvmf_subsystem_listener_set_ana_state"`)
	assert.Contains(t, string(saved), `"anagrpid": 5`)
	require.NoError(t, tg.Close()) // free the port
	again := newTestService(t, Options{})
	require.NoError(t, again.Load(cfgOf(t, string(saved)), false))
	sub2 := again.opts.Target.Subsystem(nqn)
	require.NotNil(t, sub2)
	assert.Equal(t, nvmeof.ANAPersistentLoss, sub2.ANAState(url, 1))
	assert.Equal(t, nvmeof.ANANonOptimized, sub2.ANAState(url, 5))
	assert.Equal(t, uint32(5), sub2.Namespace(2).ANAGroupID())
	a, _ := json.Marshal(sv.Config())
	b, _ := json.Marshal(again.Config())
	assert.JSONEq(t, string(a), string(b))

	// Every group back to Optimized drops the entries; removing the
	// listener from the subsystem forgets its states.
	srv2 := NewServer(nil)
	again.Register(srv2)
	call2 := func(method, params string) *Error {
		out := srv2.Handle(context.Background(), json.RawMessage(`{"jsonrpc":"2.0","id":1,"method":"`+method+`","params":`+params+`}`))
		var rsp Response
		require.NoError(t, json.Unmarshal(out, &rsp))
		return rsp.Error
	}
	require.Nil(t, call2("ana_set_state", `{"nqn":"`+nqn+`","listen_address":`+addr+`,"ana_state":"optimized"}`))
	assert.Equal(t, nvmeof.ANAOptimized, sub2.ANAState(url, 1))
	b, _ = json.Marshal(again.Config())
	assert.NotContains(t, string(b), "set_ana_state")
	require.Nil(t, call2("ana_set_state", `{"nqn":"`+nqn+`","listen_address":`+addr+`,"ana_state":"change","anagrpid":1}`))
	require.Nil(t, call2("nvmf_subsystem_remove_listener", `{"nqn":"`+nqn+`","listen_address":`+addr+`}`))
	b, _ = json.Marshal(again.Config())
	assert.NotContains(t, string(b), "set_ana_state")

	// nvmf_subsystem_add_listener takes ana_state: every group.
	require.Nil(t, call2("nvmf_subsystem_add_listener", `{"nqn":"`+nqn+`","listen_address":`+addr+`,"ana_state":"inaccessible"}`))
	assert.Equal(t, nvmeof.ANAInaccessible, sub2.ANAState(url, 5))
	b, _ = json.Marshal(again.Config())
	assert.Contains(t, string(b), `"ana_state":"inaccessible"`)
	e := call2("nvmf_subsystem_add_listener", `{"nqn":"`+nvmeof.DiscoveryNQN+`","listen_address":{"trtype":"TCP","adrfam":"IPv4","traddr":"127.0.0.1","trsvcid":"0"},"ana_state":"inaccessible"}`)
	require.NotNil(t, e)
	assert.Contains(t, e.Message, "ana_state is for a listener added to an NVM subsystem")
}
