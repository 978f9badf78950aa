package experiments

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/meshchaos/meshchaos/harness/cluster/bins"
	"github.com/meshchaos/meshchaos/harness/kube"
	"github.com/meshchaos/meshchaos/harness/suite"
	imgs "github.com/meshchaos/meshchaos/images"
	"github.com/meshchaos/meshchaos/internal/crds"
	"github.com/meshchaos/meshchaos/results"
)

// stagingNamespace holds the staging mesh's own workloads and configuration.
const stagingNamespace = "staging-apps"

// stagingCRDs are Istio's CRDs of another version than the reference's: istio's own from the
// 2026-04 build's base chart, or, without an istiod build, the reference's relabelled as a
// release of their own.
func stagingCRDs(t *testing.T) []byte {
	if root, err := bins.IstiodRoot(); err == nil {
		if data, err := os.ReadFile(filepath.Join(root, "2026-04", "manifests", "10-base.yaml")); err == nil {
			objs, err := kube.Decode(data)
			require.NoError(t, err)
			var out []string
			for _, o := range objs {
				if o.GetKind() == "CustomResourceDefinition" {
					y, err := o.MarshalJSON()
					require.NoError(t, err)
					out = append(out, string(y))
				}
			}
			require.NotEmpty(t, out, "istio's base chart holds its CRDs")
			t.Logf("staging mesh: istio's CRDs of its 2026-04 build (%d)", len(out))
			return []byte(strings.Join(out, "\n---\n"))
		}
	}
	t.Logf("staging mesh: no istiod build ('make istiod'), the reference's CRDs as another release")
	return []byte(strings.ReplaceAll(string(crds.Istio), "\nmetadata:\n", "\nmetadata:\n  labels: {release: staging-1.22}\n"))
}

