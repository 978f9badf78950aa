package params

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var testSet = Set{
	Rate, Length, Steady, CPMemory, CPCPU,
	FloatParam("cpus", 0.5, 0.001, 4, "CPUs", "quota"),
	EnumParam("mode", "hold", []string{"none", "hold", "native"}, "start order"),
}

func TestResolveDefaultsAndTypes(t *testing.T) {
	v, err := testSet.Resolve([]string{"rate=200", "cpMemoryLimit=512Mi", "cpCPULimit=250m", "mode=native", "duration=2m"})
	require.NoError(t, err)
	assert.Equal(t, 200, v.Int("rate"))
	assert.Equal(t, int64(512<<20), v.Bytes("cpMemoryLimit"))
	q, ok := v.Quantity("cpCPULimit")
	require.True(t, ok)
	assert.Equal(t, int64(250), q.MilliValue())
	assert.Equal(t, "native", v.String("mode"))
	assert.Equal(t, 2*time.Minute, v.Duration("duration"))
	assert.Equal(t, 10*time.Second, v.Duration("steady"), "default")
	assert.Equal(t, 0.5, v.Float("cpus"))
}

// TestUndeclaredNameIsABug: a misspelt name must not read as 0 (it did: Int dropped the parse
// error of ""); the panic names it and what is declared.
func TestUndeclaredNameIsABug(t *testing.T) {
	v, err := testSet.Resolve(nil)
	require.NoError(t, err)
	for name, get := range map[string]func(){
		"Int":      func() { v.Int("rat") },
		"Float":    func() { v.Float("cpu") },
		"Duration": func() { v.Duration("stedy") },
		"Quantity": func() { v.Quantity("cpCPULimit-missing") },
		"Bytes":    func() { v.Bytes("cpMemLimit") },
		"Ints":     func() { v.Ints("step") },
		"String":   func() { v.String("mod") },
	} {
		assert.Panics(t, get, name)
		assert.Contains(t, panicText(get), "is not a declared parameter (declared: cpCPULimit, cpMemoryLimit, cpus, duration, mode, rate, steady)", name)
	}
	assert.Contains(t, panicText(func() { v.Int("rat") }), `"rat"`)
}

func TestGetterOfTheWrongKindIsABug(t *testing.T) {
	v, err := testSet.Resolve(nil)
	require.NoError(t, err)
	assert.Contains(t, panicText(func() { v.Int("duration") }), `duration="1m0s" read as an int`)
	assert.Contains(t, panicText(func() { v.Duration("rate") }), `rate="50" read as a duration`)
	assert.Contains(t, panicText(func() { v.Int("cpMemoryLimit") }), `cpMemoryLimit="1Gi" read as an int`)
	assert.Contains(t, panicText(func() { v.Bytes("mode") }), `mode="hold" read as a quantity`)
	// An optional parameter left empty reads as none, not as a bug.
	v, err = testSet.Resolve([]string{"cpMemoryLimit="})
	require.NoError(t, err)
	assert.Zero(t, v.Bytes("cpMemoryLimit"))
}

// panicText runs f and returns what it panicked with ("" when it did not).
func panicText(f func()) (s string) {
	defer func() {
		if r := recover(); r != nil {
			s, _ = r.(string)
		}
	}()
	f()
	return ""
}

func TestResolveRefusesOutOfRangeWithTheRange(t *testing.T) {
	for set, want := range map[string]string{
		"rate=0":             `rate="0": want a whole number from 1 to 10000 rps`,
		"rate=10001":         "from 1 to 10000",
		"rate=1.5":           "want a whole number",
		"duration=-1s":       `duration="-1s": want a duration from 5s to 2h0m0s`,
		"duration=3h":        "from 5s to 2h0m0s",
		"cpCPULimit=abc":     `want a quantity from 10m to 64, or "" for the control plane's own limit (the reference has none)`,
		"cpCPULimit=1m":      "from 10m to 64",
		"cpMemoryLimit=1Mi":  "from 128Mi to 64Gi",
		"cpMemoryLimit=64Mi": "from 128Mi to 64Gi",                                             // below the control plane's memory request
		"cpMemoryLimit=x":    `or "" for the control plane's own limit (the reference's: 1Gi)`, // not "none": the reference applies 1Gi
		"cpMemoryLimit=1Ti":  "from 128Mi to 64Gi",
		"cpus=0":             "want a number from 0.001 to 4 CPUs",
		"cpus=NaN":           "want a number from 0.001 to 4 CPUs",
		"cpus=+Inf":          "want a number from 0.001 to 4 CPUs",
		"mode=sidecar-first": "want one of none, hold, native",
		"nope=1":             "unknown parameter; known parameters: rate",
		"=1":                 "use name=value",
	} {
		_, err := testSet.Resolve([]string{set})
		if assert.Error(t, err, set) {
			assert.Contains(t, err.Error(), want, set)
		}
	}
}

func TestOptionalAllowsNone(t *testing.T) {
	v, err := testSet.Resolve([]string{"cpCPULimit="})
	require.NoError(t, err)
	_, ok := v.Quantity("cpCPULimit")
	assert.False(t, ok)
	_, err = testSet.Resolve([]string{"rate="})
	assert.Error(t, err, "rate is not optional")
}

func TestEmptyMeansWhatItDoes(t *testing.T) {
	budget := QuantityParam("memoryBudget", "1Gi", "16Mi", "1Ti", "budget").OrNone()
	assert.Equal(t, `a quantity from 16Mi to 1Ti, or "" for none`, budget.Range())
	assert.Equal(t, `a quantity from 16Mi to 1Ti, or "" for the default`, budget.OrEmpty("the default").Range())
}

func TestBadDefaultIsABugNotAPass(t *testing.T) {
	_, err := Set{Rate.WithDefault("0")}.Resolve(nil)
	assert.ErrorContains(t, err, "a bug in the experiment")
}

func TestIntList(t *testing.T) {
	p := IntListParam("steps", "500,1000", 1, 50000, "ServiceEntries", "steps")
	set := Set{p}
	v, err := set.Resolve([]string{"steps=50, 100,200"})
	require.NoError(t, err)
	require.Equal(t, []int{50, 100, 200}, v.Ints("steps"))
	for _, bad := range []string{"steps=100,50", "steps=0", "steps=60000", "steps=1,x", "steps=", "steps=5,5"} {
		_, err := set.Resolve([]string{bad})
		require.ErrorContains(t, err, "increasing whole numbers from 1 to 50000 ServiceEntries", bad)
	}
}
