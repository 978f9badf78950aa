// Package params declares an experiment's parameters as typed values with bounds and units, and
// resolves `--set name=value` assignments against them before anything starts: a bad value is
// refused with the allowed range named, in well under a second, with no cluster touched.
package params

import (
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
)

// Kind is a parameter's type.
type Kind string

// Parameter kinds.
const (
	Int      Kind = "int"
	Float    Kind = "float"
	Duration Kind = "duration"
	// Quantity is a Kubernetes resource quantity (256Mi, 1Gi, 100m).
	Quantity Kind = "quantity"
	Enum     Kind = "enum"
	// IntList is a comma-separated, strictly increasing list of whole numbers (e.g. steps).
	IntList Kind = "int-list"
)

// Param is one tunable. Build it with IntParam, FloatParam, DurationParam, QuantityParam or
// EnumParam; bounds are inclusive.
type Param struct {
	Name    string
	Kind    Kind
	Default string
	Unit    string
	Help    string
	// Min and Max bound Int, Float (as numbers), Duration (nanoseconds) and Quantity (the
	// quantity's value in its base unit: bytes, or cores).
	Min, Max float64
	// Values are an Enum's choices.
	Values []string
	// Optional allows the empty value (e.g. "no CPU limit").
	Optional bool
	// Empty says what the empty value does ("none" when not set): the help must not promise
	// "none" where "" keeps someone else's default.
	Empty string
}

// IntParam is a whole number in [min, max].
func IntParam(name string, def, min, max int, unit, help string) Param {
	return Param{Name: name, Kind: Int, Default: strconv.Itoa(def), Min: float64(min), Max: float64(max), Unit: unit, Help: help}
}

// FloatParam is a number in [min, max].
func FloatParam(name string, def, min, max float64, unit, help string) Param {
	return Param{Name: name, Kind: Float, Default: strconv.FormatFloat(def, 'f', -1, 64), Min: min, Max: max, Unit: unit, Help: help}
}

// DurationParam is a Go duration in [min, max].
func DurationParam(name string, def, min, max time.Duration, help string) Param {
	return Param{Name: name, Kind: Duration, Default: def.String(), Min: float64(min), Max: float64(max), Help: help}
}

// QuantityParam is a Kubernetes quantity in [min, max] (e.g. "64Mi", "8Gi", or "10m", "4").
func QuantityParam(name, def, min, max, help string) Param {
	lo, hi := resource.MustParse(min), resource.MustParse(max)
	return Param{Name: name, Kind: Quantity, Default: def, Min: lo.AsApproximateFloat64(), Max: hi.AsApproximateFloat64(), Help: help}
}

// IntListParam is a strictly increasing, comma-separated list of whole numbers, each in
// [min, max] (e.g. "500,1000,2500").
func IntListParam(name, def string, min, max int, unit, help string) Param {
	return Param{Name: name, Kind: IntList, Default: def, Min: float64(min), Max: float64(max), Unit: unit, Help: help}
}

// EnumParam is one of values.
func EnumParam(name, def string, values []string, help string) Param {
	return Param{Name: name, Kind: Enum, Default: def, Values: values, Help: help}
}

// OrNone allows the empty value (for "no limit").
func (p Param) OrNone() Param { p.Optional = true; return p }

// OrEmpty allows the empty value, which does what means says (e.g. "the control plane's own").
func (p Param) OrEmpty(means string) Param { p.Optional, p.Empty = true, means; return p }

// WithDefault returns p with another default (experiments share common parameters with their
// own defaults).
func (p Param) WithDefault(def string) Param { p.Default = def; return p }

// Range describes the allowed values, e.g. "a whole number from 1 to 10000 rps".
func (p Param) Range() string {
	unit := ""
	if p.Unit != "" {
		unit = " " + p.Unit
	}
	none := ""
	if p.Optional {
		empty := p.Empty
		if empty == "" {
			empty = "none"
		}
		none = `, or "" for ` + empty
	}
	switch p.Kind {
	case Int:
		return fmt.Sprintf("a whole number from %d to %d%s%s", int64(p.Min), int64(p.Max), unit, none)
	case Float:
		return fmt.Sprintf("a number from %g to %g%s%s", p.Min, p.Max, unit, none)
	case Duration:
		return fmt.Sprintf("a duration from %s to %s%s", time.Duration(p.Min), time.Duration(p.Max), none)
	case Quantity:
		return fmt.Sprintf("a quantity from %s to %s%s", quantityString(p.Min, p.Default), quantityString(p.Max, p.Default), none)
	case Enum:
		return "one of " + strings.Join(p.Values, ", ") + none
	case IntList:
		return fmt.Sprintf("increasing whole numbers from %d to %d%s, comma-separated%s", int64(p.Min), int64(p.Max), unit, none)
	}
	return "a value"
}

