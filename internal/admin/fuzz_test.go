package admin

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/capsule-storage/capsule/nvmeof/target"
)

// FuzzParseRequest: any bytes give a request or a JSON-RPC error, never a
// panic; an accepted request survives a round trip through MarshalJSON.
func FuzzParseRequest(f *testing.F) {
	for _, s := range []string{
		`{"jsonrpc":"2.0","method":"nvmf_get_subsystems","id":1}`,
		"{\n  \"jsonrpc\": \"2.0\",\n  \"method\": \"nvmf_subsystem_add_ns\",\n  \"id\": 1,\n  \"params\": {\n    \"nqn\": \"nqn.2016-06.io.spdk:cnode1\",\n    \"namespace\": {\n      \"bdev_name\": \"vol0\",\n      \"nsid\": 5\n    }\n  }\n}",
		`{"jsonrpc":"2.0","method":"echo","params":[1,"a",null],"id":"x"}`,
		`{"jsonrpc":"2.0","method":"echo"}`,
		`{"jsonrpc":"2.0","method":"echo","id":null,"extra":1}`,
		`{"jsonrpc":"2.0","method":"","id":1}`,
		`{"jsonrpc":"2.0","method":"echo","params":"x","id":1}`,
		`[{"jsonrpc":"2.0","method":"echo","id":1}]`,
		`{"jsonrpc": nope}`,
		`null`, `{}`, ``, `{"id":1e400}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		req, perr := ParseRequest(data)
		if perr != nil {
			require.Contains(t, []int{CodeParseError, CodeInvalidRequest}, perr.Code)
			if req.ID != nil {
				require.True(t, json.Valid(req.ID))
			}
			return
		}
		require.NotEmpty(t, req.Method)
		b, err := json.Marshal(req)
		require.NoError(t, err)
		again, perr := ParseRequest(b)
		require.Nil(t, perr, "%s", b)
		require.Equal(t, req.Method, again.Method)
		require.Equal(t, compact(t, req.Params), compact(t, again.Params))
		require.Equal(t, compact(t, req.ID), compact(t, again.ID))
	})
}

func compact(t *testing.T, v json.RawMessage) string {
	if v == nil {
		return "<none>"
	}
	var b []byte
	b, err := json.Marshal(v)
	require.NoError(t, err)
	return string(b)
}

// FuzzCheckConfig: any bytes as a config (or as one method's params)
// are refused with an error or checked, never a panic; checking changes
// nothing on the target.
func FuzzCheckConfig(f *testing.F) {
	f.Add([]byte(goodConfig), "nvmf_subsystem_add_ns")
	f.Add([]byte(`{"subsystems":[{"subsystem":"nvmf","config":[{"method":"nvmf_subsystem_add_listener","params":{"nqn":"nqn.2014-08.org.nvmexpress.discovery","listen_address":{"trtype":"RDMA","adrfam":"INTRA_HOST","traddr":"x"}}}]}]}`), "nvmf_subsystem_add_listener")
	f.Add([]byte(`{"nqn":"nqn.2026-11.io.capsule:a","namespace":{"bdev_name":"m","nsid":4294967295}}`), "nvmf_subsystem_add_ns")
	f.Add([]byte(`{"nqn":"x","listen_address":null}`), "nvmf_subsystem_remove_listener")
	f.Add([]byte(`{"name":"v","size":"1TiB","block_size":4096}`), "volume_create")
	f.Add([]byte(`{"name":"m","num_blocks":18446744073709551615,"block_size":512}`), "bdev_malloc_create")
	tg, err := target.New()
	require.NoError(f, err)
	defer tg.Close()
	sv, err := NewService(Options{Target: tg})
	require.NoError(f, err)
	names := make([]string, 0, len(changes))
	for n := range changes {
		names = append(names, n)
	}
	f.Fuzz(func(t *testing.T, data []byte, method string) {
		if cfg, err := ParseConfig(data); err == nil {
			sv.Check(cfg)
		}
		// The same bytes as the params of a method, through a config.
		if _, ok := changes[method]; !ok {
			method = names[len(method)%len(names)]
		}
		var c Config
		for _, sub := range []string{SubsystemCapsule, SubsystemBdev, SubsystemNVMf} {
			c.Subsystems = append(c.Subsystems, ConfigSubsystem{Subsystem: sub})
		}
		if json.Valid(data) {
			for i, sub := range c.Subsystems {
				if contains(configMethods[sub.Subsystem], method) {
					c.Subsystems[i].Config = []ConfigEntry{{Method: method, Params: data}}
				}
			}
			sv.Check(c)
		}
		if ch, err := decodeChange(method, data); err == nil { // every change, as the socket takes it
			sv.mu.Lock()
			ch.check(sv.model.clone(), sv)
			sv.mu.Unlock()
		}
		require.Empty(t, tg.Subsystems())
		require.Empty(t, tg.Listeners())
	})
}
