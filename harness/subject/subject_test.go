package subject

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"

	"github.com/meshchaos/meshchaos/controlplane/metrics"
	"github.com/meshchaos/meshchaos/controlplane/webhook"
)

func TestParse(t *testing.T) {
	cp, err := Parse("reference")
	require.NoError(t, err)
	assert.Equal(t, "reference", cp.Name())
	assert.True(t, cp.(*Reference).gated())

	cp, err = Parse("reference:ungated, we-stale-label")
	require.NoError(t, err)
	assert.Equal(t, "reference:ungated,we-stale-label", cp.Name())
	assert.False(t, cp.(*Reference).gated())

	_, err = Parse("reference:nope")
	assert.ErrorContains(t, err, `unknown regression switch "nope"`)
	_, err = Parse("linkerd")
	assert.ErrorContains(t, err, "use reference, reference:<switch>[,<switch>][,generation=per-proxy], istiod[@PIN], istiod:installed or external:FILE")
}

// TestParseGeneration: generation=MODE in a reference spec is the control plane's
// --generation, beside switches or alone; unknown modes and options are refused.
func TestParseGeneration(t *testing.T) {
	cp, err := Parse("reference:generation=per-proxy")
	require.NoError(t, err)
	assert.Equal(t, "reference:generation=per-proxy", cp.Name())
	assert.Equal(t, "per-proxy", cp.(*Reference).generation)
	assert.Empty(t, cp.(*Reference).switches)

	cp, err = Parse("reference:generation=per-proxy,full-push-on-endpoint-reappear")
	require.NoError(t, err)
	assert.Equal(t, "reference:full-push-on-endpoint-reappear,generation=per-proxy", cp.Name(), "switches first, then the option")
	assert.Equal(t, []string{"full-push-on-endpoint-reappear"}, cp.(*Reference).switches)
	back, err := Parse(cp.Name())
	require.NoError(t, err)
	assert.Equal(t, cp.Name(), back.Name(), "the name parses back to the same control plane")

	for spec, want := range map[string]string{
		"reference:generation=per-pod":                        `unknown generation mode "per-pod" (known: per-scope, per-proxy)`,
		"reference:generation=":                               `unknown generation mode ""`,
		"reference:gen=per-proxy":                             `unknown option "gen" (known: generation=per-scope|per-proxy)`,
		"reference:generation=per-proxy,generation=per-scope": "generation given twice",
		"reference:generation=per-proxy,no-such-bug":          `unknown regression switch "no-such-bug"`,
	} {
		_, err := Parse(spec)
		assert.ErrorContains(t, err, want, spec)
	}
}

func TestMetricMatches(t *testing.T) {
	m := Metric{Name: "pushes", Labels: map[string]string{"kind": "full"}}
	assert.True(t, m.Matches("pushes", map[string]string{"kind": "full", "pod": "a"}), "other labels are summed over")
	assert.False(t, m.Matches("pushes", map[string]string{"kind": "eds"}))
	assert.False(t, m.Matches("pushes", nil))
	assert.False(t, m.Matches("other", map[string]string{"kind": "full"}))
	assert.True(t, Metric{Name: "pilot_xds"}.Matches("pilot_xds", nil))
}

// TestReferenceMetricsExist: every measure the reference maps is a metric the reference control
// plane registers, with the labels it maps (a rename there must break here, not give an
// experiment a silently missing measure).
func TestReferenceMetricsExist(t *testing.T) {
	m := metrics.New()
	_, err := webhook.NewMetrics(m.Registry) // registered when the webhooks are served
	require.NoError(t, err)
	ref := &Reference{}
	// Labelled series exist once a label value is used: use exactly the mapped labels (With
	// panics on a label name the metric does not have).
	for _, measure := range []Measure{FullPushes, EDSPushes} {
		m.XDSPushes.With(prometheus.Labels(ref.Metrics()[measure].Labels)).Add(0)
	}
	m.PushCycleTime.With(prometheus.Labels(ref.Metrics()[FullPushTime].Labels)).Observe(0)
	m.PushTime.WithLabelValues("eds").Observe(0)
	m.XDSPushes.WithLabelValues("eds").Add(0)
	m.PushTriggers.WithLabelValues("endpoint").Add(0)
	m.Rejects.WithLabelValues("cds").Add(0)
	fams, err := m.Registry.Gather()
	require.NoError(t, err)
	names := map[string]bool{}
	for _, f := range fams {
		names[f.GetName()] = true
	}
	for measure, metric := range ref.Metrics() {
		assert.True(t, names[metric.Name], "%s: %s is not registered by the reference control plane", measure, metric.Name)
	}
}

func TestReferenceURLs(t *testing.T) {
	ref := &Reference{}
	pod := &corev1.Pod{Status: corev1.PodStatus{PodIP: "10.244.0.5"}}
	assert.Equal(t, "http://10.244.0.5:15014", ref.AdminURL(pod))
	assert.Equal(t, "http://10.244.0.5:15014/debug/ballast?mb=512&step=4&every=100ms", ref.BallastURL(pod, 512))
}

// The reference's ballast is bounded by twice its memory limit, what the OOM kill asks for.
func TestBallastBound(t *testing.T) {
	for limit, want := range map[string]int{"256Mi": 512, "1Gi": 2048, "": 2048, "192Mi": 384} {
		got, err := ballastBound(limit)
		require.NoError(t, err, limit)
		assert.Equal(t, want, got, limit)
	}
	_, err := ballastBound("lots")
	assert.ErrorContains(t, err, `control plane memory limit "lots"`)
}
