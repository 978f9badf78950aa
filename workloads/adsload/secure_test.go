package adsload_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshchaos/meshchaos/workloads/adsload"
	"github.com/meshchaos/meshchaos/workloads/xdscred"
	"github.com/meshchaos/meshchaos/workloads/xdstest"
)

const secureName = "meshchaos-controlplane.meshchaos-system.svc"

// runLoad runs l until the test ends.
func runLoad(t *testing.T, l *adsload.Load) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { l.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
}

// On a TLS port that checks bearer tokens, clients with the root and a valid token get the
// whole configuration; clients whose token is refused get nothing and keep retrying.
func TestClientsOnASecurePort(t *testing.T) {
	ca := xdstest.NewCA(t)
	xds := xdstest.StartSecure(t, xdstest.Auth{Cert: ca.ServerCert(t, secureName), Tokens: []string{"good"}})
	xds.Set(t, "1", mesh(3)...)
	creds := func(token string) xdscred.Options {
		return xdscred.Options{RootCertFile: ca.WriteRoot(t), TokenFile: xdstest.WriteFile(t, "istio-token", token), ServerName: secureName}
	}

	const n = 3
	good, err := adsload.New(adsload.Options{XDSAddress: xds.Addr, Clients: n, Credentials: creds("good")})
	require.NoError(t, err)
	runLoad(t, good)
	require.Eventually(t, func() bool { return good.Stats().ClientsAtVersion["rds"]["1"] == n }, 10*time.Second, 10*time.Millisecond)
	assert.EqualValues(t, n*3, good.Stats().Resources["eds"])

	refused, err := adsload.New(adsload.Options{XDSAddress: xds.Addr, Clients: 1, Credentials: creds("expired"), BackoffMax: 200 * time.Millisecond})
	require.NoError(t, err)
	runLoad(t, refused)
	require.Eventually(t, func() bool { return refused.Stats().Streams >= 3 }, 10*time.Second, 10*time.Millisecond, "the refused client retries")
	s := refused.Stats()
	assert.Zero(t, s.ACKs)
	assert.Empty(t, s.ClientsAtVersion["cds"])
}

// Abusers reach a secure port too; without a token they are what a control plane must refuse.
func TestAbusersOnASecurePort(t *testing.T) {
	ca := xdstest.NewCA(t)
	xds := xdstest.StartSecure(t, xdstest.Auth{Cert: ca.ServerCert(t, secureName), Tokens: []string{"good"}})
	xds.Set(t, "1", mesh(1)...)
	abuse := func(o xdscred.Options, until func(adsload.AbuseStats) bool) adsload.AbuseStats {
		a, err := adsload.NewAbuser(adsload.AbuseOptions{XDSAddress: xds.Addr, Mode: adsload.AbuseNACK, Clients: 1, Credentials: o, Namespace: "load"})
		require.NoError(t, err)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { a.Run(ctx); close(done) }()
		defer func() { cancel(); <-done }()
		require.Eventually(t, func() bool { return until(a.Stats()) }, 10*time.Second, 10*time.Millisecond)
		return a.Stats()
	}
	root := ca.WriteRoot(t)
	abuse(xdscred.Options{RootCertFile: root, TokenFile: xdstest.WriteFile(t, "istio-token", "good"), ServerName: secureName},
		func(s adsload.AbuseStats) bool { return s.NACKs > 0 })
	s := abuse(xdscred.Options{RootCertFile: root, ServerName: secureName},
		func(s adsload.AbuseStats) bool { return s.Ended["Unauthenticated"] > 0 })
	assert.Zero(t, s.Responses, "no token, nothing served")
	for _, r := range xds.Requests() {
		assert.Contains(t, r.GetNode().GetId(), "~load.svc.cluster.local", "the abusers' node ids carry their namespace")
	}
}
