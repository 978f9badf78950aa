package cli

import (
	"strings"

	"github.com/meshchaos/meshchaos/experiments"
	"github.com/meshchaos/meshchaos/harness/subject"
	"github.com/meshchaos/meshchaos/harness/suite"
)

// resolvedEntry is a suite entry checked against the experiments it names: the parameters it
// runs with (its own, then the command line's) and its control plane.
type resolvedEntry struct {
	suite.Entry
	Sets []string
	// CP is the entry's control plane, or defaultCP; empty when both are.
	CP string
}

// resolveEntries checks a whole suite before anything runs, so that a bad file or flag is
// reported at once and whatever the machine: every experiment exists, every --set
// [EXPERIMENT.]name=value means something to at least one entry (it is added to those entries
// after their own sets, so it wins), every entry's parameters resolve and its control plane
// parses. Errors are bad input (exit 2) naming the entry.
func resolveEntries(s suite.Suite, sets []string, defaultCP string) ([]resolvedEntry, error) {
	out := make([]resolvedEntry, len(s.Entries))
	for i, e := range s.Entries {
		if _, ok := experiments.Lookup(e.Experiment); !ok {
			return nil, Usagef("suite %s entry %d: unknown experiment %q (see 'meshchaos list')", s.Name, i+1, e.Experiment)
		}
		out[i] = resolvedEntry{Entry: e, Sets: append([]string{}, e.Set...), CP: e.ControlPlane}
		if out[i].CP == "" {
			out[i].CP = defaultCP
		}
	}
	for _, kv := range sets {
		name, _, ok := strings.Cut(kv, "=")
		if !ok {
			return nil, Usagef("--set %q: want [EXPERIMENT.]name=value", kv)
		}
		only := ""
		if exp, param, scoped := strings.Cut(name, "."); scoped {
			only, name, kv = exp, param, kv[len(exp)+1:]
			if _, ok := experiments.Lookup(only); !ok {
				return nil, Usagef("--set %s: unknown experiment %q (see 'meshchaos list')", kv, only)
			}
		}
		used := false
		for i, e := range s.Entries {
			def, _ := experiments.Lookup(e.Experiment)
			if _, has := def.Params.Lookup(name); has && (only == "" || only == e.Experiment) {
				out[i].Sets, used = append(out[i].Sets, kv), true
			}
		}
		if !used {
			return nil, Usagef("--set %s: no experiment of suite %s has a parameter %q (see 'meshchaos list')", kv, s.Name, name)
		}
	}
	for i, e := range out {
		def, _ := experiments.Lookup(e.Experiment)
		where := e.Experiment
		if e.CP != "" {
			where += ", " + e.CP
		}
		if _, err := def.Resolve(e.Sets); err != nil {
			return nil, Usagef("suite %s entry %d (%s): %v", s.Name, i+1, where, err)
		}
		if e.CP == "" {
			continue
		}
		if _, err := subject.Parse(e.CP); err != nil {
			return nil, Usagef("suite %s entry %d (%s): %v", s.Name, i+1, where, err)
		}
	}
	return out, nil
}
