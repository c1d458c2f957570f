package admin

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/capsule-storage/capsule/chunkstore"
	"github.com/capsule-storage/capsule/nvmeof/target"
)

func newTestService(t *testing.T, opts Options) *Service {
	t.Helper()
	tg, err := target.New()
	require.NoError(t, err)
	opts.Target = tg
	sv, err := NewService(opts)
	require.NoError(t, err)
	t.Cleanup(func() {
		tg.Close()
		sv.Close()
	})
	return sv
}

func cfgOf(t *testing.T, s string) Config {
	t.Helper()
	c, err := ParseConfig([]byte(s))
	require.NoError(t, err)
	return c
}

const goodConfig = `{"subsystems":[
 {"subsystem":"bdev","config":[
  {"method":"bdev_malloc_create","params":{"name":"m0","num_blocks":2048,"block_size":512}},
  {"method":"bdev_malloc_create","params":{"name":"m1","num_blocks":256,"block_size":4096}}]},
 {"subsystem":"nvmf","config":[
  {"method":"nvmf_create_subsystem","params":{"nqn":"nqn.2026-11.io.capsule:a","allow_any_host":false,"serial_number":"S1"}},
  {"method":"nvmf_subsystem_add_host","params":{"nqn":"nqn.2026-11.io.capsule:a","host":"nqn.2014-08.org.nvmexpress:uuid:11111111-2222-3333-4444-555555555555"}},
  {"method":"nvmf_subsystem_add_ns","params":{"nqn":"nqn.2026-11.io.capsule:a","namespace":{"bdev_name":"m1","nsid":7}}},
  {"method":"nvmf_subsystem_add_ns","params":{"nqn":"nqn.2026-11.io.capsule:a","namespace":{"bdev_name":"m0"}}}]}]}`

// TestLoadAndSave: a config loads onto the target, save_config gives it
// back in canonical form, and that form loads onto a fresh target into
// the same configuration.
func TestLoadAndSave(t *testing.T) {
	state := filepath.Join(t.TempDir(), "capsule.json")
	sv := newTestService(t, Options{StatePath: state})
	require.NoError(t, sv.Load(cfgOf(t, goodConfig), true))
	sub := sv.opts.Target.Subsystem("nqn.2026-11.io.capsule:a")
	require.NotNil(t, sub)
	require.Len(t, sub.Namespaces(), 2)
	assert.Equal(t, uint32(1), sub.Namespaces()[0].NSID(), "no nsid: the lowest free one")
	assert.Equal(t, 4096, sub.Namespace(7).BlockSize())
	assert.Equal(t, []string{"nqn.2014-08.org.nvmexpress:uuid:11111111-2222-3333-4444-555555555555"}, sub.Hosts())
	assert.Equal(t, "S1", sub.SerialNumber())

	saved, err := os.ReadFile(state)
	require.NoError(t, err)
	again := newTestService(t, Options{})
	require.NoError(t, again.Load(cfgOf(t, string(saved)), false))
	a, _ := json.Marshal(sv.Config())
	b, _ := json.Marshal(again.Config())
	assert.JSONEq(t, string(a), string(b))
	assert.JSONEq(t, string(a), string(saved[:len(saved)-1]))
}

// TestBadConfig: every entry is checked before anything is done, and the
// error names the entry at fault.
func TestBadConfig(t *testing.T) {
	for _, tc := range []struct{ cfg, want string }{
		{`{"subsystems":[{"subsystem":"capsule","config":[{"method":"volume_create","params":{"name":"v","size":"1MiB"}}]},
		  {"subsystem":"nvmf","config":[{"method":"nvmf_create_subsystem","params":{"nqn":"nqn.2026-11.io.capsule:a"}},
		  {"method":"nvmf_subsystem_add_ns","params":{"nqn":"nqn.2026-11.io.capsule:a","namespace":{"bdev_name":"w"}}}]}]}`,
			`subsystems[1].config[1] (nvmf_subsystem_add_ns): no bdev (volume) named "w" (volume_create`},
		{`{"subsystems":[{"subsystem":"nvmf","config":[{"method":"nvmf_create_subsystem","params":{"nqn":"nqn.2026-11.io.capsule:a","colour":1}}]}]}`,
			`subsystems[0].config[0] (nvmf_create_subsystem): invalid parameters: unknown parameter "colour"`},
		{`{"subsystems":[{"subsystem":"nvmf","config":[{"method":"nvmf_subsystem_add_listener","params":{"nqn":"nqn.2014-08.org.nvmexpress.discovery","listen_address":{"trtype":"TCP","traddr":"127.0.0.1","trsvcid":"http"}}}]}]}`,
			`subsystems[0].config[0] (nvmf_subsystem_add_listener): listen_address: trsvcid "http" is not a port number`},
		{`{"subsystems":[{"subsystem":"bdev","config":[{"method":"volume_create","params":{"name":"v","size":4096}}]}]}`,
			`subsystems[0].config[0] (volume_create): not a method of subsystem "bdev" here`},
		{`{"subsystems":[{"subsystem":"iscsi","config":[]}]}`, `subsystems[0]: unknown subsystem "iscsi"`},
		{`{"subsystems":[{"subsystem":"nvmf","config":[{"method":"nvmf_create_subsystem","params":{"nqn":"nqn.2026-11.io.capsule:a"}},
		  {"method":"nvmf_create_subsystem","params":{"nqn":"nqn.2026-11.io.capsule:a"}}]}]}`,
			`subsystems[0].config[1] (nvmf_create_subsystem): subsystem nqn.2026-11.io.capsule:a already exists`},
		{`{"subsystems":[{"subsystem":"capsule","config":[{"method":"volume_create","params":{"name":"v","size":1000}}]}]}`,
			`subsystems[0].config[0] (volume_create): volume "v": size 1000 is not a multiple of the 512-byte block`},
	} {
		dir := t.TempDir()
		sv := newTestService(t, Options{DataDir: dir, StatePath: filepath.Join(dir, "capsule.json"),
			OpenStore: func() (*chunkstore.Store, error) {
				t.Error("the store was opened for a config that fails")
				return nil, os.ErrInvalid
			}})
		err := sv.Load(cfgOf(t, tc.cfg), true)
		require.Error(t, err, tc.cfg)
		assert.Contains(t, err.Error(), tc.want)
		entries, _ := os.ReadDir(dir)
		assert.Empty(t, entries, "nothing was created")
		assert.Empty(t, sv.opts.Target.Subsystems())
	}
	_, err := ParseConfig([]byte(`{"subsystems":[],"extra":1}`))
	assert.ErrorContains(t, err, `unknown field "extra"`)
}

