package subject

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"

	"github.com/meshchaos/meshchaos/harness/cluster"
	"github.com/meshchaos/meshchaos/harness/kube"
)

// Descriptor is an external control plane's descriptor file (--cp external:FILE): everything
// the harness needs to install, find, reach, measure and remove a control plane it knows
// nothing else about. docs/controlplane-descriptor.md is its schema; examples/controlplanes
// holds examples.
type Descriptor struct {
	// Install renders the control plane's objects; they are applied server-side. "none": the
	// control plane is installed already and the harness only finds it (attached.go).
	Install Install `json:"install"`
	// Remove is "delete" (default: delete what Install rendered, in reverse order) or "keep"
	// (leave it; e.g. the cluster is thrown away anyway; required with install none).
	Remove string `json:"remove,omitempty"`
	// Namespace holds its pods; Selector (equality-based, "app=istiod") finds them; Deployment
	// is the Deployment the harness places (node, limits, replicas) and waits for; Container
	// serves xDS.
	Namespace  string `json:"namespace"`
	Selector   string `json:"selector"`
	Deployment string `json:"deployment"`
	Container  string `json:"container"`
	// XDS is where our proxies dial: a Service's port (plaintext gRPC).
	XDS ServicePort `json:"xds"`
	// SecureXDS, when set, is its xDS over TLS with token authentication (istiod's 15012),
	// which runs use by default.
	SecureXDS *SecurePort `json:"secureXDS,omitempty"`
	// Admin is the pods' HTTP port for metrics and pprof.
	Admin Admin `json:"admin"`
	// Ready bounds the wait for the Deployment to be available (default 3m).
	Ready *Ready `json:"ready,omitempty"`
	// Ballast, when the control plane has a hook that grows its own heap, lets memory faults
	// use it instead of the generic memory hog.
	Ballast *BallastHook `json:"ballast,omitempty"`
	// Metrics maps measures (subject.Measures, e.g. full-pushes) to its metric names and labels;
	// an unmapped measure is not measured (checks that need it give verdict error).
	Metrics map[Measure]Metric `json:"metrics"`
}

// Install is one way to render the control plane's objects, or none.
type Install struct {
	// None says the control plane is installed already: nothing is rendered or applied (YAML
	// install: none).
	None bool `json:"-"`
	// Manifests is a directory of YAML/JSON files (recursively, in lexical order), relative to
	// the descriptor's directory.
	Manifests string `json:"manifests,omitempty"`
	// Command is an argv run in the descriptor's directory whose standard output is the YAML
	// (helm template …, kustomize build …).
	Command []string `json:"command,omitempty"`
}

// UnmarshalJSON reads install as the string none or as an object with manifests or command;
// unknown fields are errors, as everywhere in a descriptor.
func (i *Install) UnmarshalJSON(b []byte) error {
	var word string
	if json.Unmarshal(b, &word) == nil {
		if word != "none" {
			return fmt.Errorf("install %q: want none (attach to an installed control plane), {manifests: DIR} or {command: [ARGV]}", word)
		}
		*i = Install{None: true}
		return nil
	}
	type plain Install // without this method
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var p plain
	if err := dec.Decode(&p); err != nil {
		return fmt.Errorf("install: %w", err)
	}
	*i = Install(p)
	return nil
}

// ServicePort is a port of a Service in the control plane's namespace.
type ServicePort struct {
	Service string `json:"service"`
	Port    int    `json:"port"`
}

// SecurePort is a Service's port serving xDS over TLS: proxies verify it against the root
// certificate in RootConfigMap (key root-cert.pem; the control plane writes it into the
// workloads' namespaces), expect ServerName in its certificate (default
// SERVICE.NAMESPACE.svc) and send a ServiceAccount token for Audience (default istio-ca).
type SecurePort struct {
	Service       string `json:"service"`
	Port          int    `json:"port"`
	ServerName    string `json:"serverName,omitempty"`
	RootConfigMap string `json:"rootConfigMap"`
	Audience      string `json:"audience,omitempty"`
}

