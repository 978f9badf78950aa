package kube

import (
	"fmt"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// Mutator adjusts a decoded object before Apply sends it; an error names what did not fit.
type Mutator func(*unstructured.Unstructured) error

// podSpecPath is where an object of the given kind keeps the spec of its pods, nil for kinds
// without pods.
func podSpecPath(kind string) []string {
	switch kind {
	case "Pod":
		return []string{"spec"}
	case "Deployment", "DaemonSet", "StatefulSet", "ReplicaSet", "Job":
		return []string{"spec", "template", "spec"}
	}
	return nil
}

// PinToNode returns an Apply mutator that schedules the pods of Pods, Deployments, DaemonSets,
// StatefulSets, ReplicaSets and Jobs onto nodes labelled label=value: it adds the pair to their
// nodeSelector, keeping the rest. An empty value leaves the objects as they are. (The local
// substrate labels its nodes meshchaos.io/node=1, =2, ….)
func PinToNode(label, value string) Mutator {
	return func(o *unstructured.Unstructured) error {
		path := podSpecPath(o.GetKind())
		if value == "" || path == nil {
			return nil
		}
		path = append(path, "nodeSelector")
		sel, _, _ := unstructured.NestedStringMap(o.Object, path...)
		if sel == nil {
			sel = map[string]string{}
		}
		sel[label] = value
		// Fails only if a field on the path is not an object: the API server rejects that
		// object anyway, with a clearer message than a mutator could give.
		_ = unstructured.SetNestedStringMap(o.Object, sel, path...)
		return nil
	}
}

// CPULimit returns an Apply mutator that sets resources.limits.cpu to qty (e.g. "100m") on the
// container named container ("" for every container, init containers included) of every object
// with pods (see PinToNode). An empty qty leaves the objects as they are. A limit below the
// container's request is rejected by the API server. A named container that an object with pods
// does not have is an error: a misspelt name must not leave a fault without its limit.
func CPULimit(container, qty string) Mutator {
	return limit("cpu", container, qty)
}

// MemoryLimit returns an Apply mutator that sets resources.limits.memory to qty (e.g. "256Mi"),
// like CPULimit.
func MemoryLimit(container, qty string) Mutator {
	return limit("memory", container, qty)
}

func limit(resource, container, qty string) Mutator {
	return func(o *unstructured.Unstructured) error {
		path := podSpecPath(o.GetKind())
		if qty == "" || path == nil {
			return nil
		}
		set := false
		for _, list := range []string{"containers", "initContainers"} {
			p := append(append([]string{}, path...), list)
			cs, found, err := unstructured.NestedSlice(o.Object, p...)
			if !found || err != nil {
				continue
			}
			for i, c := range cs {
				m, ok := c.(map[string]any)
				if !ok || (container != "" && m["name"] != container) {
					continue
				}
				// As in PinToNode: only a malformed container fails here, and the API server says so.
				_ = unstructured.SetNestedField(m, qty, "resources", "limits", resource)
				cs[i], set = m, true
			}
			_ = unstructured.SetNestedSlice(o.Object, cs, p...)
		}
		if !set && container != "" {
			return fmt.Errorf("no container %q to set the %s limit on", container, resource)
		}
		return nil
	}
}
