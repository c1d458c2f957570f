package admin

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"sort"
	"strings"
	"sync"
)

// Version is the only "jsonrpc" member a request may carry.
const Version = "2.0"

// MaxRequestSize bounds one request (or one batch) in bytes: a longer
// one is answered with a parse error and the connection is closed.
const MaxRequestSize = 4 << 20

// Error codes of JSON-RPC 2.0 (section 5.1). Methods answer ordinary
// failures with CodeInvalidParams, as SPDK does, or CodeInternal.
const (
	CodeParseError     = -32700 // the bytes are not JSON
	CodeInvalidRequest = -32600 // JSON, but not a request object
	CodeMethodNotFound = -32601
	CodeInvalidParams  = -32602
	CodeInternal       = -32603
)

// Error is a JSON-RPC error object; a Method returns one (or wraps one)
// to choose its code.
type Error struct {
	Code    int             `json:"code"`
	Message string          `json:"message"`
	Data    json.RawMessage `json:"data,omitempty"`
}

func (e *Error) Error() string { return e.Message }

// Errorf returns an *Error with the code and a formatted message.
func Errorf(code int, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// Request is one JSON-RPC 2.0 request, as ParseRequest accepted it.
type Request struct {
	Method string
	// Params is the "params" member, an object or an array; nil when
	// the request has none.
	Params json.RawMessage
	// ID is the "id" member as sent (a number, a string or null); nil
	// for a notification, which gets no response.
	ID json.RawMessage
}

// Notification reports whether the request wants no response.
func (r *Request) Notification() bool { return r.ID == nil }

// MarshalJSON writes the request as a client sends it.
func (r Request) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		JSONRPC string          `json:"jsonrpc"`
		Method  string          `json:"method"`
		Params  json.RawMessage `json:"params,omitempty"`
		ID      json.RawMessage `json:"id,omitempty"`
	}{Version, r.Method, r.Params, r.ID})
}

// Response is one JSON-RPC 2.0 response: Result or Error, never both.
type Response struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id"`
	Result  json.RawMessage `json:"result,omitempty"`
	Error   *Error          `json:"error,omitempty"`
}

// nullID is the id of a response to a request whose id could not be read.
var nullID = json.RawMessage("null")

// ParseRequest checks one JSON value against the request object of
// JSON-RPC 2.0: an object with "jsonrpc": "2.0", a non-empty string
// "method", "params" an object or an array if present, "id" a string, a
// number or null if present, and no other member. The error is the one
// to answer with (CodeParseError for bytes that are not one JSON value,
// CodeInvalidRequest otherwise); the Request returned with it carries
// the id when one could be read, so the answer can name it.
func ParseRequest(data []byte) (Request, *Error) {
	var members map[string]json.RawMessage
	if !json.Valid(data) {
		return Request{}, Errorf(CodeParseError, "parse error: not one JSON value")
	}
	if err := json.Unmarshal(data, &members); err != nil || members == nil {
		return Request{}, Errorf(CodeInvalidRequest, "invalid request: want a JSON object")
	}
	var req Request
	if id, ok := members["id"]; ok {
		switch firstByte(id) {
		case '"', 'n', '-', '0', '1', '2', '3', '4', '5', '6', '7', '8', '9':
			req.ID = id
		default:
			return Request{}, Errorf(CodeInvalidRequest, "invalid request: id must be a string, a number or null")
		}
	}
	var version string
	if err := json.Unmarshal(members["jsonrpc"], &version); err != nil || version != Version {
		return req, Errorf(CodeInvalidRequest, "invalid request: \"jsonrpc\" must be \"2.0\"")
	}
	if err := json.Unmarshal(members["method"], &req.Method); err != nil || req.Method == "" {
		return req, Errorf(CodeInvalidRequest, "invalid request: \"method\" must be a non-empty string")
	}
	if p, ok := members["params"]; ok {
		switch firstByte(p) {
		case '{', '[':
			req.Params = p
		default:
			return req, Errorf(CodeInvalidRequest, "invalid request: \"params\" must be an object or an array")
		}
	}
	for name := range members {
		switch name {
		case "jsonrpc", "method", "params", "id":
		default:
			return req, Errorf(CodeInvalidRequest, "invalid request: unknown member %q", name)
		}
	}
	return req, nil
}

// firstByte is the first byte of a JSON value json.Unmarshal produced
// (no leading space), or 0.
func firstByte(v json.RawMessage) byte {
	v = bytes.TrimLeft(v, " \t\r\n")
	if len(v) == 0 {
		return 0
	}
	return v[0]
}

// Method serves one method: it gets the request's params (nil when there
// are none) and returns a value to marshal as the result, or an error.
// An error that is (or wraps) an *Error is answered with it; any other
// with CodeInternal and the error's text.
type Method func(ctx context.Context, params json.RawMessage) (any, error)