// Admin is a pod's HTTP admin endpoint.
type Admin struct {
	Port        int    `json:"port"`
	MetricsPath string `json:"metricsPath"`
	// PprofPath is the pprof base, /debug/pprof ("" none), under Port or under PprofPort.
	PprofPath string `json:"pprofPath,omitempty"`
	// PprofPort is the port of the pprof server when it is not Port (istiod: its debug port
	// 8080, metrics on 15014).
	PprofPort int `json:"pprofPort,omitempty"`
}

// Ready is how long the control plane may take to become available.
type Ready struct {
	Timeout string `json:"timeout"`
}

// BallastHook is a control plane's own memory-growth hook: Path, under the admin port, with
// {mib} standing for the size to grow to, is POSTed.
type BallastHook struct {
	Path string `json:"path"`
}

// External is a control plane described by a descriptor file.
type External struct {
	file    string // as given to --cp
	dir     string // the descriptor's directory
	d       Descriptor
	match   map[string]string
	timeout time.Duration
	xds     string
	secure  SecureXDS // with the descriptor's secureXDS, after Deploy
	applied []byte    // what Install rendered, for Remove
}

// SecureXDS implements SecureServer: the descriptor's secureXDS, after Deploy.
func (e *External) SecureXDS() (SecureXDS, bool) { return e.secure, e.d.SecureXDS != nil }

// externalBallaster is an External whose descriptor names a ballast hook: only then is it a
// Ballaster, so chaos falls back to the generic memory hog for the others.
type externalBallaster struct{ *External }

var (
	_ ControlPlane = (*External)(nil)
	_ Remover      = (*External)(nil)
	_ SecureServer = (*External)(nil)
	_ Ballaster    = externalBallaster{}
)

// metricName is a Prometheus metric name.
var metricName = regexp.MustCompile(`^[a-zA-Z_:][a-zA-Z0-9_:]*$`)

// LoadExternal reads and checks a descriptor: a strict parse (unknown or repeated fields are
// errors) and every rule of the schema, each error one line naming the field.
func LoadExternal(file string) (ControlPlane, error) {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("control plane external:%s: %s", file, fmt.Sprintf(format, args...))
	}
	if file == "" {
		return nil, errors.New("control plane external: name the descriptor file, e.g. external:examples/controlplanes/reference.yaml")
	}
	if i := strings.LastIndex(file, ":"); i >= 0 {
		return nil, fmt.Errorf("control plane external:%s: regression switches (%q) belong to the reference control plane; an external control plane has none: use external:FILE", file, file[i+1:])
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, bad("%v", err)
	}
	var d Descriptor
	if err := yaml.UnmarshalStrict(b, &d); err != nil {
		msg := err.Error()
		// sigs.k8s.io/yaml goes through JSON: its wrapping says nothing to a user.
		for _, p := range []string{"error unmarshaling JSON: ", "while decoding JSON: ", "json: "} {
			msg = strings.TrimPrefix(msg, p)
		}
		return nil, bad("%s (schema: docs/controlplane-descriptor.md)", strings.ReplaceAll(msg, "\n", "; "))
	}
	e, err := newExternal(file, filepath.Dir(file), d)
	if err != nil {
		return nil, bad("%v", err)
	}
	return e.withHooks(), nil
}

// withHooks is e as the control plane its descriptor describes: installed or not, with a
// ballast hook or not.
func (e *External) withHooks() ControlPlane {
	switch {
	case e.d.Install.None && e.d.Ballast != nil:
		return installedBallaster{&Installed{External: e}}
	case e.d.Install.None:
		return &Installed{External: e}
	case e.d.Ballast != nil:
		return externalBallaster{e}
	}
	return e
}

// newExternal checks descriptor d, whose relative paths are relative to dir; name is how --cp
// names the control plane after "external:".
func newExternal(name, dir string, d Descriptor) (*External, error) {
	e := &External{file: name, dir: dir, d: d, timeout: 3 * time.Minute}
	if err := e.check(); err != nil {
		return nil, err
	}
	return e, nil
}

