// Package controlplane is meshchaos's reference sync-gated xDS control plane: informers
// (package kube) feed the model (package model); the pusher (package xds) debounces changes and
// writes Envoy resources into go-control-plane caches served over ADS (SotW and Delta); the sync
// gate (package gate) keeps /ready at 503 and refuses xDS streams until the initial state is
// completely in the model and pushed. Regression switches (package regress) re-create the
// historical bugs. See README.md for resource naming and the admin endpoints.
package controlplane

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/protobuf/encoding/protojson"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/meshchaos/meshchaos/controlplane/ca"
	"github.com/meshchaos/meshchaos/controlplane/gate"
	"github.com/meshchaos/meshchaos/controlplane/kube"
	"github.com/meshchaos/meshchaos/controlplane/metrics"
	"github.com/meshchaos/meshchaos/controlplane/model"
	"github.com/meshchaos/meshchaos/controlplane/regress"
	"github.com/meshchaos/meshchaos/controlplane/rootcert"
	"github.com/meshchaos/meshchaos/controlplane/webhook"
	"github.com/meshchaos/meshchaos/controlplane/xds"
)

// Options configure a control plane. The zero value of every duration means its default.
type Options struct {
	// Kube is the API server connection.
	Kube *rest.Config
	// XDSAddr and AdminAddr are listen addresses (default 127.0.0.1:15010 and 127.0.0.1:15014;
	// port 0 picks a free port). Never wider than asked.
	XDSAddr, AdminAddr string
	// ReadyAddr, when set, serves /ready alone on an address of its own, as istiod serves it
	// on its HTTP port 8080 (pilot/cmd/pilot-discovery/app/cmd.go:159 --httpAddr ":8080",
	// pilot/pkg/bootstrap/server.go:695) where its chart's readiness probe asks
	// (manifests/charts/istio-control/istio-discovery/templates/deployment.yaml:146-152 at
	// 2026-08). The admin port answers /ready too.
	ReadyAddr string
	// SyncGate enables the sync gate (the fix). False (or regress "ungated") serves xDS at once.
	SyncGate bool
	// MaxWait, when set, opens the gate anyway after this long, loudly. Zero (the default)
	// waits for sync however long it takes, as istiod does: its Start blocks in
	// waitForCacheSync until every cache has synced and the push context has committed the
	// initial updates, or until it is stopped (pilot/pkg/bootstrap/server.go:482 and :866-881,
	// pkg/kube/client.go:857, whose loop has no deadline; at 2026-08, the same at 2026-04). A
	// forced opening serves whatever the model holds: the incomplete config the gate exists
	// to keep from proxies.
	MaxWait time.Duration
	// DebounceQuiet and DebounceMax are the push debounce (defaults 100 ms and 10 s).
	DebounceQuiet, DebounceMax time.Duration
	Regress                    regress.Set
	// PushThrottle bounds the responses sent at once (istiod's PILOT_PUSH_THROTTLE; default 100).
	PushThrottle int
	// Generation is where CDS/LDS/RDS are generated (xds.PerScope, the default, or xds.PerProxy:
	// again for every proxy's response, as istio ≤ 1.14).
	Generation xds.Generation
	// XDSLimits bound what one xDS client can take (zero fields: xds.DefaultLimits); its
	// PushThrottle is PushThrottle when that is set.
	XDSLimits xds.Limits
	// NoRouteDefaults leaves istiod's default retry policy and route timeout 0 out of routes.
	NoRouteDefaults bool
	DomainSuffix    string
	Logger          *slog.Logger
	// Webhook serves the admission webhooks (sidecar injection, config validation); nil: none.
	Webhook *webhook.Options
	// SecureXDS serves xDS over TLS with token authentication too (istiod's 15012); nil: off.
	SecureXDS *SecureXDS
	// Namespace is the control plane's own namespace, where CASecret lives.
	Namespace string
	// CASecret names the Secret in Namespace that holds the CA every replica shares (istiod's
	// istio-ca-secret): created by the first replica, read by the others. "": a CA of this
	// process's own, in memory (replicas then serve certificates from different roots).
	CASecret string
	// BallastMaxMiB bounds the admin port's memory ballast (/debug/ballast, the chaos hook that
	// OOM-kills the process); 0 turns it off.
	BallastMaxMiB int
}