// TestChangesOverTheSocket: the methods change the target, refuse what
// the model refuses with SPDK's code, and persist after each change.
func TestChangesOverTheSocket(t *testing.T) {
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
	nqn := "nqn.2026-11.io.capsule:x"
	_, e := call("nvmf_create_subsystem", `{"nqn":"`+nqn+`","allow_any_host":true,"ana_reporting":false}`)
	require.Nil(t, e)
	_, e = call("bdev_malloc_create", `{"name":"m","num_blocks":64,"block_size":512}`)
	require.Nil(t, e)
	res, e := call("nvmf_subsystem_add_ns", `{"nqn":"`+nqn+`","namespace":{"bdev_name":"m","nsid":5}}`)
	require.Nil(t, e)
	assert.Equal(t, "5", string(res))
	require.NotNil(t, sv.opts.Target.Subsystem(nqn).Namespace(5))
	b, err := os.ReadFile(state)
	require.NoError(t, err)
	assert.Contains(t, string(b), `"bdev_name": "m"`)

	_, e = call("nvmf_subsystem_add_ns", `{"nqn":"`+nqn+`","namespace":{"bdev_name":"m"}}`)
	require.NotNil(t, e)
	assert.Equal(t, CodeInvalidParams, e.Code)
	_, e = call("nvmf_create_subsystem", `{"nqn":"`+nqn+`2","passthrough":true}`)
	require.NotNil(t, e)
	assert.Contains(t, e.Message, "passthrough")
	_, e = call("nvmf_subsystem_remove_ns", `{"nqn":"`+nqn+`","nsid":5}`)
	require.Nil(t, e)
	assert.Nil(t, sv.opts.Target.Subsystem(nqn).Namespace(5))
	_, e = call("nvmf_delete_subsystem", `{"nqn":"`+nqn+`"}`)
	require.Nil(t, e)
	assert.Nil(t, sv.opts.Target.Subsystem(nqn))
	_, e = call("volume_create", `{"name":"v","size":4096}`)
	require.NotNil(t, e, "no store")
	assert.Contains(t, e.Message, "no erasure-coded store")
	res, e = call("save_config", `{}`)
	require.Nil(t, e)
	assert.Contains(t, string(res), `"bdev_malloc_create"`)
	assert.NotContains(t, string(res), `nvmf_create_subsystem`)
}

