// Package respflags is the contract between the control plane, the data plane and the harness
// for proxy-generated errors: every reply a proxy makes itself (no route, no cluster, no healthy
// upstream, connect failure) carries Envoy's response flag in Header. With real Envoy the reference
// control plane sets it through the HTTP connection manager's local_reply_config
// (%RESPONSE_FLAGS%); xdsproxy sets it directly. The harness counts 503s per flag per second.
package respflags

// Header is the response header that carries Envoy's %RESPONSE_FLAGS% on proxy-generated replies.
const Header = "x-meshchaos-response-flags"

// Envoy response flags the experiments observe (Envoy access-log docs, "Response flags").
const (
	// NoRouteFound (NR): no route matched the request; Envoy answers 404.
	NoRouteFound = "NR"
	// NoClusterFound (NC): the route names a cluster the proxy does not have; 503.
	// Envoy before 1.18 reported this case as NR too.
	NoClusterFound = "NC"
	// NoHealthyUpstream (UH): the cluster has no healthy endpoint; 503.
	NoHealthyUpstream = "UH"
	// UpstreamConnectionFailure (UF): connecting to the chosen endpoint failed; 503.
	UpstreamConnectionFailure = "UF"
	// UpstreamRequestTimeout (UT): the upstream did not answer in time; 504.
	UpstreamRequestTimeout = "UT"
	// UpstreamConnectionTermination (UC): the upstream closed or reset the connection before
	// answering, e.g. a pooled keep-alive connection it had just closed; 503.
	UpstreamConnectionTermination = "UC"
	// UpstreamRetryLimitExceeded (URX): the route's retries were exhausted; it stands beside the
	// last attempt's flag ("UF,URX").
	UpstreamRetryLimitExceeded = "URX"
)