// check enforces the schema's rules beyond the field types.
func (e *External) check() error {
	d := &e.d
	switch {
	case d.Install.None && d.Remove != "keep":
		return fmt.Errorf("remove %q: with install none the run installs nothing and must delete nothing: say remove: keep", d.Remove)
	case d.Install.None:
	case d.Install.Manifests == "" && len(d.Install.Command) == 0:
		return errors.New("install: give manifests (a directory), command (an argv whose output is YAML) or none (attach to an installed control plane)")
	case d.Install.Manifests != "" && len(d.Install.Command) > 0:
		return errors.New("install: give manifests or command, not both")
	case d.Remove != "" && d.Remove != "delete" && d.Remove != "keep":
		return fmt.Errorf("remove %q: use delete (the default) or keep", d.Remove)
	case d.Namespace == "":
		return errors.New("namespace: required (where the control plane's pods run)")
	case d.Deployment == "":
		return errors.New("deployment: required (the Deployment the harness places and waits for)")
	case d.Container == "":
		return errors.New("container: required (the container that serves xDS)")
	case d.XDS.Service == "":
		return errors.New("xds.service: required (the Service our proxies dial)")
	case !validPort(d.XDS.Port):
		return fmt.Errorf("xds.port %d: want 1-65535", d.XDS.Port)
	case d.SecureXDS != nil && (d.SecureXDS.Service == "" || !validPort(d.SecureXDS.Port)):
		return fmt.Errorf("secureXDS: want service and port 1-65535 (got %q, %d)", d.SecureXDS.Service, d.SecureXDS.Port)
	case d.SecureXDS != nil && d.SecureXDS.RootConfigMap == "":
		return errors.New("secureXDS.rootConfigMap: required (the ConfigMap with root-cert.pem the control plane writes into each namespace, e.g. istio-ca-root-cert)")
	case !validPort(d.Admin.Port):
		return fmt.Errorf("admin.port %d: want 1-65535", d.Admin.Port)
	case !strings.HasPrefix(d.Admin.MetricsPath, "/"):
		return fmt.Errorf("admin.metricsPath %q: want a path starting with /, e.g. /metrics", d.Admin.MetricsPath)
	case d.Admin.PprofPath != "" && d.Admin.PprofPath != "/debug/pprof":
		return fmt.Errorf("admin.pprofPath %q: want /debug/pprof (Go's net/http/pprof), or leave it out", d.Admin.PprofPath)
	case d.Admin.PprofPort != 0 && (!validPort(d.Admin.PprofPort) || d.Admin.PprofPath == ""):
		return fmt.Errorf("admin.pprofPort %d: want 1-65535, with admin.pprofPath", d.Admin.PprofPort)
	case d.Ballast != nil && (!strings.HasPrefix(d.Ballast.Path, "/") || !strings.Contains(d.Ballast.Path, "{mib}")):
		return fmt.Errorf("ballast.path %q: want a path starting with / holding {mib} (the size to grow to)", d.Ballast.Path)
	}
	if d.Install.Manifests != "" {
		if fi, err := os.Stat(filepath.Join(e.dir, d.Install.Manifests)); err != nil || !fi.IsDir() {
			return fmt.Errorf("install.manifests %q: not a directory beside the descriptor (render the reference's with 'meshchaos controlplane manifests --out DIR')", d.Install.Manifests)
		}
	}
	sel, err := labels.ConvertSelectorToLabelsMap(d.Selector)
	if err != nil || len(sel) == 0 {
		return fmt.Errorf("selector %q: want equality-based labels, e.g. app=istiod", d.Selector)
	}
	e.match = sel
	if d.Ready != nil {
		t, err := time.ParseDuration(d.Ready.Timeout)
		if err != nil || t <= 0 {
			return fmt.Errorf("ready.timeout %q: want a duration, e.g. 3m", d.Ready.Timeout)
		}
		e.timeout = t
	}
	known := map[Measure]bool{}
	for _, m := range Measures {
		known[m] = true
	}
	for _, m := range sortedMeasures(d.Metrics) {
		if !known[m] {
			return fmt.Errorf("metrics: unknown measure %q; known: %s", m, joinMeasures(Measures))
		}
		if !metricName.MatchString(d.Metrics[m].Name) {
			return fmt.Errorf("metrics.%s.name %q: want a Prometheus metric name", m, d.Metrics[m].Name)
		}
	}
	return nil
}