// SecureXDS configures the secure xDS port, as istiod's 15012: TLS with a serving certificate
// from the CA, every stream authenticated by the pod's ServiceAccount token (a TokenReview for
// Audience) and its proxy's namespace checked against the token's; the root certificate is
// published as a ConfigMap into the namespaces proxies run in.
type SecureXDS struct {
	// Addr is the listen address (in a pod $(POD_IP):15012).
	Addr string
	// DNSNames and IPs go into the serving certificate: what clients verify, e.g.
	// meshchaos-controlplane.NAMESPACE.svc.
	DNSNames []string
	IPs      []net.IP
	// Audience the proxies' tokens must have (default xds.DefaultAudience, istio-ca).
	Audience string
	// RootConfigMap is the ConfigMap the root certificate is published as (default
	// rootcert.DefaultConfigMap), RootNamespaces the label selector of the namespaces it is
	// written into ("": every namespace, as istiod).
	RootConfigMap, RootNamespaces string
}

// ControlPlane is a running reference control plane.
type ControlPlane struct {
	opts    Options
	log     *slog.Logger
	start   time.Time
	Metrics *metrics.Metrics
	Model   *model.Model
	Gate    *gate.Gate
	Caches  *xds.Caches
	Pusher  *xds.Pusher
	Server  *xds.Server
	source  *kube.Source
	// Webhook is the admission webhook server (nil without Options.Webhook).
	Webhook *webhook.Server
	// CA signs the secure xDS and webhook certificates (nil without either).
	CA *ca.CA

	xdsL, adminL, secureL, readyL net.Listener
	admin, ready                  *http.Server
	cancel                        context.CancelFunc
	wg                            sync.WaitGroup
}

