package cli

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/meshchaos/meshchaos/harness/cluster/existing"
)

const existingDownHelp = "--substrate existing removes what run NAME left on the cluster --kubeconfig names (a run\n" +
	"killed before its teardown, or one whose teardown failed): its namespaces (their pods first),\n" +
	"the cluster-scoped objects it created and the node labels it set, all found by the label\n" +
	existing.RunLabel + "=NAME; nothing without that label is touched. --all lists every run that left\n" +
	"something there, then removes each (narrow it with --prefix). A NAME that left nothing is exit 2,\n" +
	"as an unknown local cluster is. Never for a run still running: its namespaces would go from under it."

// existingDown are the flags of `cluster down` and `cluster list` with --substrate existing.
type existingDown struct {
	kubeconfig, context string
	timeout             time.Duration
}

func (e *existingDown) flags(cmd *cobra.Command) {
	cmd.Flags().StringVar(&e.kubeconfig, "kubeconfig", "", "--substrate existing: the cluster's kubeconfig (default: $KUBECONFIG, else ~/.kube/config, as kubectl)")
	cmd.Flags().StringVar(&e.context, "context", "", "--substrate existing: the kubeconfig context (default: its current one)")
	if cmd.Name() == "down" {
		cmd.Flags().DurationVar(&e.timeout, "timeout", existing.DownBudget, "--substrate existing: the time budget of each run's teardown")
	}
}

// check refuses the existing substrate's flags with another substrate: they would be ignored.
func (e existingDown) check(substrate string) error {
	for _, f := range []struct {
		name string
		set  bool
	}{{"kubeconfig", e.kubeconfig != ""}, {"context", e.context != ""}} {
		if f.set {
			return Usagef("--%s is for --substrate existing: add --substrate existing for that cluster's runs, or leave --%s out for --substrate %s", f.name, f.name, substrate)
		}
	}
	return nil
}

// provider checks the kubeconfig before anything is asked of the cluster: an unreadable one is
// exit 2.
func (e existingDown) provider() (existing.Substrate, error) {
	if e.timeout <= 0 {
		return existing.Substrate{}, Usagef("--timeout %s: give a positive duration (default %s)", e.timeout, existing.DownBudget)
	}
	p := existing.Substrate{Kubeconfig: e.kubeconfig, Context: e.context, DownBudget: e.timeout}
	if _, err := p.RESTConfig(); err != nil {
		return p, kubeconfigError(e.kubeconfig, err)
	}
	return p, nil
}

// listTimeout bounds reading the runs' leftovers (reads only).
const listTimeout = time.Minute

// down removes run name's leftovers, or every run's (name "") whose name starts with prefix.
func (e existingDown) down(cmd *cobra.Command, name, prefix string) error {
	if name != "" {
		if prefix != "" {
			return Usagef("--prefix narrows --all; with NAME give the whole name")
		}
		if errs := validation.IsValidLabelValue(name); len(errs) > 0 {
			return Usagef("run name %q: %s (it is the value of the label %s)", name, strings.Join(errs, "; "), existing.RunLabel)
		}
	}
	p, err := e.provider()
	if err != nil {
		return err
	}
	out := cmd.OutOrStdout()
	names := []string{name}
	if name == "" {
		ctx, cancel := context.WithTimeout(cmd.Context(), listTimeout)
		defer cancel()
		left, err := p.Leftovers(ctx, "")
		if err != nil {
			return WithExitCode(2, fmt.Errorf("find the runs' leftovers: %w", err))
		}
		names = nil
		for _, l := range left {
			if strings.HasPrefix(l.Run, prefix) {
				fmt.Fprintf(out, "run %s left: %s\n", l.Run, l)
				names = append(names, l.Run)
			}
		}
		if len(names) == 0 {
			fmt.Fprintf(out, "no meshchaos run%s left anything on this cluster\n", prefixNote(prefix))
			return nil
		}
	}
	var errs []error
	for _, n := range names {
		start := time.Now()
		l, err := p.Remove(cmd.Context(), n, func(f string, a ...any) { fmt.Fprintf(cmd.ErrOrStderr(), f+"\n", a...) })
		switch {
		case errors.Is(err, existing.ErrNothingLeft) && name != "":
			return WithExitCode(2, fmt.Errorf("run %s left nothing on this cluster (no namespace, cluster-scoped object or node label of %s=%s): 'meshchaos cluster list --substrate existing' lists the runs that did", n, existing.RunLabel, n))
		case errors.Is(err, existing.ErrNothingLeft):
			fmt.Fprintf(out, "run %s: gone meanwhile\n", n)
		case err != nil && l.String() == "":
			// Nothing found: the cluster could not be read.
			return WithExitCode(2, fmt.Errorf("run %s: %w", n, err))
		case err != nil:
			errs = append(errs, fmt.Errorf("run %s: %w", n, err))
		default:
			fmt.Fprintf(out, "removed run %s (existing: %s) in %s\n", n, l, time.Since(start).Round(10*time.Millisecond))
		}
	}
	return errors.Join(errs...)
}

// prefixNote is " named P…" for a prefix, else "".
func prefixNote(prefix string) string {
	if prefix == "" {
		return ""
	}
	return " named " + prefix + "…"
}

// list prints each run that left something on the cluster, with what it left.
func (e existingDown) list(cmd *cobra.Command) error {
	e.timeout = existing.DownBudget // no teardown here
	p, err := e.provider()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(cmd.Context(), listTimeout)
	defer cancel()
	left, err := p.Leftovers(ctx, "")
	if err != nil {
		return WithExitCode(2, fmt.Errorf("find the runs' leftovers: %w", err))
	}
	for _, l := range left {
		fmt.Fprintf(cmd.OutOrStdout(), "%s (existing): %s\n", l.Run, l)
	}
	if len(left) == 0 {
		fmt.Fprintln(cmd.ErrOrStderr(), "no meshchaos run left anything on this cluster")
	}
	return nil
}
