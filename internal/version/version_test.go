package version

import (
	"os"
	"regexp"
	"runtime/debug"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func stamped(settings ...string) *debug.BuildInfo {
	bi := &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Path: "github.com/meshchaos/meshchaos", Version: "v0.0.0-20261126063131-248835d732d4+dirty"}}
	for i := 0; i+1 < len(settings); i += 2 {
		bi.Settings = append(bi.Settings, debug.BuildSetting{Key: settings[i], Value: settings[i+1]})
	}
	return bi
}

func TestFromBuildInfo(t *testing.T) {
	in := from(stamped("-trimpath", "true", "vcs", "git", "vcs.revision", "248835d732d4b01647831fd771466f9d133049c4",
		"vcs.time", "2026-11-26T06:31:31Z", "vcs.modified", "true"), "", "", "")
	assert.Equal(t, "v0.0.0-20261126063131-248835d732d4+dirty", in.Version)
	assert.Equal(t, "248835d732d4b01647831fd771466f9d133049c4", in.Revision)
	require.NotNil(t, in.Time)
	assert.Equal(t, time.Date(2026, 11, 26, 6, 31, 31, 0, time.UTC), *in.Time)
	require.NotNil(t, in.Modified)
	assert.True(t, *in.Modified)
	assert.Equal(t, "go1.26.8", in.GoVersion)
}

func TestFromUnstampedBuild(t *testing.T) {
	// go test, go run, go build in a linked worktree: no vcs.* settings.
	bi := stamped()
	bi.Main.Version = "(devel)"
	in := from(bi, "", "", "")
	assert.Equal(t, Info{Version: "(devel)", GoVersion: "go1.26.8"}, in, "nothing is made up: revision, time and modified stay unknown")

	assert.Equal(t, "(devel)", from(nil, "", "", "").Version, "a binary without build info still has a version")
}

func TestLdflagsWinOverBuildInfo(t *testing.T) {
	// In a worktree nested in another checkout, go build stamps the enclosing checkout's revision.
	bi := stamped("vcs.revision", "1111111111111111111111111111111111111111", "vcs.time", "2020-01-01T00:00:00Z", "vcs.modified", "false")
	in := from(bi, "v0.4.0-3-g248835d-dirty", "248835d732d4b01647831fd771466f9d133049c4", "2026-11-26T07:31:31+01:00")
	assert.Equal(t, "v0.4.0-3-g248835d-dirty", in.Version)
	assert.Equal(t, "248835d732d4b01647831fd771466f9d133049c4", in.Revision)
	require.NotNil(t, in.Time)
	assert.Equal(t, time.Date(2026, 11, 26, 6, 31, 31, 0, time.UTC), *in.Time, "in UTC, as the summary's times")
	require.NotNil(t, in.Modified)
	assert.True(t, *in.Modified, "from git describe's -dirty")

	in = from(bi, "248835d", "248835d732d4b01647831fd771466f9d133049c4", "")
	assert.False(t, *in.Modified)
	assert.Nil(t, in.Time, "an unreadable commit time is unknown, not the enclosing checkout's")
}

func TestGetInATestBinary(t *testing.T) {
	in := Get()
	assert.NotEmpty(t, in.Version)
	assert.NotEmpty(t, in.GoVersion)
}

// TestMakefileSetsTheseVariables guards the Makefile's -X flags: the linker ignores -X for a
// name that does not exist, so a renamed variable would silently leave make builds unstamped.
func TestMakefileSetsTheseVariables(t *testing.T) {
	b, err := os.ReadFile("../../Makefile")
	require.NoError(t, err)
	pkg := regexp.MustCompile(`(?m)^VERSION_PKG\s*:?=\s*(\S+)`).FindSubmatch(b)
	require.NotNil(t, pkg, "the Makefile defines VERSION_PKG")
	assert.Equal(t, "github.com/meshchaos/meshchaos/internal/version", string(pkg[1]))
	// The pointers tie the names to the variables: renaming one breaks this test's build.
	vars := map[string]*string{"describe": &describe, "commit": &commit, "commitTime": &commitTime}
	set := map[string]bool{}
	for _, m := range regexp.MustCompile(`-X \$\(VERSION_PKG\)\.(\w+)=`).FindAllSubmatch(b, -1) {
		name := string(m[1])
		assert.Contains(t, vars, name, "the Makefile sets %s, which this package does not declare", name)
		set[name] = true
	}
	for name := range vars {
		assert.True(t, set[name], "the Makefile does not set %s", name)
	}
	assert.Regexp(t, `-ldflags "[^"]*\$\(VERSION_LDFLAGS\)[^"]*" -o \$\(MESHCHAOS\) `, string(b), "make build stamps the CLI")
}
