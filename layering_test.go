// Package meshchaos_test holds checks about the module as a whole.
package meshchaos_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os/exec"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// module is the import path of this module; the rules below use paths relative to it.
const module = "github.com/meshchaos/meshchaos"

// A rule forbids the packages under from (but not those under exempt) to depend on packages
// under any of deny, except those under allow. Paths are module-relative prefixes ("harness" covers harness/...; "" is the whole
// module). A transitive rule looks at every dependency, the others at direct imports. Only
// non-test imports count: tests may bring up whatever they need.
type rule struct {
	from       string
	exempt     []string
	deny       []string
	allow      []string
	transitive bool
	why        string
}

// substrates are the implementations of the substrate interface.
var substrates = []string{"harness/cluster/local", "harness/cluster/kind", "harness/cluster/existing", "harness/cluster/apiserver"}

var rules = []rule{
	{from: "controlplane", deny: []string{"harness", "workloads", "experiments", "cmd"},
		why: "the reference control plane is a product of its own (it may use images and results/respflags)"},
	{from: "workloads", deny: []string{"controlplane", "harness", "experiments", "cmd"},
		why: "workloads are what runs in pods and know nothing of the harness or the control plane"},
	{from: "images", deny: []string{""}, allow: []string{"images"},
		why: "images is a leaf builder"},
	{from: "results", deny: []string{"harness", "controlplane", "workloads", "experiments", "cmd"},
		why: "results is the schema and its writers; the rest reports into it"},
	{from: "harness", deny: []string{"experiments", "cmd"},
		why: "the harness is the library experiments and the CLI are built from"},
	{from: "harness", exempt: []string{"harness/subject"}, deny: []string{"controlplane"},
		why: "the harness is generic over control planes: only the control-plane-under-test seam (harness/subject) knows the reference's manifests; what every control plane reads (Istio's CRDs) is internal/crds"},
	{from: "harness/params", deny: []string{""}, allow: []string{"harness/params"},
		why: "parameters are a leaf: what a control plane under test needs of them (its memory request) is held to them by that control plane's side (harness/subject's tests), not imported"},
	{from: "harness/cluster", deny: []string{"harness/chaos", "harness/traffic", "harness/observe", "harness/runner", "controlplane", "workloads"},
		why: "substrates bring clusters up and know nothing of what runs on them"},
	{from: "experiments", deny: substrates, transitive: true,
		why: "experiments reach a cluster through the substrate interface, never an implementation"},
	// Shared low-level packages it may link, listed one by one: results/respflags (the
	// response-flag vocabulary its routes put in local replies) and nothing else.
	{from: "cmd/meshchaos-controlplane", deny: []string{""}, allow: []string{"controlplane", "results/respflags"}, transitive: true,
		why: "the control plane's image runs this binary: its heap must be the control plane's, without the harness's packages and their init-time allocations"},
}

// knownViolations are allowed for now, each with its way out. The test logs them, and fails on
// an entry that no longer occurs, so delete the entry together with the import.
var knownViolations = []violation{}

// pkg is one package of the module: its direct and its transitive dependencies inside the module.
type pkg struct {
	imports, deps []string
}

type violation struct {
	pkg, dep string
	via      string // for a transitive dependency: the direct import it comes through
	why      string
}

func (v violation) String() string {
	if v.via != "" {
		return fmt.Sprintf("%s depends on %s (via %s): %s", v.pkg, v.dep, v.via, v.why)
	}
	return fmt.Sprintf("%s imports %s: %s", v.pkg, v.dep, v.why)
}

func (v violation) key() string { return v.pkg + " -> " + v.dep }

// under reports whether the module-relative path p is prefix or below it.
func under(p, prefix string) bool {
	return prefix == "" || p == prefix || strings.HasPrefix(p, prefix+"/")
}

func underAny(p string, prefixes []string) bool {
	return slices.ContainsFunc(prefixes, func(pre string) bool { return under(p, pre) })
}