// Start starts a control plane: it listens, starts the informers and serves; the gate opens
// later (or at once without it). Stop it with Stop.
func Start(ctx context.Context, opts Options) (*ControlPlane, error) {
	if opts.Kube == nil {
		return nil, errors.New("start control plane: no Kubernetes config (give --kubeconfig, or run in a cluster)")
	}
	if opts.XDSAddr == "" {
		opts.XDSAddr = "127.0.0.1:15010"
	}
	if opts.AdminAddr == "" {
		opts.AdminAddr = "127.0.0.1:15014"
	}
	if opts.DebounceQuiet == 0 {
		opts.DebounceQuiet = 100 * time.Millisecond
	}
	if opts.DebounceMax == 0 {
		opts.DebounceMax = 10 * time.Second
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Regress.On(regress.Ungated) {
		opts.SyncGate = false
	}
	gen, err := xds.ParseGeneration(string(opts.Generation))
	if err != nil {
		return nil, fmt.Errorf("start control plane: %w", err)
	}
	opts.Generation = gen
	cp := &ControlPlane{opts: opts, log: opts.Logger, start: time.Now(), Metrics: metrics.New(), Gate: gate.New()}
	cp.Model = model.New(model.Options{Regress: opts.Regress, DomainSuffix: opts.DomainSuffix, Logger: opts.Logger,
		OnSkip: func(s model.Skip) {
			kind, _, _ := strings.Cut(s.Object, "/")
			cp.Metrics.InputSkipped.WithLabelValues(kind, s.Reason).Inc()
		}})
	cp.Caches = xds.NewCaches(strconv.FormatInt(cp.start.UnixNano(), 36) + "-")
	cp.Pusher = xds.NewPusher(cp.Model, cp.Caches, xds.PushOptions{Quiet: opts.DebounceQuiet, Max: opts.DebounceMax,
		Regress: opts.Regress, Generate: xds.GenOptions{NoRouteDefaults: opts.NoRouteDefaults}, Generation: opts.Generation,
		Logger: opts.Logger, Metrics: cp.Metrics})
	src, err := kube.NewSource(opts.Kube, cp.Model, cp.Pusher.Enqueue, opts.Logger)
	if err != nil {
		return nil, fmt.Errorf("start control plane: %w", err)
	}
	cp.source = src
	src.OnEvent = cp.countEvent
	src.SyncedBeforeApplied = opts.Regress.On(regress.GateBeforeEvents)

	if opts.SecureXDS != nil || opts.Webhook != nil {
		if cp.CA, err = cp.loadCA(ctx); err != nil {
			return nil, fmt.Errorf("start control plane: %w", err)
		}
	}
	ctx, cp.cancel = context.WithCancel(ctx)
	fail := func(err error) (*ControlPlane, error) {
		cp.cancel()
		if cp.Server != nil {
			cp.Server.Stop() // the secure port's, if it was started
		}
		for _, l := range []net.Listener{cp.xdsL, cp.adminL, cp.secureL, cp.readyL} {
			if l != nil {
				l.Close()
			}
		}
		return nil, fmt.Errorf("start control plane: %w", err)
	}
	if cp.xdsL, err = net.Listen("tcp", opts.XDSAddr); err != nil {
		return fail(fmt.Errorf("listen for xDS on %s: %w", opts.XDSAddr, err))
	}
	if cp.adminL, err = net.Listen("tcp", opts.AdminAddr); err != nil {
		return fail(fmt.Errorf("listen for admin on %s: %w", opts.AdminAddr, err))
	}
	if opts.ReadyAddr != "" {
		if cp.readyL, err = net.Listen("tcp", opts.ReadyAddr); err != nil {
			return fail(fmt.Errorf("listen for /ready on %s: %w", opts.ReadyAddr, err))
		}
	}
	limits := opts.XDSLimits
	if opts.PushThrottle != 0 {
		limits.PushThrottle = opts.PushThrottle
	}
	cp.Server = xds.NewServerLimited(ctx, cp.Caches, cp.Pusher, cp.Gate, cp.Metrics, opts.Logger, limits)
	if opts.SecureXDS != nil {
		if err := cp.startSecure(ctx); err != nil {
			return fail(err)
		}
	}
	if opts.Webhook != nil {
		if err := cp.startWebhook(ctx); err != nil {
			return fail(err)
		}
	}
	cp.admin = &http.Server{Handler: cp.adminMux(), ReadHeaderTimeout: 10 * time.Second}

	cp.wg.Add(4)
	go func() { defer cp.wg.Done(); _ = cp.Server.Serve(cp.xdsL) }()
	go func() { defer cp.wg.Done(); _ = cp.admin.Serve(cp.adminL) }()
	go func() { defer cp.wg.Done(); cp.Pusher.Run(ctx) }()
	if cp.readyL != nil {
		mux := http.NewServeMux()
		mux.HandleFunc("/ready", cp.readyHandler)
		cp.ready = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
		cp.wg.Add(1)
		go func() { defer cp.wg.Done(); _ = cp.ready.Serve(cp.readyL) }()
	}
	if !opts.SyncGate {
		cp.log.Warn("sync gate disabled: serving xDS before the informers have synced (historical behaviour; proxies may get an incomplete config)")
		cp.openGate("sync gate disabled", false)
		cp.Pusher.Enable()
	}
	cp.source.Start(ctx)
	go func() { defer cp.wg.Done(); cp.waitSync(ctx) }()
	cp.log.Info("control plane started", "xds", cp.XDSAddr(), "secureXDS", cp.SecureXDSAddr(), "admin", cp.AdminAddr(),
		"syncGate", opts.SyncGate, "regress", opts.Regress.String(), "generation", opts.Generation)
	return cp, nil
}

// maxWaitC is the channel the gate's max wait fires on, and its stop: a channel that never
// fires without a max wait (d ≤ 0).
func maxWaitC(d time.Duration) (<-chan time.Time, func()) {
	if d <= 0 {
		return nil, func() {}
	}
	t := time.NewTimer(d)
	return t.C, func() { t.Stop() }
}

// waitSync opens the gate once the initial state is in the model and pushed, or at the max
// wait when one is set.
func (cp *ControlPlane) waitSync(ctx context.Context) {
	maxWait, stop := maxWaitC(cp.opts.MaxWait)
	defer stop()
	select {
	case <-ctx.Done():
		return
	case <-cp.source.Synced():
		hosts, eps := cp.Model.Stats()
		cp.log.Info("initial state in the model", "hosts", hosts, "endpoints", eps, "events", cp.source.Applied(),
			"after", time.Since(cp.start))
		// The initial full push, synchronously: the gate opens only once the caches hold the
		// complete config.
		cp.Pusher.Push(model.Change{Full: true, Reasons: []string{"initial"}})
		cp.Server.Synced()
		cp.openGate("informers synced and initial events processed", false)
	case <-maxWait:
		cp.log.Error("SYNC GATE FORCED OPEN: informers did not sync within the max wait; serving a possibly incomplete config",
			"maxWait", cp.opts.MaxWait, "eventsApplied", cp.source.Applied())
		cp.Pusher.Push(model.Change{Full: true, Reasons: []string{"max-wait"}})
		cp.Server.Synced()
		cp.openGate("max wait elapsed", true)
	}
}

// countEvent maps an informer event to istiod's pilot_k8s_reg_events (Kubernetes registry
// kinds) and pilot_inbound_updates (config, eds, svc, svcdelete).
func (cp *ControlPlane) countEvent(kind, event string) {
	switch kind {
	case "Service":
		cp.Metrics.K8sRegEvents.WithLabelValues("Services", event).Inc()
		if event == "delete" {
			cp.Metrics.InboundUpdates.WithLabelValues("svcdelete").Inc()
		} else {
			cp.Metrics.InboundUpdates.WithLabelValues("svc").Inc()
		}
	case "EndpointSlice":
		cp.Metrics.K8sRegEvents.WithLabelValues("EndpointSlice", event).Inc()
		cp.Metrics.InboundUpdates.WithLabelValues("eds").Inc()
	case "Pod":
		cp.Metrics.K8sRegEvents.WithLabelValues("Pods", event).Inc()
	default: // Istio config: ServiceEntry, WorkloadEntry, Sidecar, Gateway, VirtualService
		cp.Metrics.InboundUpdates.WithLabelValues("config").Inc()
	}
}

func (cp *ControlPlane) openGate(reason string, forced bool) {
	if !cp.Gate.Open(reason, forced) {
		return
	}
	cp.Metrics.SyncGateOpen.Set(1)
	if forced {
		cp.Metrics.SyncGateForced.Set(1)
	}
	cp.Metrics.TimeToReady.Set(time.Since(cp.start).Seconds())
	if cp.opts.SyncGate {
		cp.log.Info("sync gate open: serving xDS", "reason", reason, "timeToReady", time.Since(cp.start))
	}
}

// XDSAddr is the address xDS is served on.
func (cp *ControlPlane) XDSAddr() string { return cp.xdsL.Addr().String() }

// SecureXDSAddr is the address secure xDS is served on ("" without Options.SecureXDS).
func (cp *ControlPlane) SecureXDSAddr() string {
	if cp.secureL == nil {
		return ""
	}
	return cp.secureL.Addr().String()
}

// AdminAddr is the admin HTTP address.
func (cp *ControlPlane) AdminAddr() string { return cp.adminL.Addr().String() }

// ReadyAddr is the address /ready is served on alone ("" without Options.ReadyAddr).
func (cp *ControlPlane) ReadyAddr() string {
	if cp.readyL == nil {
		return ""
	}
	return cp.readyL.Addr().String()
}

// Synced is closed once the initial state is in the model (before the initial push).
func (cp *ControlPlane) Synced() <-chan struct{} { return cp.source.Synced() }

// StartedAt is when Start was called.
func (cp *ControlPlane) StartedAt() time.Time { return cp.start }

// Stop stops serving, the informers and every goroutine.
func (cp *ControlPlane) Stop() {
	cp.cancel()
	cp.Server.Stop()
	sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_ = cp.admin.Shutdown(sctx)
	if cp.ready != nil {
		_ = cp.ready.Shutdown(sctx)
	}
	cp.source.Shutdown()
	if cp.Webhook != nil {
		cp.Webhook.Stop()
	}
	cp.wg.Wait()
}

// loadCA is the CA replicas share (Options.CASecret), or one of this process's own.
func (cp *ControlPlane) loadCA(ctx context.Context) (*ca.CA, error) {
	const name = "meshchaos-controlplane-ca"
	if cp.opts.CASecret == "" {
		return ca.New(name, ca.DefaultValidity)
	}
	if cp.opts.Namespace == "" {
		return nil, errors.New("the CA Secret needs the control plane's namespace (--namespace, or POD_NAMESPACE in a pod)")
	}
	kc, err := kubernetes.NewForConfig(cp.opts.Kube)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	authority, err := ca.LoadOrCreate(ctx, kc, cp.opts.Namespace, cp.opts.CASecret, name)
	if err != nil {
		return nil, err
	}
	cp.log.Info("CA loaded", "secret", cp.opts.Namespace+"/"+cp.opts.CASecret)
	return authority, nil
}

// startSecure listens on the secure xDS port and publishes the root certificate.
func (cp *ControlPlane) startSecure(ctx context.Context) error {
	so := *cp.opts.SecureXDS
	if so.Audience == "" {
		so.Audience = xds.DefaultAudience
	}
	kc, err := kubernetes.NewForConfig(cp.opts.Kube)
	if err != nil {
		return err
	}
	pub, err := rootcert.New(rootcert.Options{Client: kc, ConfigMap: so.RootConfigMap, Selector: so.RootNamespaces,
		RootPEM: cp.CA.PEM, Logger: cp.log})
	if err != nil {
		return err
	}
	cert, err := cp.CA.Serving(so.DNSNames, so.IPs)
	if err != nil {
		return fmt.Errorf("secure xDS: %w", err)
	}
	if cp.secureL, err = net.Listen("tcp", so.Addr); err != nil {
		return fmt.Errorf("listen for secure xDS on %s: %w", so.Addr, err)
	}
	cp.Server.EnableSecure(&tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12},
		xds.TokenReviewer{Client: kc, Audience: so.Audience})
	cp.wg.Add(2)
	go func() { defer cp.wg.Done(); _ = cp.Server.ServeSecure(cp.secureL) }()
	go func() { defer cp.wg.Done(); pub.Run(ctx) }()
	return nil
}

