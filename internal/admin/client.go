package admin

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"time"
)

// Call sends one request to the JSON-RPC server on the Unix socket at
// path and returns its result. A JSON-RPC error comes back as an *Error;
// params nil sends none.
func Call(ctx context.Context, path, method string, params json.RawMessage) (json.RawMessage, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "unix", path)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	if dl, ok := ctx.Deadline(); ok {
		c.SetDeadline(dl)
	} else {
		c.SetDeadline(time.Now().Add(5 * time.Minute))
	}
	stop := context.AfterFunc(ctx, func() { c.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	req, err := json.Marshal(Request{Method: method, Params: params, ID: json.RawMessage("1")})
	if err != nil {
		return nil, err
	}
	if _, err := c.Write(req); err != nil {
		return nil, err
	}
	var rsp Response
	if err := json.NewDecoder(c).Decode(&rsp); err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, fmt.Errorf("reading the response: %w", err)
	}
	if rsp.Error != nil {
		return nil, rsp.Error
	}
	return rsp.Result, nil
}
