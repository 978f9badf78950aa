// Package manifests renders the Kubernetes manifests of meshchaos's workloads: a gateway (proxy
// Deployment + Service), echo backends, an app with a sidecar proxy in both start orders (plain:
// app first, the incident; hold: proxy first with a postStart hook that waits for /ready, the
// fix), adsload and the proxyless gRPC client. The same templates serve every substrate: the Substrate sets image names,
// pull policy and which proxy runs — xdsproxy on the local substrate, Envoy on kind — behind the
// same admin port and /ready, so experiments observe both alike.
//
// Values.SecureXDS makes the proxies, adsload and the gRPC client reach the control plane's secure port as
// Istio's sidecars reach istiod's 15012: the control plane's root ConfigMap and a projected
// ServiceAccount token mounted where Istio's sidecar template mounts them, and the flags that
// read them. Envoy is refused in that mode (see SecureXDS).
package manifests

import (
	"bytes"
	"embed"
	"encoding/json"
	"fmt"
	"net"
	"strconv"
	"strings"
	"text/template"
	"time"

	"github.com/meshchaos/meshchaos/images"
)

//go:embed *.yaml.tmpl
var files embed.FS

var tmpl = template.Must(template.New("").Funcs(template.FuncMap{
	"json": func(v any) (string, error) {
		b, err := json.Marshal(v)
		return string(b), err
	},
	// The mount paths and the token's lifetime, for the volumes of SecureXDS.
	"rootCertDir":   func() string { return RootCertDir },
	"tokenDir":      func() string { return TokenDir },
	"tokenLifetime": func() int { return TokenLifetime },
	"indent": func(n int, s string) string {
		pad := strings.Repeat(" ", n)
		return pad + strings.ReplaceAll(strings.TrimRight(s, "\n"), "\n", "\n"+pad)
	},
	"image": func(string) string { return "" }, // replaced per render
}).ParseFS(files, "*.yaml.tmpl"))

// Proxy is the data plane a substrate runs.
type Proxy string

const (
	// XDSProxy is meshchaos's Go proxy (local substrate).
	XDSProxy Proxy = "xdsproxy"
	// Envoy is real Envoy (kind and existing clusters).
	Envoy Proxy = "envoy"
)

// DefaultEnvoyImage is the Envoy image Kind uses unless told otherwise.
const DefaultEnvoyImage = "envoyproxy/envoy:v1.34-latest"

// Substrate is what differs between substrates.
type Substrate struct {
	Name string
	// PullPolicy of every meshchaos image.
	PullPolicy string
	// ImageRef names the image of a catalog entry (images).
	ImageRef func(name string) string
	// Proxy is the gateway and sidecar; EnvoyImage is used when it is Envoy.
	Proxy      Proxy
	EnvoyImage string
}

// Local is the local substrate: images imported into containerd, never pulled; xdsproxy.
func Local() Substrate {
	return Substrate{Name: "local", PullPolicy: "Never", ImageRef: images.Ref, Proxy: XDSProxy}
}

// Kind is a kind cluster: meshchaos images loaded with `kind load image-archive` (present, so
// IfNotPresent never pulls them), real Envoy as gateway and sidecar.
func Kind(envoyImage string) Substrate {
	if envoyImage == "" {
		envoyImage = DefaultEnvoyImage
	}
	return Substrate{Name: "kind", PullPolicy: "IfNotPresent", ImageRef: images.Ref, Proxy: Envoy, EnvoyImage: envoyImage}
}

