package fault

import (
	"fmt"
	"math/rand"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/capsule-storage/capsule/rdma"
)

// Kind names a fault.
type Kind uint8

const (
	// Cut drops the connection: both QPs go to StateError with Err
	// RetryExcErr, as on a lost connection, and outstanding WRs flush.
	Cut Kind = iota
	// Drop makes a WR vanish: the peer never sees it, the connection
	// stays, and the sender's WR completes successfully.
	Drop
	// Delay holds a WR, and every WR posted after it on the QP, for a while.
	Delay
	// Truncate shortens the payload of a Send or Write.
	Truncate
	// Corrupt flips bytes of the payload of a Send, Write or Read.
	Corrupt
	// Refuse refuses a connection (Injector.Refuse).
	Refuse
	numKinds
)

var kindNames = [...]string{"Cut", "Drop", "Delay", "Truncate", "Corrupt", "Refuse"}

func (k Kind) String() string {
	if int(k) < len(kindNames) {
		return kindNames[k]
	}
	return fmt.Sprintf("Kind(%d)", uint8(k))
}

// payloadOps are the opcodes that carry a payload to the peer.
var payloadOps = []rdma.Opcode{rdma.OpSend, rdma.OpSendImm, rdma.OpSendInv, rdma.OpWrite, rdma.OpWriteImm}

// applies reports whether a fault of kind k can act on op.
func (k Kind) applies(op rdma.Opcode) bool {
	switch k {
	case Truncate:
		return op != rdma.OpRead
	case Cut, Drop, Delay, Corrupt:
		return true
	}
	return false
}

// Side selects the QPs of a connection a rule acts on, by how they
// joined it.
type Side uint8

const (
	// AnySide: both ends.
	AnySide Side = iota
	// Dialer: the QP that called Connect (an NVMe-oF host).
	Dialer
	// Acceptor: the QP handed to ConnRequest.Accept (an NVMe-oF target).
	Acceptor
)

// Match selects the WRs a rule faults, among those posted with PostSend
// on the injector's QPs. WRs that pass Ops and Side are the rule's
// matches, counted from 1: the rule lets the first After through, then
// faults every Every-th of the rest (each one when Every is 0 or 1), each
// with probability Prob when 0 < Prob < 1, until it has faulted Times WRs
// (no limit when 0).
type Match struct {
	Ops   []rdma.Opcode // empty: every opcode the fault acts on
	Side  Side
	After int
	Every int
	Times int
	Prob  float64
}

// Rule is one fault added to an Injector.
type Rule struct {
	inj   *Injector
	kind  Kind
	m     Match
	delay time.Duration // Delay
	keep  int           // Truncate: payload bytes kept
	flips int           // Corrupt: bytes flipped

	// Guarded by inj.mu.
	seen    int
	hits    int
	removed bool
}

// Hits is how many WRs the rule has faulted.
func (r *Rule) Hits() int {
	r.inj.mu.Lock()
	defer r.inj.mu.Unlock()
	return r.hits
}

// Remove stops the rule. WRs it already holds (Delay) keep their time.
func (r *Rule) Remove() {
	r.inj.mu.Lock()
	defer r.inj.mu.Unlock()
	r.removed = true
	for i, x := range r.inj.rules {
		if x == r {
			r.inj.rules = append(r.inj.rules[:i], r.inj.rules[i+1:]...)
			break
		}
	}
}

// match decides whether r faults a WR of op posted on a QP of side s.
// Called with inj.mu held.
func (r *Rule) match(op rdma.Opcode, s Side) bool {
	if r.removed || !r.kind.applies(op) || (r.m.Side != AnySide && r.m.Side != s) {
		return false
	}
	if len(r.m.Ops) > 0 {
		found := false
		for _, o := range r.m.Ops {
			found = found || o == op
		}
		if !found {
			return false
		}
	}
	r.seen++
	if r.seen <= r.m.After || (r.m.Times > 0 && r.hits >= r.m.Times) {
		return false
	}
	if every := r.m.Every; every > 1 && (r.seen-r.m.After)%every != 0 {
		return false
	}
	if p := r.m.Prob; p > 0 && p < 1 && r.inj.rng.Float64() >= p {
		return false
	}
	r.hits++
	r.inj.counts[r.kind]++
	return true
}

// Injector holds the faults of one address: every QP dialled to it or
// accepted on it through a fault+ provider. Its methods are safe for
// concurrent use. Injectors of different addresses share nothing, so
// tests with their own listeners do not disturb each other.
type Injector struct {
	addr string

	mu     sync.Mutex // guards the fields below and every Rule's counters
	rules  []*Rule
	counts [numKinds]int
	rng    *rand.Rand
	refuse bool
	conns  map[*qp]struct{}
}

var (
	injectorsMu sync.Mutex // guards injectors
	injectors   = map[string]*Injector{}
)

// For returns the injector of addr, creating it: a host:port as given to
// Connect, or a listener's address as Addr returns it (a URL). The same
// address string gives the same injector; "localhost:4420" and
// "127.0.0.1:4420" are different addresses.
func For(addr string) *Injector {
	key := addrKey(addr)
	injectorsMu.Lock()
	defer injectorsMu.Unlock()
	i := injectors[key]
	if i == nil {
		i = &Injector{addr: key, rng: rand.New(rand.NewSource(1)), conns: map[*qp]struct{}{}}
		injectors[key] = i
	}
	return i
}

// addrKey strips a scheme:// prefix.
func addrKey(addr string) string {
	if strings.Contains(addr, "://") {
		if u, err := url.Parse(addr); err == nil && u.Host != "" {
			return u.Host
		}
	}
	return addr
}