// startWebhook serves the admission webhooks and keeps their configurations' caBundle set to
// the CA. The webhooks answer from the start, independent of the sync gate: the
// apiserver reaches them only through the Service, once the pod is ready.
func (cp *ControlPlane) startWebhook(ctx context.Context) error {
	wo := *cp.opts.Webhook
	if wo.Logger == nil {
		wo.Logger = cp.log
	}
	wo.CA = cp.CA
	dyn, err := dynamic.NewForConfig(cp.opts.Kube)
	if err != nil {
		return err
	}
	cp.Webhook, err = webhook.Start(wo, cp.Metrics.Registry)
	if err != nil {
		return err
	}
	cp.wg.Add(1)
	go func() { defer cp.wg.Done(); cp.Webhook.Run(ctx, dyn, 5*time.Second) }()
	return nil
}

// readyHandler is /ready: 503 until the sync gate opens, then 200.
func (cp *ControlPlane) readyHandler(w http.ResponseWriter, _ *http.Request) {
	open, forced, reason, at := cp.Gate.State()
	if !open {
		w.WriteHeader(http.StatusServiceUnavailable)
		fmt.Fprintf(w, "not ready: informers syncing (%s since start)\n", time.Since(cp.start).Round(time.Millisecond))
		return
	}
	fmt.Fprintf(w, "ready: %s (forced=%v) after %s\n", reason, forced, at.Sub(cp.start).Round(time.Millisecond))
}

