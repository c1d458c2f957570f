package rdma

import (
	"context"
	"fmt"
	"net/url"
	"sort"
	"sync"
)

// MaxPrivateData is the most connection private data any provider carries
// (the MPA limit, RFC 5044 section 7.1). A provider may allow less.
const MaxPrivateData = 512

// Provider is one transport: iwarp, shm or verbs. Providers register
// themselves with Register; import rdma/providers to link them all in.
type Provider interface {
	// Scheme is the URL scheme that selects the provider: "iwarp", "shm", "rdma".
	Scheme() string
	// OpenPD opens a protection domain. host is the URL's host part; a
	// hardware provider uses it to pick the device that routes to it.
	OpenPD(host string) (PD, error)
	// Listen starts a passive endpoint at host (the URL's host part).
	Listen(ctx context.Context, host string) (Listener, error)
}

// PD is a protection domain: the owner of memory regions and queue pairs.
// Objects of one PD must not be used with another. Safe for concurrent use.
type PD interface {
	// Scheme names the provider that made the PD.
	Scheme() string
	// Register makes buf a memory region. The caller keeps buf alive and
	// must not resize it. A provider that cannot share buf with its peers
	// (shm, for remote access) returns ErrNotSupported; use Alloc.
	Register(buf []byte, access Access) (MR, error)
	// Alloc returns a new zeroed registered buffer of size bytes. Every
	// provider supports it.
	Alloc(size int, access Access) (MR, error)
	// CreateCQ makes a completion queue that holds up to depth completions.
	CreateCQ(depth int) (CQ, error)
	// CreateQP makes a reliable-connected QP in StateInit. Post receives,
	// then Connect it (active side) or hand it to ConnRequest.Accept.
	CreateQP(cfg QPConfig) (QP, error)
	// CreateSRQ makes a shared receive queue, or returns ErrNotSupported.
	CreateSRQ(depth, maxSGE int) (SRQ, error)
	// Close releases the PD. Regions and QPs must be closed first.
	Close() error
}

// MR is a registered memory region, as ibv_mr.
type MR interface {
	// Bytes is the region's memory.
	Bytes() []byte
	// Addr is the virtual address of Bytes()[0]; SGEs and remote
	// addresses name bytes of the region as Addr()+offset.
	Addr() uint64
	LKey() uint32
	RKey() uint32
	Access() Access
	// Deregister invalidates the lkey and rkey at once: a later remote
	// access fails with RemAccessErr, and no access is in progress when it
	// returns. Memory from Alloc is released.
	Deregister() error
}

// SGEOf returns the SGE for n bytes at offset off of mr.
func SGEOf(mr MR, off, n int) SGE {
	return SGE{Addr: mr.Addr() + uint64(off), Length: uint32(n), LKey: mr.LKey()}
}

// CQ is a completion queue. Poll and Wait may be called from one goroutine
// at a time; completions are pushed by the provider from any goroutine.
type CQ interface {
	// Poll moves up to len(wc) completions into wc without blocking and
	// returns how many. It returns ErrCQOverrun once the queue overflowed.
	Poll(wc []WC) (int, error)
	// Wait is Poll that blocks until at least one completion is ready or
	// ctx is done.
	Wait(ctx context.Context, wc []WC) (int, error)
	// Close releases the CQ. QPs that use it must be closed first.
	Close() error
}

// QP is a reliable-connected queue pair. PostSend and PostRecv are safe to
// call concurrently with each other and with completions.
type QP interface {
	// Num identifies the QP in WC.QPNum.
	Num() uint32
	State() QPState
	// PostSend posts a batch of send WRs in order. On error it returns a
	// *PostError: WRs before its Index were posted, the rest were not.
	PostSend(wrs []SendWR) error
	// PostRecv posts a batch of receive WRs. Allowed from StateInit.
	PostRecv(wrs []RecvWR) error
	// Connect is the active side of connection setup: it moves the QP from
	// Init to RTS, sending private to the listener at host and returning
	// the accept's private data. A reject gives *RejectError.
	Connect(ctx context.Context, host string, private []byte) ([]byte, error)
	// SetError moves the QP to StateError: every outstanding WR is flushed
	// with WRFlushErr and the peer sees the connection end.
	SetError()
	// Done is closed when the QP enters StateError.
	Done() <-chan struct{}
	// Err says why the QP entered StateError: a WCStatus such as
	// RemAccessErr (the peer refused an rkey), RNRRetryExcErr, RetryExcErr
	// (connection lost) or WRFlushErr (SetError or Close); nil before.
	Err() error
	// Close disconnects (as SetError) and frees the QP once its
	// outstanding WRs have completed.
	Close() error
	LocalAddr() string
	RemoteAddr() string
}

