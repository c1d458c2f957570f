package fs

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/capsule-storage/capsule/fs/internal/proto"
	"github.com/capsule-storage/capsule/nvmeof/host"
)

// Handles across reconnects. The server keeps open handles in memory, so
// a target restart ends them: the grants they stand for and the life of
// files unlinked while open. The client remembers every handle it holds
// (its inode, its open flags without O_CREAT, O_EXCL and O_TRUNC, and the
// credential that opened it) and, the first time it sends a command on a
// connection it had not used yet (after the host library reconnected, or
// after the client dialed again), reopens each of them by number: OPEN
// with CDW12-13 naming the handle. To a target that kept its handles
// (the connection only dropped) that changes nothing; a restarted one
// registers the numbers again, with their grants and without a new
// permission check, and keeps the files unlinked while open for its
// reclaim grace (fs/server's doc.go, "Open files").
// A handle whose reclaim fails (the file is gone) is forgotten, and the
// calls that use it fail as they would have. A command in flight across
// the restart, which the host library resubmits on the new connection
// before any of this runs, is answered ENOKEY by the restarted server
// (it forgot the credentials, and ran nothing), so do registers the
// credential and sends it again, after the reclaim; root's commands,
// whose credential is never registered, need no grant.

// openHandle is what reopens a handle.
type openHandle struct {
	ino   Ino
	flags int
	cred  *Credential
}

// handleTable is the client's open handles and the connection they were
// last reclaimed on.
type handleTable struct {
	mu   sync.Mutex
	open map[Handle]openHandle
	// on is the controller and its reconnect count the handles are known
	// to be open on (nil before the first command), replaced whole under
	// mu and read without it; reclaiming serializes the reclaims.
	on         atomic.Pointer[connection]
	reclaiming sync.Mutex
	busy       atomic.Bool // a reclaim runs: commands wait for it
}

// connection names one association of one controller.
type connection struct {
	ctrl       *host.Controller
	reconnects uint64
}

// opened records a handle the server returned.
func (t *handleTable) opened(h Handle, ino Ino, flags int, cred *Credential) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.open == nil {
		t.open = map[Handle]openHandle{}
	}
	t.open[h] = openHandle{ino: ino, flags: flags &^ (syscall.O_CREAT | syscall.O_EXCL | syscall.O_TRUNC), cred: cred}
}

// released forgets a handle, and reports whether it was open.
func (t *handleTable) released(h Handle) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	_, ok := t.open[h]
	delete(t.open, h)
	return ok
}

// current reports whether ctrl, as it is now, is the connection the
// handles were last reclaimed on, and marks it so. The first connection
// (no handles yet) is current.
func (t *handleTable) current(ctrl *host.Controller) bool {
	r := ctrl.Reconnects()
	if on := t.on.Load(); on != nil && on.ctrl == ctrl && on.reconnects == r {
		return true
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	on := t.on.Load()
	if on != nil && on.ctrl == ctrl && on.reconnects == r {
		return true // another command marked it meanwhile
	}
	t.on.Store(&connection{ctrl: ctrl, reconnects: r})
	return on == nil || len(t.open) == 0
}

// snapshot returns the open handles.
func (t *handleTable) snapshot() map[Handle]openHandle {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make(map[Handle]openHandle, len(t.open))
	for h, o := range t.open {
		out[h] = o
	}
	return out
}

// settle runs before every command but a reclaim's own: on a connection
// not used before it reclaims the handles; while another command does,
// it waits for that.
func (c *Client) settle(ctx context.Context, ctrl *host.Controller) {
	if !c.handles.current(ctrl) {
		c.reclaim(ctx)
		return
	}
	if c.handles.busy.Load() {
		c.handles.reclaiming.Lock()
		c.handles.reclaiming.Unlock() //nolint:staticcheck // waits for the reclaim
	}
}

// reclaim reopens every handle the client holds, on a connection it had
// not used since it last did (handleTable.current). It runs inside do,
// before the command that noticed.
func (c *Client) reclaim(ctx context.Context) {
	c.handles.reclaiming.Lock()
	c.handles.busy.Store(true)
	defer c.handles.reclaiming.Unlock()
	defer c.handles.busy.Store(false)
	open := c.handles.snapshot()
	kept := 0
	for h, o := range open {
		var buf [proto.OpenReplyLen]byte
		k := &call{op: proto.OpOpen, a0: uint64(o.ino), a1: uint64(h), cdw14: uint32(o.flags), out: buf[:], reclaim: true}
		err := c.do(WithCredential(ctx, o.cred), k)
		switch {
		case err == nil:
			kept++
		case errors.Is(err, syscall.EIO) || errors.Is(err, syscall.EINTR):
			// The connection went again: the next command reclaims.
			c.log.Info("capfs: reclaiming open handles stopped", "err", err)
			return
		default:
			c.handles.released(h)
			c.log.Warn("capfs: an open handle could not be reclaimed; it is closed", "ino", uint64(o.ino), "err", err)
		}
	}
	if len(open) > 0 {
		c.log.Info("capfs: open handles reclaimed", "handles", kept, "of", len(open))
	}
}
