// Package webhook is the reference control plane's admission webhooks, as istiod serves them: a
// mutating sidecar injector (failure policy Fail: no pod of an injected namespace starts without
// its sidecar) and a validating webhook for ServiceEntries and WorkloadEntries (failure policy
// Ignore). Both are served over TLS with a certificate from the control plane's own CA, whose
// certificate the control plane patches into the webhook configurations' caBundle.
package webhook

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	admissionv1 "k8s.io/api/admission/v1"
	admregv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"

	"github.com/meshchaos/meshchaos/controlplane/ca"
)

// Paths the webhook configurations point at.
const (
	InjectPath   = "/inject"
	ValidatePath = "/validate"
)

// Options configure the webhook server.
type Options struct {
	// Addr is the HTTPS listen address (istiod's port is 15017).
	Addr string
	// DNSNames and IPs go into the serving certificate: the Service name the apiserver dials
	// (<name>.<namespace>.svc), or the host of a URL clientConfig.
	DNSNames []string
	IPs      []net.IP
	// Sidecar is what the injector adds.
	Sidecar Sidecar
	// MutatingConfig and ValidatingConfig name the webhook configurations whose caBundle the
	// control plane keeps set to its CA ("" leaves that one alone).
	MutatingConfig, ValidatingConfig string
	// CA signs the serving certificate and goes into the caBundle; nil: a CA of this process's
	// own, in memory. The control plane gives the CA its replicas share (ca.LoadOrCreate).
	CA     *ca.CA
	Logger *slog.Logger
}

// Server serves both webhooks.
type Server struct {
	opts    Options
	CA      *ca.CA
	metrics *Metrics
	ln      net.Listener
	srv     *http.Server
	log     *slog.Logger
}

// Start listens and serves; Run (patching the caBundle) is separate so the server answers
// before the bundle is in place.
func Start(o Options, reg prometheus.Registerer) (*Server, error) {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	o.Sidecar.defaults()
	if o.Sidecar.Image == "" || o.Sidecar.XDSAddress == "" {
		return nil, errors.New("webhook: the sidecar needs an image and the xDS address (--inject-image, --inject-xds-address)")
	}
	authority := o.CA
	if authority == nil {
		var err error
		if authority, err = ca.New("meshchaos-controlplane-ca", ca.DefaultValidity); err != nil {
			return nil, fmt.Errorf("webhook: %w", err)
		}
	}
	cert, err := authority.Serving(o.DNSNames, o.IPs)
	if err != nil {
		return nil, fmt.Errorf("webhook: %w", err)
	}
	m, err := NewMetrics(reg)
	if err != nil {
		return nil, err
	}
	s := &Server{opts: o, CA: authority, metrics: m, log: o.Logger}
	s.ln, err = net.Listen("tcp", o.Addr)
	if err != nil {
		return nil, fmt.Errorf("webhook: listen on %s: %w", o.Addr, err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc(InjectPath, s.review("inject", s.inject))
	mux.HandleFunc(ValidatePath, s.review("validate", s.validate))
	s.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second,
		TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}}
	go func() { _ = s.srv.ServeTLS(s.ln, "", "") }()
	return s, nil
}

// Addr is the address served.
func (s *Server) Addr() string { return s.ln.Addr().String() }

// Stop stops serving.
func (s *Server) Stop() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_ = s.srv.Shutdown(ctx)
}

// review decodes an AdmissionReview, answers it with handle's response, and times it.
func (s *Server) review(name string, handle func(*admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		defer func() { s.metrics.Duration.WithLabelValues(name).Observe(time.Since(start).Seconds()) }()
		body, err := io.ReadAll(io.LimitReader(r.Body, 8<<20))
		var rev admissionv1.AdmissionReview
		if err == nil {
			err = json.Unmarshal(body, &rev)
		}
		if err == nil && rev.Request == nil {
			err = errors.New("no request in the AdmissionReview")
		}
		if err != nil {
			if name == "inject" {
				s.metrics.InjectRequests.Inc()
				s.metrics.InjectFailures.Inc()
			}
			http.Error(w, "bad AdmissionReview: "+err.Error(), http.StatusBadRequest)
			return
		}
		resp := handle(rev.Request)
		resp.UID = rev.Request.UID
		out := admissionv1.AdmissionReview{TypeMeta: rev.TypeMeta, Response: resp}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(out)
	}
}

func deny(err error) *admissionv1.AdmissionResponse {
	return &admissionv1.AdmissionResponse{Allowed: false, Result: &metav1.Status{Status: metav1.StatusFailure, Message: err.Error(), Reason: metav1.StatusReasonBadRequest, Code: http.StatusBadRequest}}
}

