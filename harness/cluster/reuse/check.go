package reuse

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"

	"github.com/meshchaos/meshchaos/harness/cgroup"
	"github.com/meshchaos/meshchaos/harness/cluster"
	"github.com/meshchaos/meshchaos/harness/kube"
)

// GiveBackBudget bounds the deletion of a run's objects and the check after it: a cluster not
// clean by then is torn down (which bounds its own time).
const GiveBackBudget = 2 * time.Minute

// podGrace is the grace period of the run's pods when it ends: none, its measurements are over
// (the API forgets them at once, and compare waits until their kubelets have removed their
// cgroups).
const podGrace = int64(0)

// Snapshot is what a cluster held when it came up, to compare with after each run.
type Snapshot struct {
	// Namespaces are the cluster's namespaces.
	Namespaces []string
	// Objects are the objects of those namespaces and the cluster-scoped ones a run could leave,
	// as "Kind namespace/name" (cluster-scoped: "Kind name").
	Objects []string
	// Nodes is what runs change on the nodes (nodeState): CPU quotas, the pods' cgroups.
	Nodes map[string]string
}

// takeSnapshot records c's baseline.
func takeSnapshot(ctx context.Context, c cluster.Cluster) (*Snapshot, error) {
	cs, err := kubernetes.NewForConfig(c.RESTConfig())
	if err != nil {
		return nil, err
	}
	mc, err := metadata.NewForConfig(c.RESTConfig())
	if err != nil {
		return nil, err
	}
	s := &Snapshot{}
	if s.Namespaces, err = namespaces(ctx, cs); err != nil {
		return nil, err
	}
	if s.Objects, err = objects(ctx, mc, s.Namespaces); err != nil {
		return nil, err
	}
	if s.Nodes, err = nodeState(c); err != nil {
		return nil, err
	}
	return s, nil
}

// compare lists what c holds that base did not (and what of base it lacks). Deletions under
// way (a namespace being finalized, a CRD whose objects are being removed, a pod's cgroup its
// kubelet has yet to remove) it waits for, up to GiveBackBudget; what cannot go by itself (an
// object in the cluster's own namespaces, a changed CPU quota, something of the baseline gone)
// ends the wait at once. waited is what the last look before the clean one found still there
// (what took longest to go).
func compare(ctx context.Context, c cluster.Cluster, base *Snapshot) (left, waited []string, err error) {
	cs, err := kubernetes.NewForConfig(c.RESTConfig())
	if err != nil {
		return nil, nil, err
	}
	oc, err := kube.NewOwnedClients(c.RESTConfig())
	if err != nil {
		return nil, nil, err
	}
	mc, err := metadata.NewForConfig(c.RESTConfig())
	if err != nil {
		return nil, nil, err
	}
	wctx, cancel := context.WithTimeout(ctx, GiveBackBudget)
	defer cancel()
	var lastErr error
	looked := false
	_ = kube.Poll(wctx, 250*time.Millisecond, func(ctx context.Context) (bool, error) {
		pending, final, err := differences(ctx, cs, mc, oc, c, base)
		if err != nil {
			lastErr = err
			return false, nil
		}
		looked, lastErr, left = true, nil, append(final, pending...)
		if len(left) > 0 {
			waited = left
		}
		return len(left) == 0 || len(final) > 0, nil
	})
	if !looked && lastErr != nil {
		return nil, nil, lastErr
	}
	return left, waited, nil
}

// differences is one comparison of c with base: what may still be going (pending) and what
// will not go by itself (final).
func differences(ctx context.Context, cs kubernetes.Interface, mc metadata.Interface, oc kube.OwnedClients, c cluster.Cluster, base *Snapshot) (pending, final []string, err error) {
	nss, err := namespaces(ctx, cs)
	if err != nil {
		return nil, nil, err
	}
	for _, d := range diff("namespace ", nss, base.Namespaces) {
		if strings.HasSuffix(d, " gone") {
			final = append(final, d)
		} else {
			pending = append(pending, d)
		}
	}
	objs, err := objects(ctx, mc, base.Namespaces)
	if err != nil {
		return nil, nil, err
	}
	for _, d := range diff("", objs, base.Objects) {
		kind, name, _ := strings.Cut(d, " ")
		ns, _, namespaced := strings.Cut(name, "/")
		// A pod of a namespace being deleted, and a cluster-scoped object (deleted by the
		// cleanup, or finalizing) may still be going.
		if !strings.HasSuffix(d, " gone") && ((kind == "Pod" && !slices.Contains(base.Namespaces, ns)) || !namespaced) {
			pending = append(pending, d)
		} else {
			final = append(final, d)
		}
	}
	owned, err := oc.ListOwned(ctx, "")
	if err != nil {
		return nil, nil, fmt.Errorf("list the runs' cluster-scoped objects: %w", err)
	}
	for _, run := range slices.Sorted(maps.Keys(owned)) {
		for _, name := range owned[run] {
			pending = append(pending, fmt.Sprintf("%s (run %s)", name, run))
		}
	}
	n, err := nodeState(c)
	if err != nil {
		return nil, nil, err
	}
	for _, k := range slices.Sorted(maps.Keys(base.Nodes)) {
		if n[k] == base.Nodes[k] {
			continue
		}
		d := fmt.Sprintf("%s %q (was %q)", k, n[k], base.Nodes[k])
		if strings.HasSuffix(k, "pod cgroups") {
			pending = append(pending, d) // the kubelet removes a deleted pod's cgroup
		} else {
			final = append(final, d)
		}
	}
	return pending, final, nil
}

