package xds

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshchaos/meshchaos/controlplane/internal/adsclient"
)

func TestFleetSpecRoundTrip(t *testing.T) {
	for _, s := range []fleetSpec{
		{addr: "127.0.0.1:1234", clients: 10000, mode: "sotw", n: 1000},
		{addr: "127.0.0.1:1234", clients: 10000, mode: "delta", n: 1000, profile: "/tmp/p-delta-fleet.pprof"},
		{addr: "127.0.0.1:1234", clients: 10000, mode: "cds", n: 10, profile: "/tmp/fp10k-cds-fleet.pprof"},
	} {
		got, err := parseFleetSpec(s.String())
		require.NoError(t, err, s.String())
		assert.Equal(t, s, got)
	}
}

func TestParseFleetSpecRejects(t *testing.T) {
	for _, spec := range []string{
		"",
		"127.0.0.1:1 10 sotw",                  // no N
		"127.0.0.1:1 10 sotw 5 /p extra",       // too many fields
		"127.0.0.1:1 ten sotw 5",               // clients not a number
		"127.0.0.1:1 0 sotw 5",                 // no clients
		"127.0.0.1:1 10 sotw -1",               // N not positive
		"127.0.0.1:1 10 true 5",                // the old DELTA boolean
		"127.0.0.1:1 10 lds 5",                 // unknown mode
		"127.0.0.1:1 10 cds five /tmp/x.pprof", // N not a number
	} {
		_, err := parseFleetSpec(spec)
		assert.Error(t, err, spec)
	}
}

func TestParseFleetEvent(t *testing.T) {
	kind, r, ok := parseFleetEvent("ack 1700000000123456789")
	require.True(t, ok)
	assert.Equal(t, "ack", kind)
	assert.Equal(t, time.Unix(0, 1700000000123456789), r.at)

	kind, r, ok = parseFleetEvent("cds 1700000000000000001 139264")
	require.True(t, ok)
	assert.Equal(t, "cds", kind)
	assert.Equal(t, received{at: time.Unix(0, 1700000000000000001), size: 139264}, r)

	for _, line := range []string{"ready", "armed", "rss 123", "ack", "ack x", "ack 1 2", "cds 1", "cds 1 x", "cds x 2", ""} {
		_, _, ok := parseFleetEvent(line)
		assert.False(t, ok, "%q is an answer, not a client's event", line)
	}
}

// A proxy's first CDS makes it ready and is never reported; after arm("push"), each proxy's
// first CDS is reported once, and nothing after arm("").
func TestCDSReceipts(t *testing.T) {
	f := newCDSReceipts(2)
	resp := func(ns int64, size int) adsclient.Response {
		return adsclient.Response{At: time.Unix(0, ns), Size: size}
	}
	f.received(0, resp(1, 10))
	f.received(1, resp(2, 10))
	require.Len(t, f.ready, 2)
	f.received(0, resp(3, 10)) // not armed
	assert.Empty(t, f.got)

	f.arm("push")
	f.received(1, resp(4, 20))
	f.received(1, resp(5, 30)) // its second since armed
	f.received(0, resp(6, 40))
	require.Len(t, f.got, 2)
	assert.Equal(t, received{at: time.Unix(0, 4), size: 20}, <-f.got)
	assert.Equal(t, received{at: time.Unix(0, 6), size: 40}, <-f.got)

	f.arm("push") // the next push counts each proxy again
	f.received(0, resp(7, 50))
	assert.Equal(t, received{at: time.Unix(0, 7), size: 50}, <-f.got)

	f.arm("")
	f.received(1, resp(8, 60))
	assert.Empty(t, f.got)
	assert.Len(t, f.ready, 2, "ready once per proxy")
}
