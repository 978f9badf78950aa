// Package prereq is how a test says what it needs of the machine: root, the integration
// environment (binaries, clusters), Docker. Where a prerequisite is missing a test skips and says
// why, except in CI (CI set in the environment, as .ci/run sets it), where a missing
// prerequisite fails the test: a CI run that skips its integration tests proves nothing, and
// `go test` without -v would still exit 0.
//
// Which tests run in which tier is not decided here but by the explicit lists of
// hack/tiers.txt (see hack/test.sh).
package prereq

import (
	"fmt"
	"os"
	"testing"
)

// SkipIntegration is the variable that turns the integration tests off (`make unit`).
const SkipIntegration = "MESHCHAOS_SKIP_INTEGRATION"

// InCI reports whether the tests run in CI: the CI variable is set, as CI systems and .ci/run set it.
func InCI() bool { return os.Getenv("CI") != "" }

// Missing ends t for want of a prerequisite: a failure in CI, a skip elsewhere.
func Missing(t testing.TB, format string, args ...any) {
	t.Helper()
	why := fmt.Sprintf(format, args...)
	if InCI() {
		t.Fatalf("prerequisite missing in CI (a skip would hide this test): %s", why)
		return
	}
	t.Skip(why)
}

// Integration ends t when the integration tests are turned off (MESHCHAOS_SKIP_INTEGRATION=1);
// in CI that is a failure.
func Integration(t testing.TB) {
	t.Helper()
	if os.Getenv(SkipIntegration) == "1" {
		Missing(t, "%s=1", SkipIntegration)
	}
}

// Root ends t unless it runs as root (cgroups, network namespaces, mounts, clusters), and when
// the integration tests are turned off.
func Root(t testing.TB, why string) {
	t.Helper()
	Integration(t)
	if os.Geteuid() != 0 {
		Missing(t, "needs root: %s", why)
	}
}