// Values parameterize a manifest; zero fields take the defaults noted.
type Values struct {
	Substrate Substrate
	Namespace string // default "default"
	Name      string // default: the manifest's name
	Replicas  int    // default 1
	// XDSAddress is the control plane's ADS address (HOST:PORT) for proxies and adsload.
	XDSAddress string
	// Delta makes proxies use delta ADS.
	Delta bool
	// Port is the container port: the gateway's listener (default 80: the reference control
	// plane's listeners are 0.0.0.0:<service port>), echo's and the app's server and adsload's
	// metrics (default 8080). ServicePort is the Service port (default 80).
	Port, ServicePort int
	// AdminPort is the proxy's admin port (default 15000, as Envoy in Istio).
	AdminPort int

	// Echo: EchoEnv sets ECHO_* variables (ECHO_READY_FOR, ECHO_UNREADY_FOR, ECHO_LATENCY,
	// ECHO_ERROR_RATE, ECHO_ERROR_CODE).
	EchoEnv map[string]string

	// App: HoldApp selects the hold variant. The app calls Dependency (a Host) through the sidecar
	// listener on 127.0.0.1:OutboundPort — the dependency's service port, where the control
	// plane puts the outbound listener (default 80) — Attempts times (default 1).
	HoldApp      bool
	Dependency   string
	OutboundPort int
	Attempts     int
	// WaitTimeout bounds the hold hook (default 60s).
	WaitTimeout time.Duration
	// StartMode, when set, leaves the sidecar to the control plane's injection webhook and asks
	// it for this start mode (none, hold, native); HoldApp is then ignored. The namespace must
	// be labelled for injection.
	StartMode string
	// InjectAnnotations are the pod annotations that ask the injector for the proxy in
	// StartMode (subject.ProxyInjector.ProxyAnnotations); default: the reference injector's
	// start annotation, sidecar.meshchaos.io/start=StartMode.
	InjectAnnotations map[string]string
	// RetryInterval and RetryMaxInterval make the app retry its start-up call with exponential
	// backoff (the resilient app), Attempts times.
	RetryInterval, RetryMaxInterval time.Duration

	// Adsload: Clients (default 100); Track, when set, makes every client record its receipts of
	// the clusters whose name contains it (adsload --track). FirstClient is the index of the
	// pod's first client (adsload --first-client): each pod of a fleet spread over several
	// names clients of its own.
	Clients     int
	Track       string
	FirstClient int

	// GRPC client (workloads/grpcclient): Clients xDS clients (default 100) with one
	// xds:///HOST:PORT channel per GRPCTargets entry, GRPCRate RPCs per second in all; Port
	// serves its /stats and /ready.
	GRPCTargets []string
	GRPCRate    int

	// SecureXDS, when set, puts the proxies (gateway, the app's sidecar) and adsload on the
	// control plane's secure port (XDSAddress should name it, e.g. :15012). The injected app
	// variant and echo ignore it.
	SecureXDS *SecureXDS
}

// SecureXDS is how a pod reaches a secure xDS port, as Istio's sidecar template sets it up: the
// control plane's root ConfigMap mounted at RootCertDir, a projected ServiceAccount token
// (the pod's ServiceAccount, in its namespace) at TokenDir, and the proxy told to use them.
//
// Envoy (kind) is refused: in Istio it reaches istiod through pilot-agent's local socket, never
// port 15012 itself, and its bootstrap could carry the token only as fixed gRPC initial
// metadata, which Envoy never reads again after kubelet rotates the token.
type SecureXDS struct {
	// ServerName is the name the control plane's certificate carries (its Service name, e.g.
	// istiod.istio-system.svc); default: the host of XDSAddress.
	ServerName string
	// RootConfigMap is the ConfigMap, in the pod's namespace, whose root-cert.pem is the
	// control plane's root: istio-ca-root-cert (istiod's, the default) or
	// meshchaos-ca-root-cert (the reference's).
	RootConfigMap string
	// Audience is the token's audience (default istio-ca, what istiod checks).
	Audience string
}

// Where Istio's sidecar template mounts the root and the token; the flags point at them.
const (
	RootCertDir   = "/var/run/secrets/istio"
	RootCertFile  = RootCertDir + "/root-cert.pem"
	TokenDir      = "/var/run/secrets/tokens"
	TokenFile     = TokenDir + "/istio-token"
	TokenLifetime = 43200 // seconds, as Istio's template; kubelet renews at 80 %
)

