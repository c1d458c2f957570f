package fusefs

import (
	"bufio"
	"bytes"
	"context"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"

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

// groupsCacheMax bounds the cache; past it, it is emptied.
const groupsCacheMax = 4096

type groupsKey struct {
	pid, uid, gid uint32
}

type groupsEntry struct {
	cred *capfs.Credential // the caller, supplementary groups included
	read time.Time
}

// groupsCache holds the supplementary groups read for recent callers.
type groupsCache struct {
	mu sync.Mutex // guards m
	m  map[groupsKey]groupsEntry
}

var callerGroups groupsCache

// get returns the credential of k's caller with the supplementary
// groups of the process k.pid, as of at most groupsTTL ago.
func (g *groupsCache) get(k groupsKey) *capfs.Credential {
	now := time.Now()
	g.mu.Lock()
	e, ok := g.m[k]
	g.mu.Unlock()
	if ok && (k.pid == 0 || now.Sub(e.read) < groupsTTL) {
		return e.cred
	}
	var groups []uint32
	if k.pid != 0 {
		groups = readGroups(k.pid)
	}
	c := capfs.NewCredential(capfs.Cred{Uid: k.uid, Gid: k.gid, Groups: groups})
	g.mu.Lock()
	if g.m == nil || len(g.m) >= groupsCacheMax {
		g.m = map[groupsKey]groupsEntry{}
	}
	g.m[k] = groupsEntry{cred: c, read: now}
	g.mu.Unlock()
	return c
}

// readGroups parses the Groups line of /proc/PID/status; nil when the
// process is gone.
func readGroups(pid uint32) []uint32 {
	f, err := os.Open("/proc/" + strconv.FormatUint(uint64(pid), 10) + "/status")
	if err != nil {
		return nil
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line, ok := bytes.CutPrefix(sc.Bytes(), []byte("Groups:"))
		if !ok {
			continue
		}
		var out []uint32
		for _, w := range bytes.Fields(line) {
			if v, err := strconv.ParseUint(string(w), 10, 32); err == nil {
				out = append(out, uint32(v))
			}
		}
		return out
	}
	return nil
}

// callerCred returns the credential of the process behind the request
// ctx carries, nil when it carries none.
func callerCred(ctx context.Context) *capfs.Credential {
	c, ok := fuse.FromContext(ctx)
	if !ok {
		return nil
	}
	return callerGroups.get(groupsKey{c.Pid, c.Uid, c.Gid})
}
