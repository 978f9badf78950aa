package apiserver

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

func TestServerServesTheKubernetesAPI(t *testing.T) {
	s := StartForTest(t)
	cs, err := kubernetes.NewForConfig(s.RESTConfig())
	require.NoError(t, err)
	ctx := context.Background()
	_, err = cs.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "probe"}, Data: map[string]string{"k": "v"},
	}, metav1.CreateOptions{})
	require.NoError(t, err)

	// The written kubeconfig reaches the same server.
	cfg, err := clientcmd.BuildConfigFromFlags("", s.KubeconfigPath())
	require.NoError(t, err)
	cs2, err := kubernetes.NewForConfig(cfg)
	require.NoError(t, err)
	cm, err := cs2.CoreV1().ConfigMaps("default").Get(ctx, "probe", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, "v", cm.Data["k"])
}

func TestClientKubeconfigAuthenticatesAsItsUserOnly(t *testing.T) {
	s := StartForTest(t)
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "kubeconfig")
	require.NoError(t, s.WriteClientKubeconfig(path, s.URL(), "system:node:a", "system:nodes"))
	fi, err := os.Stat(path)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), fi.Mode().Perm(), "the kubeconfig holds the client key")
	cfg, err := clientcmd.BuildConfigFromFlags("", path)
	require.NoError(t, err)
	cs, err := kubernetes.NewForConfig(cfg)
	require.NoError(t, err)
	who, err := cs.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authnv1.SelfSubjectReview{}, metav1.CreateOptions{})
	require.NoError(t, err)
	assert.Equal(t, "system:node:a", who.Status.UserInfo.Username)
	assert.Contains(t, who.Status.UserInfo.Groups, "system:nodes")
	assert.NotContains(t, who.Status.UserInfo.Groups, "system:masters")
	_, err = cs.CoreV1().Secrets("default").List(ctx, metav1.ListOptions{})
	assert.True(t, apierrors.IsForbidden(err), "a node may not list Secrets: %v", err)
}

func TestFirstServiceIP(t *testing.T) {
	ip, err := firstServiceIP("10.96.0.0/16")
	require.NoError(t, err)
	assert.Equal(t, "10.96.0.1", ip.String())
	_, err = firstServiceIP("fd00::/64")
	assert.ErrorContains(t, err, "IPv4")
}