// SRQ is a shared receive queue: QPs created with QPConfig.SRQ take their
// receives from it.
type SRQ interface {
	PostRecv(wrs []RecvWR) error
	Close() error
}

// Listener yields incoming connection requests.
type Listener interface {
	// Accept waits for the next connection request.
	Accept(ctx context.Context) (ConnRequest, error)
	// Addr is the listening address as a URL, with the real port when
	// the port asked for was 0.
	Addr() string
	Close() error
}

// ConnRequest is a peer asking to connect, as RDMA_CM_EVENT_CONNECT_REQUEST.
// Answer it with exactly one of Accept or Reject.
type ConnRequest interface {
	// PrivateData is the private data the peer sent with its request.
	PrivateData() []byte
	RemoteAddr() string
	// Accept binds qp (created in StateInit on a PD of this provider) to
	// the connection, moves it to RTS and answers with private.
	Accept(qp QP, private []byte) error
	// Reject refuses the connection, sending private to the peer.
	Reject(private []byte) error
}

var (
	providersMu sync.RWMutex // guards providers
	providers   = map[string]Provider{}
)

// Register makes a provider available by its scheme. It panics if the
// scheme is taken, as database/sql.Register does.
func Register(p Provider) {
	providersMu.Lock()
	defer providersMu.Unlock()
	if _, dup := providers[p.Scheme()]; dup {
		panic("rdma: Register called twice for scheme " + p.Scheme())
	}
	providers[p.Scheme()] = p
}

// Schemes lists the registered provider schemes, sorted.
func Schemes() []string {
	providersMu.RLock()
	defer providersMu.RUnlock()
	s := make([]string, 0, len(providers))
	for k := range providers {
		s = append(s, k)
	}
	sort.Strings(s)
	return s
}

// ParseURL splits an RDMA endpoint URL ("iwarp://127.0.0.1:4420",
// "shm://capsule", "rdma://10.0.0.1:4420") into its provider and host.
func ParseURL(rawurl string) (Provider, string, error) {
	u, err := url.Parse(rawurl)
	if err != nil {
		return nil, "", fmt.Errorf("%w: %v", ErrInvalidArgument, err)
	}
	if u.Host == "" || (u.Path != "" && u.Path != "/") {
		return nil, "", fmt.Errorf("%w: %q is not scheme://host", ErrInvalidArgument, rawurl)
	}
	providersMu.RLock()
	p := providers[u.Scheme]
	providersMu.RUnlock()
	if p == nil {
		if s := Schemes(); len(s) > 0 {
			return nil, "", fmt.Errorf("%w %q (registered: %v; importing rdma/providers links in every provider)", ErrUnknownScheme, u.Scheme, s)
		}
		return nil, "", fmt.Errorf("%w %q: no provider is linked into this program; "+
			"import _ \"github.com/capsule-storage/capsule/rdma/providers\" (or one provider's package, e.g. rdma/iwarp)",
			ErrUnknownScheme, u.Scheme)
	}
	return p, u.Host, nil
}

// OpenPD opens a protection domain of the provider that url names.
func OpenPD(url string) (PD, error) {
	p, host, err := ParseURL(url)
	if err != nil {
		return nil, err
	}
	return p.OpenPD(host)
}

// Listen starts a listener at url.
func Listen(ctx context.Context, url string) (Listener, error) {
	p, host, err := ParseURL(url)
	if err != nil {
		return nil, err
	}
	return p.Listen(ctx, host)
}

// Dial creates a QP on pd with cfg and connects it to the listener at url,
// sending private. It returns the QP in RTS and the accept's private data.
// Use PD.CreateQP and QP.Connect instead to post receives before the
// connection is up.
func Dial(ctx context.Context, url string, pd PD, cfg QPConfig, private []byte) (QP, []byte, error) {
	p, host, err := ParseURL(url)
	if err != nil {
		return nil, nil, err
	}
	if pd.Scheme() != p.Scheme() {
		return nil, nil, fmt.Errorf("%w: PD is %s, URL is %s", ErrWrongProvider, pd.Scheme(), p.Scheme())
	}
	qp, err := pd.CreateQP(cfg)
	if err != nil {
		return nil, nil, err
	}
	reply, err := qp.Connect(ctx, host, private)
	if err != nil {
		qp.Close()
		return nil, nil, err
	}
	return qp, reply, nil
}
