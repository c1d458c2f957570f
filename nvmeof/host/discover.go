package host

import (
	"context"
	"fmt"
	"net"

	"github.com/capsule-storage/capsule/nvmeof"
)

// maxDiscoveryRecords bounds the discovery log the host reads.
const maxDiscoveryRecords = 4096

// Discover connects to the discovery controller at url
// (nqn.2014-08.org.nvmexpress.discovery), reads the discovery log page
// (header, entries, header again to check the generation counter did not
// move; retried if it did) and disconnects. Options that name the host
// (WithHostNQN, WithHostID, WithLogger) apply; the keep-alive timeout
// sent is 0, as for a discovery controller that is not kept.
func Discover(ctx context.Context, url string, opts ...Option) ([]nvmeof.DiscoveryLogEntry, error) {
	cfg, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	c, err := newController(url, cfg, nvmeof.DiscoveryNQN, true)
	if err != nil {
		return nil, err
	}
	a, err := c.connect(ctx)
	if err != nil {
		c.closePD()
		c.cancel()
		return nil, err
	}
	c.assoc = a
	c.state = StateLive
	c.live.Store(a)
	defer c.Close()

	hdr := make([]byte, nvmeof.DiscoveryLogHeaderSize)
	readHeader := func() (nvmeof.DiscoveryLogHeader, error) {
		if err := a.admin.getLogPage(ctx, nvmeof.LogDiscovery, 0, hdr, a.maxTransfer); err != nil {
			return nvmeof.DiscoveryLogHeader{}, err
		}
		return nvmeof.ParseDiscoveryLogHeader(hdr)
	}
	for attempt := 0; attempt < 10; attempt++ {
		h, err := readHeader()
		if err != nil {
			return nil, err
		}
		if h.NumRec > maxDiscoveryRecords {
			return nil, fmt.Errorf("%w: discovery log of %d records", ErrProtocol, h.NumRec)
		}
		page := make([]byte, nvmeof.DiscoveryLogSize(int(h.NumRec)))
		if err := a.admin.getLogPage(ctx, nvmeof.LogDiscovery, 0, page, a.maxTransfer); err != nil {
			return nil, err
		}
		var log nvmeof.DiscoveryLog
		if err := log.UnmarshalBinary(page); err != nil {
			if h2, herr := nvmeof.ParseDiscoveryLogHeader(page); herr == nil && (h2.GenCtr != h.GenCtr || h2.NumRec != h.NumRec) {
				continue // the log changed between the two reads
			}
			return nil, fmt.Errorf("%w: discovery log: %w", ErrProtocol, err)
		}
		again, err := readHeader()
		if err != nil {
			return nil, err
		}
		if log.GenCtr != h.GenCtr || again.GenCtr != h.GenCtr {
			continue
		}
		return log.Entries, nil
	}
	return nil, fmt.Errorf("%w: the discovery log kept changing while it was read", ErrProtocol)
}

// EntryURL returns the URL Dial takes for a discovery log entry:
// shm://TRADDR for an intra-host entry (ADRFAM FEh, as the project's
// target describes its shm listeners under TRTYPE RDMA, or TRTYPE FEh),
// iwarp://TRADDR:TRSVCID for an RDMA entry whose provider type is iWARP,
// rdma://TRADDR:TRSVCID for other RDMA entries, and tcp://TRADDR:TRSVCID
// for TCP entries without TLS (SECTYPE 0).
func EntryURL(e nvmeof.DiscoveryLogEntry) (string, error) {
	if e.ADRFAM == nvmeof.AddressFamilyIntraHost && (e.TRTYPE == nvmeof.TransportRDMA || e.TRTYPE == nvmeof.TransportIntraHost) {
		if e.TRADDR == "" {
			return "", fmt.Errorf("%w: intra-host entry without TRADDR", ErrNotSupported)
		}
		return "shm://" + e.TRADDR, nil
	}
	switch e.TRTYPE {
	case nvmeof.TransportRDMA:
		if e.ADRFAM != nvmeof.AddressFamilyIPv4 && e.ADRFAM != nvmeof.AddressFamilyIPv6 {
			return "", fmt.Errorf("%w: RDMA address family %d", ErrNotSupported, e.ADRFAM)
		}
		scheme := "rdma"
		if e.RDMA().Provider == nvmeof.RDMAProviderIWARP {
			scheme = "iwarp"
		}
		return scheme + "://" + net.JoinHostPort(e.TRADDR, e.TRSVCID), nil
	case nvmeof.TransportTCP:
		if e.ADRFAM != nvmeof.AddressFamilyIPv4 && e.ADRFAM != nvmeof.AddressFamilyIPv6 {
			return "", fmt.Errorf("%w: TCP address family %d", ErrNotSupported, e.ADRFAM)
		}
		if sec := e.TSAS[nvmeof.TSASOffsetTCPSECTYPE]; sec != nvmeof.TCPSecTypeNone {
			return "", fmt.Errorf("%w: TCP security type %d (TLS)", ErrNotSupported, sec)
		}
		return "tcp://" + net.JoinHostPort(e.TRADDR, e.TRSVCID), nil
	}
	return "", fmt.Errorf("%w: transport type %d", ErrNotSupported, e.TRTYPE)
}
