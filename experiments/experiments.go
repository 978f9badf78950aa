// Package experiments is the catalog: one experiment per incident (../shared/DESIGN.md), built
// from composable steps (bring a cluster up, deploy the control plane, preload ServiceEntries,
// deploy a gateway, throttle, kill) on top of the runner.
package experiments

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/meshchaos/meshchaos/harness/runner"
)

// Param is one tunable of an experiment (`--set name=value`).
type Param struct {
	Name    string
	Default string
	Help    string
	// Kind validates the value: "int", "float", "duration", "quantity" or "string".
	Kind string
}

// Definition is an experiment in the catalog.
type Definition struct {
	Name        string
	Description string
	Params      []Param
	// Build turns validated parameters into a runnable experiment.
	Build func(env Env, p Values) (runner.Experiment, error)
}

// Env is what every experiment gets from the CLI.
type Env struct {
	// Substrate: only "local" runs experiments today.
	Substrate string
	// ControlPlane: "reference" or "reference:<switch>[,<switch>…]".
	ControlPlane string
	// ImagesDir holds the image tarballs (make images).
	ImagesDir string
	// Home holds cluster state (default local.Home()).
	Home string
	// Logf reports setup progress.
	Logf func(format string, args ...any)
}

// Values are an experiment's parameters after defaults and --set.
type Values map[string]string

// Int returns an int parameter (validated by Resolve).
func (v Values) Int(name string) int { n, _ := strconv.Atoi(v[name]); return n }

// Float returns a float parameter.
func (v Values) Float(name string) float64 { f, _ := strconv.ParseFloat(v[name], 64); return f }

// Duration returns a duration parameter.
func (v Values) Duration(name string) time.Duration { d, _ := time.ParseDuration(v[name]); return d }

var catalog = map[string]Definition{}

func register(d Definition) { catalog[d.Name] = d }

// List returns the catalog sorted by name.
func List() []Definition {
	out := make([]Definition, 0, len(catalog))
	for _, d := range catalog {
		out = append(out, d)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Lookup finds an experiment by name.
func Lookup(name string) (Definition, bool) {
	d, ok := catalog[name]
	return d, ok
}

// Resolve applies --set assignments (name=value) over the defaults and validates them. Errors
// name the known parameters.
func (d Definition) Resolve(sets []string) (Values, error) {
	v := Values{}
	kinds := map[string]string{}
	for _, p := range d.Params {
		v[p.Name] = p.Default
		kinds[p.Name] = p.Kind
	}
	for _, s := range sets {
		k, val, ok := strings.Cut(s, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("--set %q: use name=value; %s", s, d.ParamHelp())
		}
		kind, known := kinds[k]
		if !known {
			return nil, fmt.Errorf("unknown parameter %q for %s; %s", k, d.Name, d.ParamHelp())
		}
		if err := validate(kind, val); err != nil {
			return nil, fmt.Errorf("--set %s=%s: %v", k, val, err)
		}
		v[k] = val
	}
	return v, nil
}

func validate(kind, val string) error {
	switch kind {
	case "int":
		n, err := strconv.Atoi(val)
		if err != nil || n < 0 {
			return fmt.Errorf("want a whole number ≥ 0")
		}
	case "float":
		f, err := strconv.ParseFloat(val, 64)
		if err != nil || f < 0 {
			return fmt.Errorf("want a number ≥ 0")
		}
	case "duration":
		d, err := time.ParseDuration(val)
		if err != nil || d < 0 {
			return fmt.Errorf("want a duration like 30s or 2m")
		}
	case "quantity":
		if _, err := parseQuantityMiB(val); err != nil {
			return err
		}
	}
	return nil
}

// ParamHelp lists the known parameters with defaults.
func (d Definition) ParamHelp() string {
	var b strings.Builder
	b.WriteString("known parameters:")
	for _, p := range d.Params {
		fmt.Fprintf(&b, " %s (default %s)", p.Name, p.Default)
	}
	return b.String()
}

// parseQuantityMiB reads a memory size like 256Mi or 1Gi as MiB.
func parseQuantityMiB(s string) (int, error) {
	for suf, mul := range map[string]int{"Mi": 1, "Gi": 1024} {
		if n, ok := strings.CutSuffix(s, suf); ok {
			v, err := strconv.Atoi(n)
			if err != nil || v <= 0 {
				break
			}
			return v * mul, nil
		}
	}
	return 0, fmt.Errorf("want a memory size like 256Mi or 1Gi")
}

// controlPlaneFlags maps --cp to the reference control plane's gate and regression switches.
func controlPlaneFlags(cp string) (gate bool, regress []string, err error) {
	name, switches, _ := strings.Cut(cp, ":")
	if name != "reference" {
		return false, nil, fmt.Errorf("--cp %q: the local substrate runs the reference control plane: use reference or reference:<switch>", cp)
	}
	gate = true
	for _, s := range strings.Split(switches, ",") {
		if s == "" {
			continue
		}
		regress = append(regress, s)
		if s == "ungated" {
			gate = false
		}
	}
	return gate, regress, nil
}
