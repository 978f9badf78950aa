package cli

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/meshchaos/meshchaos/harness/cluster/local"
)

// fakeLocal replaces the local substrate under 'cluster down' for the test: owners is what the
// host would report (owner checks answer from it too), and the names taken down are recorded.
// Nothing on this host is ever looked at or touched.
func fakeLocal(t *testing.T, owners []local.OwnerStatus, downErr map[string]error) *[]string {
	t.Helper()
	var downed []string
	byName := map[string]local.OwnerStatus{}
	for _, o := range owners {
		byName[o.Name] = o
	}
	oldOwners, oldCheck, oldDown, oldEuid := localOwners, localCheckOwner, localDown, euid
	t.Cleanup(func() { localOwners, localCheckOwner, localDown, euid = oldOwners, oldCheck, oldDown, oldEuid })
	localOwners = func(home string) ([]local.OwnerStatus, error) { return owners, nil }
	localCheckOwner = func(home, name string) local.OwnerStatus { return byName[name] }
	localDown = func(_ context.Context, home, name string, _ func(string, ...any)) error {
		downed = append(downed, name)
		return downErr[name]
	}
	euid = func() int { return 0 }
	return &downed
}

var hostOwners = []local.OwnerStatus{
	{Name: "bench", Stale: false, Why: "its owner, pid 31643, is running"},
	{Name: "ci-a", Stale: true, Why: "its owner, pid 4242, is gone"},
	{Name: "ci-b", Stale: true, Why: "its owner, pid 77, is gone (the pid now belongs to another process)"},
	{Name: "odd", Stale: false, Why: "no owner record (no state directory under /h, no process naming one)"},
}

// --stale takes down exactly the clusters whose owner is gone and says which it skipped and why.
func TestClusterDownStaleRemovesOnlyClustersWhoseOwnerIsGone(t *testing.T) {
	downed := fakeLocal(t, hostOwners, nil)
	code, out := run(t, "cluster", "down", "--stale")
	assert.Equal(t, 0, code, out)
	assert.Equal(t, []string{"ci-a", "ci-b"}, *downed)
	assert.Contains(t, out, "skipped bench: its owner, pid 31643, is running")
	assert.Contains(t, out, "skipped odd: no owner record")
	assert.Contains(t, out, "removed ci-a (local; its owner, pid 4242, is gone)")
	assert.Contains(t, out, "removed ci-b (local; its owner, pid 77, is gone (the pid now belongs to another process))")
}

// --prefix narrows --stale; what it leaves out is not mentioned.
func TestClusterDownStaleWithPrefix(t *testing.T) {
	downed := fakeLocal(t, hostOwners, nil)
	code, out := run(t, "cluster", "down", "--stale", "--prefix", "ci-b")
	assert.Equal(t, 0, code, out)
	assert.Equal(t, []string{"ci-b"}, *downed)
	assert.NotContains(t, out, "bench")

	*downed = nil
	code, out = run(t, "cluster", "down", "--stale", "--prefix", "bench")
	assert.Equal(t, 0, code, out)
	assert.Empty(t, *downed)
	assert.Contains(t, out, "skipped bench: its owner, pid 31643, is running")
	assert.Contains(t, out, "no stale local clusters named bench… on this host")
}

// The owner is checked again right before each teardown: one that is back is skipped.
func TestClusterDownStaleChecksTheOwnerAgainBeforeEachTeardown(t *testing.T) {
	downed := fakeLocal(t, hostOwners, nil)
	localCheckOwner = func(home, name string) local.OwnerStatus {
		return local.OwnerStatus{Name: name, Why: "its owner, pid 9, is running"}
	}
	code, out := run(t, "cluster", "down", "--stale")
	assert.Equal(t, 0, code, out)
	assert.Empty(t, *downed)
	assert.Contains(t, out, "skipped ci-a: its owner, pid 9, is running")
}

// A teardown that fails is reported with the cluster's name (exit 1) and the others still go.
func TestClusterDownStaleReportsAFailedTeardown(t *testing.T) {
	downed := fakeLocal(t, hostOwners, map[string]error{"ci-a": errors.New("unmount: device busy")})
	code, out := run(t, "cluster", "down", "--stale")
	assert.Equal(t, 1, code, out)
	assert.Equal(t, []string{"ci-a", "ci-b"}, *downed)
	assert.Contains(t, out, "ci-a: unmount: device busy")
	assert.Contains(t, out, "removed ci-b")
}

func TestClusterDownStaleNothingToDo(t *testing.T) {
	downed := fakeLocal(t, hostOwners[:1], nil)
	code, out := run(t, "cluster", "down", "--stale")
	assert.Equal(t, 0, code, out)
	assert.Empty(t, *downed)
	assert.Contains(t, out, "no stale local clusters on this host")
}

// Bad combinations are usage errors (exit 2) and never reach the host.
func TestClusterDownStaleBadInputExitsTwo(t *testing.T) {
	downed := fakeLocal(t, hostOwners, nil)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--stale", "--name", "ci-a"}, "exactly one of --name N, --all or --stale"},
		{[]string{"--stale", "--all"}, "exactly one of"},
		{[]string{"--stale", "--substrate", "kind"}, "--stale covers local clusters only"},
		{[]string{"--name", "ci-a", "--prefix", "ci"}, "--prefix narrows --all and --stale"},
	} {
		code, out := run(t, append([]string{"cluster", "down"}, tc.args...)...)
		assert.Equal(t, 2, code, "%v: %s", tc.args, out)
		assert.Contains(t, out, tc.want, "%v", tc.args)
	}
	euid = func() int { return 1000 }
	code, out := run(t, "cluster", "down", "--stale")
	assert.Equal(t, 2, code, out)
	assert.Contains(t, out, "needs root")
	assert.Empty(t, *downed)
}

// The help says what --stale covers.
func TestClusterDownHelpExplainsStale(t *testing.T) {
	code, out := run(t, "cluster", "down", "--help")
	assert.Equal(t, 0, code, out)
	assert.True(t, strings.Contains(out, "--stale") && strings.Contains(out, "kind clusters record no owner"), out)
}