func validPort(p int) bool { return p > 0 && p < 65536 }

func sortedMeasures(m map[Measure]Metric) []Measure {
	out := make([]Measure, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

func joinMeasures(ms []Measure) string {
	s := make([]string, len(ms))
	for i, m := range ms {
		s[i] = string(m)
	}
	return strings.Join(s, ", ")
}

// Name implements ControlPlane: as --cp named it, so a summary's controlPlane runs it again.
func (e *External) Name() string { return "external:" + e.file }

// Render returns the objects Install describes, as YAML.
func (e *External) Render(ctx context.Context) ([]byte, error) {
	if e.d.Install.None {
		return nil, fmt.Errorf("%s: install none: the control plane is installed already, nothing to render", e.file)
	}
	if len(e.d.Install.Command) > 0 {
		cmd := exec.CommandContext(ctx, e.d.Install.Command[0], e.d.Install.Command[1:]...)
		cmd.Dir = e.dir
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			return nil, fmt.Errorf("install command %s: %w: %s", strings.Join(e.d.Install.Command, " "), err, strings.TrimSpace(stderr.String()))
		}
		return out, nil
	}
	root := filepath.Join(e.dir, e.d.Install.Manifests)
	var files []string
	err := filepath.WalkDir(root, func(path string, de fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		switch filepath.Ext(path) {
		case ".yaml", ".yml", ".json":
			if !de.IsDir() {
				files = append(files, path)
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("install manifests %s: %w", root, err)
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("install manifests %s: no .yaml, .yml or .json file", root)
	}
	sort.Strings(files) // WalkDir's order is lexical already; say so
	var all bytes.Buffer
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		all.WriteString("\n---\n")
		all.Write(b)
	}
	return all.Bytes(), nil
}

// Deploy implements ControlPlane: render, place the Deployment as asked, apply, wait until it
// is available, find the xDS Service's address.
func (e *External) Deploy(ctx context.Context, c cluster.Cluster, p Placement) error {
	y, err := e.Render(ctx)
	if err != nil {
		return err
	}
	objs, err := kube.Decode(y)
	if err != nil {
		return fmt.Errorf("install of %s: %w", e.file, err)
	}
	found := false
	for _, o := range objs {
		found = found || (o.GetKind() == "Deployment" && o.GetName() == e.d.Deployment && o.GetNamespace() == e.d.Namespace)
	}
	if !found {
		return fmt.Errorf("%s: install renders no Deployment %s/%s (the descriptor's namespace and deployment)", e.file, e.d.Namespace, e.d.Deployment)
	}
	place, err := e.placement(p)
	if err != nil {
		return err
	}
	if p.PriorityClass != "" {
		y = append(append(priorityClassYAML(p.PriorityClass), "---\n"...), y...)
	}
	e.applied = y
	if err := apply(ctx, c, p, y, place); err != nil {
		return fmt.Errorf("deploy %s: %w", e.file, err)
	}
	cs, err := kubernetes.NewForConfig(c.RESTConfig())
	if err != nil {
		return err
	}
	if err := kube.WaitDeploymentReady(ctx, cs, e.d.Namespace, e.d.Deployment, e.timeout); err != nil {
		return err
	}
	return e.findXDS(ctx, cs, e.file)
}

// findXDS finds the xDS Services' addresses (plaintext, and the secure port when the
// descriptor has one); name says whose in errors.
func (e *External) findXDS(ctx context.Context, cs kubernetes.Interface, name string) error {
	d := e.d
	svc, err := cs.CoreV1().Services(d.Namespace).Get(ctx, d.XDS.Service, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("%s: the xDS Service %s/%s (xds.service): %w", name, d.Namespace, d.XDS.Service, err)
	}
	e.xds = net.JoinHostPort(svc.Spec.ClusterIP, strconv.Itoa(d.XDS.Port))
	sp := d.SecureXDS
	if sp == nil {
		return nil
	}
	if sp.Service != d.XDS.Service {
		if svc, err = cs.CoreV1().Services(d.Namespace).Get(ctx, sp.Service, metav1.GetOptions{}); err != nil {
			return fmt.Errorf("%s: the secure xDS Service %s/%s (secureXDS.service): %w", name, d.Namespace, sp.Service, err)
		}
	}
	e.secure = SecureXDS{Address: net.JoinHostPort(svc.Spec.ClusterIP, strconv.Itoa(sp.Port)), ServerName: sp.ServerName,
		RootConfigMap: sp.RootConfigMap, Audience: sp.Audience}
	if e.secure.ServerName == "" {
		e.secure.ServerName = sp.Service + "." + d.Namespace + ".svc"
	}
	if e.secure.Audience == "" {
		e.secure.Audience = DefaultAudience
	}
	return nil
}

// placement is the Apply mutator that places the descriptor's Deployment as p asks: node,
// limits, QoS, replicas, priority.
func (e *External) placement(p Placement) (kube.Mutator, error) {
	muts := []kube.Mutator{kube.CPULimit(e.d.Container, p.CPULimit), kube.MemoryLimit(e.d.Container, p.MemoryLimit)}
	if p.Node > 0 && len(p.Nodes) == 0 {
		muts = append(muts, kube.PinToNode(cluster.NodeLabel, fmt.Sprint(p.Node)))
	}
	more, err := placementMutators(p, e.match, e.d.Container)
	if err != nil {
		return nil, fmt.Errorf("control plane placement: %w", err)
	}
	return onlyDeployment(e.d.Namespace, e.d.Deployment, append(muts, more...)), nil
}

// onlyDeployment applies muts to the named Deployment alone: a chart's other workloads (a
// gateway, a job) keep their own placement.
func onlyDeployment(ns, name string, muts []kube.Mutator) kube.Mutator {
	return func(o *unstructured.Unstructured) error {
		if o.GetKind() != "Deployment" || o.GetName() != name || o.GetNamespace() != ns {
			return nil
		}
		for _, m := range muts {
			if err := m(o); err != nil {
				return err
			}
		}
		return nil
	}
}

// Remove implements Remover: delete what Deploy applied, unless the descriptor says keep.
func (e *External) Remove(ctx context.Context, c cluster.Cluster) error {
	if e.d.Remove == "keep" || e.applied == nil {
		return nil
	}
	return kube.Delete(ctx, c.RESTConfig(), e.applied, c.Name())
}

// Namespace implements ControlPlane.
func (e *External) Namespace() string { return e.d.Namespace }

// Selector implements ControlPlane.
func (e *External) Selector() string { return e.d.Selector }

// Container implements ControlPlane.
func (e *External) Container() string { return e.d.Container }

// XDSAddress implements ControlPlane.
func (e *External) XDSAddress() string { return e.xds }

// AdminURL implements ControlPlane.
func (e *External) AdminURL(pod *corev1.Pod) string {
	return "http://" + net.JoinHostPort(pod.Status.PodIP, strconv.Itoa(e.d.Admin.Port))
}

// MetricsPath implements ControlPlane.
func (e *External) MetricsPath() string { return e.d.Admin.MetricsPath }

// PprofURL implements ControlPlane.
func (e *External) PprofURL(pod *corev1.Pod) string {
	switch {
	case e.d.Admin.PprofPath == "":
		return ""
	case e.d.Admin.PprofPort != 0:
		return "http://" + net.JoinHostPort(pod.Status.PodIP, strconv.Itoa(e.d.Admin.PprofPort))
	}
	return e.AdminURL(pod)
}

// Metrics implements ControlPlane.
func (e *External) Metrics() map[Measure]Metric {
	out := make(map[Measure]Metric, len(e.d.Metrics))
	for k, v := range e.d.Metrics {
		out[k] = v
	}
	return out
}

// BallastURL implements Ballaster with the descriptor's hook.
func (e externalBallaster) BallastURL(pod *corev1.Pod, mib int) string {
	return e.AdminURL(pod) + strings.ReplaceAll(e.d.Ballast.Path, "{mib}", strconv.Itoa(mib))
}