func (s *Server) inject(req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
	s.metrics.InjectRequests.Inc()
	var pod corev1.Pod
	if err := json.Unmarshal(req.Object.Raw, &pod); err != nil {
		s.metrics.InjectFailures.Inc()
		return deny(fmt.Errorf("sidecar injection: decode pod: %w", err))
	}
	if pod.Namespace == "" {
		pod.Namespace = req.Namespace
	}
	patch, mode, skip, err := s.opts.Sidecar.Inject(&pod)
	switch {
	case err != nil:
		s.metrics.InjectFailures.Inc()
		s.log.Warn("sidecar injection refused", "namespace", req.Namespace, "pod", pod.GenerateName+pod.Name, "err", err)
		return deny(fmt.Errorf("sidecar injection: %w", err))
	case skip != "":
		s.metrics.InjectSkips.Inc()
		return &admissionv1.AdmissionResponse{Allowed: true}
	}
	s.metrics.InjectSuccesses.Inc()
	s.log.Debug("sidecar injected", "namespace", req.Namespace, "pod", pod.GenerateName+pod.Name, "mode", mode)
	pt := admissionv1.PatchTypeJSONPatch
	return &admissionv1.AdmissionResponse{Allowed: true, Patch: patch, PatchType: &pt}
}

// Run keeps the webhook configurations' caBundle set to the CA until ctx ends: at once, and
// again whenever someone re-applies a configuration without it (istiod's webhook patcher).
func (s *Server) Run(ctx context.Context, dyn dynamic.Interface, every time.Duration) {
	for {
		for _, c := range []struct {
			name string
			gvr  schema.GroupVersionResource
		}{{s.opts.MutatingConfig, admregv1.SchemeGroupVersion.WithResource("mutatingwebhookconfigurations")},
			{s.opts.ValidatingConfig, admregv1.SchemeGroupVersion.WithResource("validatingwebhookconfigurations")}} {
			if c.name == "" {
				continue
			}
			changed, err := s.patchCABundle(ctx, dyn.Resource(c.gvr), c.name)
			if err != nil {
				s.log.Warn("webhook caBundle not patched (retrying)", "configuration", c.name, "err", err)
			} else if changed {
				s.log.Info("webhook caBundle patched", "configuration", c.name)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(every):
		}
	}
}

// patchCABundle adds the CA to every webhook's caBundle in the named configuration with one
// JSON patch (guarded by the resourceVersion read); changed is false when all already had it.
// The CA is added, not set: replicas that share the CA Secret add the same one, but a replica
// with a CA of its own (no Secret, or one from before the Secret) must not be locked out by the
// others, who would otherwise replace each other's CA and re-patch each other forever.
func (s *Server) patchCABundle(ctx context.Context, api dynamic.ResourceInterface, name string) (changed bool, err error) {
	c, err := api.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return false, err
	}
	hooks, _, _ := unstructured.NestedSlice(c.Object, "webhooks")
	ops := []patchOp{{Op: "test", Path: "/metadata/resourceVersion", Value: c.GetResourceVersion()}}
	for i, h := range hooks {
		got, _, _ := unstructured.NestedString(h.(map[string]any), "clientConfig", "caBundle")
		cur, _ := base64.StdEncoding.DecodeString(got)
		if want, ok := withCA(cur, s.CA.PEM); !ok {
			ops = append(ops, patchOp{Op: "add", Path: fmt.Sprintf("/webhooks/%d/clientConfig/caBundle", i), Value: base64.StdEncoding.EncodeToString(want)})
		}
	}
	if len(ops) == 1 {
		return false, nil
	}
	patch, err := json.Marshal(ops)
	if err != nil {
		return false, err
	}
	_, err = api.Patch(ctx, name, types.JSONPatchType, patch, metav1.PatchOptions{})
	return err == nil, err
}

// maxBundleCAs bounds a caBundle: the CAs of replicas that restarted are dropped, oldest first.
// With the shared CA (ca.LoadOrCreate) the bundle holds one CA however many replicas run.
const maxBundleCAs = 4

// withCA returns bundle with ca appended (keeping the newest maxBundleCAs certificates), and
// whether bundle already held ca.
func withCA(bundle, ca []byte) ([]byte, bool) {
	var certs [][]byte
	for rest := bundle; ; {
		var b *pem.Block
		if b, rest = pem.Decode(rest); b == nil {
			break
		}
		enc := pem.EncodeToMemory(b)
		if bytes.Equal(bytes.TrimSpace(enc), bytes.TrimSpace(ca)) {
			return bundle, true
		}
		certs = append(certs, enc)
	}
	certs = append(certs, ca)
	if len(certs) > maxBundleCAs {
		certs = certs[len(certs)-maxBundleCAs:]
	}
	return bytes.Join(certs, nil), false
}
