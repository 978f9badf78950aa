// Package apiserver runs a real etcd and kube-apiserver: on loopback for integration tests and
// out-of-cluster tools, or inside a network namespace as the control plane of a local cluster.
package apiserver

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/meshchaos/meshchaos/harness/cluster/bins"
	"github.com/meshchaos/meshchaos/harness/cluster/internal/pki"
	"github.com/meshchaos/meshchaos/harness/cluster/internal/proc"
	"github.com/meshchaos/meshchaos/harness/netns"
	"github.com/meshchaos/meshchaos/internal/prereq"
)

// Options configure Start. The zero value runs on 127.0.0.1 with free ports in a temp dir.
type Options struct {
	// Dir holds etcd's data, the PKI, logs and the kubeconfig. Empty: a new temp dir, removed by Stop.
	Dir string
	// Netns runs both processes inside this network namespace (a path), bound to BindIP.
	Netns string
	// BindIP is the address etcd and the apiserver listen on (default 127.0.0.1).
	BindIP net.IP
	// Port and EtcdPort; 0 picks free loopback ports (only without Netns; with it 6443 and 2379).
	Port, EtcdPort int
	// ServiceCIDR is the Service cluster IP range (default 10.96.0.0/16).
	ServiceCIDR string
	// ExtraSANs are added to the serving certificate (e.g. the host-side forwarder address).
	ExtraSANs []net.IP
	// ExtraArgs are appended to kube-apiserver's flags.
	ExtraArgs []string
	// BinDir is searched first for etcd and kube-apiserver (see bins.Finder); empty: the usual places.
	BinDir string
	// Logf reports progress; nil is silent.
	Logf func(format string, args ...any)
}

// Server is a running etcd + kube-apiserver.
type Server struct {
	opts    Options
	pki     pki.Files
	tempDir bool
	etcd    *proc.Process
	api     *proc.Process
	url     string
	kubecfg string
	// kubeletCert and kubeletKey are the apiserver's client certificate for kubelets.
	kubeletCert, kubeletKey string
}

// Start starts etcd and kube-apiserver and returns once /readyz answers ok.
func Start(ctx context.Context, o Options) (*Server, error) {
	paths, err := bins.Finder{Dir: o.BinDir}.All(bins.Etcd, bins.KubeAPIServer)
	if err != nil {
		return nil, err
	}
	s := &Server{opts: o}
	if s.opts.Dir == "" {
		d, err := os.MkdirTemp("", "meshchaos-apiserver-")
		if err != nil {
			return nil, err
		}
		s.opts.Dir, s.tempDir = d, true
	}
	if s.opts.BindIP == nil {
		s.opts.BindIP = net.IPv4(127, 0, 0, 1)
	}
	if s.opts.ServiceCIDR == "" {
		s.opts.ServiceCIDR = "10.96.0.0/16"
	}
	if s.opts.Logf == nil {
		s.opts.Logf = func(string, ...any) {}
	}
	if err := s.pickPorts(); err != nil {
		return nil, err
	}
	firstSvcIP, err := firstServiceIP(s.opts.ServiceCIDR)
	if err != nil {
		return nil, err
	}
	ips := append([]net.IP{net.IPv4(127, 0, 0, 1), s.opts.BindIP, firstSvcIP}, s.opts.ExtraSANs...)
	dns := []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"}
	if s.pki, err = pki.Write(filepath.Join(s.opts.Dir, "pki"), ips, dns); err != nil {
		return nil, fmt.Errorf("write PKI: %w", err)
	}
	if err := s.writeKubeletClient(); err != nil {
		return nil, err
	}
	s.url = "https://" + net.JoinHostPort(s.opts.BindIP.String(), strconv.Itoa(s.opts.Port))
	ok := false
	defer func() {
		if !ok {
			_ = s.Stop()
		}
	}()
	if err := s.startEtcd(ctx, paths[bins.Etcd]); err != nil {
		return nil, err
	}
	if err := s.startAPIServer(ctx, paths[bins.KubeAPIServer]); err != nil {
		return nil, err
	}
	s.kubecfg = filepath.Join(s.opts.Dir, "kubeconfig")
	if err := s.WriteKubeconfig(s.kubecfg, s.url); err != nil {
		return nil, err
	}
	ok = true
	return s, nil
}

