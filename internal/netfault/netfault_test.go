package netfault

import (
	"io"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestCut(t *testing.T) {
	ln, err := Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	url := "fault+tcp://" + ln.Addr().String()
	Register(url, ln.Injector())
	defer Unregister(url)
	require.Same(t, ln.Injector(), For(url))

	accepted := make(chan net.Conn, 2)
	go func() {
		for range 2 {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted <- c
		}
	}()
	var clients []net.Conn
	for range 2 {
		c, err := net.Dial("tcp", ln.Addr().String())
		require.NoError(t, err)
		defer c.Close()
		clients = append(clients, c)
	}
	<-accepted
	<-accepted
	For(url).Cut()
	assert.Equal(t, 1, For(url).Cuts())
	for _, c := range clients {
		_, err := c.Read(make([]byte, 1))
		assert.ErrorIs(t, err, io.EOF, "the cut closed the accepted end")
	}
	Unregister(url)
	assert.Nil(t, For(url))
}

func TestStall(t *testing.T) {
	ln, err := Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	go func() {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			return
		}
		defer c.Close()
		c.Write([]byte("x"))
		io.Copy(io.Discard, c)
	}()
	c, err := ln.Accept()
	require.NoError(t, err)
	ln.Injector().Stall()
	got := make(chan error, 1)
	go func() {
		_, err := c.Read(make([]byte, 1))
		got <- err
	}()
	select {
	case err := <-got:
		t.Fatalf("a read returned during a stall: %v", err)
	case <-time.After(50 * time.Millisecond):
	}
	ln.Injector().Resume()
	require.NoError(t, <-got, "the byte arrives after Resume")

	ln.Injector().Stall()
	go func() { got <- func() error { _, err := c.Read(make([]byte, 1)); return err }() }()
	c.Close()
	require.ErrorIs(t, <-got, net.ErrClosed, "Close ends a stalled read")
	ln.Injector().Resume()
}

// TestWrapper: a listener wrapped by Wrapper is found under its tcp://
// URL and its fault+tcp:// name until it is closed.
func TestWrapper(t *testing.T) {
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	url := "tcp://" + raw.Addr().String()
	ln, err := Wrapper(url, raw)
	require.NoError(t, err)
	inj := For(url)
	require.NotNil(t, inj)
	assert.Same(t, inj, For("fault+"+url))
	require.NoError(t, ln.Close())
	assert.Nil(t, For(url), "closing forgets the URL")
	_, err = raw.Accept()
	assert.ErrorIs(t, err, net.ErrClosed, "and closes the listener it wrapped")
}
