package ca

import (
	"context"
	"crypto/x509"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// verifies reports whether a serving certificate of ca chains to root.
func verifies(t *testing.T, ca *CA, root []byte) bool {
	t.Helper()
	cert, err := ca.Serving([]string{"meshchaos-controlplane.ns.svc"}, nil)
	require.NoError(t, err)
	leaf, err := x509.ParseCertificate(cert.Certificate[0])
	require.NoError(t, err)
	pool := x509.NewCertPool()
	require.True(t, pool.AppendCertsFromPEM(root))
	_, err = leaf.Verify(x509.VerifyOptions{Roots: pool, DNSName: "meshchaos-controlplane.ns.svc"})
	return err == nil
}

func TestLoadOrCreateSharesOneCA(t *testing.T) {
	kc := fake.NewClientset()
	first, err := LoadOrCreate(context.Background(), kc, "cp", "meshchaos-ca-secret", "test")
	require.NoError(t, err)
	second, err := LoadOrCreate(context.Background(), kc, "cp", "meshchaos-ca-secret", "test")
	require.NoError(t, err)
	assert.Equal(t, first.PEM, second.PEM, "the second replica reads the first one's CA")
	assert.True(t, verifies(t, second, first.PEM), "certificates the second replica issues chain to the first one's root")
	other, err := New("other", DefaultValidity)
	require.NoError(t, err)
	assert.False(t, verifies(t, other, first.PEM))
}

// A replica that loses the create race reads the winner's CA instead of its own.
func TestLoadOrCreateLosingTheRaceReadsTheWinners(t *testing.T) {
	winner, err := New("winner", DefaultValidity)
	require.NoError(t, err)
	key, err := winner.keyPEM()
	require.NoError(t, err)
	kc := fake.NewClientset()
	gets := 0
	kc.PrependReactor("get", "secrets", func(k8stesting.Action) (bool, runtime.Object, error) {
		gets++
		if gets == 1 { // not there yet when this replica looks
			return true, nil, apierrors.NewNotFound(corev1.Resource("secrets"), "s")
		}
		return true, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "s", Namespace: "cp"},
			Data: map[string][]byte{CertKey: winner.PEM, KeyKey: key}}, nil
	})
	kc.PrependReactor("create", "secrets", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewAlreadyExists(corev1.Resource("secrets"), "s")
	})
	got, err := LoadOrCreate(context.Background(), kc, "cp", "s", "loser")
	require.NoError(t, err)
	assert.Equal(t, winner.PEM, got.PEM)
	assert.True(t, verifies(t, got, winner.PEM))
}

func TestBrokenSecretSaysWhatToDo(t *testing.T) {
	kc := fake.NewClientset(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "s", Namespace: "cp"},
		Data: map[string][]byte{CertKey: []byte("nope")}})
	_, err := LoadOrCreate(context.Background(), kc, "cp", "s", "x")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "delete it")
}
