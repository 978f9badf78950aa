package xdsproxy

import (
	"fmt"
	"math/rand/v2"
	"net/http"
	"regexp"
	"sort"
	"strings"
	"time"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
)

// Envoy's default route timeout when a route sets none.
const defaultRouteTimeout = 15 * time.Second

// routeTable is a compiled RouteConfiguration: virtual hosts looked up by Host the way Envoy does
// (exact, then longest suffix wildcard, then longest prefix wildcard, then "*").
type routeTable struct {
	name     string
	exact    map[string]*vhost
	suffixes []domainVhost // "*.example.com": longest first
	prefixes []domainVhost // "example.*": longest first
	catchAll *vhost
}

type domainVhost struct {
	part string // domain without the '*'
	vh   *vhost
}

type vhost struct {
	name   string
	routes []*route
}

type route struct {
	name string
	// Path match: exactly one of these.
	prefix        string
	path          string
	sepPrefix     string
	regex         *regexp.Regexp
	caseSensitive bool
	headers       []headerMatch

	// Action: exactly one of cluster/weighted, direct.
	cluster         string
	weighted        []weightedCluster
	weightTotal     uint32
	notFoundCode    int
	direct          *directResponse
	prefixRewrite   string
	hostRewrite     string
	timeout         time.Duration // 0: none
	retry           *retryPolicy
	hasRouteAction  bool
	hasDirectAction bool
}

type weightedCluster struct {
	name   string
	weight uint32
}

type directResponse struct {
	status int
	body   string
}

type retryPolicy struct {
	numRetries     int
	connectFailure bool // connect-failure
	reset          bool // reset
	fiveXX         bool // 5xx (includes connect failure and reset)
	gatewayError   bool // gateway-error: 502, 503, 504 (includes connect failure)
	retriableCodes map[int]bool
	perTryTimeout  time.Duration
}

type headerMatch struct {
	name    string
	invert  bool
	present bool // present_match
	match   func(v string) bool
}

// compileRouteConfig validates rc and builds its table. Errors are what Envoy would reject.
func compileRouteConfig(rc *routev3.RouteConfiguration) (*routeTable, error) {
	if err := rc.ValidateAll(); err != nil {
		return nil, fmt.Errorf("route config %q: %w", rc.GetName(), err)
	}
	t := &routeTable{name: rc.GetName(), exact: map[string]*vhost{}}
	seen := map[string]string{}
	for _, v := range rc.GetVirtualHosts() {
		vh := &vhost{name: v.GetName()}
		for i, r := range v.GetRoutes() {
			cr, err := compileRoute(r, v.GetRetryPolicy())
			if err != nil {
				return nil, fmt.Errorf("route config %q: virtual host %q: route %d: %w", rc.GetName(), v.GetName(), i, err)
			}
			vh.routes = append(vh.routes, cr)
		}
		for _, d := range v.GetDomains() {
			d = strings.ToLower(d)
			if prev, dup := seen[d]; dup {
				// Envoy: "Only unique values for domains are permitted. Duplicate entry of domain X in route Y".
				return nil, fmt.Errorf("route config %q: only unique values for domains are permitted: domain %q is in virtual hosts %q and %q", rc.GetName(), d, prev, v.GetName())
			}
			seen[d] = v.GetName()
			switch {
			case d == "*":
				t.catchAll = vh
			case strings.HasPrefix(d, "*"):
				t.suffixes = append(t.suffixes, domainVhost{part: d[1:], vh: vh})
			case strings.HasSuffix(d, "*"):
				t.prefixes = append(t.prefixes, domainVhost{part: d[:len(d)-1], vh: vh})
			default:
				t.exact[d] = vh
			}
		}
	}
	longestFirst := func(s []domainVhost) {
		sort.SliceStable(s, func(i, j int) bool { return len(s[i].part) > len(s[j].part) })
	}
	longestFirst(t.suffixes)
	longestFirst(t.prefixes)
	return t, nil
}

