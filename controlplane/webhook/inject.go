package webhook

import (
	"encoding/json"
	"fmt"
	"net"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/meshchaos/meshchaos/controlplane/rootcert"
)

// The injection contract with users: a namespace labelled NamespaceLabel=enabled gets sidecars;
// a pod chooses how its sidecar starts with StartAnnotation, opts out with InjectAnnotation
// "false", and an injected pod carries StatusAnnotation (the mode it got).
const (
	NamespaceLabel   = "meshchaos.io/inject"
	StartAnnotation  = "sidecar.meshchaos.io/start"
	InjectAnnotation = "sidecar.meshchaos.io/inject"
	StatusAnnotation = "sidecar.meshchaos.io/status"
	// ProxyContainer is the injected container's name.
	ProxyContainer = "proxy"
)

// StartMode is how the sidecar starts relative to the app, the fixes of incident 5 in the order
// history found them.
type StartMode string

const (
	// StartNone appends the proxy after the app containers: kubelet starts the app first, before
	// the proxy has its configuration (the incident; Istio before 1.7).
	StartNone StartMode = "none"
	// StartHold puts the proxy first with a postStart hook that returns once the proxy is ready:
	// kubelet starts the next container only after the hook (Istio's
	// holdApplicationUntilProxyStarts, 1.7).
	StartHold StartMode = "hold"
	// StartNative makes the proxy a Kubernetes native sidecar: an init container with
	// restartPolicy Always whose startup probe (/ready) gates the app containers.
	StartNative StartMode = "native"
)

// ParseStartMode reads a StartAnnotation value.
func ParseStartMode(s string) (StartMode, error) {
	switch m := StartMode(s); m {
	case StartNone, StartHold, StartNative:
		return m, nil
	}
	return "", fmt.Errorf("%s %q: use none, hold or native", StartAnnotation, s)
}

// Sidecar is what the injector adds: the xdsproxy image configured for this control plane.
type Sidecar struct {
	// Image and PullPolicy of the proxy.
	Image, PullPolicy string
	// XDSAddress is the control plane's xDS address (HOST:PORT) the proxies dial.
	XDSAddress string
	// AdminPort serves /ready (default 15000, as Envoy in Istio).
	AdminPort int
	// DefaultMode applies to pods without StartAnnotation (default none).
	DefaultMode StartMode
	// WaitTimeout bounds the hold hook and the native startup probe (default 60s).
	WaitTimeout time.Duration
	// RootConfigMap, when set, makes the proxy dial secure xDS (XDSAddress is then the TLS
	// port): the pod mounts this ConfigMap's root-cert.pem and a projected ServiceAccount token
	// for TokenAudience, as istio's injection template mounts istio-ca-root-cert and istio-token.
	RootConfigMap string
	// XDSServerName is the TLS server name the proxy verifies (default: XDSAddress's host).
	XDSServerName string
	// TokenAudience is the projected token's audience (default istio-ca).
	TokenAudience string
}

// Where the secure xDS files are in the proxy container, and the pod volumes that hold them
// (istio's paths; the volume names are ours so as not to clash with an istio-injected pod's).
const (
	RootCertDir    = "/var/run/secrets/istio"
	RootCertFile   = RootCertDir + "/root-cert.pem"
	TokenDir       = "/var/run/secrets/tokens"
	TokenFile      = TokenDir + "/istio-token"
	RootCertVolume = "meshchaos-ca-cert"
	TokenVolume    = "istio-token"
	// tokenExpiry is the projected token's lifetime; the kubelet refreshes it before it ends.
	tokenExpiry = 43200
)

func (s *Sidecar) defaults() {
	if s.AdminPort == 0 {
		s.AdminPort = 15000
	}
	if s.DefaultMode == "" {
		s.DefaultMode = StartNone
	}
	if s.WaitTimeout == 0 {
		s.WaitTimeout = 60 * time.Second
	}
	if s.PullPolicy == "" {
		s.PullPolicy = string(corev1.PullIfNotPresent)
	}
	if s.TokenAudience == "" {
		s.TokenAudience = "istio-ca"
	}
	if s.XDSServerName == "" {
		if host, _, err := net.SplitHostPort(s.XDSAddress); err == nil {
			s.XDSServerName = host
		}
	}
}

// patchOp is one JSON patch (RFC 6902) operation.
type patchOp struct {
	Op    string `json:"op"`
	Path  string `json:"path"`
	Value any    `json:"value,omitempty"`
}

