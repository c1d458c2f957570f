package admin

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
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
