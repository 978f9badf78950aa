package kind

import (
	"context"
	"errors"
	"fmt"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/e2e-framework/klient"
	"sigs.k8s.io/e2e-framework/support"
	kindcluster "sigs.k8s.io/kind/pkg/cluster"

	"github.com/meshchaos/meshchaos/harness/cluster/bins"
	"github.com/meshchaos/meshchaos/harness/cluster/internal/e2eprov"
	"github.com/meshchaos/meshchaos/images"
)

// Provider is the kind substrate as an e2e-framework cluster provider: tests written with
// e2e-framework's env.Setup(envfuncs.CreateClusterWithOpts(...)) get meshchaos's kind clusters
// (node labels, the meshchaos images loaded, our node image where there is no registry).
type Provider struct {
	name      string
	version   string
	image     string
	nodes     int
	home      string
	imagesDir string
	logf      func(string, ...any)
	cluster   *Cluster
}

var _ support.E2EClusterProviderWithImageLoader = (*Provider)(nil)

// Option configures a Provider.
type Option func(*Provider)

// WithNodes sets the number of worker nodes (default 1).
func WithNodes(n int) Option { return func(p *Provider) { p.nodes = n } }

// WithNodeImage sets the node image (default DefaultImage()).
func WithNodeImage(image string) Option { return func(p *Provider) { p.image = image } }

// WithImages sets the directory of image tarballs loaded into every node (default: bins.ImagesDir
// finds `make images`' output).
func WithImages(dir string) Option { return func(p *Provider) { p.imagesDir = dir } }

// WithHome sets where kubeconfigs are written (default Home()).
func WithHome(dir string) Option { return func(p *Provider) { p.home = dir } }

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
		p.name = "e2e"
	}
	if p.nodes == 0 {
		p.nodes = 1
	}
	return p
}

// WithName implements support.E2EClusterProvider; the kind cluster is Prefix+name.
func (p *Provider) WithName(name string) support.E2EClusterProvider { p.name = name; return p }

// WithVersion implements support.E2EClusterProvider: without a node image set, a version other
// than KubernetesVersion selects kind's official image of that version (kindest/node:VERSION),
// which Docker must have or pull.
func (p *Provider) WithVersion(v string) support.E2EClusterProvider { p.version = v; return p }

// WithPath implements support.E2EClusterProvider. kind runs from its Go library here, so there
// is no kind binary to find: the path is not used.
func (p *Provider) WithPath(string) support.E2EClusterProvider { return p }

// WithOpts implements support.E2EClusterProvider.
func (p *Provider) WithOpts(opts ...support.ClusterOpts) support.E2EClusterProvider {
	for _, o := range opts {
		o(p)
	}
	return p
}

// nodeImage is the image Create uses.
func (p *Provider) nodeImage() string {
	if p.image != "" {
		return p.image
	}
	if v := p.version; v != "" && strings.TrimPrefix(v, "v") != strings.TrimPrefix(KubernetesVersion, "v") {
		return "kindest/node:v" + strings.TrimPrefix(v, "v")
	}
	return DefaultImage()
}

// Create implements support.E2EClusterProvider. Args: --nodes=N.
func (p *Provider) Create(ctx context.Context, args ...string) (string, error) {
	if err := e2eprov.ParseArgs("kind", args, &p.nodes); err != nil {
		return "", err
	}
	imagesDir, err := bins.ImagesDir(p.imagesDir)
	if err != nil {
		return "", err
	}
	p.imagesDir = imagesDir
	c, err := Up(ctx, Config{Name: p.name, Nodes: p.nodes, ImagesDir: imagesDir, Image: p.nodeImage(), Home: p.home, Logf: p.logf})
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
	return e2eprov.GenerateKubeconfig("kind", p.GetKubeconfig(), args...)
}

// GetKubectlContext implements support.E2EClusterProvider: kind's context name.
func (p *Provider) GetKubectlContext() string { return "kind-" + Prefix + p.name }

// ExportLogs implements support.E2EClusterProvider with kind's log collector (every node's
// journal, containerd and pod logs).
func (p *Provider) ExportLogs(_ context.Context, dest string) error {
	if p.cluster == nil {
		return errors.New("kind provider: no cluster")
	}
	return kindcluster.NewProvider(kindcluster.ProviderWithDocker()).CollectLogs(p.cluster.kindName, dest)
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
		return errors.New("kind provider: no cluster")
	}
	return client.Resources().Get(ctx, "coredns", "kube-system", &appsv1.Deployment{})
}

// KubernetesRestConfig implements support.E2EClusterProvider.
func (p *Provider) KubernetesRestConfig() *rest.Config {
	if p.cluster == nil {
		return nil
	}
	return p.cluster.RESTConfig()
}

// LoadImage implements support.E2EClusterProviderWithImageLoader: a meshchaos image by
// reference (meshchaos.local/NAME:dev) or name from its tarball, any other image from Docker
// (as 'kind load docker-image'; never pulled).
func (p *Provider) LoadImage(ctx context.Context, image string, _ ...string) error {
	if p.cluster == nil {
		return errors.New("kind provider: no cluster")
	}
	name := strings.TrimSuffix(strings.TrimPrefix(image, images.Registry+"/"), ":"+images.Tag)
	if _, ok := images.Lookup(name); ok {
		return p.cluster.LoadImageArchive(ctx, images.TarPath(p.imagesDir, name))
	}
	held, err := p.cluster.HoldImage(ctx, image)
	if err != nil {
		return err
	}
	if !held {
		return fmt.Errorf("kind provider: Docker has no image %s (meshchaos never pulls; 'docker pull %s' first)", image, image)
	}
	return nil
}

// LoadImageArchive implements support.E2EClusterProviderWithImageLoader.
func (p *Provider) LoadImageArchive(ctx context.Context, archive string, _ ...string) error {
	if p.cluster == nil {
		return errors.New("kind provider: no cluster")
	}
	return p.cluster.LoadImageArchive(ctx, archive)
}
