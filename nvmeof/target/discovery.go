package target

import (
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"

	"github.com/capsule-storage/capsule/nvmeof"
)

// discoveryChanged bumps the discovery log's generation counter and tells
// discovery controllers that asked for the event.
func (t *Target) discoveryChanged() {
	t.genctr.Add(1)
	t.discovery.mu.Lock()
	ctrls := t.discovery.controllerListLocked()
	t.discovery.mu.Unlock()
	for _, c := range ctrls {
		c.discoveryLogChanged()
	}
}

// RemoteEntry is a discovery log entry for another target's listener,
// which the discovery log lists after this target's own: a subsystem that
// several targets serve between them (a cluster's volume, one path per
// target), or a referral to another target's discovery subsystem.
type RemoteEntry struct {
	// NQN is the subsystem; nvmeof.DiscoveryNQN makes the entry a
	// referral (SUBTYPE 1), anything else an NVM subsystem (SUBTYPE 2).
	NQN string
	// URL is the other target's listener, as its Target.Listen returned
	// it.
	URL string
	// PortID is PORTID, which should name the other target's port
	// uniquely among the entries.
	PortID uint16
}

// SetRemoteEntries replaces the entries for other targets' listeners
// that the discovery log lists. An entry whose subsystem this target also
// serves is listed only to the hosts that subsystem allows; any other
// goes to every host. A change bumps the log's generation counter and
// tells the discovery controllers that asked for Discovery Log Change
// events; setting the entries the log already has does neither.
func (t *Target) SetRemoteEntries(entries []RemoteEntry) error {
	out := make([]nvmeof.DiscoveryLogEntry, 0, len(entries))
	for _, r := range entries {
		e, err := discoveryEntry(r.URL, r.PortID)
		if err != nil {
			return err
		}
		e.SUBTYPE = nvmeof.SubsystemNVMe
		if r.NQN == nvmeof.DiscoveryNQN {
			e.SUBTYPE = nvmeof.SubsystemReferral
		} else if err := nvmeof.ValidateNQN(r.NQN); err != nil {
			return fmt.Errorf("%w: %q", ErrInvalidNQN, r.NQN)
		}
		e.SUBNQN = r.NQN
		out = append(out, e)
	}
	t.mu.Lock()
	same := slices.Equal(t.remote, out)
	if !same {
		t.remote = out
	}
	t.mu.Unlock()
	if !same {
		t.discoveryChanged()
	}
	return nil
}

// discoveryLogPage renders the discovery log for a host: one entry per
// listener for the discovery subsystem itself (SUBTYPE 3), then one per
// listener for every NVM subsystem the host may connect to (SUBTYPE 2),
// then the remote entries (SetRemoteEntries) the host may use.
func (t *Target) discoveryLogPage(hostNQN string) []byte {
	t.mu.Lock()
	listeners := append([]listener(nil), t.listeners...)
	subs := append([]*Subsystem(nil), t.order...)
	remote := t.remote
	t.mu.Unlock()

	var log nvmeof.DiscoveryLog
	for {
		gen := t.genctr.Load()
		log = nvmeof.DiscoveryLog{GenCtr: gen}
		for _, l := range listeners {
			e := l.entry()
			e.SUBTYPE = nvmeof.SubsystemCurrentDiscovery
			e.SUBNQN = nvmeof.DiscoveryNQN
			log.Entries = append(log.Entries, e)
		}
		for _, s := range subs {
			if !s.HostAllowed(hostNQN) {
				continue
			}
			for _, l := range listeners {
				if !s.ListenerAllowed(l.url()) {
					continue
				}
				e := l.entry()
				e.SUBTYPE = nvmeof.SubsystemNVMe
				e.SUBNQN = s.nqn
				log.Entries = append(log.Entries, e)
			}
		}
		for _, e := range remote {
			if e.SUBTYPE == nvmeof.SubsystemNVMe {
				if s := t.Subsystem(e.SUBNQN); s != nil && !s.HostAllowed(hostNQN) {
					continue
				}
			}
			log.Entries = append(log.Entries, e)
		}
		if t.genctr.Load() == gen {
			break
		}
	}
	page, err := log.MarshalBinary()
	if err != nil {
		// Every field comes from validated configuration.
		panic(fmt.Sprintf("target: discovery log does not encode: %v", err))
	}
	return page
}