func (cp *ControlPlane) adminMux() *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc("/ready", cp.readyHandler)
	mux.Handle("/metrics", promhttp.HandlerFor(cp.Metrics.Registry, promhttp.HandlerOpts{}))
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	mux.HandleFunc("/debug/connections", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, cp.Server.Proxies())
	})
	mux.HandleFunc("/debug/config_dump", cp.configDump)
	mux.HandleFunc("/debug/syncz", func(w http.ResponseWriter, _ *http.Request) { writeJSON(w, cp.Server.Syncz()) })
	mux.HandleFunc("/debug/push_status", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, pushStatus{PushStatus: cp.Pusher.Status(), Proxies: cp.Server.Proxies()})
	})
	mux.Handle("/debug/ballast", &ballast{max: cp.opts.BallastMaxMiB})
	return mux
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

// configDump answers /debug/config_dump?proxyID=ID (istiod's parameter; ?proxy= too): the resources of every type the connected
// proxy ID subscribed to (all of them for a wildcard subscription), as the caches hold them now,
// with the versions sent and acknowledged.
func (cp *ControlPlane) configDump(w http.ResponseWriter, r *http.Request) {
	id := r.URL.Query().Get("proxyID")
	if id == "" {
		id = r.URL.Query().Get("proxy")
	}
	if id == "" {
		http.Error(w, "give ?proxyID=NODE_ID (see /debug/syncz)", http.StatusBadRequest)
		return
	}
	node, ok := cp.Server.NodeOf(id)
	if !ok {
		http.Error(w, fmt.Sprintf("proxy %q is not connected (see /debug/connections)", id), http.StatusNotFound)
		return
	}
	var status *xds.ProxyStatus
	for _, p := range cp.Server.Proxies() {
		if p.ID == id {
			status = &p
			break
		}
	}
	out := map[string]any{"proxy": status}
	res := map[string][]json.RawMessage{}
	for short, t := range map[string]string{"cds": typeCluster, "eds": typeEndpoint, "lds": typeListener, "rds": typeRoute} {
		c := cp.Caches.ForNode(t, node)
		if c == nil {
			continue // its scope was refused (MaxScopes)
		}
		all := c.GetResources()
		var names []string
		if ts, ok := status.Types[short]; ok && len(ts.Subscribed) > 0 && !(len(ts.Subscribed) == 1 && ts.Subscribed[0] == "*") {
			names = ts.Subscribed
		} else if ok {
			names = make([]string, 0, len(all))
			for n := range all {
				names = append(names, n)
			}
		}
		sort.Strings(names)
		for _, n := range names {
			if r, ok := all[n]; ok {
				res[short] = append(res[short], marshal(r))
			}
		}
	}
	out["resources"] = res
	writeJSON(w, out)
}

func marshal(r types.Resource) json.RawMessage {
	b, err := protojson.Marshal(r)
	if err != nil {
		return json.RawMessage(strconv.Quote(err.Error()))
	}
	return b
}

const (
	typeCluster  = "type.googleapis.com/envoy.config.cluster.v3.Cluster"
	typeEndpoint = "type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment"
	typeListener = "type.googleapis.com/envoy.config.listener.v3.Listener"
	typeRoute    = "type.googleapis.com/envoy.config.route.v3.RouteConfiguration"
)

// pushStatus is /debug/push_status: the latest push and every scope, and per connected proxy
// what it was sent of which push and what it acknowledged or rejected (istiod's push status is
// per proxy too).
type pushStatus struct {
	xds.PushStatus
	Proxies []xds.ProxyStatus `json:"proxies"`
}
