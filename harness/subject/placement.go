package subject

import (
	"context"
	"fmt"
	"strconv"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/meshchaos/meshchaos/harness/cluster"
	"github.com/meshchaos/meshchaos/harness/kube"
)

// placementMutators turn a Placement into Apply mutators on a control plane's Deployment whose
// pods carry the labels match and whose serving container is container: where the pods may
// run, how many, their QoS class and priority. The node pin and CPU limit stay with the
// caller's existing mutators.
func placementMutators(p Placement, match map[string]string, container string) ([]kube.Mutator, error) {
	var muts []kube.Mutator
	switch p.QoS {
	case "":
	case QoSBestEffort:
		muts = append(muts, resources(container, nil))
	case QoSGuaranteed:
		if p.CPULimit == "" || p.MemoryLimit == "" {
			return nil, fmt.Errorf("QoS %s needs a CPU and a memory limit (requests are set to them)", QoSGuaranteed)
		}
		both := map[string]any{"cpu": p.CPULimit, "memory": p.MemoryLimit}
		muts = append(muts, resources(container, map[string]any{"requests": both, "limits": both}))
	default:
		return nil, fmt.Errorf("QoS %q: use %s, %s or nothing (the control plane's own requests)", p.QoS, QoSBestEffort, QoSGuaranteed)
	}
	if len(p.Nodes) > 0 {
		vals := make([]any, 0, len(p.Nodes))
		for _, k := range p.Nodes {
			vals = append(vals, strconv.Itoa(k))
		}
		muts = append(muts, deploymentField(map[string]any{"nodeAffinity": map[string]any{
			"requiredDuringSchedulingIgnoredDuringExecution": map[string]any{"nodeSelectorTerms": []any{
				map[string]any{"matchExpressions": []any{map[string]any{"key": cluster.NodeLabel, "operator": "In", "values": vals}}},
			}},
		}}, "spec", "template", "spec", "affinity"))
	}
	if p.Replicas > 1 {
		muts = append(muts, deploymentField(int64(p.Replicas), "spec", "replicas"),
			deploymentField(map[string]any{"preferredDuringSchedulingIgnoredDuringExecution": []any{map[string]any{
				"weight": int64(100),
				"podAffinityTerm": map[string]any{
					"labelSelector": map[string]any{"matchLabels": stringMap(match)},
					"topologyKey":   "kubernetes.io/hostname",
				},
			}}}, "spec", "template", "spec", "affinity", "podAntiAffinity"))
	}
	if p.PriorityClass != "" {
		muts = append(muts, deploymentField(p.PriorityClass, "spec", "template", "spec", "priorityClassName"))
	}
	return muts, nil
}

// priorityClassYAML is the PriorityClass Placement.PriorityClass names: as high as
// system-cluster-critical's user-settable counterpart, so the scheduler preempts business pods
// for the control plane.
func priorityClassYAML(name string) []byte {
	return []byte(fmt.Sprintf(`apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata:
  name: %s
value: 1000000000
preemptionPolicy: PreemptLowerPriority
description: the mesh control plane (meshchaos)
`, name))
}

// deploymentField sets one field of every Deployment, merging maps into what is there.
func deploymentField(v any, path ...string) kube.Mutator {
	return func(o *unstructured.Unstructured) error {
		if o.GetKind() != "Deployment" {
			return nil
		}
		if m, ok := v.(map[string]any); ok {
			old, _, _ := unstructured.NestedMap(o.Object, path...)
			if old == nil {
				old = map[string]any{}
			}
			for k, x := range m {
				old[k] = x
			}
			v = old
		}
		return unstructured.SetNestedField(o.Object, runtimeCopy(v), path...)
	}
}

// runtimeCopy deep-copies v so no two objects share a map or slice.
func runtimeCopy(v any) any {
	switch x := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[k] = runtimeCopy(e)
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = runtimeCopy(e)
		}
		return out
	}
	return v
}

// resources replaces the named container's resources of every Deployment (nil: none at all).
func resources(container string, res map[string]any) kube.Mutator {
	return func(o *unstructured.Unstructured) error {
		if o.GetKind() != "Deployment" {
			return nil
		}
		path := []string{"spec", "template", "spec", "containers"}
		cs, _, err := unstructured.NestedSlice(o.Object, path...)
		if err != nil {
			return err
		}
		set := false
		for i, c := range cs {
			m, ok := c.(map[string]any)
			if !ok || m["name"] != container {
				continue
			}
			if res == nil {
				delete(m, "resources")
			} else {
				m["resources"] = runtimeCopy(res)
			}
			cs[i], set = m, true
		}
		if !set {
			return fmt.Errorf("deployment %s has no container %q to set resources on", o.GetName(), container)
		}
		return unstructured.SetNestedSlice(o.Object, cs, path...)
	}
}

// stringMap is m as an unstructured object's map.
func stringMap(m map[string]string) map[string]any {
	out := make(map[string]any, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// apply applies y to c as the run's own (kube.Owned: on a shared cluster the run changes only
// what it created) and reports what it found there and kept as it was.
func apply(ctx context.Context, c cluster.Cluster, p Placement, y []byte, muts ...kube.Mutator) error {
	rep, err := kube.Apply(ctx, c.RESTConfig(), y, append([]kube.Mutator{kube.Owned(c.Name())}, muts...)...)
	logKept(p, rep)
	return err
}

// logKept reports the cluster's own objects an apply used as they were.
func logKept(p Placement, rep kube.Report) {
	for _, k := range rep.Kept {
		if p.Logf != nil {
			p.Logf("%s", k)
		}
	}
}
