package kit

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/meshchaos/meshchaos/harness/observe"
	"github.com/meshchaos/meshchaos/harness/runner"
	"github.com/meshchaos/meshchaos/results"
)

// KeepPolicy says when a run's cluster is left up for debugging instead of torn down.
type KeepPolicy string

// Keep policies.
const (
	// KeepNever tears the cluster down whatever the verdict (the default).
	KeepNever KeepPolicy = "never"
	// KeepOnFailure keeps it when the verdict is not pass (a failed check, or a run that could
	// not be carried out or was interrupted): the cluster worth a look.
	KeepOnFailure KeepPolicy = "on-failure"
	// KeepAlways keeps it whatever the verdict.
	KeepAlways KeepPolicy = "always"
)

// ParseKeep reads a keep policy: never, on-failure, always, or a boolean (true is always,
// false never); empty is never.
func ParseKeep(s string) (KeepPolicy, error) {
	switch p := KeepPolicy(s); p {
	case KeepNever, KeepOnFailure, KeepAlways:
		return p, nil
	case "":
		return KeepNever, nil
	}
	if b, err := strconv.ParseBool(s); err == nil {
		if b {
			return KeepAlways, nil
		}
		return KeepNever, nil
	}
	return "", fmt.Errorf("keep the cluster %q: want never, on-failure, always, true or false", s)
}

// Keeps says whether a run with verdict v keeps its cluster.
func (p KeepPolicy) Keeps(v results.Verdict) bool {
	switch p {
	case KeepAlways:
		return true
	case KeepOnFailure:
		return v != results.VerdictPass
	}
	return false
}

// saveLogs keeps the container logs of the run's pods in the run directory (observe.SaveLogs)
// and lists them in the summary: only the namespaces the run made, never an installed control
// plane's.
func (s *State) saveLogs(ctx context.Context, r *runner.Run) {
	logs := observe.SaveLogs(ctx, s.Mesh.Client, r.Dir(), s.Mesh.Namespaces, observe.MaxLogBytes)
	if s.Mesh.Attached != "" {
		logs.Errors = append(logs.Errors, fmt.Sprintf("namespace %s not read: it is the installed control plane's, not the run's", s.Mesh.Attached))
	}
	r.RecordLogs(logs)
	failed := 0
	for _, f := range logs.Files {
		if f.Error != "" {
			failed++
		}
	}
	r.Logf("logs: %d container logs of namespaces %s in %s/ (%d could not be read)", len(logs.Files)-failed, strings.Join(logs.Namespaces, ", "), results.LogsDir, failed)
}

// keep leaves the run's cluster up (policy p and verdict v decided it) and records how to
// reach it.
func (s *State) keep(ctx context.Context, r *runner.Run, p KeepPolicy, v results.Verdict) (results.KeptCluster, error) {
	k, err := s.Mesh.Keep(ctx)
	if err != nil {
		return results.KeptCluster{}, err
	}
	kept := results.KeptCluster{Name: s.Mesh.Cluster.Name(), Substrate: r.Summary().Substrate, Kubeconfig: k.Kubeconfig, Context: k.Context,
		Namespaces: s.Mesh.Namespaces, Why: fmt.Sprintf("keep %s, verdict %s", p, v)}
	r.RecordKept(kept)
	return kept, nil
}