// check returns every dependency the rules forbid, one per package and dependency, in a stable order.
func check(rules []rule, graph map[string]pkg) []violation {
	names := make([]string, 0, len(graph))
	for n := range graph {
		names = append(names, n)
	}
	sort.Strings(names)
	var out []violation
	seen := map[string]bool{}
	for _, name := range names {
		p := graph[name]
		for _, r := range rules {
			if !under(name, r.from) || underAny(name, r.exempt) {
				continue
			}
			deps := p.imports
			if r.transitive {
				deps = p.deps
			}
			for _, d := range deps {
				if d == name || !underAny(d, r.deny) || underAny(d, r.allow) {
					continue
				}
				v := violation{pkg: name, dep: d, why: r.why}
				if seen[v.key()] {
					continue
				}
				seen[v.key()] = true
				if !slices.Contains(p.imports, d) {
					v.via = through(graph, p, d)
				}
				out = append(out, v)
			}
		}
	}
	return out
}

// through names the first direct import of p that brings in d.
func through(graph map[string]pkg, p pkg, d string) string {
	for _, i := range p.imports {
		if slices.Contains(graph[i].deps, d) {
			return i
		}
	}
	return "?"
}

// partition splits found into the violations knownViolations does not list and those it does,
// and returns the entries of known that no longer occur.
func partition(found, known []violation) (unexpected, allowed, stale []violation) {
	listed := map[string]bool{}
	for _, k := range known {
		listed[k.key()] = true
	}
	occurs := map[string]bool{}
	for _, v := range found {
		occurs[v.key()] = true
		if listed[v.key()] {
			allowed = append(allowed, v)
		} else {
			unexpected = append(unexpected, v)
		}
	}
	for _, k := range known {
		if !occurs[k.key()] {
			stale = append(stale, k)
		}
	}
	return unexpected, allowed, stale
}

// loadGraph lists the module's packages and their non-test dependencies inside the module, with
// one `go list` (go test puts its own go first on $PATH).
func loadGraph(t *testing.T) map[string]pkg {
	t.Helper()
	cmd := exec.Command("go", "list", "-json=ImportPath,Imports,Deps", "./...")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	require.NoError(t, err, "go list: %s", stderr.String())
	rel := func(paths []string) []string {
		var r []string
		for _, p := range paths {
			if p == module {
				r = append(r, "")
			} else if s, ok := strings.CutPrefix(p, module+"/"); ok {
				r = append(r, s)
			}
		}
		return r
	}
	graph := map[string]pkg{}
	dec := json.NewDecoder(bytes.NewReader(out))
	for dec.More() {
		var p struct {
			ImportPath    string
			Imports, Deps []string
		}
		require.NoError(t, dec.Decode(&p))
		name := rel([]string{p.ImportPath})
		require.Len(t, name, 1, "go list ./... answered %s, outside %s", p.ImportPath, module)
		graph[name[0]] = pkg{imports: rel(p.Imports), deps: rel(p.Deps)}
	}
	return graph
}

// TestLayering fails on every import that goes against the layering of DESIGN.md.
func TestLayering(t *testing.T) {
	graph := loadGraph(t)
	for _, r := range rules {
		matched := false
		for name := range graph {
			matched = matched || under(name, r.from)
		}
		assert.True(t, matched, "the rule for %s matches no package: fix the rule", r.from)
	}
	unexpected, allowed, stale := partition(check(rules, graph), knownViolations)
	for _, v := range allowed {
		t.Logf("known violation (listed in knownViolations): %s", v)
	}
	for _, v := range unexpected {
		t.Errorf("layering: %s", v)
	}
	for _, k := range stale {
		t.Errorf("knownViolations lists %s, which no longer occurs: delete the entry", k.key())
	}
}

