package experiments

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/meshchaos/meshchaos/harness/cluster"
	"github.com/meshchaos/meshchaos/harness/kube"
	"github.com/meshchaos/meshchaos/harness/subject"
	"github.com/meshchaos/meshchaos/harness/suite"
	"github.com/meshchaos/meshchaos/internal/prereq"
	"github.com/meshchaos/meshchaos/results"
)

// stagingIstiodMemory is the memory limit the "user" gave the installed istiod: the OOM kill
// needs one, and an attached control plane keeps its own.
const stagingIstiodMemory = "256Mi"

// TestAttachInstalledIstiod attaches to an istiod installed before the runs (the user's staging
// mesh: installed with the harness's own istiod install on a local cluster, with a memory limit
// of its own) and runs cp-oom-restart and endpoint-flap against it through the existing
// substrate with --cp istiod:installed. Both must pass, the OOM kill must land on the installed
// istiod's pod, and afterwards istiod's objects (its namespace's, its CRDs, its webhook
// configurations, its cluster roles) must be as they were: same uid, generation, labels,
// annotations and spec (data, webhooks, rules), none deleted, none added to its namespace.
func TestAttachInstalledIstiod(t *testing.T) {
	prereq.Integration(t)
	istiod, err := subject.NewIstiod("")
	if err != nil {
		prereq.Missing(t, "%v", err)
	}
	l := newLocalRunner(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	lc, err := l.sub.Up(ctx, cluster.Spec{Name: fmt.Sprintf("ai%d", os.Getpid()%100000), Nodes: 2, Logf: t.Logf})
	require.NoError(t, err)
	t.Cleanup(func() {
		require.NoError(t, lc.Down(context.Background()))
	})
	cfg := lc.RESTConfig()
	cs, err := kubernetes.NewForConfig(cfg)
	require.NoError(t, err)

	// The staging istiod, installed as --cp istiod installs it, on node 1.
	start := time.Now()
	require.NoError(t, istiod.Deploy(ctx, lc, subject.Placement{Node: 1, MemoryLimit: stagingIstiodMemory, Logf: t.Logf}))
	rendered, err := istiod.Render(ctx)
	require.NoError(t, err)
	installed, err := kube.Decode(rendered)
	require.NoError(t, err)
	waitIstiodValidating(t, ctx, cfg)
	t.Logf("staging istiod %s installed in %s (%d objects)", istiod.Name(), time.Since(start).Round(time.Second), len(installed))
	before := snapshotIstiod(t, cfg, installed)
	podBefore, restartsBefore := istiodPod(t, cs)

	// What the installed istiod does not have is refused, naming the setting.
	cp, err := subject.Parse("istiod:installed")
	require.NoError(t, err)
	err = cp.(subject.Attached).CheckInstalled(ctx, cs, subject.Placement{MemoryLimit: "1Gi"})
	assert.ErrorContains(t, err, "run with parameter cpMemoryLimit="+stagingIstiodMemory)

	l.useExisting(lc)
	l.allowCPChaos = true
	cases := []struct {
		experiment string
		set        []string
	}{
		// istiod's test scale (suite.BothWays' istiod case), at the installed istiod's limits:
		// its memory limit, no CPU limit.
		{"cp-oom-restart", []string{"serviceEntries=1000", "cpMemoryLimit=" + stagingIstiodMemory, "cpCPULimit="}},
		{"endpoint-flap", []string{"cpMemoryLimit=" + stagingIstiodMemory}},
	}
	for _, c := range cases {
		t.Run(c.experiment, func(t *testing.T) {
			started := time.Now()
			s, _ := l.forTest(t).run(c.experiment, "istiod:installed", append(suite.TestScale(c.experiment), c.set...), caseTimeout)
			t.Logf("%s against the installed istiod: %s in %s", c.experiment, s.Verdict, time.Since(started).Round(time.Second))
			assert.Equal(t, results.VerdictPass, s.Verdict, "checks: %v", s.Checks)
			assert.Equal(t, "istiod:installed", s.ControlPlane)
			i := slices.IndexFunc(s.Events, func(e results.Event) bool { return e.Kind == "cp.attached" })
			require.GreaterOrEqual(t, i, 0, "the timeline says what the run attached to")
			assert.Contains(t, s.Events[i].Detail, "memory limit "+stagingIstiodMemory)
			assert.Contains(t, s.Events[i].Detail, "pod "+podBefore)
			if c.experiment == "cp-oom-restart" {
				assertCPOOMRestart(t, suite.Case{Expect: results.Expect{Verdict: results.VerdictPass}}, s, "")
				f := slices.IndexFunc(s.Faults, func(f results.Fault) bool { return f.Name == "memory-ballast/control-plane" })
				require.GreaterOrEqual(t, f, 0, "faults: %v", s.Faults)
				assert.True(t, s.Faults[f].Fallback, "istiod has no ballast hook: the generic memory hog: %+v", s.Faults[f])
			}
		})
	}

	podAfter, restartsAfter := istiodPod(t, cs)
	assert.Equal(t, podBefore, podAfter, "the installed istiod's pod is the same pod (restarted in place by the OOM kill, not replaced)")
	assert.Greater(t, restartsAfter, restartsBefore, "the OOM kill landed on the installed istiod")
	changes := diffIstiod(before, snapshotIstiod(t, cfg, installed))
	t.Logf("istiod's objects: %d compared before and after, %d changed", len(before), len(changes))
	assert.Empty(t, changes, "attaching changed nothing of the installed istiod's")
}

// waitIstiodValidating waits until istiod has switched its validating webhooks to
// failurePolicy Fail (it does once it serves): a change of istiod's own that must come before
// the snapshot.
func waitIstiodValidating(t *testing.T, ctx context.Context, cfg *rest.Config) {
	cs, err := kubernetes.NewForConfig(cfg)
	require.NoError(t, err)
	require.NoError(t, kube.Poll(ctx, time.Second, func(ctx context.Context) (bool, error) {
		list, err := cs.AdmissionregistrationV1().ValidatingWebhookConfigurations().List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		n := 0
		for _, v := range list.Items {
			if !strings.HasPrefix(v.Name, "istio") {
				continue
			}
			for _, w := range v.Webhooks {
				if w.FailurePolicy == nil || *w.FailurePolicy != "Fail" || len(w.ClientConfig.CABundle) == 0 {
					return false, nil
				}
			}
			n++
		}
		return n > 0, nil
	}), "istiod set its validating webhooks to Fail with its CA")
}

// istiodPod is the installed istiod's pod and its container's restarts.
func istiodPod(t *testing.T, cs kubernetes.Interface) (string, int32) {
	pods, err := cs.CoreV1().Pods("istio-system").List(context.Background(), metav1.ListOptions{LabelSelector: "app=istiod"})
	require.NoError(t, err)
	require.Len(t, pods.Items, 1)
	p := pods.Items[0]
	for _, c := range p.Status.ContainerStatuses {
		if c.Name == "discovery" {
			return p.Name, c.RestartCount
		}
	}
	t.Fatalf("pod %s has no container discovery", p.Name)
	return "", 0
}

// istiodObject is what a run could change of one of istiod's objects: identity (uid, creation
// time: deleted and recreated shows), generation (any spec write shows), labels, annotations
// and everything but metadata and status (spec, data, webhooks, rules…), hashed: a Secret's
// data is compared, never printed.
type istiodObject struct {
	UID, Created string
	Generation   int64
	Labels       map[string]string
	Annotations  map[string]string
	Content      map[string]string // top-level field → sha256 of its JSON
}

// istiodSkip are the kinds in istiod's namespace that change on their own (events, leader
// election leases, pods' status, endpoints following readiness) or are ephemeral reviews.
var istiodSkip = map[string]bool{"events": true, "leases": true, "pods": true, "endpoints": true, "endpointslices": true,
	"controllerrevisions": true, "localsubjectaccessreviews": true}

// leaderAnnotation is the leader-election record istiod keeps on ConfigMaps: istiod's own, renewed
// every few seconds.
const leaderAnnotation = "control-plane.alpha.kubernetes.io/leader"

// snapshotIstiod maps every object in istio-system (but istiodSkip) and every cluster-scoped
// object istiod's install rendered (CRDs, webhook configurations, cluster roles and bindings) to
// its istiodObject, keyed "resource namespace/name".
func snapshotIstiod(t *testing.T, cfg *rest.Config, installed []*unstructured.Unstructured) map[string]istiodObject {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	clusterScoped := map[schema.GroupKind][]string{}
	for _, o := range installed {
		if o.GetNamespace() == "" {
			gk := o.GroupVersionKind().GroupKind()
			clusterScoped[gk] = append(clusterScoped[gk], o.GetName())
		}
	}
	out := map[string]istiodObject{}
	add := func(resource string, o *unstructured.Unstructured) {
		v := istiodObject{UID: string(o.GetUID()), Created: o.GetCreationTimestamp().String(), Generation: o.GetGeneration(),
			Labels: o.GetLabels(), Annotations: o.GetAnnotations(), Content: map[string]string{}}
		delete(v.Annotations, leaderAnnotation)
		for k, f := range o.Object {
			if k == "metadata" || k == "status" || k == "apiVersion" || k == "kind" {
				continue
			}
			b, err := json.Marshal(f)
			require.NoError(t, err)
			v.Content[k] = fmt.Sprintf("%x", sha256.Sum256(b))
		}
		out[fmt.Sprintf("%s %s/%s", resource, o.GetNamespace(), o.GetName())] = v
	}
	eachResource(t, cfg, istiodSkip, func(gv schema.GroupVersion, r metav1.APIResource, ri dynamic.NamespaceableResourceInterface) {
		if r.Namespaced {
			got, err := ri.Namespace("istio-system").List(ctx, metav1.ListOptions{})
			require.NoError(t, err, "list %s in istio-system", r.Name)
			for i := range got.Items {
				add(r.Name, &got.Items[i])
			}
			return
		}
		for _, name := range clusterScoped[schema.GroupKind{Group: gv.Group, Kind: r.Kind}] {
			if got, err := ri.Get(ctx, name, metav1.GetOptions{}); err == nil {
				add(r.Name, got)
			}
		}
	})
	for gk, names := range clusterScoped {
		for _, n := range names {
			found := false
			for k := range out {
				found = found || strings.HasSuffix(k, " /"+n)
			}
			require.True(t, found, "%s %s, which istiod's install rendered, is on the cluster", gk, n)
		}
	}
	return out
}

// diffIstiod lists what differs between two snapshots: objects deleted or added, and the
// fields of the others that changed.
func diffIstiod(before, after map[string]istiodObject) []string {
	var changes []string
	for k, was := range before {
		now, ok := after[k]
		if !ok {
			changes = append(changes, k+" deleted")
			continue
		}
		var what []string
		if now.UID != was.UID || now.Created != was.Created {
			what = append(what, "recreated")
		}
		if now.Generation != was.Generation {
			what = append(what, fmt.Sprintf("generation %d → %d", was.Generation, now.Generation))
		}
		if !maps.Equal(now.Labels, was.Labels) {
			what = append(what, fmt.Sprintf("labels %v → %v", was.Labels, now.Labels))
		}
		if !maps.Equal(now.Annotations, was.Annotations) {
			what = append(what, fmt.Sprintf("annotations %v → %v", was.Annotations, now.Annotations))
		}
		for f := range unionKeys(was.Content, now.Content) {
			if was.Content[f] != now.Content[f] {
				what = append(what, f)
			}
		}
		if len(what) > 0 {
			sort.Strings(what)
			changes = append(changes, k+" changed: "+strings.Join(what, ", "))
		}
	}
	for k := range after {
		if _, ok := before[k]; !ok {
			changes = append(changes, k+" added")
		}
	}
	sort.Strings(changes)
	return changes
}

func unionKeys(a, b map[string]string) map[string]bool {
	out := map[string]bool{}
	for k := range a {
		out[k] = true
	}
	for k := range b {
		out[k] = true
	}
	return out
}