func compileRoute(r *routev3.Route, vhRetry *routev3.RetryPolicy) (*route, error) {
	m := r.GetMatch()
	cr := &route{name: r.GetName(), caseSensitive: true}
	if cs := m.GetCaseSensitive(); cs != nil {
		cr.caseSensitive = cs.GetValue()
	}
	switch ps := m.GetPathSpecifier().(type) {
	case *routev3.RouteMatch_Prefix:
		cr.prefix = ps.Prefix
	case *routev3.RouteMatch_Path:
		cr.path = ps.Path
	case *routev3.RouteMatch_PathSeparatedPrefix:
		cr.sepPrefix = ps.PathSeparatedPrefix
	case *routev3.RouteMatch_SafeRegex:
		re, err := regexp.Compile("^(?:" + ps.SafeRegex.GetRegex() + ")$")
		if err != nil {
			return nil, fmt.Errorf("invalid regex %q: %w", ps.SafeRegex.GetRegex(), err)
		}
		cr.regex = re
	default:
		return nil, fmt.Errorf("xdsproxy supports prefix, path, path_separated_prefix and safe_regex route matches, not %T", ps)
	}
	if !cr.caseSensitive {
		cr.prefix, cr.path, cr.sepPrefix = strings.ToLower(cr.prefix), strings.ToLower(cr.path), strings.ToLower(cr.sepPrefix)
	}
	if len(m.GetQueryParameters()) > 0 || len(m.GetCookies()) > 0 || m.GetRuntimeFraction() != nil || len(m.GetDynamicMetadata()) > 0 {
		return nil, fmt.Errorf("xdsproxy does not support query parameter, cookie, runtime or metadata route matches")
	}
	for _, h := range m.GetHeaders() {
		hm, err := compileHeaderMatch(h)
		if err != nil {
			return nil, err
		}
		cr.headers = append(cr.headers, hm)
	}
	switch a := r.GetAction().(type) {
	case *routev3.Route_Route:
		if err := compileRouteAction(cr, a.Route, vhRetry); err != nil {
			return nil, err
		}
	case *routev3.Route_DirectResponse:
		cr.hasDirectAction = true
		cr.direct = &directResponse{status: int(a.DirectResponse.GetStatus()), body: a.DirectResponse.GetBody().GetInlineString()}
	default:
		return nil, fmt.Errorf("xdsproxy supports route and direct_response actions, not %T", a)
	}
	return cr, nil
}

func compileRouteAction(cr *route, a *routev3.RouteAction, vhRetry *routev3.RetryPolicy) error {
	cr.hasRouteAction = true
	switch cs := a.GetClusterSpecifier().(type) {
	case *routev3.RouteAction_Cluster:
		cr.cluster = cs.Cluster
	case *routev3.RouteAction_WeightedClusters:
		for _, w := range cs.WeightedClusters.GetClusters() {
			wt := w.GetWeight().GetValue()
			if wt == 0 {
				continue
			}
			cr.weighted = append(cr.weighted, weightedCluster{name: w.GetName(), weight: wt})
			cr.weightTotal += wt
		}
		if cr.weightTotal == 0 {
			return fmt.Errorf("weighted clusters: total weight is zero")
		}
	default:
		return fmt.Errorf("xdsproxy supports cluster and weighted_clusters, not %T", cs)
	}
	cr.notFoundCode = http.StatusServiceUnavailable
	if a.GetClusterNotFoundResponseCode() == routev3.RouteAction_NOT_FOUND {
		cr.notFoundCode = http.StatusNotFound
	} else if a.GetClusterNotFoundResponseCode() == routev3.RouteAction_INTERNAL_SERVER_ERROR {
		cr.notFoundCode = http.StatusInternalServerError
	}
	cr.prefixRewrite = a.GetPrefixRewrite()
	cr.hostRewrite = a.GetHostRewriteLiteral()
	cr.timeout = defaultRouteTimeout
	if t := a.GetTimeout(); t != nil {
		cr.timeout = t.AsDuration()
	}
	rp := a.GetRetryPolicy()
	if rp == nil {
		rp = vhRetry
	}
	if rp != nil {
		p := &retryPolicy{numRetries: 1, retriableCodes: map[int]bool{}}
		if n := rp.GetNumRetries(); n != nil {
			p.numRetries = int(n.GetValue())
		}
		p.perTryTimeout = rp.GetPerTryTimeout().AsDuration()
		for _, on := range strings.Split(rp.GetRetryOn(), ",") {
			switch strings.TrimSpace(on) {
			case "connect-failure":
				p.connectFailure = true
			case "reset", "reset-before-request":
				p.reset = true
			case "5xx":
				p.fiveXX = true
			case "gateway-error":
				p.gatewayError = true
			case "retriable-status-codes":
				for _, c := range rp.GetRetriableStatusCodes() {
					p.retriableCodes[int(c)] = true
				}
			}
		}
		cr.retry = p
	}
	return nil
}

