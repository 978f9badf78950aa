// Package suite is what a suite of experiment runs is: a named list of experiments × control
// planes × parameters × repeats, each with the verdict it is expected to give. Suites come from
// built-ins (nightly, honesty, pre-upgrade, capacity) or from a YAML file. This package only
// describes suites; the CLI runs them.
package suite

import (
	"errors"
	"fmt"
	"os"
	"regexp"
	"sort"
	"strings"

	"sigs.k8s.io/yaml"

	"github.com/meshchaos/meshchaos/results"
)

// Entry is one experiment under one control plane with one parameter set, run Repeats times.
type Entry struct {
	// Experiment is the experiment's name (see `meshchaos list`).
	Experiment string `json:"experiment"`
	// ControlPlane is the control plane as --cp spells it ("reference", "reference:ungated", …).
	// Empty: the suite's default (upgrade-check substitutes base and candidate here).
	ControlPlane string `json:"controlPlane,omitempty"`
	// Set are parameter assignments name=value, as --set takes them.
	Set []string `json:"set,omitempty"`
	// Repeats is how many times the entry runs (default 1).
	Repeats int `json:"repeats,omitempty"`
	// Expect is the verdict the entry should give: pass (default) or fail (a regression switch
	// the experiment must catch).
	Expect results.Verdict `json:"expect,omitempty"`
	// Failing names the checks a fail must fail, and no other (see results.Expect); a name
	// ending in "?" may fail or pass. Empty: any failed check will do.
	Failing []string `json:"failing,omitempty"`
}

// Expectation is what a run of the entry must give.
func (e Entry) Expectation() results.Expect {
	v := e.Expect
	if v == "" {
		v = results.VerdictPass
	}
	return results.Expect{Verdict: v, Failing: e.Failing}
}

// Suite is a named list of entries.
type Suite struct {
	Name    string  `json:"name"`
	Summary string  `json:"summary,omitempty"`
	Entries []Entry `json:"entries"`
}

// Runs is the number of runs the suite makes.
func (s Suite) Runs() int {
	n := 0
	for _, e := range s.Entries {
		n += max(e.Repeats, 1)
	}
	return n
}

// Validate checks the suite's shape (experiment and parameter names are checked by the CLI,
// which knows the catalog).
func (s Suite) Validate() error {
	if s.Name == "" {
		return errors.New("suite has no name")
	}
	if !validName.MatchString(s.Name) {
		// The name becomes a file name: the history's NAME.jsonl, the default output directory.
		return fmt.Errorf("suite name %q: want letters, digits, '.', '_' and '-', starting with a letter or digit, at most 64 characters (it names files: NAME.jsonl in the history directory)", s.Name)
	}
	if len(s.Entries) == 0 {
		return fmt.Errorf("suite %s has no entries", s.Name)
	}
	for i, e := range s.Entries {
		if e.Experiment == "" {
			return fmt.Errorf("suite %s entry %d names no experiment", s.Name, i+1)
		}
		if e.Repeats < 0 || e.Repeats > 100 {
			return fmt.Errorf("suite %s entry %d (%s): repeats %d out of range 0–100", s.Name, i+1, e.Experiment, e.Repeats)
		}
		if err := e.Expectation().Validate(); err != nil {
			return fmt.Errorf("suite %s entry %d (%s): %w", s.Name, i+1, e.Experiment, err)
		}
		for _, kv := range e.Set {
			if !strings.Contains(kv, "=") {
				return fmt.Errorf("suite %s entry %d (%s): set %q: want name=value", s.Name, i+1, e.Experiment, kv)
			}
		}
	}
	return nil
}

// validName is a suite name that is safe as a file name on its own: no path separator, no "..".
var validName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)

var builtins = map[string]Suite{}

// Register adds a built-in suite; it panics on a duplicate name or an invalid suite (a
// programming error).
func Register(s Suite) {
	if _, dup := builtins[s.Name]; dup {
		panic("suite: duplicate built-in " + s.Name)
	}
	if err := s.Validate(); err != nil {
		panic("suite: " + err.Error())
	}
	builtins[s.Name] = s
}

// Builtin returns the built-in suite called name.
func Builtin(name string) (Suite, bool) {
	s, ok := builtins[name]
	return s, ok
}

// Builtins lists the built-in suites by name.
func Builtins() []Suite {
	out := make([]Suite, 0, len(builtins))
	for _, s := range builtins {
		out = append(out, s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Load returns the built-in suite called nameOrFile, or reads the YAML file at that path.
func Load(nameOrFile string) (Suite, error) {
	if s, ok := Builtin(nameOrFile); ok {
		return s, nil
	}
	b, err := os.ReadFile(nameOrFile)
	if err != nil {
		names := make([]string, 0, len(builtins))
		for _, s := range Builtins() {
			names = append(names, s.Name)
		}
		return Suite{}, fmt.Errorf("suite %q is neither a built-in (%s) nor a readable file: %w", nameOrFile, strings.Join(names, ", "), err)
	}
	var s Suite
	if err := yaml.UnmarshalStrict(b, &s); err != nil {
		return Suite{}, fmt.Errorf("suite file %s: %w", nameOrFile, err)
	}
	if err := s.Validate(); err != nil {
		return Suite{}, fmt.Errorf("suite file %s: %w", nameOrFile, err)
	}
	return s, nil
}
