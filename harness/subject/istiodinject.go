package subject

import "encoding/json"

// istiod's injection contract as meshchaos renders its chart (hack/istiod/values.yaml): the
// injection template that injects meshchaos's proxy, and the pod annotations istiod reads.
const (
	// IstiodProxyTemplate is the injection template (sidecarInjectorWebhook.templates) that
	// injects xdsproxy in place of istio-proxy.
	IstiodProxyTemplate = "meshchaos"
	// istiodProxyContainer is the name istiod gives the proxy (and orders containers by).
	istiodProxyContainer = "istio-proxy"
)

var _ ProxyInjector = (*Istiod)(nil)

// ProxyAnnotations implements ProxyInjector: the template "meshchaos" with the image, and
// the start order in istiod's own terms: native sidecars by sidecar.istio.io/nativeSidecar
// (istiod's default is on, for nodes of Kubernetes ≥ 1.33, so none and hold turn it off), hold
// by holdApplicationUntilProxyStarts in the pod's proxy.istio.io/config. The pod's probes stay
// its own (no pilot-agent to rewrite them to).
func (i *Istiod) ProxyAnnotations(mode, image string) map[string]string {
	a := map[string]string{
		"inject.istio.io/templates":              IstiodProxyTemplate,
		"sidecar.istio.io/proxyImage":            image,
		"sidecar.istio.io/rewriteAppHTTPProbers": "false",
		"sidecar.istio.io/nativeSidecar":         "false",
	}
	switch mode {
	case "native":
		a["sidecar.istio.io/nativeSidecar"] = "true"
	case "hold":
		b, _ := json.Marshal(map[string]bool{"holdApplicationUntilProxyStarts": true})
		a["proxy.istio.io/config"] = string(b)
	}
	return a
}

// ProxyContainer implements ProxyInjector.
func (i *Istiod) ProxyContainer() string { return istiodProxyContainer }
