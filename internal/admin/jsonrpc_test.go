package admin

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// testServer has "echo" (returns its params), "fail" (an invalid-params
// error) and "boom" (a plain error, then a panic for params "panic").
func testServer() *Server {
	s := NewServer(nil)
	s.Register("echo", func(_ context.Context, p json.RawMessage) (any, error) {
		if p == nil {
			return true, nil
		}
		return p, nil
	})
	s.Register("fail", func(context.Context, json.RawMessage) (any, error) {
		return nil, Errorf(CodeInvalidParams, "no such volume")
	})
	s.Register("boom", func(_ context.Context, p json.RawMessage) (any, error) {
		if string(p) == `["panic"]` {
			panic("bad")
		}
		return nil, errors.New("disk on fire")
	})
	return s
}

// The exchanges below are what goes over the socket, byte for byte: the
// request stream a client writes (several values may follow each other
// with no separator, as SPDK's rpc.py writes its indented objects), and
// the response stream the server writes back, one value per line.
func TestServeConnStream(t *testing.T) {
	cases := []struct {
		name string
		in   string
		want string
	}{{
		name: "one request, result true when there are no params",
		in:   `{"jsonrpc":"2.0","method":"echo","id":1}`,
		want: `{"jsonrpc":"2.0","id":1,"result":true}` + "\n",
	}, {
		name: "rpc.py's shape: indented, no trailing newline, a second request glued on",
		in: "{\n  \"jsonrpc\": \"2.0\",\n  \"method\": \"echo\",\n  \"id\": 1,\n  \"params\": {\n    \"nqn\": \"x\"\n  }\n}" +
			`{"jsonrpc":"2.0","method":"echo","id":"two","params":[1,2]}`,
		want: `{"jsonrpc":"2.0","id":1,"result":{"nqn":"x"}}` + "\n" + // params echoed, re-compacted by encoding/json
			`{"jsonrpc":"2.0","id":"two","result":[1,2]}` + "\n", // a string id comes back as sent
	}, {
		name: "a notification (no id) gets no response; the next request does",
		in:   `{"jsonrpc":"2.0","method":"echo"} {"jsonrpc":"2.0","method":"echo","id":null}`,
		want: `{"jsonrpc":"2.0","id":null,"result":true}` + "\n",
	}, {
		name: "method errors carry their code and message",
		in:   `{"jsonrpc":"2.0","method":"fail","id":3}{"jsonrpc":"2.0","method":"boom","id":4}`,
		want: `{"jsonrpc":"2.0","id":3,"error":{"code":-32602,"message":"no such volume"}}` + "\n" +
			`{"jsonrpc":"2.0","id":4,"error":{"code":-32603,"message":"disk on fire"}}` + "\n",
	}, {
		name: "a panicking method is an internal error, and the connection stays",
		in:   `{"jsonrpc":"2.0","method":"boom","params":["panic"],"id":5}{"jsonrpc":"2.0","method":"echo","id":6}`,
		want: `{"jsonrpc":"2.0","id":5,"error":{"code":-32603,"message":"internal error in boom"}}` + "\n" +
			`{"jsonrpc":"2.0","id":6,"result":true}` + "\n",
	}, {
		name: "unknown method",
		in:   `{"jsonrpc":"2.0","method":"nvmf_nope","id":7}`,
		want: `{"jsonrpc":"2.0","id":7,"error":{"code":-32601,"message":"method \"nvmf_nope\" not found"}}` + "\n",
	}, {
		name: "invalid requests are answered with the id when it could be read, and the stream goes on",
		in: `{"jsonrpc":"1.0","method":"echo","id":8}` + // wrong version
			`{"jsonrpc":"2.0","id":9}` + // no method
			`{"jsonrpc":"2.0","method":"echo","params":3,"id":10}` + // params neither object nor array
			`{"jsonrpc":"2.0","method":"echo","id":{}}` + // id an object: unreadable, answered with null
			`[1]` + // a batch whose element is not an object
			`"x"`, // not an object at all
		want: `{"jsonrpc":"2.0","id":8,"error":{"code":-32600,"message":"invalid request: \"jsonrpc\" must be \"2.0\""}}` + "\n" +
			`{"jsonrpc":"2.0","id":9,"error":{"code":-32600,"message":"invalid request: \"method\" must be a non-empty string"}}` + "\n" +
			`{"jsonrpc":"2.0","id":10,"error":{"code":-32600,"message":"invalid request: \"params\" must be an object or an array"}}` + "\n" +
			`{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"invalid request: id must be a string, a number or null"}}` + "\n" +
			`[{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"invalid request: want a JSON object"}}]` + "\n" +
			`{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"invalid request: want a JSON object"}}` + "\n",
	}, {
		name: "a batch: responses in order, notifications left out",
		in:   `[{"jsonrpc":"2.0","method":"echo","id":1},{"jsonrpc":"2.0","method":"echo"},{"jsonrpc":"2.0","method":"fail","id":2}]`,
		want: `[{"jsonrpc":"2.0","id":1,"result":true},{"jsonrpc":"2.0","id":2,"error":{"code":-32602,"message":"no such volume"}}]` + "\n",
	}, {
		name: "an empty batch is one invalid request",
		in:   `[]`,
		want: `{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"invalid request: empty batch"}}` + "\n",
	}, {
		name: "bytes that are not JSON: one parse error, then the connection ends",
		in:   `{"jsonrpc":"2.0","method":"echo","id":1} {"jsonrpc": nope} {"jsonrpc":"2.0","method":"echo","id":2}`,
		want: `{"jsonrpc":"2.0","id":1,"result":true}` + "\n" +
			`{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"parse error: invalid character 'o' in literal null (expecting 'u')"}}` + "\n",
	}, {
		name: "a stream cut inside a request",
		in:   `{"jsonrpc":"2.0","meth`,
		want: `{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"parse error: unexpected EOF"}}` + "\n",
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			testServer().ServeConn(context.Background(), &rw{strings.NewReader(tc.in), &out})
			assert.Equal(t, tc.want, out.String())
		})
	}
}

