package cli

import (
	"errors"
	"fmt"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/meshchaos/meshchaos/results"
	"github.com/meshchaos/meshchaos/results/render"
)

func init() { register(newReportCmd) }

func newReportCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "report RUN_DIR",
		Short: "Re-render a run directory's junit.xml, report.md, report.html and charts from its summary.json",
		Long: `Reads RUN_DIR/summary.json (schema meshchaos/v1), validates it, and writes junit.xml,
report.md, report.html and charts/ next to it.

Exit code mirrors the run: 0 pass, 1 a check failed, 2 the run could not be carried out
(verdict error) or RUN_DIR is missing or not a valid run directory.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			dir := args[0]
			s, err := results.Read(dir)
			if err != nil {
				return Usagef("%v", err)
			}
			err = render.Render(dir, s)
			// Only what it wrote: the run directory may be someone else's.
			handOver(cmd.ErrOrStderr(), filepath.Join(dir, results.JUnitFile), filepath.Join(dir, results.MarkdownFile),
				filepath.Join(dir, results.HTMLFile), filepath.Join(dir, results.ChartsDir))
			if err != nil {
				return WithExitCode(2, fmt.Errorf("render %s: %w", dir, err))
			}
			out := cmd.OutOrStdout()
			fmt.Fprintf(out, "%s: %s\n", s.Experiment, s.Verdict)
			for _, c := range s.Checks {
				fmt.Fprintf(out, "  %-4s  %s\n", checkResult(c), c.String())
			}
			fmt.Fprintf(out, "wrote %s, %s, %s\n", filepath.Join(dir, results.HTMLFile), filepath.Join(dir, results.MarkdownFile), filepath.Join(dir, results.JUnitFile))
			return verdictError(s)
		},
	}
}

// verdictError turns a run's verdict into the process exit code (DESIGN.md contracts).
func verdictError(s *results.Summary) error {
	switch s.Verdict {
	case results.VerdictPass:
		return nil
	case results.VerdictFail:
		n := 0
		for _, c := range s.Checks {
			if !c.Pass {
				n++
			}
		}
		return WithExitCode(1, fmt.Errorf("%s failed %d of %d checks", s.Experiment, n, len(s.Checks)))
	default:
		return WithExitCode(2, errors.New(s.Experiment+" could not be carried out: "+s.Error))
	}
}