// Names lists the manifests Render knows.
var Names = []string{"gateway", "echo", "app", "adsload", "grpc-client"}

// data is what the templates see.
type data struct {
	Values
	PullPolicy     string
	ProxyImage     string
	ProxyArgs      []string
	ProxyPorts     []int
	WaitCommand    []string
	EnvoyBootstrap string
	AppArgs        []string
	// XDSCredArgs are the flags of SecureXDS (empty without it).
	XDSCredArgs []string
	// GRPCArgs are the gRPC client's arguments.
	GRPCArgs []string
}

// Render returns the YAML (several documents) of manifest name.
func Render(name string, v Values) ([]byte, error) {
	known := false
	for _, n := range Names {
		known = known || n == name
	}
	if !known {
		return nil, fmt.Errorf("unknown manifest %q (known: %s)", name, strings.Join(Names, ", "))
	}
	if v.Substrate.ImageRef == nil {
		return nil, fmt.Errorf("manifest %s: no substrate set (use manifests.Local() or manifests.Kind(...))", name)
	}
	def := func(p *int, d int) {
		if *p == 0 {
			*p = d
		}
	}
	if v.Namespace == "" {
		v.Namespace = "default"
	}
	if v.Name == "" {
		v.Name = name
	}
	def(&v.Replicas, 1)
	if name == "gateway" {
		def(&v.Port, 80)
	}
	def(&v.Port, 8080)
	def(&v.ServicePort, 80)
	def(&v.AdminPort, 15000)
	def(&v.OutboundPort, 80)
	def(&v.Attempts, 1)
	def(&v.Clients, 100)
	if v.WaitTimeout == 0 {
		v.WaitTimeout = 60 * time.Second
	}
	d := data{Values: v, PullPolicy: v.Substrate.PullPolicy}
	d.HoldApp = name == "app" && v.HoldApp // only the app's sidecar holds anything
	injected := name == "app" && v.StartMode != ""
	if injected && d.InjectAnnotations == nil {
		d.InjectAnnotations = map[string]string{"sidecar.meshchaos.io/start": v.StartMode}
	}
	if sx := v.SecureXDS; sx != nil {
		switch {
		case name == "echo" || injected:
			d.SecureXDS = nil // no xDS client of ours in these pods
		case sx.RootConfigMap == "":
			return nil, fmt.Errorf("manifest %s: SecureXDS.RootConfigMap (the control plane's root ConfigMap, e.g. istio-ca-root-cert) is required", name)
		case name != "adsload" && name != "grpc-client" && v.Substrate.Proxy == Envoy:
			return nil, fmt.Errorf("manifest %s: SecureXDS is not supported with Envoy (substrate %s): Envoy cannot read a rotating token file; use xdsproxy (local) or plaintext", name, v.Substrate.Name)
		default:
			c := *sx
			if c.Audience == "" {
				c.Audience = "istio-ca"
			}
			d.SecureXDS = &c
			d.XDSCredArgs = []string{"--xds-root-cert", RootCertFile, "--xds-token", TokenFile}
			if c.ServerName != "" {
				d.XDSCredArgs = append(d.XDSCredArgs, "--xds-server-name", c.ServerName)
			}
		}
	}
	switch name {
	case "gateway", "app", "adsload", "grpc-client":
		if injected {
			break // the injector knows the control plane's address
		}
		if _, _, err := net.SplitHostPort(v.XDSAddress); err != nil {
			return nil, fmt.Errorf("manifest %s: XDSAddress %q: want HOST:PORT of the control plane", name, v.XDSAddress)
		}
	}
	switch name {
	case "gateway":
		if err := d.proxy("router", map[string]string{"app": v.Name, "meshchaos.io/role": "gateway"}); err != nil {
			return nil, err
		}
		d.ProxyPorts = []int{v.Port}
	case "grpc-client":
		if err := d.grpcClient(); err != nil {
			return nil, err
		}
	case "app":
		if v.Dependency == "" {
			return nil, fmt.Errorf("manifest app: Dependency (the Host the app calls at start) is required")
		}
		if !injected {
			if err := d.proxy("sidecar", map[string]string{"app": v.Name, "meshchaos.io/role": "app"}); err != nil {
				return nil, err
			}
		}
		d.AppArgs = []string{
			"--target", fmt.Sprintf("http://127.0.0.1:%d/", v.OutboundPort), "--host", v.Dependency,
			"--attempts", strconv.Itoa(v.Attempts), "--addr", fmt.Sprintf(":%d", v.Port),
			"--termination-log", "/dev/termination-log",
		}
		if v.RetryInterval > 0 {
			d.AppArgs = append(d.AppArgs, "--interval", v.RetryInterval.String(), "--max-interval", v.RetryMaxInterval.String())
		}
	}
	t, err := tmpl.Clone()
	if err != nil {
		return nil, err
	}
	t.Funcs(template.FuncMap{"image": v.Substrate.ImageRef})
	var buf bytes.Buffer
	if err := t.ExecuteTemplate(&buf, name+".yaml.tmpl", d); err != nil {
		return nil, fmt.Errorf("render %s: %w", name, err)
	}
	return buf.Bytes(), nil
}

