package observe

import (
	"context"
	"errors"
	"net"
	"sync/atomic"
	"testing"
	"time"

	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshchaos/meshchaos/results"
	"github.com/meshchaos/meshchaos/workloads/xdscred"
	"github.com/meshchaos/meshchaos/workloads/xdstest"
)

// TestProberKeepsPaceWhenAProbeHangs: a probe that hangs until its timeout is sampled as often
// as one that answers, each sample failed with its timeout; the window is marked; samples added
// from outside join the series.
func TestProberKeepsPaceWhenAProbeHangs(t *testing.T) {
	var fast atomic.Int64
	p := &Prober{Every: 20 * time.Millisecond, As: RoleControlPlane, Probes: []Probe{
		{Name: "fast", Run: func(context.Context) (float64, error) { return float64(fast.Add(1)), nil }},
		{Name: "hangs", Timeout: 100 * time.Millisecond, Run: func(ctx context.Context) (float64, error) {
			<-ctx.Done()
			return 0, errors.New("no answer")
		}},
	}}
	ctx, cancel := context.WithCancel(context.Background())
	s := &sink{ctx: ctx}
	require.NoError(t, p.Start(ctx, s))
	p.MarkStart(time.Now())
	p.Add("staleness", time.Now(), results.ProbeSample{OK: true, Ms: 42})
	require.Eventually(t, func() bool {
		snap := p.Snapshot()
		return len(snap.Series["hangs"]) >= 5
	}, 5*time.Second, 10*time.Millisecond)
	p.MarkEnd(time.Now())
	cancel()
	s.wg.Wait()

	var sum results.Summary
	p.Gather(&sum)
	require.NotNil(t, sum.Probes)
	w := sum.Probes.Window
	require.NotNil(t, w)
	assert.Greater(t, w.End, w.Start)
	hangs, quick := sum.Probes.Series["hangs"], sum.Probes.Series["fast"]
	for _, x := range hangs {
		assert.False(t, x.OK)
		assert.Equal(t, "no answer", x.Error)
		assert.GreaterOrEqual(t, x.Ms, 100.0, "failed at its timeout")
	}
	assert.InDelta(t, len(quick), len(hangs), 6, "the hanging probe is sampled at the same pace")
	for i := 1; i < len(quick); i++ {
		assert.GreaterOrEqual(t, quick[i].T, quick[i-1].T, "sorted by time")
	}
	assert.Equal(t, []results.ProbeSample{{T: sum.Probes.Series["staleness"][0].T, OK: true, Ms: 42}}, sum.Probes.Series["staleness"])
	assert.Equal(t, "probes", sum.Measurements[0].Name)
	assert.True(t, sum.Measurements[0].OK)
}

// The xDS probe reaches a secure port with credentials: TLS under the control plane's name
// while it dials an IP, and a token.
func TestXDSProbeOnASecurePort(t *testing.T) {
	const name = "meshchaos-controlplane.meshchaos-system.svc"
	ca := xdstest.NewCA(t)
	srv := xdstest.StartSecure(t, xdstest.Auth{Cert: ca.ServerCert(t, name), Tokens: []string{"tok"}})
	srv.Set(t, "1", xdstest.EDSCluster("a", ""), xdstest.EDSCluster("b", ""))
	creds, err := xdscred.Options{RootCertPEM: ca.RootPEM, ServerName: name,
		Token: func(context.Context) (string, error) { return "tok", nil }}.DialOptions()
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var d net.Dialer
	n, err := XDSProbe(srv.Addr, "", d.DialContext, resourcev3.ClusterType, creds...)(ctx)
	require.NoError(t, err)
	assert.EqualValues(t, 2, n)

	_, err = XDSProbe(srv.Addr, "", d.DialContext, resourcev3.ClusterType)(ctx)
	assert.Error(t, err, "plaintext to a TLS port")
}

// A server that takes the subscription and answers nothing fails the probe at its deadline,
// saying so; each run is a new proxy (a node id of its own, one stream each).
func TestXDSProbeFailsAtItsDeadline(t *testing.T) {
	srv := xdstest.Start(t) // no snapshot: go-control-plane holds the request
	var d net.Dialer
	probe := XDSProbe(srv.Addr, "ns1", d.DialContext, resourcev3.ClusterType)
	for range 2 {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err := probe(ctx)
		cancel()
		require.EqualError(t, err, "xds probe: no response within the deadline")
	}
	assert.Equal(t, 2, srv.Streams())
	var ids []string
	for _, r := range srv.Requests() {
		ids = append(ids, r.GetNode().GetId())
	}
	assert.Equal(t, []string{"sidecar~10.0.0.1~xds-probe-1.ns1~ns1.svc.cluster.local",
		"sidecar~10.0.0.1~xds-probe-2.ns1~ns1.svc.cluster.local"}, ids)
}
