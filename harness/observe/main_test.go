package observe

import (
	"os"
	"testing"

	"github.com/meshchaos/meshchaos/harness/internal/memhog"
)

// The test binary doubles as the profiled process (see memhog).
func TestMain(m *testing.M) {
	memhog.MaybeRun()
	os.Exit(m.Run())
}
