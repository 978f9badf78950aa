package experiments

import (
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/meshchaos/meshchaos/harness/cluster"
	"github.com/meshchaos/meshchaos/harness/cluster/bins"
	"github.com/meshchaos/meshchaos/harness/cluster/existing"
	"github.com/meshchaos/meshchaos/harness/cluster/kind"
	"github.com/meshchaos/meshchaos/harness/cluster/local"
	"github.com/meshchaos/meshchaos/harness/kit"
	"github.com/meshchaos/meshchaos/harness/runner"
	"github.com/meshchaos/meshchaos/harness/subject"
	"github.com/meshchaos/meshchaos/internal/prereq"
	"github.com/meshchaos/meshchaos/results"
)

// localRunner runs experiments of the catalog on local clusters for both-ways tests: every run
// must be carried out (verdict pass or fail, never error), leave a complete run directory and
// tear its cluster down without leftovers.
type localRunner struct {
	t         *testing.T
	home      string
	imagesDir string
	// sub is the substrate (default: local under home); leftovers lists what a cluster left.
	sub       cluster.Substrate
	leftovers func(name string) []string
	// staging lists what the runs changed of the staging mesh the cluster was prepared as
	// (newExistingRunner; nil elsewhere).
	staging func() []string
	// allowCPChaos lets the runs' faults land on a control plane installed before them
	// (--allow-cp-chaos).
	allowCPChaos bool
}

// newLocalRunner skips with MESHCHAOS_SKIP_INTEGRATION=1 and fails when the machine cannot
// run a local cluster.
func newLocalRunner(t *testing.T) *localRunner {
	prereq.Integration(t)
	require.NoError(t, local.Preflight())
	imagesDir, err := bins.ImagesDir("")
	require.NoError(t, err)
	home, err := os.MkdirTemp("", "mc")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(home) })
	return &localRunner{t: t, home: home, imagesDir: imagesDir,
		sub:       local.Substrate{Home: home, ImagesDir: imagesDir},
		leftovers: func(name string) []string { return local.Leftovers(home, name) }}
}

// newKindRunner runs on kind clusters; it skips, saying why, where Docker or the node image is
// missing ('sudo hack/docker.sh' and 'make kind-node-image' provide both on a machine like CI).
func newKindRunner(t *testing.T) *localRunner {
	prereq.Integration(t)
	if err := kind.Preflight(); err != nil {
		prereq.Missing(t, "kind substrate not usable here: %v", err)
	}
	if img := kind.DefaultImage(); !kind.ImagePresent(img) {
		prereq.Missing(t, "kind node image %s is not in Docker and there is no registry to pull it from: run 'make kind-node-image'", img)
	}
	imagesDir, err := bins.ImagesDir("")
	require.NoError(t, err)
	return &localRunner{t: t, imagesDir: imagesDir,
		sub:       kind.Substrate{ImagesDir: imagesDir},
		leftovers: kind.Leftovers}
}