// quantityString formats a bound in the same family as the default (bytes as Mi/Gi, cores as m).
func quantityString(v float64, like string) string {
	if strings.HasSuffix(like, "i") || strings.HasSuffix(like, "M") || strings.HasSuffix(like, "G") {
		return resource.NewQuantity(int64(v), resource.BinarySI).String()
	}
	return resource.NewMilliQuantity(int64(v*1000+0.5), resource.DecimalSI).String()
}

// Check validates one value against p.
func (p Param) Check(val string) error {
	if val == "" && p.Optional {
		return nil
	}
	bad := func() error { return fmt.Errorf("%s=%q: want %s", p.Name, val, p.Range()) }
	var n float64
	switch p.Kind {
	case Int:
		i, err := strconv.ParseInt(val, 10, 64)
		if err != nil {
			return bad()
		}
		n = float64(i)
	case Float:
		f, err := strconv.ParseFloat(val, 64)
		if err != nil {
			return bad()
		}
		n = f
	case Duration:
		d, err := time.ParseDuration(val)
		if err != nil {
			return bad()
		}
		n = float64(d)
	case Quantity:
		q, err := resource.ParseQuantity(val)
		if err != nil {
			return bad()
		}
		n = q.AsApproximateFloat64()
	case IntList:
		prev := int64(math.MinInt64)
		for _, f := range strings.Split(val, ",") {
			i, err := strconv.ParseInt(strings.TrimSpace(f), 10, 64)
			if err != nil || i <= prev || float64(i) < p.Min || float64(i) > p.Max {
				return bad()
			}
			prev = i
		}
		return nil
	case Enum:
		for _, v := range p.Values {
			if v == val {
				return nil
			}
		}
		return bad()
	default:
		return nil
	}
	// NaN compares false with every bound: refused by name (nodeCPU=NaN passed both).
	if math.IsNaN(n) || n < p.Min || n > p.Max {
		return bad()
	}
	return nil
}

// Set is an experiment's parameters, in display order.
type Set []Param

// Lookup finds a parameter by name.
func (s Set) Lookup(name string) (Param, bool) {
	for _, p := range s {
		if p.Name == name {
			return p, true
		}
	}
	return Param{}, false
}

// Resolve applies `name=value` assignments over the defaults and validates every value; errors
// name the allowed range, or the known parameters for an unknown name.
func (s Set) Resolve(sets []string) (Values, error) {
	v := map[string]string{}
	for _, p := range s {
		v[p.Name] = p.Default
	}
	for _, a := range sets {
		k, val, ok := strings.Cut(a, "=")
		if !ok || k == "" {
			return Values{}, fmt.Errorf("parameter setting %q: use name=value; %s", a, s.Names())
		}
		p, known := s.Lookup(k)
		if !known {
			return Values{}, fmt.Errorf("%s: unknown parameter; %s", k, s.Names())
		}
		if err := p.Check(val); err != nil {
			return Values{}, fmt.Errorf("parameter %w", err)
		}
		v[k] = val
	}
	for _, p := range s {
		if err := p.Check(v[p.Name]); err != nil {
			return Values{}, fmt.Errorf("default of %w (a bug in the experiment)", err)
		}
	}
	return Values{m: v}, nil
}

// Names lists the known parameters with their defaults.
func (s Set) Names() string {
	var b strings.Builder
	b.WriteString("known parameters:")
	for _, p := range s {
		fmt.Fprintf(&b, " %s (default %q)", p.Name, p.Default)
	}
	return b.String()
}

// Values are an experiment's resolved parameters: every declared name with its value,
// validated by Resolve, so the getters do not fail on bad input. Reading a name that is not
// declared, or a value as a kind it is not (Int of a duration), is a bug in the experiment and
// panics with the name and the declared set: a misspelt name would otherwise read as 0 or "",
// and the panic shows in the first unit test that resolves the experiment. A struct rather than
// a map, so that nothing indexes around the check.
type Values struct{ m map[string]string }