// IstioVersion is the Istio version the proxies say they are in their node metadata: istiod
// generates for a proxy what its version understands.
const IstioVersion = "1.31.0"

// nodeMetadata is the node metadata an Istio proxy (pilot-agent) sends, as far as the control
// planes read it: its namespace, pod, IPs and labels (istiod selects Gateways and Sidecars by
// them), cluster and mesh, workload and version. Kubernetes expands $(VAR) from the env.
func nodeMetadata(name string, labels map[string]string) map[string]any {
	l := map[string]any{}
	for k, v := range labels {
		l[k] = v
	}
	return map[string]any{
		"NAMESPACE": "$(POD_NAMESPACE)", "NAME": "$(POD_NAME)", "INSTANCE_IPS": "$(POD_IP)",
		"LABELS": l, "CLUSTER_ID": "Kubernetes", "MESH_ID": "cluster.local",
		"WORKLOAD_NAME": name, "ISTIO_VERSION": IstioVersion,
	}
}

// proxy fills the proxy container for role ("sidecar" or "router", Istio's node types) of a pod
// with labels.
func (d *data) proxy(role string, labels map[string]string) error {
	// Kubernetes expands $(VAR) in args from the container's env.
	nodeID := role + "~$(POD_IP)~$(POD_NAME).$(POD_NAMESPACE)~$(POD_NAMESPACE).svc.cluster.local"
	md, err := json.Marshal(nodeMetadata(d.Name, labels))
	if err != nil {
		return err
	}
	admin := fmt.Sprintf("127.0.0.1:%d", d.AdminPort)
	switch d.Substrate.Proxy {
	case XDSProxy:
		d.ProxyImage = d.Substrate.ImageRef("xdsproxy")
		d.ProxyArgs = []string{"--xds", d.XDSAddress, "--node-id", nodeID, "--cluster", d.Name, "--admin", fmt.Sprintf(":%d", d.AdminPort),
			"--metadata", string(md)}
		if d.Delta {
			d.ProxyArgs = append(d.ProxyArgs, "--delta")
		}
		d.ProxyArgs = append(d.ProxyArgs, d.XDSCredArgs...)
		// The image's entrypoint is /meshchaos workload xdsproxy; the hook runs its wait.
		d.WaitCommand = []string{"/meshchaos", "workload", "xdsproxy", "wait", "--admin", admin, "--timeout", d.WaitTimeout.String()}
	case Envoy:
		d.ProxyImage = d.Substrate.EnvoyImage
		d.ProxyArgs = []string{"-c", "/etc/envoy/bootstrap.yaml", "--service-node", nodeID, "--service-cluster", d.Name, "--log-level", "warn"}
		b, err := envoyBootstrap(d.XDSAddress, d.AdminPort, d.Delta)
		if err != nil {
			return err
		}
		d.EnvoyBootstrap = b
		// The Envoy image has bash but no meshchaos: poll /ready over bash's /dev/tcp.
		secs := int(d.WaitTimeout.Seconds())
		d.WaitCommand = []string{"/bin/bash", "-c", fmt.Sprintf(
			`for i in $(seq %d); do exec 3<>/dev/tcp/127.0.0.1/%d && printf 'GET /ready HTTP/1.0\r\n\r\n' >&3 && head -n1 <&3 | grep -q ' 200 ' && exit 0; sleep 0.2; done; exit 1`,
			secs*5, d.AdminPort)}
	default:
		return fmt.Errorf("unknown proxy %q", d.Substrate.Proxy)
	}
	return nil
}

