package manifests_test

import (
	"fmt"
	"testing"

	"github.com/meshchaos/meshchaos/controlplane/manifests"
	"github.com/meshchaos/meshchaos/harness/kube"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

func TestControlPlaneManifests(t *testing.T) {
	data, err := manifests.ControlPlane(manifests.Params{SyncGate: false, Regress: []string{"ungated", "quadratic-scope"},
		RootCertNamespaces: "meshchaos.io/run=r1"})
	require.NoError(t, err)
	objs, err := kube.Decode(data)
	require.NoError(t, err)
	kinds := map[string]*unstructured.Unstructured{}
	for _, o := range objs {
		kinds[o.GetKind()] = o
	}
	for _, k := range []string{"Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding", "Deployment", "Service",
		"MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"} {
		require.Contains(t, kinds, k)
	}
	containers, _, _ := unstructured.NestedSlice(kinds["Deployment"].Object, "spec", "template", "spec", "containers")
	require.Len(t, containers, 1)
	c := containers[0].(map[string]any)
	require.Equal(t, "meshchaos.local/controlplane:dev", c["image"])
	require.Equal(t, []any{"--xds-addr=$(POD_IP):15010",
		"--secure-xds-addr=$(POD_IP):15012", "--secure-xds-dns=meshchaos-controlplane.meshchaos-system.svc",
		"--namespace=$(POD_NAMESPACE)", "--ca-secret=meshchaos-ca-secret", "--root-cert-namespaces=meshchaos.io/run=r1",
		"--admin-addr=$(POD_IP):15014", "--ready-addr=$(POD_IP):8080", "--sync-gate=false",
		"--regress=ungated", "--regress=quadratic-scope",
		"--webhook-addr=$(POD_IP):15017", "--webhook-dns=meshchaos-controlplane.meshchaos-system.svc",
		"--inject-image=meshchaos.local/xdsproxy:dev", "--inject-pull-policy=Never",
		"--inject-xds-address=meshchaos-controlplane.meshchaos-system.svc:15012",
		"--inject-xds-server-name=meshchaos-controlplane.meshchaos-system.svc", "--inject-xds-root-configmap=meshchaos-ca-root-cert",
		"--mutating-webhook-config=meshchaos-sidecar-injector", "--validating-webhook-config=meshchaos-validation"}, c["args"])
	// istiod's chart's readiness probe: /ready on 8080, initial delay 1 s, period 3 s, timeout
	// 5 s, Kubernetes' default failure threshold 3.
	probe, _, _ := unstructured.NestedMap(c, "readinessProbe")
	require.Equal(t, map[string]any{"httpGet": map[string]any{"path": "/ready", "port": float64(8080)},
		"initialDelaySeconds": float64(1), "periodSeconds": float64(3), "timeoutSeconds": float64(5), "failureThreshold": float64(3)}, probe)
	// GOMAXPROCS from the CPU limit, as istiod's chart has it.
	env, _, _ := unstructured.NestedSlice(c, "env")
	require.Contains(t, env, map[string]any{"name": "GOMAXPROCS",
		"valueFrom": map[string]any{"resourceFieldRef": map[string]any{"resource": "limits.cpu", "divisor": "1"}}})
	ports, _, _ := unstructured.NestedSlice(kinds["Service"].Object, "spec", "ports")
	var names []string
	for _, p := range ports {
		names = append(names, p.(map[string]any)["name"].(string))
	}
	require.Equal(t, []string{"grpc-xds", "grpc-xds-tls", "https-webhook"}, names, "the admin port (pprof, config dump, ballast) is not in the Service")
	assert.NotContains(t, fmt.Sprint(c["args"]), "--generation", "no --generation: the binary's default")
	rules, _, _ := unstructured.NestedSlice(kinds["ClusterRole"].Object, "rules")
	require.Contains(t, rules, map[string]any{"apiGroups": []any{"authentication.k8s.io"}, "resources": []any{"tokenreviews"}, "verbs": []any{"create"}})
	require.Contains(t, rules, map[string]any{"apiGroups": []any{""}, "resources": []any{"configmaps"},
		"verbs": []any{"get", "list", "watch", "create", "update"}})
	secrets, _, _ := unstructured.NestedSlice(kinds["Role"].Object, "rules")
	require.Equal(t, []any{map[string]any{"apiGroups": []any{""}, "resources": []any{"secrets"}, "verbs": []any{"get", "create"}}}, secrets,
		"Secrets only in its own namespace")

	// A run that OOM-kills the control plane allows the ballast, bounded.
	data, err = manifests.ControlPlane(manifests.Params{SyncGate: true, BallastMaxMiB: 512})
	require.NoError(t, err)
	require.Contains(t, string(data), "- --ballast-max=512\n")
	require.Contains(t, string(data), "- --root-cert-namespaces=meshchaos.io/run\n", "no selector given: the namespaces of meshchaos runs, never a shared cluster's others")
}

// TestControlPlaneGeneration: Params.Generation is the control plane's --generation; an
// unknown mode is refused before anything is applied.
func TestControlPlaneGeneration(t *testing.T) {
	data, err := manifests.ControlPlane(manifests.Params{Generation: "per-proxy"})
	require.NoError(t, err)
	assert.Contains(t, string(data), "        - --generation=per-proxy\n")
	_, err = manifests.ControlPlane(manifests.Params{Generation: "per-pod"})
	assert.ErrorContains(t, err, `unknown generation mode "per-pod" (known: per-scope, per-proxy)`)
}