// Server answers JSON-RPC 2.0 on stream connections. A connection
// carries a stream of JSON values, one request (or batch) each, with or
// without whitespace between them, as SPDK's rpc.py sends them; each
// gets its response, one JSON value followed by a newline, in order.
// Requests of one connection run one at a time; connections run in
// parallel.
type Server struct {
	log *slog.Logger

	// mu guards the fields below.
	mu        sync.Mutex
	methods   map[string]Method
	listeners map[net.Listener]struct{}
	conns     map[net.Conn]struct{}
	closed    bool

	wg sync.WaitGroup // Serve loops and connections
}

// NewServer returns a server with no methods but rpc_get_methods.
func NewServer(log *slog.Logger) *Server {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Server{log: log, methods: map[string]Method{},
		listeners: map[net.Listener]struct{}{}, conns: map[net.Conn]struct{}{}}
	s.Register("rpc_get_methods", func(context.Context, json.RawMessage) (any, error) { return s.Methods(), nil })
	return s
}

// Register adds (or replaces) a method.
func (s *Server) Register(name string, m Method) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.methods[name] = m
}

// Methods lists the method names, sorted.
func (s *Server) Methods() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]string, 0, len(s.methods))
	for n := range s.methods {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// maxSocketPath is the longest path a Unix socket address holds (108
// bytes of sun_path on Linux, one of them the terminating NUL).
const maxSocketPath = 107

// CheckSocketPath checks, creating nothing, that ListenUnix can listen
// at path: it is short enough (ErrSocketPath), and it is not a file other
// than a socket or a socket some process answers on (ErrSocketInUse).
func CheckSocketPath(path string) error {
	if len(path) > maxSocketPath {
		return fmt.Errorf("%w: %s is %d bytes, and a Unix socket's path holds at most %d", ErrSocketPath, path, len(path), maxSocketPath)
	}
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode()&os.ModeSocket == 0 {
			return fmt.Errorf("%w: %s is not a socket", ErrSocketInUse, path)
		}
		if c, err := net.Dial("unix", path); err == nil {
			c.Close()
			return fmt.Errorf("%w: %s", ErrSocketInUse, path)
		}
	}
	return nil
}

// ListenUnix listens on a Unix stream socket at path with mode 0600. A
// socket file left by a process that is gone is replaced; one that
// answers is not (ErrSocketInUse).
func ListenUnix(path string) (net.Listener, error) {
	if err := CheckSocketPath(path); err != nil {
		return nil, err
	}
	if _, err := os.Lstat(path); err == nil {
		if err := os.Remove(path); err != nil {
			return nil, err
		}
	}
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, err
	}
	if err := os.Chmod(path, 0o600); err != nil {
		ln.Close()
		return nil, err
	}
	return ln, nil
}

// Serve accepts connections on ln until Close, and serves each on its
// own goroutine. It returns nil after Close.
func (s *Server) Serve(ln net.Listener) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		ln.Close()
		return ErrServerClosed
	}
	s.listeners[ln] = struct{}{}
	s.wg.Add(1)
	s.mu.Unlock()
	defer s.wg.Done()
	for {
		c, err := ln.Accept()
		if err != nil {
			s.mu.Lock()
			closed := s.closed
			s.mu.Unlock()
			if closed {
				return nil
			}
			return err
		}
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			c.Close()
			return nil
		}
		s.conns[c] = struct{}{}
		s.wg.Add(1)
		s.mu.Unlock()
		go func() {
			defer s.wg.Done()
			s.ServeConn(context.Background(), c)
			c.Close()
			s.mu.Lock()
			delete(s.conns, c)
			s.mu.Unlock()
		}()
	}
}