// StartForTest starts a server for an integration test and stops it at the end of the test.
// It skips the test only when MESHCHAOS_SKIP_INTEGRATION=1; missing binaries fail it.
func StartForTest(t testing.TB) *Server {
	t.Helper()
	prereq.Integration(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s, err := Start(ctx, Options{Logf: t.Logf})
	if err != nil {
		t.Fatalf("start kube-apiserver: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Stop(); err != nil {
			t.Errorf("stop kube-apiserver: %v", err)
		}
	})
	return s
}

func (s *Server) pickPorts() error {
	if s.opts.Netns != "" {
		if s.opts.Port == 0 {
			s.opts.Port = 6443
		}
		if s.opts.EtcdPort == 0 {
			s.opts.EtcdPort = 2379
		}
		return nil
	}
	for p, ip := range map[*int]net.IP{&s.opts.Port: s.opts.BindIP, &s.opts.EtcdPort: etcdIP} {
		if *p != 0 {
			continue
		}
		port, err := FreePort(ip)
		if err != nil {
			return err
		}
		*p = port
	}
	return nil
}

// FreePort asks the kernel for a free TCP port on ip.
func FreePort(ip net.IP) (int, error) {
	l, err := net.Listen("tcp", net.JoinHostPort(ip.String(), "0"))
	if err != nil {
		return 0, fmt.Errorf("find a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func (s *Server) startEtcd(ctx context.Context, path string) error {
	// etcd listens on loopback only: the apiserver is its one client, in the same network
	// namespace, and etcd serves plaintext with no authentication — on the hub's address every
	// pod could read and write the cluster's whole state past the apiserver.
	ip := etcdIP.String()
	client := s.etcdURL()
	peerPort := s.opts.EtcdPort + 1
	if s.opts.Netns == "" {
		var err error
		if peerPort, err = FreePort(etcdIP); err != nil {
			return err
		}
	}
	peer := "http://" + net.JoinHostPort(ip, strconv.Itoa(peerPort))
	s.opts.Logf("starting etcd on %s", client)
	var err error
	s.etcd, err = proc.Start(proc.Spec{
		Name: "etcd", Path: path, Dir: s.opts.Dir, Netns: s.opts.Netns,
		Args: []string{
			"--name=default", "--data-dir=" + filepath.Join(s.opts.Dir, "etcd"),
			"--listen-client-urls=" + client, "--advertise-client-urls=" + client,
			"--listen-peer-urls=" + peer, "--initial-advertise-peer-urls=" + peer,
			"--initial-cluster=default=" + peer,
			// A test cluster's data is disposable; fsync dominates etcd latency on shared disks.
			"--unsafe-no-fsync", "--log-level=warn", "--quota-backend-bytes=4294967296",
		},
	})
	if err != nil {
		return err
	}
	return s.waitHTTP(ctx, s.etcd, client+"/health", nil, 60*time.Second)
}

// etcdIP is where etcd listens: loopback (of the network namespace both run in).
var etcdIP = net.IPv4(127, 0, 0, 1)

// etcdURL is etcd's client URL.
func (s *Server) etcdURL() string {
	return "http://" + net.JoinHostPort(etcdIP.String(), strconv.Itoa(s.opts.EtcdPort))
}

func (s *Server) startAPIServer(ctx context.Context, path string) error {
	s.opts.Logf("starting kube-apiserver on %s", s.url)
	args := []string{
		"--etcd-servers=" + s.etcdURL(),
		"--bind-address=" + s.opts.BindIP.String(), "--advertise-address=" + s.opts.BindIP.String(),
		"--secure-port=" + strconv.Itoa(s.opts.Port),
		"--tls-cert-file=" + s.pki.ServingCert, "--tls-private-key-file=" + s.pki.ServingKey,
		"--client-ca-file=" + s.pki.CACert,
		// Kubelets authenticate and authorize who calls them (pod logs, exec, port-forward):
		// the apiserver calls them with this certificate.
		"--kubelet-client-certificate=" + s.kubeletCert, "--kubelet-client-key=" + s.kubeletKey,
		// Node and RBAC, as every real cluster: a kubelet (a client certificate as
		// system:node:NAME, see WriteClientKubeconfig) reaches only its own Node and the
		// Secrets, ConfigMaps and tokens of the pods bound to it, and NodeRestriction keeps
		// it from changing other nodes and their pods; kube-proxy is system:kube-proxy; the
		// harness and the hub's components use the admin token (system:masters); every
		// pod's ServiceAccount gets only what its manifests grant. So a missing rule in ours
		// fails here as on a user's cluster, and a pod, or whoever takes a node's
		// credentials, cannot do more than a user's cluster would let it. The admission
		// plugins are the defaults plus NodeRestriction.
		"--token-auth-file=" + s.pki.TokenFile, "--authorization-mode=Node,RBAC",
		"--enable-admission-plugins=NodeRestriction",
		"--service-cluster-ip-range=" + s.opts.ServiceCIDR,
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file=" + s.pki.SAPub, "--service-account-signing-key-file=" + s.pki.SAKey,
		"--cert-dir=" + filepath.Join(s.opts.Dir, "pki"),
		"--allow-privileged=true", "--shutdown-delay-duration=0s", "--profiling=false",
		// Priority and fairness queues requests; experiments want the apiserver out of the way.
		"--enable-priority-and-fairness=false",
		"--event-ttl=30m", "--v=1",
		// A namespace's or a CRD's objects are deleted by DeleteCollection, one object after
		// another with the default single worker: thousands of ServiceEntries took longer to
		// delete than a cluster takes to come up (a pooled cluster's give-back, harness/cluster/reuse).
		"--delete-collection-workers=4",
	}
	var err error
	s.api, err = proc.Start(proc.Spec{Name: "kube-apiserver", Path: path, Dir: s.opts.Dir, Netns: s.opts.Netns,
		Args: append(args, s.opts.ExtraArgs...)})
	if err != nil {
		return err
	}
	return s.waitHTTP(ctx, s.api, s.url+"/readyz", s.tlsConfig(), 120*time.Second)
}

// writeKubeletClient writes the client certificate the apiserver presents to kubelets, in the
// PKI directory, the key readable by its owner only. It is in system:masters because the
// apiserver proxies logs, exec and port-forward for users it has already authorized: the
// kubelet's own authorization (a SubjectAccessReview) must then allow whatever they asked.
func (s *Server) writeKubeletClient() error {
	cert, key, err := s.pki.IssueClient("kube-apiserver-kubelet-client", "system:masters")
	if err != nil {
		return fmt.Errorf("kubelet client certificate: %w", err)
	}
	dir := filepath.Dir(s.pki.CACert)
	s.kubeletCert = filepath.Join(dir, "apiserver-kubelet-client.crt")
	s.kubeletKey = filepath.Join(dir, "apiserver-kubelet-client.key")
	for path, b := range map[string][]byte{s.kubeletCert: cert, s.kubeletKey: key} {
		if err := os.WriteFile(path, b, 0o600); err != nil {
			return fmt.Errorf("kubelet client certificate: %w", err)
		}
	}
	return nil
}

func (s *Server) tlsConfig() *tls.Config {
	pool := x509.NewCertPool()
	if b, err := os.ReadFile(s.pki.CACert); err == nil {
		pool.AppendCertsFromPEM(b)
	}
	return &tls.Config{RootCAs: pool}
}

// waitHTTP polls url until it answers 200, the process exits, or the timeout passes.
func (s *Server) waitHTTP(ctx context.Context, p *proc.Process, url string, tc *tls.Config, timeout time.Duration) error {
	tr := &http.Transport{TLSClientConfig: tc}
	if s.opts.Netns != "" {
		tr.DialContext = netns.Dialer(s.opts.Netns)
	}
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr, Timeout: 2 * time.Second}
	deadline := time.Now().Add(timeout)
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		req.Header.Set("Authorization", "Bearer "+s.pki.Token)
		resp, err := c.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			err = fmt.Errorf("HTTP %d", resp.StatusCode)
		}
		if e := p.ExitError(); e != nil {
			return e
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not ready after %s (%v); last log lines:\n%s", p.Spec.Name, timeout, err, p.Tail(15))
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("wait for %s: %w", p.Spec.Name, ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// CPU is the user + system CPU time etcd and kube-apiserver have used so far (for benchmarks
// that account where a figure's CPU went).
func (s *Server) CPU() (etcd, apiserver time.Duration, err error) {
	if etcd, err = procCPU(s.etcd.Pid()); err != nil {
		return 0, 0, err
	}
	apiserver, err = procCPU(s.api.Pid())
	return etcd, apiserver, err
}

// procCPU is process pid's user + system CPU time (/proc/PID/stat, in clock ticks of 1/100 s,
// Linux's USER_HZ).
func procCPU(pid int) (time.Duration, error) {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name (field 2) may hold spaces; the fields after its closing ")" are fixed:
	// state is field 3, utime 14, stime 15.
	f := strings.Fields(string(raw[bytes.LastIndexByte(raw, ')')+1:]))
	if len(f) < 13 {
		return 0, fmt.Errorf("parse /proc/%d/stat: %q", pid, raw)
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("parse /proc/%d/stat: %q", pid, raw)
	}
	return time.Duration(utime+stime) * 10 * time.Millisecond, nil
}

// URL is the apiserver's address as seen from its own network namespace.
func (s *Server) URL() string { return s.url }

// CACertPath is the CA that signed the serving certificate (kube-root-ca.crt for pods).
func (s *Server) CACertPath() string { return s.pki.CACert }

// SAKeyPath is the service-account signing key (for kube-controller-manager).
func (s *Server) SAKeyPath() string { return s.pki.SAKey }

// KubeconfigPath is a kubeconfig for URL.
func (s *Server) KubeconfigPath() string { return s.kubecfg }

// RESTConfig is a client config for URL; with a namespace it dials through it.
func (s *Server) RESTConfig() *rest.Config {
	cfg := &rest.Config{
		Host: s.url, BearerToken: s.pki.Token,
		TLSClientConfig: rest.TLSClientConfig{CAFile: s.pki.CACert},
		QPS:             500, Burst: 1000,
	}
	if s.opts.Netns != "" {
		cfg.Dial = netns.Dialer(s.opts.Netns)
	}
	return cfg
}

// WriteKubeconfig writes the admin's kubeconfig (system:masters) pointing at server (which may
// be a forwarder's address).
func (s *Server) WriteKubeconfig(path, server string) error {
	return s.writeKubeconfig(path, server, "meshchaos-admin", &clientcmdapi.AuthInfo{Token: s.pki.Token})
}

// WriteClientKubeconfig writes a kubeconfig pointing at server that authenticates with a client
// certificate, issued by the cluster's CA, as user in groups: "system:node:NAME" in
// "system:nodes" for a kubelet (which the Node authorizer and NodeRestriction then confine
// to node NAME), "system:kube-proxy" for kube-proxy. The key is in the file, which only its
// owner may read.
func (s *Server) WriteClientKubeconfig(path, server, user string, groups ...string) error {
	cert, key, err := s.pki.IssueClient(user, groups...)
	if err != nil {
		return err
	}
	return s.writeKubeconfig(path, server, user, &clientcmdapi.AuthInfo{ClientCertificateData: cert, ClientKeyData: key})
}

func (s *Server) writeKubeconfig(path, server, user string, auth *clientcmdapi.AuthInfo) error {
	ca, err := os.ReadFile(s.pki.CACert)
	if err != nil {
		return fmt.Errorf("kubeconfig %s: %w", path, err)
	}
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["meshchaos"] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: ca}
	cfg.AuthInfos[user] = auth
	cfg.Contexts["meshchaos"] = &clientcmdapi.Context{Cluster: "meshchaos", AuthInfo: user}
	cfg.CurrentContext = "meshchaos"
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("kubeconfig %s: %w", path, err)
	}
	// WriteToFile creates the file 0600 but keeps an existing file's mode: the file may hold
	// a key, so make sure.
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		return fmt.Errorf("write kubeconfig %s: %w", path, err)
	}
	return os.Chmod(path, 0o600)
}

// Stop stops kube-apiserver then etcd, and removes a temp dir.
func (s *Server) Stop() error {
	var errs []error
	if s.api != nil {
		errs = append(errs, s.api.Stop(10*time.Second))
	}
	if s.etcd != nil {
		errs = append(errs, s.etcd.Stop(10*time.Second))
	}
	if s.tempDir {
		errs = append(errs, os.RemoveAll(s.opts.Dir))
	}
	return errors.Join(errs...)
}

func firstServiceIP(cidr string) (net.IP, error) {
	_, n, err := net.ParseCIDR(cidr)
	if err != nil {
		return nil, fmt.Errorf("service CIDR %q: %w", cidr, err)
	}
	ip := n.IP.To4()
	if ip == nil {
		return nil, fmt.Errorf("service CIDR %q: only IPv4 is supported", cidr)
	}
	out := make(net.IP, 4)
	copy(out, ip)
	out[3]++
	return out, nil
}