// TestLayeringCheckFindsViolations runs the rules over a made-up module: the checker reports
// exactly the forbidden edges, direct and transitive, and nothing the rules allow.
func TestLayeringCheckFindsViolations(t *testing.T) {
	graph := map[string]pkg{
		"controlplane/xds":      {imports: []string{"controlplane/model", "images", "results/respflags", "harness/cluster/bins"}},
		"controlplane/model":    {},
		"controlplanetools":     {imports: []string{"harness/runner"}}, // not under controlplane/
		"images":                {imports: []string{"results"}},
		"workloads/echo":        {imports: []string{"results/respflags", "workloads/echo/internal"}},
		"workloads/manifests":   {imports: []string{"images", "controlplane/manifests"}},
		"results":               {imports: []string{"cmd/meshchaos/cli"}},
		"results/respflags":     {},
		"harness/runner":        {imports: []string{"results", "harness/observe"}},
		"harness/params":        {imports: []string{"controlplane/manifests"}, deps: []string{"controlplane/manifests", "images"}},
		"harness/observe":       {imports: []string{"experiments"}},
		"harness/mesh":          {imports: []string{"controlplane/manifests", "internal/crds"}},
		"harness/subject":       {imports: []string{"controlplane/manifests", "controlplane/regress", "internal/crds"}},
		"harness/cluster/local": {imports: []string{"harness/cgroup", "harness/cluster/bins", "images", "harness/runner"}},
		"harness/cluster":       {imports: []string{"harness/cluster/kind"}, deps: []string{"harness/cluster/kind", "harness/cluster/bins"}},
		"experiments": {imports: []string{"harness/runner", "harness/cluster"},
			deps: []string{"harness/runner", "results", "harness/observe", "harness/cluster", "harness/cluster/kind", "harness/cluster/bins"}},
		"experiments/steps": {imports: []string{"harness/cluster/existing"}, deps: []string{"harness/cluster/existing"}},
		"cmd/meshchaos-controlplane": {imports: []string{"controlplane/command"},
			deps: []string{"controlplane/command", "controlplane", "results/respflags", "controlplane/manifests", "images"}},
	}
	var got []string
	for _, v := range check(rules, graph) {
		got = append(got, v.key())
	}
	assert.ElementsMatch(t, []string{
		"controlplane/xds -> harness/cluster/bins",
		"images -> results",
		"workloads/manifests -> controlplane/manifests",
		"results -> cmd/meshchaos/cli",
		"harness/observe -> experiments",
		"harness/params -> controlplane/manifests",
		"harness/mesh -> controlplane/manifests",
		"harness/cluster/local -> harness/runner",
		"experiments -> harness/cluster/kind",
		"experiments/steps -> harness/cluster/existing",
		"cmd/meshchaos-controlplane -> images",
	}, got)

	byKey := map[string]violation{}
	for _, v := range check(rules, graph) {
		byKey[v.key()] = v
	}
	assert.Contains(t, byKey["experiments -> harness/cluster/kind"].String(), "experiments depends on harness/cluster/kind (via harness/cluster): ",
		"a transitive violation names the import it comes through")
	assert.Equal(t, "images imports results: images is a leaf builder", byKey["images -> results"].String())
}

func TestLayeringKnownViolations(t *testing.T) {
	found := []violation{{pkg: "experiments", dep: "harness/cluster/local"}, {pkg: "controlplane", dep: "harness/runner"}}
	known := []violation{{pkg: "experiments", dep: "harness/cluster/local"}, {pkg: "experiments", dep: "harness/cluster/kind"}}
	unexpected, allowed, stale := partition(found, known)
	assert.Equal(t, []violation{{pkg: "controlplane", dep: "harness/runner"}}, unexpected, "anything not listed fails")
	assert.Equal(t, []violation{{pkg: "experiments", dep: "harness/cluster/local"}}, allowed)
	assert.Equal(t, []violation{{pkg: "experiments", dep: "harness/cluster/kind"}}, stale, "an entry that no longer occurs is reported")
}