// Close stops the listeners, closes the connections (a request running
// finishes; its response is lost) and waits for their goroutines.
func (s *Server) Close() error {
	s.mu.Lock()
	s.closed = true
	for ln := range s.listeners {
		ln.Close()
	}
	for c := range s.conns {
		c.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
	return nil
}

// ServeConn reads requests from rw and writes their responses until the
// stream ends, a write fails, or the stream stops being JSON (answered
// with one parse error first: a stream cannot be resynchronized).
func (s *Server) ServeConn(ctx context.Context, rw io.ReadWriter) {
	lr := &limitedReader{r: rw}
	dec := json.NewDecoder(lr)
	for {
		lr.n = 0
		var raw json.RawMessage
		err := dec.Decode(&raw)
		if errors.Is(err, io.EOF) {
			return
		}
		if err != nil {
			var syn *json.SyntaxError
			if errors.As(err, &syn) || errors.Is(err, errTooLarge) || errors.Is(err, io.ErrUnexpectedEOF) {
				msg := "parse error: " + err.Error()
				if errors.Is(err, errTooLarge) {
					msg = fmt.Sprintf("parse error: request larger than %d bytes", MaxRequestSize)
				}
				s.write(rw, Response{JSONRPC: Version, ID: nullID, Error: Errorf(CodeParseError, "%s", msg)})
			}
			return
		}
		out := s.Handle(ctx, raw)
		if out == nil {
			continue
		}
		if _, err := rw.Write(append(out, '\n')); err != nil {
			return
		}
	}
}

// Handle answers one JSON value read from a stream: a request or a
// batch (an array of them). It returns the response bytes, or nil when
// nothing is to be sent (a notification, or a batch of them).
func (s *Server) Handle(ctx context.Context, raw json.RawMessage) []byte {
	if firstByte(raw) == '[' {
		var batch []json.RawMessage
		if err := json.Unmarshal(raw, &batch); err != nil {
			return marshalResponse(Response{JSONRPC: Version, ID: nullID, Error: Errorf(CodeParseError, "parse error: %v", err)})
		}
		if len(batch) == 0 {
			return marshalResponse(Response{JSONRPC: Version, ID: nullID, Error: Errorf(CodeInvalidRequest, "invalid request: empty batch")})
		}
		var out []json.RawMessage
		for _, r := range batch {
			if rsp, ok := s.handleOne(ctx, r); ok {
				out = append(out, marshalResponse(rsp))
			}
		}
		if len(out) == 0 {
			return nil
		}
		b, _ := json.Marshal(out)
		return b
	}
	rsp, ok := s.handleOne(ctx, raw)
	if !ok {
		return nil
	}
	return marshalResponse(rsp)
}

// handleOne runs one request; ok is false for a notification.
func (s *Server) handleOne(ctx context.Context, raw json.RawMessage) (Response, bool) {
	req, perr := ParseRequest(raw)
	if perr != nil {
		id := req.ID
		if id == nil {
			id = nullID
		}
		return Response{JSONRPC: Version, ID: id, Error: perr}, true
	}
	s.mu.Lock()
	m := s.methods[req.Method]
	s.mu.Unlock()
	var rsp Response
	if m == nil {
		rsp.Error = Errorf(CodeMethodNotFound, "method %q not found", req.Method)
	} else {
		rsp.Result, rsp.Error = s.call(ctx, m, req)
	}
	if req.Notification() {
		return Response{}, false
	}
	rsp.JSONRPC, rsp.ID = Version, req.ID
	return rsp, true
}

// call runs a method, turning a panic into an internal error so that one
// bad request does not end the daemon.
func (s *Server) call(ctx context.Context, m Method, req Request) (result json.RawMessage, rerr *Error) {
	defer func() {
		if p := recover(); p != nil {
			s.log.Error("rpc method panicked", "method", req.Method, "panic", p)
			result, rerr = nil, Errorf(CodeInternal, "internal error in %s", req.Method)
		}
	}()
	v, err := m(ctx, req.Params)
	if err != nil {
		var e *Error
		if errors.As(err, &e) {
			if e.Message != err.Error() { // wrapped: keep the whole text
				e = &Error{Code: e.Code, Message: err.Error(), Data: e.Data}
			}
			return nil, e
		}
		return nil, Errorf(CodeInternal, "%s", err.Error())
	}
	b, err := json.Marshal(v)
	if err != nil {
		return nil, Errorf(CodeInternal, "%s: result does not encode: %v", req.Method, err)
	}
	return b, nil
}

func marshalResponse(r Response) []byte {
	b, err := json.Marshal(r)
	if err != nil { // Result is valid JSON and Error plain fields
		panic(fmt.Sprintf("admin: response does not encode: %v", err))
	}
	return b
}

func (s *Server) write(w io.Writer, r Response) {
	w.Write(append(marshalResponse(r), '\n'))
}

// errTooLarge ends a connection whose request exceeds MaxRequestSize.
var errTooLarge = errors.New("request too large")

// limitedReader fails once n bytes have been read since the counter was
// last reset (before each request). The decoder reads ahead, so the
// bound is approximate by one read buffer.
type limitedReader struct {
	r io.Reader
	n int
}

func (l *limitedReader) Read(p []byte) (int, error) {
	if l.n >= MaxRequestSize {
		return 0, errTooLarge
	}
	if len(p) > MaxRequestSize-l.n {
		p = p[:MaxRequestSize-l.n]
	}
	n, err := l.r.Read(p)
	l.n += n
	return n, err
}

// DecodeParams decodes a method's params object into v, refusing unknown
// members; no params (nil or null) leave v as it is. The error is a
// CodeInvalidParams *Error.
func DecodeParams(params json.RawMessage, v any) error {
	if len(params) == 0 || string(params) == "null" {
		return nil
	}
	if firstByte(params) != '{' {
		return Errorf(CodeInvalidParams, "invalid parameters: want an object")
	}
	dec := json.NewDecoder(bytes.NewReader(params))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		msg := err.Error()
		if f, ok := strings.CutPrefix(msg, "json: unknown field "); ok {
			return Errorf(CodeInvalidParams, "invalid parameters: unknown parameter %s", f)
		}
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) && te.Field != "" {
			return Errorf(CodeInvalidParams, "invalid parameters: %s: want %s, got %s", te.Field, te.Type, te.Value)
		}
		return Errorf(CodeInvalidParams, "invalid parameters: %s", strings.TrimPrefix(msg, "json: "))
	}
	return nil
}