// get returns name's value; it panics when name is not declared.
func (v Values) get(name string) string {
	val, ok := v.m[name]
	if !ok {
		panic(fmt.Sprintf("params: %q is not a declared parameter (declared: %s)", name, strings.Join(v.Sorted(), ", ")))
	}
	return val
}

// wrongKind panics: a resolved value that does not parse was read as the wrong kind.
func wrongKind(name, val, kind string, err error) {
	panic(fmt.Sprintf("params: %s=%q read as %s: %v (a bug in the experiment: use the getter of its kind)", name, val, kind, err))
}

// Int returns an Int parameter (0 when an optional one is empty).
func (v Values) Int(name string) int {
	val := v.get(name)
	if val == "" {
		return 0
	}
	n, err := strconv.Atoi(val)
	if err != nil {
		wrongKind(name, val, "an int", err)
	}
	return n
}

// Float returns a Float parameter (0 when an optional one is empty).
func (v Values) Float(name string) float64 {
	val := v.get(name)
	if val == "" {
		return 0
	}
	f, err := strconv.ParseFloat(val, 64)
	if err != nil {
		wrongKind(name, val, "a float", err)
	}
	return f
}

// Ints reads an IntList parameter (nil when an optional one is empty).
func (v Values) Ints(name string) []int {
	val := v.get(name)
	if val == "" {
		return nil
	}
	var out []int
	for _, f := range strings.Split(val, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil {
			wrongKind(name, val, "a list of ints", err)
		}
		out = append(out, n)
	}
	return out
}

// Duration returns a Duration parameter (0 when an optional one is empty).
func (v Values) Duration(name string) time.Duration {
	val := v.get(name)
	if val == "" {
		return 0
	}
	d, err := time.ParseDuration(val)
	if err != nil {
		wrongKind(name, val, "a duration", err)
	}
	return d
}

// Quantity returns a Quantity parameter; ok is false when it is empty (none).
func (v Values) Quantity(name string) (q resource.Quantity, ok bool) {
	val := v.get(name)
	if val == "" {
		return q, false
	}
	q, err := resource.ParseQuantity(val)
	if err != nil {
		wrongKind(name, val, "a quantity", err)
	}
	return q, true
}

// Bytes returns a memory Quantity parameter in bytes (0 when none).
func (v Values) Bytes(name string) int64 {
	q, _ := v.Quantity(name)
	return q.Value()
}

// String returns a parameter as given.
func (v Values) String(name string) string { return v.get(name) }

// Map is a copy for the summary.
func (v Values) Map() map[string]string {
	out := make(map[string]string, len(v.m))
	for k, val := range v.m {
		out[k] = val
	}
	return out
}

// Sorted lists the names in order, for stable output.
func (v Values) Sorted() []string {
	out := make([]string, 0, len(v.m))
	for k := range v.m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// The parameters most experiments share. Each experiment takes the ones it uses and may give
// them its own defaults with WithDefault.
var (
	Rate   = IntParam("rate", 50, 1, 10000, "rps", "requests per second of traffic through the data plane")
	Length = DurationParam("duration", 60*time.Second, 5*time.Second, 2*time.Hour, "traffic duration (steady state, chaos, recovery)")
	Steady = DurationParam("steady", 10*time.Second, 0, time.Hour, "clean traffic before the chaos")
	Nodes  = IntParam("nodes", 2, 1, 8, "", "cluster nodes")
	// CPMemory's least value is CPMemoryFloor. "" applies no limit of the harness's: the control
	// plane keeps its own (the reference's manifests default to 1Gi).
	CPMemory = QuantityParam("cpMemoryLimit", "1Gi", CPMemoryFloor, "64Gi",
		"the control plane's memory limit (at least "+CPMemoryFloor+", the reference's and istiod's memory request)").
		OrEmpty("the control plane's own limit (the reference's: 1Gi)")
	// CPCPU: "" likewise keeps the control plane's own CPU limit.
	CPCPU = QuantityParam("cpCPULimit", "", "10m", "64", "the control plane's CPU limit").
		OrEmpty("the control plane's own limit (the reference has none)")
)

// CPMemoryFloor is the least cpMemoryLimit: a limit below the container's memory request makes
// a Deployment the API server refuses, which would show only once the cluster is up. The
// control plane under test owns its request (the reference's is controlplane/manifests'
// MemoryRequest, istiod's hack/istiod/values.yaml's): this floor is not below either, and
// harness/subject's tests hold the reference's request and default limit to it and to CPMemory's
// help, so that parameters stay a leaf that depends on no control plane.
const CPMemoryFloor = "128Mi"