// discoveryEntry returns the transport fields of a discovery log entry
// for a listener URL (fault+ wrappers are described as the transport they
// wrap):
//
//	tcp://ADDR:PORT    TRTYPE TCP (3), ADRFAM IPv4 or IPv6, TRADDR ADDR,
//	                   TRSVCID PORT, TSAS: SECTYPE 0 (no security), the
//	                   rest zero
//	iwarp://ADDR:PORT  TRTYPE RDMA, ADRFAM IPv4 or IPv6, TRADDR ADDR,
//	                   TRSVCID PORT, TSAS: RC QP, PRTYPE iWARP, CMS RDMA_CM
//	rdma://ADDR:PORT   the same with PRTYPE "not specified" (the NIC decides)
//	shm://NAME         TRTYPE RDMA, ADRFAM Intra Host (FEh), TRADDR NAME,
//	                   TRSVCID empty, TSAS: RC QP, PRTYPE "not specified",
//	                   CMS RDMA_CM
//
// An address that is not an IP literal (a host name) is reported as IPv4,
// as Linux nvmet does for names it cannot classify.
func discoveryEntry(url string, portID uint16) (nvmeof.DiscoveryLogEntry, error) {
	e := nvmeof.DiscoveryLogEntry{
		TRTYPE: nvmeof.TransportRDMA,
		TREQ:   nvmeof.TREQSecureChannelNotRequired | nvmeof.TREQDisableSQFlowControl,
		PORTID: portID,
		CNTLID: nvmeof.CNTLIDDynamic,
		ASQSZ:  AdminQueueEntries,
	}
	scheme, rest, ok := strings.Cut(url, "://")
	if !ok {
		return e, fmt.Errorf("target: listener address %q is not a URL", url)
	}
	if i := strings.LastIndexByte(scheme, '+'); i >= 0 {
		scheme = scheme[i+1:] // a wrapper provider such as fault+iwarp
	}
	tsas := nvmeof.RDMATransportAddress{QPType: nvmeof.RDMAQPTypeReliableConnected, Provider: nvmeof.RDMAProviderNone,
		CMS: nvmeof.RDMACMSRDMACM}
	switch scheme {
	case "shm":
		e.ADRFAM = nvmeof.AddressFamilyIntraHost
		e.TRADDR = rest
	case "iwarp", "rdma", "tcp":
		host, port, err := net.SplitHostPort(rest)
		if err != nil {
			return e, fmt.Errorf("target: listener address %q: %w", url, err)
		}
		if _, err := strconv.ParseUint(port, 10, 16); err != nil {
			return e, fmt.Errorf("target: listener address %q: port %q", url, port)
		}
		e.ADRFAM = nvmeof.AddressFamilyIPv4
		if ip := net.ParseIP(host); ip != nil && ip.To4() == nil {
			e.ADRFAM = nvmeof.AddressFamilyIPv6
		}
		e.TRADDR, e.TRSVCID = host, port
		if scheme == "iwarp" {
			tsas.Provider = nvmeof.RDMAProviderIWARP
		}
		if scheme == "tcp" {
			e.TRTYPE = nvmeof.TransportTCP
			e.TSAS = [nvmeof.TSASSize]byte{}
			e.TSAS[nvmeof.TSASOffsetTCPSECTYPE] = nvmeof.TCPSecTypeNone
			return e, nil
		}
	default:
		return e, fmt.Errorf("target: listener address %q: scheme %q has no NVMe-oF binding", url, scheme)
	}
	e.SetRDMA(tsas)
	return e, nil
}
