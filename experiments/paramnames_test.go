package experiments

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshchaos/meshchaos/harness/kit"
	"github.com/meshchaos/meshchaos/harness/params"
	"github.com/meshchaos/meshchaos/harness/suite"
)

// valuesGetters are params.Values' getters by name: a call of one with a string literal in an
// experiment's file reads that experiment's parameter.
var valuesGetters = []string{"Int", "Float", "Ints", "Duration", "Quantity", "Bytes", "String"}

// TestEveryParameterReadIsDeclared reads each experiment's file and fails on a getter call
// (v.Int("rate"), s.Params.Duration("faultFor")) whose name the experiment does not declare:
// the fault sequence reads parameters too, and it runs only on a cluster, where a misspelt
// name would panic (or, before params.Values checked names, read as 0) in the middle of a run.
func TestEveryParameterReadIsDeclared(t *testing.T) {
	files, err := filepath.Glob("*.go")
	require.NoError(t, err)
	fset := token.NewFileSet()
	seen := 0
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		file, err := parser.ParseFile(fset, f, nil, 0)
		require.NoError(t, err)
		name := registeredName(file)
		if name == "" {
			continue
		}
		d, ok := Lookup(name)
		require.True(t, ok, "%s registers %q, which the catalog does not hold", f, name)
		seen++
		ast.Inspect(file, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok || len(call.Args) != 1 {
				return true
			}
			sel, ok := call.Fun.(*ast.SelectorExpr)
			lit, isLit := call.Args[0].(*ast.BasicLit)
			if !ok || !isLit || lit.Kind != token.STRING || !slices.Contains(valuesGetters, sel.Sel.Name) {
				return true
			}
			p, err := strconv.Unquote(lit.Value)
			require.NoError(t, err)
			_, declared := d.Params.Lookup(p)
			assert.True(t, declared, "%s: %s reads parameter %q, which %s does not declare (%s)",
				fset.Position(call.Pos()), sel.Sel.Name, p, name, d.Params.Names())
			return true
		})
	}
	assert.Equal(t, len(List()), seen, "every experiment's file was read")
}

// registeredName is the Name of the Definition file registers ("" when it registers none).
func registeredName(file *ast.File) string {
	name := ""
	ast.Inspect(file, func(n ast.Node) bool {
		call, ok := n.(*ast.CallExpr)
		if !ok {
			return name == ""
		}
		fn, ok := call.Fun.(*ast.Ident)
		if !ok || fn.Name != "register" || len(call.Args) != 1 {
			return true
		}
		lit, ok := call.Args[0].(*ast.CompositeLit)
		if !ok {
			return true
		}
		for _, e := range lit.Elts {
			kv, ok := e.(*ast.KeyValueExpr)
			if !ok {
				continue
			}
			key, isID := kv.Key.(*ast.Ident)
			val, isLit := kv.Value.(*ast.BasicLit)
			if isID && isLit && key.Name == "Name" {
				name, _ = strconv.Unquote(val.Value)
			}
		}
		return false
	})
	return name
}

// TestDefinitionsReadTheirValues calls every experiment's functions of its parameters (Validate
// and Mesh through Resolve, Hosts, Checks) with its defaults, every value of each enum, "" for
// each optional parameter and every both-ways case's settings: params.Values panics on a name
// that is not declared and on a getter of the wrong kind (Int of a duration), so either shows
// here rather than as a 0 in a run.
func TestDefinitionsReadTheirValues(t *testing.T) {
	for _, d := range List() {
		variants := [][]string{nil}
		for _, p := range d.Params {
			for _, val := range p.Values {
				variants = append(variants, []string{p.Name + "=" + val})
			}
			if p.Optional {
				variants = append(variants, []string{p.Name + "="})
			}
		}
		for _, c := range suite.BothWays() {
			if c.Experiment == d.Name {
				variants = append(variants, c.Entry(true).Set)
			}
		}
		for i, sets := range variants {
			var v params.Values
			var err error
			require.NotPanics(t, func() { v, err = d.Resolve(sets) }, "%s %v: Validate or Mesh", d.Name, sets)
			if i == 0 {
				require.NoError(t, err, "%s: its defaults resolve", d.Name)
			}
			if err != nil {
				continue // a combination its Validate refuses
			}
			assert.NotPanics(t, func() { readAll(d, v) }, "%s %v: Hosts or Checks", d.Name, sets)
		}
		if d.Hosts != nil {
			// The kit's traffic phase reads these of an experiment that sends traffic.
			for _, p := range []params.Param{params.Rate, params.Length, params.Steady} {
				_, ok := d.Params.Lookup(p.Name)
				assert.True(t, ok, "%s sends traffic but does not declare %s", d.Name, p.Name)
			}
		}
	}
}

func readAll(d kit.Definition, v params.Values) {
	if d.Hosts != nil {
		_ = d.Hosts(v)
	}
	if d.Checks != nil {
		_ = d.Checks(v)
	}
}

// TestControlPlaneLimitsReachThePlacement: every experiment that declares cpMemoryLimit and
// cpCPULimit gets them as its control plane's limits (the kit applies them), unless it shapes
// the control plane's resources itself, as cp-cpu-starvation's cpQoS does.
func TestControlPlaneLimitsReachThePlacement(t *testing.T) {
	applied := 0
	for _, d := range List() {
		_, mem := d.Params.Lookup(params.CPMemory.Name)
		_, cpu := d.Params.Lookup(params.CPCPU.Name)
		if !mem || !cpu || d.Mesh == nil {
			continue
		}
		v, err := d.Resolve([]string{"cpMemoryLimit=3Gi", "cpCPULimit=1500m"})
		require.NoError(t, err, d.Name)
		cp := d.MeshSpec(v).CP
		if cp.QoS != "" {
			continue
		}
		applied++
		assert.Equal(t, "3Gi", cp.MemoryLimit, d.Name)
		assert.Equal(t, "1500m", cp.CPULimit, d.Name)
	}
	assert.GreaterOrEqual(t, applied, 5, "cp-oom-restart, endpoint-flap, serviceentry-scale, sidecar-startup and soak take the limits from the kit")

	d, ok := Lookup("cp-cpu-starvation")
	require.True(t, ok)
	v, err := d.Resolve([]string{"cpQoS=guaranteed", "cpMemoryLimit=3Gi", "cpCPULimit=1500m"})
	require.NoError(t, err)
	cp := d.MeshSpec(v).CP
	assert.Equal(t, [2]string{"3Gi", "1500m"}, [2]string{cp.MemoryLimit, cp.CPULimit})
	v, err = d.Resolve([]string{"cpQoS=burstable", "cpCPULimit=1500m"})
	require.NoError(t, err)
	assert.Empty(t, d.MeshSpec(v).CP.CPULimit, "burstable: its own request, no CPU limit")
}
