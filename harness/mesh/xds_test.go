package mesh

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshchaos/meshchaos/harness/subject"
)

func TestParseXDS(t *testing.T) {
	for in, want := range map[string]string{"auto": XDSAuto, "": XDSAuto, "tls": XDSSecure, "plaintext": XDSPlaintext} {
		got, err := ParseXDS(in)
		require.NoError(t, err, in)
		assert.Equal(t, want, got, in)
	}
	_, err := ParseXDS("mtls")
	assert.ErrorContains(t, err, `xDS transport "mtls": use auto`)
}

// --xds tls on a control plane without a secure port is refused before anything starts; the
// reference serves one, and so does a descriptor that declares secureXDS.
func TestSecureXDSNeedsASecurePort(t *testing.T) {
	ref, err := subject.Parse("reference")
	require.NoError(t, err)
	spec := Spec{Nodes: 1, ControlPlane: ref, CP: subject.Placement{Node: 1}, XDS: XDSSecure}
	assert.NoError(t, spec.Validate())

	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "cp.yaml"), []byte("kind: List\n"), 0o644))
	desc := `install: {command: [cat, cp.yaml]}
namespace: mesh
selector: app=cp
deployment: cp
container: cp
xds: {service: cp, port: 15010}
admin: {port: 15014, metricsPath: /metrics}
`
	file := filepath.Join(dir, "d.yaml")
	require.NoError(t, os.WriteFile(file, []byte(desc), 0o644))
	plain, err := subject.Parse("external:" + file)
	require.NoError(t, err)
	spec.ControlPlane = plain
	assert.ErrorContains(t, spec.Validate(), "serves no secure xDS port")
	spec.XDS = XDSAuto
	assert.NoError(t, spec.Validate(), "auto falls back to plaintext")
}
