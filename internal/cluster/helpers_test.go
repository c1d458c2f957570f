package cluster

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// etcdEndpoints is the package's embedded etcd, started by TestMain;
// each test keeps its map under a prefix of its own.
var etcdEndpoints []string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "cluster-etcd-")
	if err != nil {
		panic(err)
	}
	e, err := StartEmbedded(EmbedOptions{Dir: dir})
	if err != nil {
		panic(err)
	}
	etcdEndpoints = e.Endpoints()
	code := m.Run()
	e.Close()
	os.RemoveAll(dir)
	os.Exit(code)
}

// testMap returns a map under a prefix named after the test, on a
// client of its own (through endpoints if given).
func testMap(t *testing.T, endpoints ...string) *Map {
	t.Helper()
	if len(endpoints) == 0 {
		endpoints = etcdEndpoints
	}
	cli, err := Connect(endpoints)
	require.NoError(t, err)
	t.Cleanup(func() { cli.Close() })
	m := New(cli, "/test/"+strings.ReplaceAll(t.Name(), "/", "_")+"/")
	if len(endpoints) == 0 || endpoints[0] == etcdEndpoints[0] {
		// What an earlier run (-count) left.
		_, err = cli.Delete(ctxFor(t), m.prefix, clientv3.WithPrefix())
		require.NoError(t, err)
	}
	return m
}

func ctxFor(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// addNodes puts nodes n0..n{count-1} (two devices each) in the map.
func addNodes(t *testing.T, m *Map, count int) []Node {
	nodes := nodesOf(count, 2, 0)
	for i, n := range nodes {
		require.NoError(t, m.AddNode(ctxFor(t), n))
		got, _, err := m.Node(ctxFor(t), n.ID)
		require.NoError(t, err)
		nodes[i].Index = got.Index
	}
	return nodes
}

// proxy forwards TCP connections to an address until Partition, which
// stops every byte in both directions without closing anything: what a
// cut network path looks like to both ends.
type proxy struct {
	ln     net.Listener
	to     string
	mu     sync.Mutex
	conns  []net.Conn
	parted bool
	heal   chan struct{}
}

func newProxy(t *testing.T, to string) *proxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p := &proxy{ln: ln, to: strings.TrimPrefix(to, "http://"), heal: make(chan struct{})}
	go p.serve()
	t.Cleanup(p.close)
	return p
}

func (p *proxy) URL() string { return "http://" + p.ln.Addr().String() }

func (p *proxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		u, err := net.Dial("tcp", p.to)
		if err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, c, u)
		p.mu.Unlock()
		go p.pipe(c, u)
		go p.pipe(u, c)
	}
}

func (p *proxy) gate() chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.parted {
		return p.heal
	}
	return nil
}

func (p *proxy) pipe(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if g := p.gate(); g != nil {
			<-g
		}
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			if err != io.EOF {
				dst.Close()
			}
			return
		}
	}
}

// Partition holds every byte from now on; new connections are accepted
// and held too.
func (p *proxy) Partition() {
	p.mu.Lock()
	p.parted = true
	p.mu.Unlock()
}

func (p *proxy) close() {
	p.mu.Lock()
	if p.parted {
		close(p.heal)
		p.parted = false
	}
	conns := p.conns
	p.mu.Unlock()
	p.ln.Close()
	for _, c := range conns {
		c.Close()
	}
}

// headOf returns the head's JSON as stored, for messages.
func headOf(t *testing.T, cli *clientv3.Client, m *Map, vol string) string {
	r, err := cli.Get(ctxFor(t), m.headKey(vol))
	require.NoError(t, err)
	if len(r.Kvs) == 0 {
		return "none"
	}
	return fmt.Sprintf("%s@%d", r.Kvs[0].Value, r.Kvs[0].CreateRevision)
}