// diff lists now's items base lacks ("left") and base's now lacks ("gone").
func diff(prefix string, now, base []string) []string {
	var out []string
	for _, s := range now {
		if !slices.Contains(base, s) {
			out = append(out, prefix+s)
		}
	}
	for _, s := range base {
		if !slices.Contains(now, s) {
			out = append(out, prefix+s+" gone")
		}
	}
	return out
}

func cpus(v float64) string {
	if v == 0 {
		return "none"
	}
	return fmt.Sprintf("%.2f CPUs", v)
}

// namespaces lists the cluster's namespaces by name, sorted.
func namespaces(ctx context.Context, cs kubernetes.Interface) ([]string, error) {
	l, err := cs.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("list namespaces: %w", err)
	}
	var out []string
	for _, ns := range l.Items {
		out = append(out, ns.Name)
	}
	sort.Strings(out)
	return out, nil
}

// listed is a kind objects lists, by its resource.
type listed struct {
	kind string
	gvr  schema.GroupVersionResource
}

var (
	// inOwnNamespaces are listed in the cluster's own namespaces (a run's are compared whole).
	inOwnNamespaces = []listed{
		{"Service", corev1.SchemeGroupVersion.WithResource("services")},
		{"ConfigMap", corev1.SchemeGroupVersion.WithResource("configmaps")},
		{"ServiceAccount", corev1.SchemeGroupVersion.WithResource("serviceaccounts")},
		{"Deployment", schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}},
	}
	// clusterScoped are the kinds a control plane installs.
	clusterScoped = []listed{
		{"CustomResourceDefinition", schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}},
		{"ClusterRole", schema.GroupVersionResource{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "clusterroles"}},
		{"ClusterRoleBinding", schema.GroupVersionResource{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "clusterrolebindings"}},
		{"MutatingWebhookConfiguration", schema.GroupVersionResource{Group: "admissionregistration.k8s.io", Version: "v1", Resource: "mutatingwebhookconfigurations"}},
		{"ValidatingWebhookConfiguration", schema.GroupVersionResource{Group: "admissionregistration.k8s.io", Version: "v1", Resource: "validatingwebhookconfigurations"}},
	}
)

// objects lists, as "Kind namespace/name" ("Kind name" when cluster-scoped) and sorted, the pods
// of every namespace, the inOwnNamespaces kinds of the namespaces nss (the baseline's) and the
// clusterScoped kinds: names only, through the metadata API.
func objects(ctx context.Context, mc metadata.Interface, nss []string) ([]string, error) {
	var out []string
	list := func(l listed, ns string) error {
		objs, err := mc.Resource(l.gvr).Namespace(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return fmt.Errorf("list %s %s: %w", l.gvr.Resource, ns, err)
		}
		for _, o := range objs.Items {
			name := o.Name
			if o.Namespace != "" {
				name = o.Namespace + "/" + name
			}
			out = append(out, l.kind+" "+name)
		}
		return nil
	}
	if err := list(listed{"Pod", corev1.SchemeGroupVersion.WithResource("pods")}, metav1.NamespaceAll); err != nil {
		return nil, err
	}
	for _, ns := range nss {
		for _, l := range inOwnNamespaces {
			if err := list(l, ns); err != nil {
				return nil, err
			}
		}
	}
	for _, l := range clusterScoped {
		if err := list(l, ""); err != nil {
			return nil, err
		}
	}
	sort.Strings(out)
	return out, nil
}

// nodeState reads what a run's chaos or pods change on every node: the CPU quotas of its
// kube-proxy and of its pods (kubepods), and the pods' cgroups (a pod whose containers still run
// keeps its cgroup after the API has forgotten it).
func nodeState(c cluster.Cluster) (map[string]string, error) {
	out := map[string]string{}
	for k := range c.Nodes() {
		node := k + 1
		kp, err := c.KubeProxyCgroup(node)
		if err != nil {
			return nil, fmt.Errorf("node %d's kube-proxy cgroup: %w", node, err)
		}
		pods, err := c.PodsCgroup(node)
		if err != nil {
			return nil, fmt.Errorf("node %d's pods cgroup: %w", node, err)
		}
		for what, g := range map[string]*cgroup.Group{"kube-proxy": kp, "pods": pods} {
			q, err := g.CPUQuota()
			if err != nil {
				return nil, fmt.Errorf("node %d's %s CPU quota: %w", node, what, err)
			}
			out[fmt.Sprintf("node %d's %s CPU quota", node, what)] = cpus(q)
		}
		cgs, err := podCgroups(pods.Dir("cpu"))
		if err != nil {
			return nil, fmt.Errorf("node %d's pod cgroups: %w", node, err)
		}
		out[fmt.Sprintf("node %d's pod cgroups", node)] = strings.Join(cgs, " ")
	}
	return out, nil
}

