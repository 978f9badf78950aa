// Package experiments is the catalog: one experiment per incident (docs/DESIGN.md), each a
// declarative kit.Definition in a file of its own — its parameters, the mesh it needs,
// its fault sequence and its checks. The kit (harness/kit) runs them all the same way.
package experiments

import (
	"sort"

	"github.com/meshchaos/meshchaos/harness/kit"
)

var catalog = map[string]kit.Definition{}

func register(d kit.Definition) { catalog[d.Name] = d }

// List returns the catalog sorted by name.
func List() []kit.Definition {
	out := make([]kit.Definition, 0, len(catalog))
	for _, d := range catalog {
		out = append(out, d)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Lookup finds an experiment by name.
func Lookup(name string) (kit.Definition, bool) {
	d, ok := catalog[name]
	return d, ok
}
