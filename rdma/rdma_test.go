package rdma_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/capsule-storage/capsule/rdma"
	_ "github.com/capsule-storage/capsule/rdma/fault" // fault+iwarp://
	_ "github.com/capsule-storage/capsule/rdma/providers"
)

func TestParseURL(t *testing.T) {
	for _, u := range []string{"iwarp://127.0.0.1:4420", "shm://capsule", "rdma://10.0.0.1:4420", "fault+iwarp://127.0.0.1:1"} {
		p, host, err := rdma.ParseURL(u)
		require.NoError(t, err, u)
		assert.Contains(t, u, p.Scheme()+"://"+host)
	}
	for u, want := range map[string]error{
		"nvme://127.0.0.1:4420":    rdma.ErrUnknownScheme,
		"iwarp://":                 rdma.ErrInvalidArgument,
		"iwarp://127.0.0.1:4420/x": rdma.ErrInvalidArgument,
		"127.0.0.1:4420":           rdma.ErrInvalidArgument,
		"iwarp://[::1":             rdma.ErrInvalidArgument,
	} {
		_, _, err := rdma.ParseURL(u)
		assert.ErrorIs(t, err, want, u)
	}
	assert.Subset(t, rdma.Schemes(), []string{"iwarp", "rdma", "shm"})
}

func TestRegisterTwicePanics(t *testing.T) {
	p, _, err := rdma.ParseURL("iwarp://127.0.0.1:1")
	require.NoError(t, err)
	assert.Panics(t, func() { rdma.Register(p) })
}

func TestDialChecksProvider(t *testing.T) {
	pd, err := rdma.OpenPD("shm://dial-check")
	require.NoError(t, err)
	defer pd.Close()
	_, _, err = rdma.Dial(context.Background(), "iwarp://127.0.0.1:1", pd, rdma.QPConfig{}, nil)
	assert.ErrorIs(t, err, rdma.ErrWrongProvider)
}

func TestQPConfigDefaults(t *testing.T) {
	var cfg rdma.QPConfig
	d := cfg.WithDefaults()
	assert.Equal(t, rdma.QPConfig{}, cfg, "WithDefaults does not write into the caller's value")
	assert.Equal(t, rdma.DefaultMaxSendWR, d.MaxSendWR)
	assert.Equal(t, rdma.DefaultMaxRecvWR, d.MaxRecvWR)
	assert.Equal(t, rdma.DefaultMaxSGE, d.MaxSGE)
	assert.Equal(t, rdma.DefaultMaxInline, d.MaxInline)
	assert.Equal(t, rdma.DefaultRNRRetry, d.RNRRetry)
	assert.Equal(t, rdma.DefaultRNRTimeout, d.RNRTimeout)
	assert.ErrorIs(t, d.Validate(), rdma.ErrInvalidArgument, "SendCQ is required")
	assert.ErrorIs(t, rdma.QPConfig{MaxSGE: -1}.Validate(), rdma.ErrInvalidArgument)
	assert.ErrorIs(t, rdma.QPConfig{RNRTimeout: -time.Second}.Validate(), rdma.ErrInvalidArgument)
}

func TestStatusIsError(t *testing.T) {
	assert.NoError(t, rdma.Success.Err())
	err := fmt.Errorf("write: %w", rdma.RemAccessErr.Err())
	var st rdma.WCStatus
	require.True(t, errors.As(err, &st))
	assert.Equal(t, rdma.RemAccessErr, st)
	assert.Equal(t, "rdma: remote access error", rdma.RemAccessErr.Error())
	assert.Equal(t, "WCStatus(200)", rdma.WCStatus(200).String())

	rej := &rdma.RejectError{Private: []byte{1, 2}}
	assert.ErrorIs(t, rej, rdma.ErrConnRefused)
	pe := &rdma.PostError{Index: 3, Err: rdma.ErrQueueFull}
	assert.ErrorIs(t, pe, rdma.ErrQueueFull)
	assert.Equal(t, "LocalWrite|RemoteWrite", (rdma.AccessLocalWrite | rdma.AccessRemoteWrite).String())
	assert.Equal(t, "None", rdma.Access(0).String())
}

// Example shows the verbs flow: a listener that accepts with private data,
// and a dialer that writes into the listener's region one-sided, then
// tells it with a Send.
func Example() {
	ctx := context.Background()
	const url = "shm://example"

	// Passive side.
	spd, _ := rdma.OpenPD(url)
	defer spd.Close()
	ln, _ := rdma.Listen(ctx, url)
	defer ln.Close()
	target, _ := spd.Alloc(4096, rdma.AccessAll)
	scq, _ := spd.CreateCQ(16)
	sqp, _ := spd.CreateQP(rdma.QPConfig{SendCQ: scq})
	sqp.PostRecv([]rdma.RecvWR{{ID: 1, SGL: []rdma.SGE{rdma.SGEOf(target, 2048, 64)}}})
	go func() {
		req, _ := ln.Accept(ctx)
		req.Accept(sqp, []byte("welcome"))
	}()

	// Active side.
	pd, _ := rdma.OpenPD(url)
	defer pd.Close()
	cq, _ := pd.CreateCQ(16)
	src, _ := pd.Alloc(4096, rdma.AccessLocalWrite)
	qp, reply, err := rdma.Dial(ctx, url, pd, rdma.QPConfig{SendCQ: cq}, []byte("hello"))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer qp.Close()
	copy(src.Bytes(), "one-sided")
	copy(src.Bytes()[100:], "done")
	qp.PostSend([]rdma.SendWR{
		{ID: 1, Op: rdma.OpWrite, SGL: []rdma.SGE{rdma.SGEOf(src, 0, 9)}, RemoteAddr: target.Addr(), RKey: target.RKey()},
		{ID: 2, Op: rdma.OpSend, Flags: rdma.Signaled, SGL: []rdma.SGE{rdma.SGEOf(src, 100, 4)}},
	})
	wc := make([]rdma.WC, 1)
	scq.Wait(ctx, wc) // the Send arrived, so the Write before it is visible
	fmt.Println(string(reply), string(target.Bytes()[:9]), string(target.Bytes()[2048:2048+wc[0].ByteLen]))
	cq.Wait(ctx, wc)
	fmt.Println(wc[0].ID, wc[0].Status.String())
	// Output:
	// welcome one-sided done
	// 2 success
}
