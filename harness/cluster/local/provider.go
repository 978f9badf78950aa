package local

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/e2e-framework/klient"
	"sigs.k8s.io/e2e-framework/support"

	"github.com/meshchaos/meshchaos/harness/cluster/bins"
	"github.com/meshchaos/meshchaos/harness/cluster/internal/e2eprov"
	"github.com/meshchaos/meshchaos/images"
)

// KubernetesVersion is the version `make bins` builds; the provider runs only that one.
const KubernetesVersion = "v1.36.4"

// Provider is the local substrate as an e2e-framework cluster provider.
type Provider struct {
	name      string
	version   string
	nodes     int
	home      string
	imagesDir string
	binDir    string
	logf      func(string, ...any)
	cluster   *Cluster
}

var _ support.E2EClusterProviderWithImageLoader = (*Provider)(nil)

// Option configures a Provider.
type Option func(*Provider)

// WithNodes sets the number of nodes (default 1).
func WithNodes(n int) Option { return func(p *Provider) { p.nodes = n } }

// WithHome sets the state root (default Home()).
func WithHome(dir string) Option { return func(p *Provider) { p.home = dir } }

// WithImages sets the directory of image tarballs loaded at start (default: bins.ImagesDir finds
// `make images`' output).
func WithImages(dir string) Option { return func(p *Provider) { p.imagesDir = dir } }

// WithLogf sets the progress reporter.
func WithLogf(f func(string, ...any)) Option { return func(p *Provider) { p.logf = f } }

// NewProvider returns a provider with defaults applied.
func NewProvider(opts ...Option) *Provider {
	p := &Provider{}
	p.SetDefaults()
	for _, o := range opts {
		o(p)
	}
	return p
}

// SetDefaults implements support.E2EClusterProvider.
func (p *Provider) SetDefaults() support.E2EClusterProvider {
	if p.name == "" {
		p.name = "meshchaos"
	}
	if p.nodes == 0 {
		p.nodes = 1
	}
	if p.version == "" {
		p.version = KubernetesVersion
	}
	return p
}

// WithName implements support.E2EClusterProvider.
func (p *Provider) WithName(name string) support.E2EClusterProvider { p.name = name; return p }

// WithVersion implements support.E2EClusterProvider; Create refuses any version but
// KubernetesVersion, since the binaries are built for that one.
func (p *Provider) WithVersion(v string) support.E2EClusterProvider { p.version = v; return p }

// WithPath implements support.E2EClusterProvider: the directory searched first for etcd and the
// Kubernetes binaries (see bins.Finder).
func (p *Provider) WithPath(dir string) support.E2EClusterProvider { p.binDir = dir; return p }

// WithOpts implements support.E2EClusterProvider.
func (p *Provider) WithOpts(opts ...support.ClusterOpts) support.E2EClusterProvider {
	for _, o := range opts {
		o(p)
	}
	return p
}

// Create implements support.E2EClusterProvider. Args: --nodes=N.
func (p *Provider) Create(ctx context.Context, args ...string) (string, error) {
	if err := e2eprov.ParseArgs("local", args, &p.nodes); err != nil {
		return "", err
	}
	if p.version != KubernetesVersion && p.version != strings.TrimPrefix(KubernetesVersion, "v") {
		return "", fmt.Errorf("local provider runs Kubernetes %s (what 'make bins' builds), not %s", KubernetesVersion, p.version)
	}
	imagesDir, err := bins.ImagesDir(p.imagesDir)
	if err != nil {
		return "", err
	}
	p.imagesDir = imagesDir // LoadImage reads it too
	c, err := Up(ctx, Config{Name: p.name, Nodes: p.nodes, Home: p.home, ImagesDir: imagesDir, BinDir: p.binDir, Logf: p.logf})
	if err != nil {
		return "", err
	}
	p.cluster = c
	return c.KubeconfigPath(), nil
}

