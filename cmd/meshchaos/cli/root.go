// Package cli holds meshchaos's cobra commands. Each area (cluster, controlplane, workload, run,
// report, …) adds its command in its own file through register.
package cli

import (
	"fmt"

	"github.com/spf13/cobra"
)

// ExitCoder is an error that carries the process exit code meshchaos should end with.
// Contract (DESIGN.md): 0 all checks passed, 1 a check failed, 2 bad input or the run could not
// be carried out.
type ExitCoder interface {
	error
	ExitCode() int
}

type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }
func (e *exitError) ExitCode() int { return e.code }

// WithExitCode wraps err so the process ends with code.
func WithExitCode(code int, err error) error {
	if err == nil {
		return nil
	}
	return &exitError{code: code, err: err}
}

// Usagef is a bad-input error: exit code 2.
func Usagef(format string, args ...any) error {
	return &exitError{code: 2, err: fmt.Errorf(format, args...)}
}

var commands []func() *cobra.Command

// register adds a top-level command constructor; called from init in each command's file.
func register(c func() *cobra.Command) { commands = append(commands, c) }

// NewRoot builds the root command with every registered subcommand.
func NewRoot() *cobra.Command {
	root := &cobra.Command{
		Use:           "meshchaos",
		Short:         "Chaos and load testing harness for service-mesh (xDS) control planes",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	// Flag errors are bad input: exit 2 with the usage hint.
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return Usagef("%v (see '%s --help')", err, c.CommandPath())
	})
	for _, c := range commands {
		root.AddCommand(c())
	}
	addCompletions(root)
	addExamples(root)
	return root
}

// Execute runs the CLI with os.Args.
func Execute() error {
	survivePipes()
	root := NewRoot()
	cmd, err := root.ExecuteC()
	if err != nil && cmd != nil && isCobraUsageError(err) {
		return Usagef("%v (see '%s --help')", err, cmd.CommandPath())
	}
	return err
}