// Inject returns the JSON patch that adds the sidecar to pod, and the mode; skip is non-empty
// (and the patch nil) when the pod is left alone, saying why.
func (s Sidecar) Inject(pod *corev1.Pod) (patch []byte, mode StartMode, skip string, err error) {
	s.defaults()
	if pod.Annotations[InjectAnnotation] == "false" {
		return nil, "", InjectAnnotation + "=false", nil
	}
	if _, done := pod.Annotations[StatusAnnotation]; done {
		return nil, "", "already injected", nil
	}
	for _, c := range append(append([]corev1.Container{}, pod.Spec.InitContainers...), pod.Spec.Containers...) {
		if c.Name == ProxyContainer {
			return nil, "", "has a " + ProxyContainer + " container", nil
		}
	}
	mode = s.DefaultMode
	if v, ok := pod.Annotations[StartAnnotation]; ok {
		if mode, err = ParseStartMode(v); err != nil {
			return nil, "", "", err
		}
	}
	proxy := s.container(pod)
	containers, inits := pod.Spec.Containers, pod.Spec.InitContainers
	switch mode {
	case StartNone:
		containers = append(append([]corev1.Container{}, containers...), proxy)
	case StartHold:
		proxy.Lifecycle = &corev1.Lifecycle{PostStart: &corev1.LifecycleHandler{Exec: &corev1.ExecAction{Command: s.waitCommand()}}}
		containers = append([]corev1.Container{proxy}, containers...)
	case StartNative:
		always := corev1.ContainerRestartPolicyAlways
		proxy.RestartPolicy = &always
		proxy.StartupProbe = s.readyProbe(int32(max(1, s.WaitTimeout/time.Second)))
		// First among the init containers: the app's own init containers have the mesh too.
		inits = append([]corev1.Container{proxy}, inits...)
	}
	ann := map[string]string{}
	for k, v := range pod.Annotations {
		ann[k] = v
	}
	ann[StatusAnnotation] = string(mode)
	ops := []patchOp{{Op: "add", Path: "/spec/containers", Value: containers}, {Op: "add", Path: "/metadata/annotations", Value: ann}}
	if mode == StartNative {
		ops = append(ops, patchOp{Op: "add", Path: "/spec/initContainers", Value: inits})
	}
	if s.RootConfigMap != "" {
		// The whole list, the pod's own volumes first: "add" replaces a member that exists, and
		// creates it when the pod has no volumes.
		vols := append(append([]corev1.Volume{}, pod.Spec.Volumes...), s.volumes()...)
		ops = append(ops, patchOp{Op: "add", Path: "/spec/volumes", Value: vols})
	}
	patch, err = json.Marshal(ops)
	return patch, mode, "", err
}

// container is the proxy container, configured as the gateway's (workloads/manifests) is.
func (s Sidecar) container(pod *corev1.Pod) corev1.Container {
	cluster := pod.Labels["app"]
	if cluster == "" {
		cluster = pod.Namespace
	}
	field := func(name, path string) corev1.EnvVar {
		return corev1.EnvVar{Name: name, ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: path}}}
	}
	// Kubernetes expands $(VAR) in args from the container's env: Istio's node id.
	args := []string{"--xds", s.XDSAddress,
		"--node-id", "sidecar~$(POD_IP)~$(POD_NAME).$(POD_NAMESPACE)~$(POD_NAMESPACE).svc.cluster.local",
		"--cluster", cluster, "--admin", fmt.Sprintf(":%d", s.AdminPort)}
	var mounts []corev1.VolumeMount
	if s.RootConfigMap != "" {
		args = append(args, "--xds-root-cert", RootCertFile, "--xds-token", TokenFile, "--xds-server-name", s.XDSServerName)
		mounts = []corev1.VolumeMount{{Name: RootCertVolume, MountPath: RootCertDir, ReadOnly: true},
			{Name: TokenVolume, MountPath: TokenDir, ReadOnly: true}}
	}
	return corev1.Container{
		Name: ProxyContainer, Image: s.Image, ImagePullPolicy: corev1.PullPolicy(s.PullPolicy),
		Args:           args,
		VolumeMounts:   mounts,
		Env:            []corev1.EnvVar{field("POD_NAME", "metadata.name"), field("POD_NAMESPACE", "metadata.namespace"), field("POD_IP", "status.podIP")},
		Ports:          []corev1.ContainerPort{{Name: "http-admin", ContainerPort: int32(s.AdminPort)}},
		ReadinessProbe: s.readyProbe(3),
	}
}

// volumes are the secure xDS files: the root ConfigMap and a projected token for the audience.
func (s Sidecar) volumes() []corev1.Volume {
	return []corev1.Volume{
		{Name: RootCertVolume, VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
			LocalObjectReference: corev1.LocalObjectReference{Name: s.RootConfigMap},
			Items:                []corev1.KeyToPath{{Key: rootcert.Key, Path: rootcert.Key}}}}},
		{Name: TokenVolume, VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
			Sources: []corev1.VolumeProjection{{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{
				Audience: s.TokenAudience, ExpirationSeconds: ptr.To[int64](tokenExpiry), Path: "istio-token"}}}}}},
	}
}

func (s Sidecar) readyProbe(failures int32) *corev1.Probe {
	return &corev1.Probe{
		ProbeHandler:  corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/ready", Port: intstr.FromInt32(int32(s.AdminPort))}},
		PeriodSeconds: 1, FailureThreshold: failures,
	}
}

// waitCommand is the hold hook: the image's own `wait` polls /ready.
func (s Sidecar) waitCommand() []string {
	return []string{"/meshchaos", "workload", "xdsproxy", "wait",
		"--admin", fmt.Sprintf("127.0.0.1:%d", s.AdminPort), "--timeout", s.WaitTimeout.String()}
}