// ClusterConfig is the file CreateWithConfig reads.
type ClusterConfig = e2eprov.Config

// CreateWithConfig implements support.E2EClusterProvider with a YAML file ("nodes: 2").
func (p *Provider) CreateWithConfig(ctx context.Context, configFile string) (string, error) {
	cc, err := e2eprov.ReadConfig(configFile)
	if err != nil {
		return "", err
	}
	if cc.Nodes > 0 {
		p.nodes = cc.Nodes
	}
	return p.Create(ctx)
}

// Cluster is the running cluster (nil before Create).
func (p *Provider) Cluster() *Cluster { return p.cluster }

// GetKubeconfig implements support.E2EClusterProvider.
func (p *Provider) GetKubeconfig() string {
	if p.cluster == nil {
		return ""
	}
	return p.cluster.KubeconfigPath()
}

// GenerateKubeconfig implements support.E2EClusterProvider: writes a copy to args[0] if given.
func (p *Provider) GenerateKubeconfig(args ...string) (string, error) {
	return e2eprov.GenerateKubeconfig("local", p.GetKubeconfig(), args...)
}

// GetKubectlContext implements support.E2EClusterProvider.
func (p *Provider) GetKubectlContext() string { return "meshchaos" }

// ExportLogs implements support.E2EClusterProvider: copies every component's log to dest.
func (p *Provider) ExportLogs(_ context.Context, dest string) error {
	if p.cluster == nil {
		return errors.New("local provider: no cluster")
	}
	if err := os.MkdirAll(dest, 0o755); err != nil {
		return err
	}
	logs, _ := filepath.Glob(filepath.Join(p.cluster.l.logDir(), "*.log"))
	more, _ := filepath.Glob(filepath.Join(p.cluster.l.cpDir(), "*.log"))
	var errs []error
	for _, f := range append(logs, more...) {
		errs = append(errs, copyFile(f, filepath.Join(dest, filepath.Base(f))))
	}
	return errors.Join(errs...)
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.Create(dst)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// Destroy implements support.E2EClusterProvider.
func (p *Provider) Destroy(ctx context.Context) error {
	if p.cluster == nil {
		return nil
	}
	err := p.cluster.Down(ctx)
	p.cluster = nil
	return err
}

// WaitForControlPlane implements support.E2EClusterProvider. Create already waits for Ready
// nodes and DNS; this re-checks through the caller's client.
func (p *Provider) WaitForControlPlane(ctx context.Context, client klient.Client) error {
	if p.cluster == nil {
		return errors.New("local provider: no cluster")
	}
	return client.Resources().Get(ctx, "coredns", "kube-system", newDeployment())
}

// KubernetesRestConfig implements support.E2EClusterProvider.
func (p *Provider) KubernetesRestConfig() *rest.Config {
	if p.cluster == nil {
		return nil
	}
	return p.cluster.RESTConfig()
}

// LoadImage implements support.E2EClusterProviderWithImageLoader for catalog images, by
// reference (meshchaos.local/NAME:dev) or name: there is no registry to pull from.
func (p *Provider) LoadImage(ctx context.Context, image string, _ ...string) error {
	name := strings.TrimSuffix(strings.TrimPrefix(image, images.Registry+"/"), ":"+images.Tag)
	if _, ok := images.Lookup(name); !ok {
		return fmt.Errorf("local provider: %q is not a meshchaos image (no registry here); use LoadImageArchive", image)
	}
	return p.LoadImageArchive(ctx, images.TarPath(p.imagesDir, name))
}

// LoadImageArchive implements support.E2EClusterProviderWithImageLoader.
func (p *Provider) LoadImageArchive(ctx context.Context, archive string, _ ...string) error {
	if p.cluster == nil {
		return errors.New("local provider: no cluster")
	}
	return p.cluster.LoadImageArchive(ctx, archive)
}

func newDeployment() *appsv1.Deployment { return &appsv1.Deployment{} }