// newExistingRunner brings a 2-node local cluster up, prepares it like someone's staging mesh
// (prepareStagingMesh) and runs on it through the existing substrate (its kubeconfig only,
// --allow-node-chaos); when the test ends, nothing of the staging mesh's may have changed and
// the cluster goes down.
// A run leaves nothing when its namespaces are gone and the nodes carry no label of its own.
func newExistingRunner(t *testing.T) *localRunner {
	l := newLocalRunner(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	lc, err := l.sub.Up(ctx, cluster.Spec{Name: fmt.Sprintf("st%d", os.Getpid()%100000), Nodes: 2, Logf: t.Logf})
	require.NoError(t, err)
	t.Cleanup(func() {
		require.NoError(t, lc.Down(context.Background()))
		assert.Empty(t, local.Leftovers(l.home, lc.Name()), "the owner's cluster went down without leftovers")
	})
	// Registered after the cluster's Down, so it runs before it: every run on it is over.
	changes := prepareStagingMesh(t, lc.RESTConfig())
	t.Cleanup(func() {
		assert.Empty(t, changes(), "the runs changed nothing of the staging mesh's own")
	})
	l.staging = changes
	l.useExisting(lc)
	return l
}

// useExisting makes l run through the existing substrate on the local cluster lc (its
// kubeconfig only, --allow-node-chaos): a run leaves nothing when its namespaces are gone and
// the nodes carry no label of its own.
func (l *localRunner) useExisting(lc cluster.Cluster) {
	t := l.t
	cs, err := kubernetes.NewForConfig(lc.RESTConfig())
	require.NoError(t, err)
	l.sub = existing.Substrate{Kubeconfig: lc.(*local.Cluster).KubeconfigPath(), AllowNodeChaos: true}
	l.leftovers = func(run string) []string {
		var left []string
		nss, err := cs.CoreV1().Namespaces().List(context.Background(), metav1.ListOptions{LabelSelector: existing.RunLabel + "=" + run})
		require.NoError(t, err)
		for _, ns := range nss.Items {
			left = append(left, "namespace "+ns.Name)
		}
		nodes, err := cs.CoreV1().Nodes().List(context.Background(), metav1.ListOptions{})
		require.NoError(t, err)
		for _, n := range nodes.Items {
			if n.Annotations[existing.LabelledByAnnotation] == run {
				left = append(left, "node label of the run on "+n.Name)
			}
		}
		return left
	}
}

// forTest is l for a subtest: the runs it makes report to t.
func (l *localRunner) forTest(t *testing.T) *localRunner {
	c := *l
	c.t = t
	return &c
}

// runSeq numbers the runs of this test process (their cluster names).
var runSeq atomic.Int64

// run executes experiment name with sets against control plane cp; it returns the summary and
// the run directory.
func (l *localRunner) run(name, cp string, sets []string, timeout time.Duration) (results.Summary, string) {
	t := l.t
	d, ok := Lookup(name)
	require.True(t, ok, name)
	v, err := d.Resolve(sets)
	require.NoError(t, err)
	sut, err := subject.Parse(cp)
	require.NoError(t, err)
	// Each run its own cluster name: runs of one experiment may run side by side (runCases).
	clusterName := fmt.Sprintf("t%d-%d", os.Getpid()%10000, runSeq.Add(1))
	exp, err := d.Build(kit.Env{Substrate: l.sub, ControlPlane: sut, ClusterName: clusterName, AllowCPChaos: l.allowCPChaos}, v)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	dir := testRunDir(t)
	s, err := runner.Execute(ctx, exp, runner.Options{Dir: dir, Progress: runner.NewProgress(testWriter{t})})
	require.NotEqual(t, results.VerdictError, s.Verdict, "the run could not be carried out: %v %s", err, s.Error)
	// The run directory is complete and readable by `meshchaos report`.
	back, rerr := results.Read(dir)
	require.NoError(t, rerr)
	assert.Equal(t, s.Verdict, back.Verdict)
	cluster := ""
	for _, e := range s.Events {
		if e.Kind == "cluster.up" {
			cluster = e.Object
		}
	}
	require.NotEmpty(t, cluster, "the timeline names the cluster")
	assert.Empty(t, l.leftovers(cluster), "teardown left no process, namespace, mount, cgroup, container or state")
	assert.Empty(t, secretsIn(t, dir), "the run directory (summary, report, logs, profiles) holds no key or token")
	return s, dir
}

// keepRunsEnv names a directory where the tests' run directories are kept (for reading a
// failure's report and logs afterwards); unset, each run's directory goes with its test.
const keepRunsEnv = "MESHCHAOS_TEST_RUNS"

// testRunDir is a new run directory for t: under $MESHCHAOS_TEST_RUNS, kept, or a temporary one.
func testRunDir(t *testing.T) string {
	keep := os.Getenv(keepRunsEnv)
	if keep == "" {
		return t.TempDir()
	}
	name := strings.NewReplacer("/", "_", " ", "_", ":", "_").Replace(t.Name())
	dir, err := os.MkdirTemp(keep, name+"-"+time.Now().UTC().Format("150405")+"-")
	require.NoError(t, err, "%s=%s", keepRunsEnv, keep)
	t.Logf("run directory %s (kept: %s is set)", dir, keepRunsEnv)
	return dir
}

// secretPatterns are what must never be in a run directory: PEM private keys, kubeconfig
// credentials, bearer tokens (service account JWTs).
var secretPatterns = regexp.MustCompile(`-----BEGIN [A-Z ]*PRIVATE KEY-----|client-key-data|(?i)bearer [A-Za-z0-9._-]{20,}|eyJ[A-Za-z0-9_-]{10,}\.eyJ[A-Za-z0-9_-]{10,}\.`)

// secretsIn lists "file: match" for every secret-looking string under dir (gzipped profiles
// are read uncompressed).
func secretsIn(t *testing.T, dir string) []string {
	var found []string
	require.NoError(t, filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if strings.HasSuffix(path, ".gz") {
			if zr, err := gzip.NewReader(bytes.NewReader(b)); err == nil {
				if u, err := io.ReadAll(zr); err == nil {
					b = u
				}
			}
		}
		for _, m := range secretPatterns.FindAll(b, 3) {
			found = append(found, fmt.Sprintf("%s: %.40s", path, m))
		}
		return nil
	}))
	return found
}

// TestSecretsInFindsKeysAndTokens: the scan run on every local run's directory finds what it
// looks for.
func TestSecretsInFindsKeysAndTokens(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "summary.json"), []byte(`{"verdict":"pass"}`), 0o600))
	assert.Empty(t, secretsIn(t, dir))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "log.txt"), []byte("-----BEGIN EC PRIVATE KEY-----\nMHc\n"), 0o600))
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	_, _ = zw.Write([]byte("Authorization: Bearer abcdefghijklmnopqrstuvwxyz0123"))
	require.NoError(t, zw.Close())
	require.NoError(t, os.WriteFile(filepath.Join(dir, "heap.pb.gz"), gz.Bytes(), 0o600))
	assert.Len(t, secretsIn(t, dir), 2)
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) { w.t.Log(string(p)); return len(p), nil }
