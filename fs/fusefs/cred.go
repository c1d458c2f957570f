package fusefs

import (
	"bytes"
	"context"
	"os"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"

	capfs "github.com/capsule-storage/capsule/fs"
)

// The caller of each request. The kernel's request header names the
// calling process's fsuid, fsgid and pid, not its supplementary groups;
// those come from /proc/PID/status (the Groups line), kept for
// groupsTTL per pid, uid and gid, so that a process that changes its
// groups is seen so within that time (one that changes its uid or gid
// at once). A request without a pid (the kernel's own, such as a
// release after the process has gone) runs with no supplementary
// groups.

// groupsTTL is how long the groups read for a process are used.
const groupsTTL = time.Second

// groupsCacheMax bounds the cache; past it, the entries older than
// groupsTTL are dropped, and all of them when that leaves it full.
const groupsCacheMax = 4096

type groupsKey struct {
	pid, uid, gid uint32
}

// preparedCred is one caller's credential, ready for the client: immutable,
// shared by every request of that caller, so that a request costs no
// allocation for it.
type preparedCred struct {
	cred   *capfs.Credential // the caller, supplementary groups included
	ctx    context.Context   // context.Background() carrying cred: what client calls run under
	groups []uint32          // as read, to tell a change at the next read
}

func newPreparedCred(k groupsKey, groups []uint32) *preparedCred {
	c := capfs.NewCredential(capfs.Cred{Uid: k.uid, Gid: k.gid, Groups: groups})
	return &preparedCred{cred: c, ctx: capfs.WithCredential(context.Background(), c), groups: groups}
}

type groupsEntry struct {
	c    *preparedCred
	read time.Time
}

// groupsCache holds the supplementary groups read for recent callers.
type groupsCache struct {
	mu sync.RWMutex // guards m
	m  map[groupsKey]groupsEntry
}

var callerGroups groupsCache

// lookup returns k's caller, with the supplementary groups of the
// process k.pid as of at most groupsTTL ago. A caller found costs a
// clock read and a map lookup; every groupsTTL a read of /proc (which
// keeps the caller it had when the groups are the same).
func (g *groupsCache) lookup(k groupsKey) *preparedCred {
	now := time.Now()
	g.mu.RLock()
	e, ok := g.m[k]
	g.mu.RUnlock()
	if ok && (k.pid == 0 || now.Sub(e.read) < groupsTTL) {
		return e.c
	}
	var buf [64]uint32
	var groups []uint32
	if k.pid != 0 {
		groups = readGroupsInto(k.pid, buf[:0])
	}
	c := e.c
	if !ok || !slices.Equal(c.groups, groups) {
		c = newPreparedCred(k, slices.Clone(groups))
	}
	g.mu.Lock()
	if g.m == nil {
		g.m = map[groupsKey]groupsEntry{}
	}
	if len(g.m) >= groupsCacheMax {
		for old, oe := range g.m {
			if now.Sub(oe.read) >= groupsTTL {
				delete(g.m, old)
			}
		}
		if len(g.m) >= groupsCacheMax {
			clear(g.m)
		}
	}
	g.m[k] = groupsEntry{c: c, read: now}
	g.mu.Unlock()
	return c
}

// readGroupsInto appends the groups of the Groups line of
// /proc/PID/status to out; nil when the process is gone. The file is
// read into a buffer on the stack (the Groups line comes early in it);
// only a line that does not end within it takes a second, whole read.
func readGroupsInto(pid uint32, out []uint32) []uint32 {
	path := "/proc/" + strconv.FormatUint(uint64(pid), 10) + "/status"
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil
	}
	var buf [4096]byte
	n := 0
	for n < len(buf) {
		m, err := unix.Read(fd, buf[n:])
		if err != nil || m <= 0 {
			break
		}
		n += m
	}
	unix.Close(fd)
	line, ok := groupsLine(buf[:n])
	if !ok && n == len(buf) {
		whole, err := os.ReadFile(path)
		if err != nil {
			return nil
		}
		line, ok = groupsLine(whole)
	}
	if !ok {
		return nil
	}
	return parseGroups(line, out)
}

// groupsLine finds the Groups line of a status file: ok when it ends
// within data.
func groupsLine(data []byte) (line []byte, ok bool) {
	const key = "\nGroups:"
	i := bytes.Index(data, []byte(key))
	if i < 0 {
		return nil, false
	}
	line = data[i+len(key):]
	end := bytes.IndexByte(line, '\n')
	if end < 0 {
		return nil, false
	}
	return line[:end], true
}

// parseGroups appends the decimal numbers of line, separated by blanks,
// to out; a number that does not fit 32 bits is skipped.
func parseGroups(line []byte, out []uint32) []uint32 {
	var v uint64
	digits := false
	for i := 0; i <= len(line); i++ {
		if i < len(line) && line[i] >= '0' && line[i] <= '9' {
			v = v*10 + uint64(line[i]-'0')
			digits = true
			if v > 1<<32 {
				v = 1 << 40 // too large; stays too large
			}
			continue
		}
		if digits && v < 1<<32 {
			out = append(out, uint32(v))
		}
		v, digits = 0, false
	}
	return out
}

// callerOf returns the caller behind the request ctx carries, nil when
// it carries none.
func callerOf(ctx context.Context) *preparedCred {
	c, ok := fuse.FromContext(ctx)
	if !ok {
		return nil
	}
	return callerGroups.lookup(groupsKey{c.Pid, c.Uid, c.Gid})
}