func compileHeaderMatch(h *routev3.HeaderMatcher) (headerMatch, error) {
	hm := headerMatch{name: h.GetName(), invert: h.GetInvertMatch()}
	var sm *matcherv3.StringMatcher
	switch s := h.GetHeaderMatchSpecifier().(type) {
	case *routev3.HeaderMatcher_ExactMatch:
		sm = &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Exact{Exact: s.ExactMatch}}
	case *routev3.HeaderMatcher_PrefixMatch:
		sm = &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Prefix{Prefix: s.PrefixMatch}}
	case *routev3.HeaderMatcher_SuffixMatch:
		sm = &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Suffix{Suffix: s.SuffixMatch}}
	case *routev3.HeaderMatcher_ContainsMatch:
		sm = &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Contains{Contains: s.ContainsMatch}}
	case *routev3.HeaderMatcher_SafeRegexMatch:
		sm = &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_SafeRegex{SafeRegex: s.SafeRegexMatch}}
	case *routev3.HeaderMatcher_StringMatch:
		sm = s.StringMatch
	case *routev3.HeaderMatcher_PresentMatch:
		hm.present = s.PresentMatch
		return hm, nil
	case nil:
		hm.present = true
		return hm, nil
	default:
		return hm, fmt.Errorf("header %q: xdsproxy does not support %T header matches", h.GetName(), s)
	}
	f, err := compileStringMatch(sm)
	if err != nil {
		return hm, fmt.Errorf("header %q: %w", h.GetName(), err)
	}
	hm.match = f
	return hm, nil
}

func compileStringMatch(sm *matcherv3.StringMatcher) (func(string) bool, error) {
	fold := func(s string) string { return s }
	if sm.GetIgnoreCase() {
		fold = strings.ToLower
	}
	switch p := sm.GetMatchPattern().(type) {
	case *matcherv3.StringMatcher_Exact:
		want := fold(p.Exact)
		return func(v string) bool { return fold(v) == want }, nil
	case *matcherv3.StringMatcher_Prefix:
		want := fold(p.Prefix)
		return func(v string) bool { return strings.HasPrefix(fold(v), want) }, nil
	case *matcherv3.StringMatcher_Suffix:
		want := fold(p.Suffix)
		return func(v string) bool { return strings.HasSuffix(fold(v), want) }, nil
	case *matcherv3.StringMatcher_Contains:
		want := fold(p.Contains)
		return func(v string) bool { return strings.Contains(fold(v), want) }, nil
	case *matcherv3.StringMatcher_SafeRegex:
		re, err := regexp.Compile("^(?:" + p.SafeRegex.GetRegex() + ")$")
		if err != nil {
			return nil, fmt.Errorf("invalid regex %q: %w", p.SafeRegex.GetRegex(), err)
		}
		return re.MatchString, nil
	default:
		return nil, fmt.Errorf("unsupported string matcher %T", p)
	}
}

// virtualHost finds the virtual host for host (already lower-cased and port-stripped as the
// listener's connection manager asks).
func (t *routeTable) virtualHost(host string) *vhost {
	if t == nil {
		return nil
	}
	if vh, ok := t.exact[host]; ok {
		return vh
	}
	// Envoy's wildcards match at least one character.
	for _, s := range t.suffixes {
		if len(host) > len(s.part) && strings.HasSuffix(host, s.part) {
			return s.vh
		}
	}
	for _, p := range t.prefixes {
		if len(host) > len(p.part) && strings.HasPrefix(host, p.part) {
			return p.vh
		}
	}
	return t.catchAll
}

// match returns the first route of vh that matches r, as Envoy does (first match wins).
func (vh *vhost) match(r *http.Request) *route {
	for _, rt := range vh.routes {
		if rt.matches(r) {
			return rt
		}
	}
	return nil
}

func (rt *route) matches(r *http.Request) bool {
	full := r.URL.RequestURI() // Envoy's prefix matches the :path header, query included
	path := r.URL.EscapedPath()
	if path == "" {
		path = "/"
	}
	if !rt.caseSensitive {
		full, path = strings.ToLower(full), strings.ToLower(path)
	}
	switch {
	case rt.regex != nil:
		if !rt.regex.MatchString(path) {
			return false
		}
	case rt.path != "":
		if path != rt.path {
			return false
		}
	case rt.sepPrefix != "":
		if path != rt.sepPrefix && !strings.HasPrefix(path, rt.sepPrefix+"/") {
			return false
		}
	default:
		if !strings.HasPrefix(full, rt.prefix) {
			return false
		}
	}
	for _, h := range rt.headers {
		vals, ok := r.Header[http.CanonicalHeaderKey(h.name)]
		if strings.EqualFold(h.name, ":authority") || strings.EqualFold(h.name, "host") {
			vals, ok = []string{r.Host}, true
		}
		var got bool
		if h.match == nil {
			got = ok == h.present
		} else {
			got = ok && h.match(strings.Join(vals, ","))
		}
		if got == h.invert {
			return false
		}
	}
	return true
}

// pickCluster returns the route's target cluster, choosing by weight for weighted clusters.
func (rt *route) pickCluster() string {
	if len(rt.weighted) == 0 {
		return rt.cluster
	}
	n := rand.Uint32N(rt.weightTotal)
	for _, w := range rt.weighted {
		if n < w.weight {
			return w.name
		}
		n -= w.weight
	}
	return rt.weighted[len(rt.weighted)-1].name
}
