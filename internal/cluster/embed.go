package cluster

import (
	"errors"
	"fmt"
	"net/url"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

// EmbedOptions configure an embedded single-member etcd.
type EmbedOptions struct {
	// Dir holds etcd's data (its WAL and database). Required.
	Dir string
	// Name of the member; "capsule" by default.
	Name string
	// ClientURL and PeerURL to listen on; http://127.0.0.1:0 (a free
	// port) by default. Endpoints says which port was taken.
	ClientURL, PeerURL string
	// StartTimeout bounds the wait for the member to be ready; 60 s by
	// default.
	StartTimeout time.Duration
	// Logger takes etcd's own log; none by default (etcd logs errors
	// for normal shutdowns). Start failures are returned either way.
	Logger *zap.Logger
}

// Embedded is an etcd member running inside this process: what a single
// node with no etcd given uses, so that `make run` needs nothing else.
type Embedded struct {
	e *embed.Etcd
}

// StartEmbedded starts a one-member etcd cluster in o.Dir (a new one, or
// the one already there) and waits until it serves.
func StartEmbedded(o EmbedOptions) (*Embedded, error) {
	if o.Dir == "" {
		return nil, fmt.Errorf("%w: embedded etcd needs a directory", ErrInvalid)
	}
	if o.Name == "" {
		o.Name = "capsule"
	}
	if o.ClientURL == "" {
		o.ClientURL = "http://127.0.0.1:0"
	}
	if o.PeerURL == "" {
		o.PeerURL = "http://127.0.0.1:0"
	}
	if o.StartTimeout <= 0 {
		o.StartTimeout = time.Minute
	}
	cu, err := url.Parse(o.ClientURL)
	if err != nil {
		return nil, fmt.Errorf("%w: client URL: %v", ErrInvalid, err)
	}
	pu, err := url.Parse(o.PeerURL)
	if err != nil {
		return nil, fmt.Errorf("%w: peer URL: %v", ErrInvalid, err)
	}
	cfg := embed.NewConfig()
	cfg.Name = o.Name
	cfg.Dir = o.Dir
	cfg.ListenClientUrls = []url.URL{*cu}
	cfg.AdvertiseClientUrls = []url.URL{*cu}
	cfg.ListenPeerUrls = []url.URL{*pu}
	cfg.AdvertisePeerUrls = []url.URL{*pu}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	cfg.LogLevel = "error"
	if o.Logger == nil {
		o.Logger = zap.NewNop()
	}
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(o.Logger)
	// The map is small and changes slowly: keep an hour of history.
	cfg.AutoCompactionMode = embed.CompactorModePeriodic
	cfg.AutoCompactionRetention = "1h"
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return nil, fmt.Errorf("embedded etcd: %w", err)
	}
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		e.Close()
		return nil, fmt.Errorf("embedded etcd: %w", err)
	case <-time.After(o.StartTimeout):
		e.Server.Stop()
		e.Close()
		return nil, errors.New("embedded etcd: not ready in time")
	}
	return &Embedded{e: e}, nil
}

// Endpoints returns the client URLs the member listens on.
func (m *Embedded) Endpoints() []string {
	var out []string
	for _, l := range m.e.Clients {
		out = append(out, "http://"+l.Addr().String())
	}
	return out
}

// Close stops the member.
func (m *Embedded) Close() { m.e.Close() }