// podCgroups lists the pod cgroups under kubepods directory dir (pod<UID>, directly for
// Guaranteed pods, under burstable/ and besteffort/ for the others), sorted.
func podCgroups(dir string) ([]string, error) {
	var out []string
	for _, sub := range []string{"", "burstable", "besteffort"} {
		es, err := os.ReadDir(filepath.Join(dir, sub))
		if errors.Is(err, fs.ErrNotExist) && sub != "" {
			continue
		}
		if err != nil {
			return nil, err
		}
		for _, e := range es {
			if e.IsDir() && strings.HasPrefix(e.Name(), "pod") {
				out = append(out, e.Name())
			}
		}
	}
	sort.Strings(out)
	return out, nil
}

// deleteRun deletes what run created on c: its cluster-scoped objects (kube.DeleteOwned:
// webhook configurations first), the pods of its namespaces (a short grace: its measurements
// are over) and those namespaces (namespaces, and every namespace carrying its owner label), and
// the ConfigMaps a control plane published into the cluster's own namespaces (istiod's root
// certificate in every namespace) — those compare's baseline lacks.
func deleteRun(ctx context.Context, c cluster.Cluster, run string, nss []string, base *Snapshot) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), GiveBackBudget)
	defer cancel()
	cs, err := kubernetes.NewForConfig(c.RESTConfig())
	if err != nil {
		return err
	}
	var errs []error
	if _, err := kube.DeleteOwned(ctx, c.RESTConfig(), run); err != nil {
		errs = append(errs, fmt.Errorf("delete the run's cluster-scoped objects: %w", err))
	}
	labelled, err := cs.CoreV1().Namespaces().List(ctx, metav1.ListOptions{LabelSelector: kube.OwnerLabel + "=" + run})
	if err != nil {
		return errors.Join(append(errs, fmt.Errorf("list the run's namespaces: %w", err))...)
	}
	all := slices.Clone(nss)
	for _, ns := range labelled.Items {
		if !slices.Contains(all, ns.Name) {
			all = append(all, ns.Name)
		}
	}
	grace := podGrace
	orphan := metav1.DeletePropagationOrphan
	for _, ns := range all {
		// The pods' owners first (their pods orphaned, then deleted at once below): a
		// ReplicaSet would replace the pods deleted, and the namespace's own deletion would
		// give every pod its grace period.
		apps := cs.AppsV1()
		for what, del := range map[string]func(context.Context, metav1.DeleteOptions, metav1.ListOptions) error{
			"Deployments": apps.Deployments(ns).DeleteCollection, "ReplicaSets": apps.ReplicaSets(ns).DeleteCollection,
			"DaemonSets": apps.DaemonSets(ns).DeleteCollection, "StatefulSets": apps.StatefulSets(ns).DeleteCollection,
		} {
			if err := del(ctx, metav1.DeleteOptions{PropagationPolicy: &orphan}, metav1.ListOptions{}); err != nil && !apierrors.IsNotFound(err) {
				errs = append(errs, fmt.Errorf("delete the %s of namespace %s: %w", what, ns, err))
			}
		}
		err := cs.CoreV1().Pods(ns).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: &grace}, metav1.ListOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("delete the pods of namespace %s: %w", ns, err))
		}
		if err := cs.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("delete namespace %s: %w", ns, err))
		}
	}
	if err := deleteNewConfigMaps(ctx, cs, base); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// deleteNewConfigMaps deletes the ConfigMaps of the baseline's namespaces that base lacks, but
// in the system's namespaces (kube-*), where Kubernetes' own controllers write and control
// planes do not publish (istiod skips them).
func deleteNewConfigMaps(ctx context.Context, cs kubernetes.Interface, base *Snapshot) error {
	var errs []error
	for _, ns := range base.Namespaces {
		if strings.HasPrefix(ns, "kube-") {
			continue
		}
		cms, err := cs.CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			if !apierrors.IsNotFound(err) {
				errs = append(errs, err)
			}
			continue
		}
		for _, cm := range cms.Items {
			if slices.Contains(base.Objects, "ConfigMap "+ns+"/"+cm.Name) {
				continue
			}
			if err := cs.CoreV1().ConfigMaps(ns).Delete(ctx, cm.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
				errs = append(errs, fmt.Errorf("delete ConfigMap %s/%s: %w", ns, cm.Name, err))
			}
		}
	}
	return errors.Join(errs...)
}

// claimNamespaces creates the run's namespaces, labelled as its own; one that exists is
// refused: it is another run's, or something the baseline check missed.
func claimNamespaces(ctx context.Context, c cluster.Cluster, run string, nss []string) error {
	cs, err := kubernetes.NewForConfig(c.RESTConfig())
	if err != nil {
		return err
	}
	for _, ns := range nss {
		_, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: map[string]string{kube.OwnerLabel: run}}}, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("namespace %s exists on the reused cluster: not run %s's", ns, run)
		}
		if err != nil {
			return fmt.Errorf("create the run's namespace %s: %w", ns, err)
		}
	}
	return nil
}