type rw struct {
	r *strings.Reader
	w *bytes.Buffer
}

func (x *rw) Read(p []byte) (int, error)  { return x.r.Read(p) }
func (x *rw) Write(p []byte) (int, error) { return x.w.Write(p) }

func TestServeConnTooLarge(t *testing.T) {
	big := `{"jsonrpc":"2.0","method":"echo","id":1,"params":["` + strings.Repeat("a", MaxRequestSize) + `"]}`
	var out bytes.Buffer
	testServer().ServeConn(context.Background(), &rw{strings.NewReader(big), &out})
	assert.Equal(t, `{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"parse error: request larger than 4194304 bytes"}}`+"\n", out.String())
}

func TestDecodeParams(t *testing.T) {
	type p struct {
		NQN  string `json:"nqn"`
		NSID uint32 `json:"nsid"`
	}
	var v p
	require.NoError(t, DecodeParams(nil, &v))
	require.NoError(t, DecodeParams(json.RawMessage(`{"nqn":"a","nsid":5}`), &v))
	assert.Equal(t, p{"a", 5}, v)
	for in, msg := range map[string]string{
		`{"nqn":"a","nsdi":5}`: `invalid parameters: unknown parameter "nsdi"`,
		`{"nsid":"five"}`:      `invalid parameters: nsid: want uint32, got string`,
		`{"nsid":-1}`:          `invalid parameters: nsid: want uint32, got number -1`,
		`[1]`:                  `invalid parameters: want an object`,
	} {
		err := DecodeParams(json.RawMessage(in), &v)
		var e *Error
		require.ErrorAs(t, err, &e, in)
		assert.Equal(t, CodeInvalidParams, e.Code, in)
		assert.Equal(t, msg, e.Message, in)
	}
}

func TestUnixSocket(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s.sock")
	ln, err := ListenUnix(path)
	require.NoError(t, err)
	s := testServer()
	done := make(chan error, 1)
	go func() { done <- s.Serve(ln) }()

	_, err = ListenUnix(path)
	require.ErrorIs(t, err, ErrSocketInUse, "a live socket is not replaced")

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := Call(ctx, path, "echo", json.RawMessage(`{"a":1}`))
	require.NoError(t, err)
	assert.JSONEq(t, `{"a":1}`, string(res))
	_, err = Call(ctx, path, "fail", nil)
	var e *Error
	require.ErrorAs(t, err, &e)
	assert.Equal(t, CodeInvalidParams, e.Code)
	res, err = Call(ctx, path, "rpc_get_methods", nil)
	require.NoError(t, err)
	assert.JSONEq(t, `["boom","echo","fail","rpc_get_methods"]`, string(res))

	// A client that holds its connection open does not stop Close.
	c, err := net.Dial("unix", path)
	require.NoError(t, err)
	defer c.Close()
	require.NoError(t, s.Close())
	require.NoError(t, <-done)

	// The socket file a dead server left is replaced.
	ln, err = ListenUnix(path)
	require.NoError(t, err)
	ln.Close()
}

func TestListenUnixPathTooLong(t *testing.T) {
	_, err := ListenUnix(filepath.Join(t.TempDir(), strings.Repeat("s", 120)))
	require.ErrorIs(t, err, ErrSocketPath)
}