// prepareStagingMesh makes the cluster look like someone's staging mesh before a run touches it:
// istio's CRDs of another version, a namespace with ServiceEntries, a ConfigMap and a running
// pod of its own, a ClusterRole and a validating webhook configuration of its own. It returns
// a function that lists every change made since to what was there (resourceVersion changed,
// object gone) and every object added to a namespace that was there or at cluster scope.
func prepareStagingMesh(t *testing.T, cfg *rest.Config) func() []string {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	_, err := kube.InstallCRDs(ctx, cfg, stagingCRDs(t))
	require.NoError(t, err)
	_, err = kube.Apply(ctx, cfg, fmt.Appendf(nil, `
apiVersion: v1
kind: Namespace
metadata: {name: %[1]s}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: team-settings, namespace: %[1]s}
data: {owner: payments}
---
apiVersion: v1
kind: Pod
metadata: {name: payments, namespace: %[1]s, labels: {app: payments}}
spec:
  terminationGracePeriodSeconds: 1
  containers: [{name: echo, image: %[2]s, imagePullPolicy: Never}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: staging-istio-reader}
rules: [{apiGroups: [networking.istio.io], resources: ["*"], verbs: [get, list, watch]}]
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingWebhookConfiguration
metadata: {name: staging-istio-validator}
webhooks:
- name: validation.staging.example.com
  admissionReviewVersions: [v1]
  sideEffects: None
  failurePolicy: Ignore
  clientConfig: {service: {name: istiod, namespace: %[1]s, path: /validate}}
  rules: [{apiGroups: [staging.example.com], apiVersions: ["*"], operations: [CREATE], resources: ["*"]}]
`, stagingNamespace, imgs.Ref("echo")))
	require.NoError(t, err)
	for i := range 3 {
		_, err = kube.Apply(ctx, cfg, fmt.Appendf(nil, `
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: payments-%[1]d, namespace: %[2]s}
spec:
  hosts: [payments-%[1]d.staging.example.com]
  location: MESH_INTERNAL
  resolution: STATIC
  ports: [{number: 80, name: http, protocol: HTTP}]
  endpoints: [{address: 10.99.0.%[1]d}]
`, i+1, stagingNamespace))
		require.NoError(t, err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	require.NoError(t, err)
	_, err = kube.WaitPodsReady(ctx, cs, stagingNamespace, "app=payments", 1, 2*time.Minute)
	require.NoError(t, err, "the staging pod runs")
	before := snapshot(t, cfg)
	t.Logf("staging mesh: %d objects of its own", len(before))
	return func() []string {
		after := snapshot(t, cfg)
		var changes []string
		for k, was := range before {
			switch now, ok := after[k]; {
			case !ok:
				changes = append(changes, k+" deleted")
			case now.rv != was.rv:
				change := fmt.Sprintf("%s changed (version %s → %s, last written by %s)", k, was.rv, now.rv, now.writer)
				if now.status != was.status {
					change += fmt.Sprintf("; status was %s, is %s", was.status, now.status)
				}
				changes = append(changes, change)
			}
		}
		for k, now := range after {
			if _, ok := before[k]; !ok {
				changes = append(changes, fmt.Sprintf("%s added (by %s)", k, now.writer))
			}
		}
		slices.Sort(changes)
		return changes
	}
}

// objectVersion is an object's resourceVersion and who wrote it last.
type objectVersion struct{ rv, writer, status string }

// lastWriter names the field manager of o's latest write (its managedFields entry with the
// latest time), with the operation and subresource: who changed the object.
func lastWriter(o *unstructured.Unstructured) string {
	var last metav1.ManagedFieldsEntry
	for _, m := range o.GetManagedFields() {
		if last.Time == nil || (m.Time != nil && !m.Time.Before(last.Time)) {
			last = m
		}
	}
	if last.Manager == "" {
		return "an unknown writer"
	}
	w := fmt.Sprintf("%s (%s", last.Manager, last.Operation)
	if last.Subresource != "" {
		w += " " + last.Subresource
	}
	return w + ")"
}

// podState is what a run could change of a pod, as JSON: its generation, labels, annotations,
// phase, conditions and containers' readiness, restarts and ids. Not its resourceVersion:
// kubelet rewrites a running pod's status on its own (a minute after the start, with nothing
// else changed; later with the resources it reads back from the runtime).
func podState(o *unstructured.Unstructured) string {
	type container struct {
		Name, ID string
		Ready    bool
		Restarts int64
	}
	st := struct {
		Generation          int64
		Labels, Annotations map[string]string
		Phase               string
		Conditions          map[string]string
		Containers          []container
	}{Generation: o.GetGeneration(), Labels: o.GetLabels(), Annotations: o.GetAnnotations(), Conditions: map[string]string{}}
	st.Phase, _, _ = unstructured.NestedString(o.Object, "status", "phase")
	conds, _, _ := unstructured.NestedSlice(o.Object, "status", "conditions")
	for _, c := range conds {
		m, _ := c.(map[string]any)
		t, _ := m["type"].(string)
		v, _ := m["status"].(string)
		st.Conditions[t] = v
	}
	cs, _, _ := unstructured.NestedSlice(o.Object, "status", "containerStatuses")
	for _, c := range cs {
		m, _ := c.(map[string]any)
		var k container
		k.Name, _ = m["name"].(string)
		k.ID, _ = m["containerID"].(string)
		k.Ready, _ = m["ready"].(bool)
		k.Restarts, _ = m["restartCount"].(int64)
		st.Containers = append(st.Containers, k)
	}
	b, _ := json.Marshal(st)
	return string(b)
}

// statusOf is o's status as JSON, for a change's message.
func statusOf(o *unstructured.Unstructured) string {
	st, ok := o.Object["status"]
	if !ok {
		return ""
	}
	b, _ := json.Marshal(st)
	return string(b)
}

// snapshot maps every cluster-scoped object and every object in the namespaces that are neither
// a run's nor the cluster's system's to its resourceVersion (a pod: its podState), as "resource namespace/name" (a
// run's cluster-scoped object still there after the run shows as added).
// Events, leases and nodes change on their own; kube-system and kube-node-lease are the
// cluster's controllers' business.
func snapshot(t *testing.T, cfg *rest.Config) map[string]objectVersion {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	namespaces := []string{metav1.NamespaceDefault, "kube-public", stagingNamespace}
	skip := map[string]bool{"events": true, "leases": true, "nodes": true, "componentstatuses": true,
		"tokenreviews": true, "subjectaccessreviews": true, "selfsubjectreviews": true}
	out := map[string]objectVersion{}
	eachResource(t, cfg, skip, func(gv schema.GroupVersion, r metav1.APIResource, ri dynamic.NamespaceableResourceInterface) {
		add := func(items []unstructured.Unstructured) {
			for _, o := range items {
				v := objectVersion{o.GetResourceVersion(), lastWriter(&o), statusOf(&o)}
				if r.Name == "pods" && gv.Group == "" {
					v.rv, v.status = podState(&o), podState(&o)
				}
				out[fmt.Sprintf("%s %s/%s", r.Name, o.GetNamespace(), o.GetName())] = v
			}
		}
		if !r.Namespaced {
			got, err := ri.List(ctx, metav1.ListOptions{})
			require.NoError(t, err, "list %s", r.Name)
			add(got.Items)
			return
		}
		for _, ns := range namespaces {
			got, err := ri.Namespace(ns).List(ctx, metav1.ListOptions{})
			require.NoError(t, err, "list %s in %s", r.Name, ns)
			add(got.Items)
		}
	})
	// The runs' own namespaces come and go; a namespace a run left is the leftovers check's.
	for k := range out {
		if strings.HasPrefix(k, "namespaces /") && !slices.Contains(append(namespaces, "kube-system", "kube-node-lease"), strings.TrimPrefix(k, "namespaces /")) {
			delete(out, k)
		}
	}
	return out
}

// eachResource calls f with every resource the API server lists (in its preferred version) but
// the skipped ones and subresources.
func eachResource(t *testing.T, cfg *rest.Config, skip map[string]bool, f func(gv schema.GroupVersion, r metav1.APIResource, ri dynamic.NamespaceableResourceInterface)) {
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	require.NoError(t, err)
	dyn, err := dynamic.NewForConfig(cfg)
	require.NoError(t, err)
	lists, err := dc.ServerPreferredResources()
	require.NoError(t, err)
	for _, l := range lists {
		gv, err := schema.ParseGroupVersion(l.GroupVersion)
		require.NoError(t, err)
		for _, r := range l.APIResources {
			if skip[r.Name] || strings.Contains(r.Name, "/") || !slices.Contains(r.Verbs, "list") {
				continue
			}
			f(gv, r, dyn.Resource(gv.WithResource(r.Name)))
		}
	}
}

// TestSharedClusterUntouched runs cp-oom-restart and endpoint-flap through the existing
// substrate on a cluster prepared like someone's staging mesh (Istio's CRDs of another version,
// a namespace of its own with ServiceEntries and a pod): each must pass, and afterwards every
// object the runs did not create has the resourceVersion it had before (newExistingRunner).
func TestSharedClusterUntouched(t *testing.T) {
	l := newExistingRunner(t)
	for _, name := range []string{"cp-oom-restart", "endpoint-flap"} {
		var c *suite.Case
		for _, bc := range suite.BothWays() {
			if bc.Experiment == name && bc.ControlPlane == "reference" && bc.Expect.Verdict == results.VerdictPass && !bc.Nightly {
				c = &bc
				break
			}
		}
		require.NotNil(t, c, "a passing reference case of %s", name)
		t.Run(name, func(t *testing.T) {
			e := c.Entry(true)
			s, _ := l.forTest(t).run(e.Experiment, e.ControlPlane, e.Set, caseTimeout)
			if miss := c.Expect.Judge(s.Verdict, s.Checks); miss != "" {
				t.Errorf("%s on the staging cluster: %s", c.Name(), miss)
			}
			assert.Empty(t, l.staging(), "%s changed nothing of the staging mesh's own", name)
		})
	}
}