func TestListenAddress(t *testing.T) {
	for url, a := range map[string]ListenAddress{
		"tcp://127.0.0.1:4420":     {TrType: "TCP", AdrFam: "IPv4", TrAddr: "127.0.0.1", TrSvcID: "4420"},
		"tcp://[::1]:4420":         {TrType: "TCP", AdrFam: "IPv6", TrAddr: "::1", TrSvcID: "4420"},
		"iwarp://10.0.0.1:4420":    {TrType: "iWARP", AdrFam: "IPv4", TrAddr: "10.0.0.1", TrSvcID: "4420"},
		"rdma://10.0.0.1:4420":     {TrType: "RDMA", AdrFam: "IPv4", TrAddr: "10.0.0.1", TrSvcID: "4420"},
		"shm://capsule":            {TrType: "RDMA", AdrFam: "INTRA_HOST", TrAddr: "capsule"},
		"fault+tcp://127.0.0.1:99": {TrType: "fault+TCP", AdrFam: "IPv4", TrAddr: "127.0.0.1", TrSvcID: "99"},
	} {
		got, err := ListenAddressOf(url)
		require.NoError(t, err, url)
		assert.Equal(t, a, got, url)
		back, err := got.URL()
		require.NoError(t, err, url)
		assert.Equal(t, url, back)
	}
	u, err := ListenAddress{TrType: "tcp", AdrFam: "ipv4", TrAddr: "127.0.0.1", TrSvcID: "4420"}.URL()
	require.NoError(t, err)
	assert.Equal(t, "tcp://127.0.0.1:4420", u, "rpc.py passes -t and -f as typed")
	for _, bad := range []ListenAddress{
		{TrType: "FC", TrAddr: "x", TrSvcID: "1"},
		{TrType: "TCP", TrAddr: "127.0.0.1"},
		{TrType: "TCP", AdrFam: "INTRA_HOST", TrAddr: "x"},
		{TrType: "TCP", AdrFam: "IB", TrAddr: "x", TrSvcID: "1"},
		{TrType: "TCP", TrSvcID: "1"},
	} {
		_, err := bad.URL()
		assert.Error(t, err, "%+v", bad)
	}
}

func TestParseSize(t *testing.T) {
	for in, want := range map[string]int64{"4096": 4096, "1GiB": 1 << 30, "8M": 8 << 20, " 2 KiB ": 2048, "1TiB": 1 << 40} {
		got, err := ParseSize(in)
		require.NoError(t, err, in)
		assert.Equal(t, want, got, in)
	}
	for _, bad := range []string{"", "x", "-1", "1PiB", "99999999999999999999"} {
		_, err := ParseSize(bad)
		assert.Error(t, err, bad)
	}
	var s Size
	require.NoError(t, json.Unmarshal([]byte(`"16MiB"`), &s))
	assert.Equal(t, Size(16<<20), s)
	require.NoError(t, json.Unmarshal([]byte(`512`), &s))
	assert.Equal(t, Size(512), s)
	assert.Error(t, json.Unmarshal([]byte(`true`), &s))
}

// TestListeners: a subsystem is served on the listeners added to it; the
// target listens on every address any subsystem has, and stops only when
// the discovery subsystem gives one up and no subsystem has it.
func TestListeners(t *testing.T) {
	sv := newTestService(t, Options{})
	srv := NewServer(nil)
	sv.Register(srv)
	call := func(method, params string) *Error {
		t.Helper()
		out := srv.Handle(context.Background(), json.RawMessage(`{"jsonrpc":"2.0","id":1,"method":"`+method+`","params":`+params+`}`))
		var rsp Response
		require.NoError(t, json.Unmarshal(out, &rsp))
		return rsp.Error
	}
	tg := sv.opts.Target
	nqn := "nqn.2026-11.io.capsule:l"
	addr := func(port string) string {
		return `{"trtype":"TCP","adrfam":"IPv4","traddr":"127.0.0.1","trsvcid":"` + port + `"}`
	}
	require.Nil(t, call("nvmf_create_subsystem", `{"nqn":"`+nqn+`"}`))
	require.Nil(t, call("nvmf_subsystem_add_listener", `{"nqn":"`+nqn+`","listen_address":`+addr("0")+`}`))
	require.Len(t, tg.Listeners(), 1, "adding an address to a subsystem starts a listener")
	url := tg.Listeners()[0]
	port := url[len("tcp://127.0.0.1:"):]
	assert.True(t, tg.Subsystem(nqn).ListenerAllowed(url))

	e := call("nvmf_subsystem_remove_listener", `{"nqn":"nqn.2014-08.org.nvmexpress.discovery","listen_address":`+addr(port)+`}`)
	require.NotNil(t, e)
	assert.Contains(t, e.Message, "is a listener of "+nqn)
	require.Nil(t, call("nvmf_subsystem_remove_listener", `{"nqn":"`+nqn+`","listen_address":`+addr(port)+`}`))
	assert.False(t, tg.Subsystem(nqn).ListenerAllowed(url))
	assert.Equal(t, []string{url}, tg.Listeners(), "discovery keeps it")
	require.Nil(t, call("nvmf_subsystem_remove_listener", `{"nqn":"nqn.2014-08.org.nvmexpress.discovery","listen_address":`+addr(port)+`}`))
	assert.Empty(t, tg.Listeners())
	e = call("nvmf_subsystem_remove_listener", `{"nqn":"`+nqn+`","listen_address":`+addr(port)+`}`)
	require.NotNil(t, e)
	assert.Contains(t, e.Message, "is not a listener of")

	// The saved config names the port the listener got.
	require.Nil(t, call("nvmf_subsystem_add_listener", `{"nqn":"`+nqn+`","listen_address":`+addr("0")+`}`))
	b, err := json.Marshal(sv.Config())
	require.NoError(t, err)
	assert.NotContains(t, string(b), `"trsvcid":"0"`)
	assert.Contains(t, string(b), `"nqn":"`+nqn+`","listen_address"`)
}