// grpcClient fills the gRPC client's arguments: its xDS clients speak as proxyless gRPC pods
// of its namespace (Istio's sidecar~IP~POD.NS~NS.svc.cluster.local node id, one per client, the
// pod's metadata; the client adds GENERATOR=grpc).
func (d *data) grpcClient() error {
	if len(d.GRPCTargets) == 0 || d.GRPCRate < 1 {
		return fmt.Errorf("manifest grpc-client: GRPCTargets (HOST:PORT to call) and GRPCRate (RPCs per second) are required")
	}
	md, err := json.Marshal(nodeMetadata(d.Name, map[string]string{"app": d.Name, "meshchaos.io/role": "grpc-client"}))
	if err != nil {
		return err
	}
	d.GRPCArgs = []string{"--xds", d.XDSAddress, "--node-id", "sidecar~$(POD_IP)~$(POD_NAME)-%d.$(POD_NAMESPACE)~$(POD_NAMESPACE).svc.cluster.local",
		"--metadata", string(md), "--clients", strconv.Itoa(d.Clients), "--rate", strconv.Itoa(d.GRPCRate), "--listen", fmt.Sprintf(":%d", d.Port)}
	for _, t := range d.GRPCTargets {
		d.GRPCArgs = append(d.GRPCArgs, "--target", t)
	}
	d.GRPCArgs = append(d.GRPCArgs, d.XDSCredArgs...)
	return nil
}

// envoyBootstrap is Envoy's bootstrap for ADS to xds, like Istio's: CDS and LDS over ADS,
// waiting for them without timeout, node sent once per stream.
func envoyBootstrap(xds string, adminPort int, delta bool) (string, error) {
	host, port, err := net.SplitHostPort(xds)
	if err != nil {
		return "", err
	}
	api := "GRPC"
	if delta {
		api = "DELTA_GRPC"
	}
	return fmt.Sprintf(`admin:
  address: {socket_address: {address: 0.0.0.0, port_value: %d}}
dynamic_resources:
  ads_config:
    api_type: %s
    transport_api_version: V3
    set_node_on_first_message_only: true
    grpc_services: [{envoy_grpc: {cluster_name: xds}}]
  cds_config: {ads: {}, initial_fetch_timeout: 0s, resource_api_version: V3}
  lds_config: {ads: {}, initial_fetch_timeout: 0s, resource_api_version: V3}
static_resources:
  clusters:
  - name: xds
    type: STRICT_DNS
    connect_timeout: 1s
    typed_extension_protocol_options:
      envoy.extensions.upstreams.http.v3.HttpProtocolOptions:
        "@type": type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions
        explicit_http_config: {http2_protocol_options: {}}
    load_assignment:
      cluster_name: xds
      endpoints: [{lb_endpoints: [{endpoint: {address: {socket_address: {address: %s, port_value: %s}}}}]}]
`, adminPort, api, host, port), nil
}
