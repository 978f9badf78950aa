package meshchaos_test

import (
	"bufio"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// tier1Only are tests that must never leave make test: the both-ways cases of every experiment
// and the table's check against the code.
var tier1Only = map[string][]string{"./experiments": {"TestBothWays", "TestBothWaysCoverEverything"}}

// TestTiersFile holds hack/tiers.txt (the tier-2 list hack/test.sh reads) against the code: every
// package exists, every test named is a top-level test of its package, no name twice, and none
// of tier1Only.
func TestTiersFile(t *testing.T) {
	f, err := os.Open("hack/tiers.txt")
	require.NoError(t, err)
	defer f.Close()
	sc := bufio.NewScanner(f)
	seen := map[string]bool{}
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) == 0 || strings.HasPrefix(fields[0], "#") {
			continue
		}
		pkg, names := fields[0], fields[1:]
		require.NotEmpty(t, names, "hack/tiers.txt: %s lists no test", pkg)
		assert.False(t, seen[pkg], "hack/tiers.txt: %s on two lines", pkg)
		seen[pkg] = true
		tests := testsOf(t, pkg)
		if len(names) == 1 && names[0] == "*" {
			for _, n := range tier1Only[pkg] {
				assert.False(t, tests[n], "hack/tiers.txt: %s * takes %s out of make test", pkg, n)
			}
			continue
		}
		dup := map[string]bool{}
		for _, n := range names {
			assert.True(t, tests[n], "hack/tiers.txt: %s has no test %s", pkg, n)
			assert.False(t, dup[n], "hack/tiers.txt: %s %s named twice", pkg, n)
			dup[n] = true
			for _, keep := range tier1Only[pkg] {
				assert.NotEqual(t, keep, n, "hack/tiers.txt: %s %s must stay in make test", pkg, n)
			}
		}
	}
	require.NoError(t, sc.Err())
}

// testsOf lists the top-level Test functions of the package in directory dir.
func testsOf(t *testing.T, dir string) map[string]bool {
	files, err := filepath.Glob(filepath.Join(dir, "*_test.go"))
	require.NoError(t, err)
	require.NotEmpty(t, files, "hack/tiers.txt: %s has no tests", dir)
	out := map[string]bool{}
	fset := token.NewFileSet()
	for _, name := range files {
		file, err := parser.ParseFile(fset, name, nil, parser.SkipObjectResolution)
		require.NoError(t, err)
		for _, d := range file.Decls {
			if fn, ok := d.(*ast.FuncDecl); ok && fn.Recv == nil && strings.HasPrefix(fn.Name.Name, "Test") {
				out[fn.Name.Name] = true
			}
		}
	}
	return out
}
