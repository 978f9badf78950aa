package adsload_test

import (
	"context"
	"testing"
	"time"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshchaos/meshchaos/workloads/adsload"
	"github.com/meshchaos/meshchaos/workloads/xdstest"
)

// abuseUntil runs mode's abusers against srv until until holds of their stats, and returns them.
func abuseUntil(t *testing.T, srv *xdstest.Server, mode string, clients int, until func(adsload.AbuseStats) bool) adsload.AbuseStats {
	t.Helper()
	a, err := adsload.NewAbuser(adsload.AbuseOptions{XDSAddress: srv.Addr, Mode: mode, Clients: clients, Period: 200 * time.Millisecond,
		OversizeBytes: 1 << 20})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { a.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	require.Eventually(t, func() bool { return until(a.Stats()) }, 20*time.Second, 10*time.Millisecond, "%s", mode)
	return a.Stats()
}

// serving is a go-control-plane server with a small mesh.
func serving(t *testing.T) *xdstest.Server {
	srv := xdstest.Start(t)
	srv.Set(t, "1", mesh(1)...)
	return srv
}

// Each abuse mode misbehaves on the wire as it says: NACKs in pairs without a version, streams
// read and never ACKed, streams dropped, streams that never read, bad requests.
func TestAbuseModesOnTheWire(t *testing.T) {
	subscribed := func(srv *xdstest.Server) (subs, replies int) {
		for _, r := range srv.Requests() {
			if r.GetResponseNonce() == "" {
				subs++
			} else {
				replies++
			}
		}
		return subs, replies
	}

	t.Run("nack", func(t *testing.T) {
		srv := serving(t)
		abuseUntil(t, srv, adsload.AbuseNACK, 1, func(s adsload.AbuseStats) bool { return s.NACKs >= 8 })
		byNonce := map[string][]*discoveryv3.DiscoveryRequest{}
		for _, r := range srv.Requests() {
			if r.GetResponseNonce() != "" {
				byNonce[r.GetTypeUrl()+"/"+r.GetResponseNonce()] = append(byNonce[r.GetTypeUrl()+"/"+r.GetResponseNonce()], r)
			}
		}
		require.NotEmpty(t, byNonce)
		for k, rs := range byNonce {
			if len(rs) == 1 {
				continue // the second may still be on its way
			}
			assert.Len(t, rs, 2, "%s: a NACK said twice", k)
			for _, r := range rs {
				assert.Empty(t, r.GetVersionInfo(), "no version is ever accepted")
				assert.Equal(t, "abuse: rejecting everything", r.GetErrorDetail().GetMessage())
			}
		}
	})

	t.Run("flood", func(t *testing.T) {
		srv := serving(t)
		s := abuseUntil(t, srv, adsload.AbuseFlood, 5, func(s adsload.AbuseStats) bool { return s.Responses >= 5 })
		assert.EqualValues(t, 5, s.Streams)
		subs, replies := subscribed(srv)
		assert.Equal(t, 5, subs, "one CDS subscription per stream")
		assert.Zero(t, replies, "read, never ACKed")
	})

	t.Run("disconnect", func(t *testing.T) {
		srv := serving(t)
		// The abuser ends each stream itself (context.Canceled, no gRPC code: "Unknown").
		s := abuseUntil(t, srv, adsload.AbuseDisconnect, 2, func(s adsload.AbuseStats) bool { return s.Ended["Unknown"] >= 10 })
		assert.GreaterOrEqual(t, s.Streams, int64(10))
		_, replies := subscribed(srv)
		assert.Zero(t, replies)
	})

	t.Run("slow", func(t *testing.T) {
		srv := serving(t)
		s := abuseUntil(t, srv, adsload.AbuseSlow, 1, func(s adsload.AbuseStats) bool { return s.Streams >= 2 })
		assert.Zero(t, s.Responses, "never reads")
		require.Eventually(t, func() bool { subs, _ := subscribed(srv); return subs >= 4 }, 10*time.Second, 10*time.Millisecond)
		_, replies := subscribed(srv)
		assert.Zero(t, replies)
	})

	t.Run("malformed", func(t *testing.T) {
		srv := serving(t)
		s := abuseUntil(t, srv, adsload.AbuseMalformed, 1, func(s adsload.AbuseStats) bool { return s.Streams >= 6 })
		ended := int64(0)
		for _, n := range s.Ended {
			ended += n
		}
		assert.GreaterOrEqual(t, ended, int64(5), "every bad request's stream ends: %v", s.Ended)
		assert.NotEmpty(t, srv.DeltaRequests(), "the delta one reaches the server")
	})
}
