package subject

import (
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/api/resource"
	"sigs.k8s.io/yaml"

	cpmanifests "github.com/meshchaos/meshchaos/controlplane/manifests"
	"github.com/meshchaos/meshchaos/harness/params"
)

// TestMemoryParamsFitTheControlPlanes holds params' cpMemoryLimit, which depends on no control
// plane, to the control planes meshchaos deploys: no limit it accepts is below a memory request
// (a Deployment the API server would refuse once the cluster is up), and its help says what ""
// does on the reference.
func TestMemoryParamsFitTheControlPlanes(t *testing.T) {
	floor := resource.MustParse(params.CPMemoryFloor)
	assert.Equal(t, floor.AsApproximateFloat64(), params.CPMemory.Min, "cpMemoryLimit's least value is the floor")

	requests := map[string]string{"reference": cpmanifests.MemoryRequest}
	b, err := os.ReadFile("../../hack/istiod/values.yaml")
	require.NoError(t, err)
	var values struct {
		Resources struct {
			Requests struct{ Memory string }
		}
	}
	require.NoError(t, yaml.Unmarshal(b, &values))
	requests["istiod (hack/istiod/values.yaml)"] = values.Resources.Requests.Memory
	for cp, req := range requests {
		q, err := resource.ParseQuantity(req)
		require.NoError(t, err, cp)
		assert.LessOrEqual(t, q.Cmp(floor), 0, "%s's memory request %s is above cpMemoryLimit's floor %s: raise params.CPMemoryFloor", cp, req, params.CPMemoryFloor)
	}

	assert.Contains(t, params.CPMemory.Range(), "the reference's: "+cpmanifests.DefaultMemoryLimit+")",
		`the help of cpMemoryLimit="" names the reference's default limit`)
}