// Addr is the address the injector belongs to.
func (i *Injector) Addr() string { return i.addr }

// Seed reseeds the random source of rules with a probability (seed 1
// until then), so a run can be repeated.
func (i *Injector) Seed(seed int64) {
	i.mu.Lock()
	defer i.mu.Unlock()
	i.rng = rand.New(rand.NewSource(seed))
}

func (i *Injector) add(r *Rule) *Rule {
	r.inj = i
	i.mu.Lock()
	defer i.mu.Unlock()
	i.rules = append(i.rules, r)
	return r
}

// Drop makes matching WRs vanish: nothing reaches the peer (no Recv is
// consumed, no memory is read or written there) and the connection
// stays. The sender's WR completes with Success and its own opcode; a
// dropped Read leaves its sink untouched.
func (i *Injector) Drop(m Match) *Rule { return i.add(&Rule{kind: Drop, m: m}) }

// Delay holds matching WRs for d before they are posted; WRs posted
// after a held one on the same QP wait behind it, so order is kept.
// PostSend returns at once.
func (i *Injector) Delay(m Match, d time.Duration) *Rule {
	return i.add(&Rule{kind: Delay, m: m, delay: d})
}

// Truncate cuts the payload of matching Sends and Writes to keep bytes
// (WRs with no more than keep bytes pass unchanged). A truncated Send
// arrives shorter: the receiver's ByteLen says so.
func (i *Injector) Truncate(m Match, keep int) *Rule {
	return i.add(&Rule{kind: Truncate, m: m, keep: max(keep, 0)})
}

// Corrupt flips n bytes (at least 1) of the payload of matching Sends
// and Writes, as they leave, and of matching Reads, as they land. The
// caller's source buffer is never touched: the payload is staged through
// memory the wrapper registers. Positions come from the injector's
// random source.
func (i *Injector) Corrupt(m Match, n int) *Rule {
	return i.add(&Rule{kind: Corrupt, m: m, flips: max(n, 1)})
}

// CutOn cuts the connection of the QP that posts a matching WR, before
// the WR is sent: it then completes with WRFlushErr.
func (i *Injector) CutOn(m Match) *Rule { return i.add(&Rule{kind: Cut, m: m}) }

// Cut drops every connection of the address now, as a lost link does:
// both ends move to StateError with Err RetryExcErr, and their outstanding
// WRs complete with WRFlushErr. It returns how many QPs it cut.
func (i *Injector) Cut() int {
	i.mu.Lock()
	qps := make([]*qp, 0, len(i.conns))
	for q := range i.conns {
		qps = append(qps, q)
	}
	i.counts[Cut] += len(qps)
	i.mu.Unlock()
	for _, q := range qps {
		q.cut()
	}
	return len(qps)
}

// Refuse makes new connections to the address fail while on: Connect
// returns ErrRefused and a listener's Accept rejects requests without
// returning them, as a target that is down does. Connections already up
// stay.
func (i *Injector) Refuse(on bool) {
	i.mu.Lock()
	defer i.mu.Unlock()
	i.refuse = on
}

// refused counts and reports a refusal.
func (i *Injector) refused() bool {
	i.mu.Lock()
	defer i.mu.Unlock()
	if i.refuse {
		i.counts[Refuse]++
	}
	return i.refuse
}

// Count is how many faults of kind k the injector has injected: WRs
// faulted, QPs cut, connections refused.
func (i *Injector) Count(k Kind) int {
	i.mu.Lock()
	defer i.mu.Unlock()
	if k >= numKinds {
		return 0
	}
	return i.counts[k]
}

// Reset removes every rule, clears the counts and Refuse, and reseeds
// the random source with 1. Connections stay attached.
func (i *Injector) Reset() {
	i.mu.Lock()
	defer i.mu.Unlock()
	for _, r := range i.rules {
		r.removed = true
	}
	i.rules = nil
	i.counts = [numKinds]int{}
	i.refuse = false
	i.rng = rand.New(rand.NewSource(1))
}

// Conns is how many QPs are attached to the injector now.
func (i *Injector) Conns() int {
	i.mu.Lock()
	defer i.mu.Unlock()
	return len(i.conns)
}

func (i *Injector) attach(q *qp) {
	i.mu.Lock()
	defer i.mu.Unlock()
	i.conns[q] = struct{}{}
}

func (i *Injector) detach(q *qp) {
	i.mu.Lock()
	defer i.mu.Unlock()
	delete(i.conns, q)
}

// verdict is what the rules decided for one WR.
type verdict struct {
	cut      bool
	drop     bool
	delay    time.Duration
	truncate int // -1: none
	flips    int
	seeds    []int64 // one per flip: positions, drawn under the lock
}

// decide runs every rule over one WR of op with total payload bytes,
// posted on a QP of side s. A Truncate rule only sees WRs longer than
// what it keeps.
func (i *Injector) decide(op rdma.Opcode, total int, s Side) verdict {
	v := verdict{truncate: -1}
	i.mu.Lock()
	defer i.mu.Unlock()
	for _, r := range i.rules {
		if r.kind == Truncate && total <= r.keep {
			continue
		}
		if !r.match(op, s) {
			continue
		}
		switch r.kind {
		case Cut:
			v.cut = true
		case Drop:
			v.drop = true
		case Delay:
			v.delay = max(v.delay, r.delay)
		case Truncate:
			if v.truncate < 0 || r.keep < v.truncate {
				v.truncate = r.keep
			}
		case Corrupt:
			v.flips += r.flips
		}
	}
	for range v.flips {
		v.seeds = append(v.seeds, i.rng.Int63())
	}
	return v
}
