package cli

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/meshchaos/meshchaos/experiments"
	"github.com/meshchaos/meshchaos/harness/cluster/bins"
	"github.com/meshchaos/meshchaos/harness/cluster/local"
	"github.com/meshchaos/meshchaos/harness/experiment"
	"github.com/meshchaos/meshchaos/harness/runner"
	"github.com/meshchaos/meshchaos/harness/subject"
	imgs "github.com/meshchaos/meshchaos/images"
	"github.com/meshchaos/meshchaos/results"
)

func init() {
	register(newRunCmd)
	register(newListCmd)
}

func newListCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "list",
		Short: "List the experiments with their parameters",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			printCatalog(cmd.OutOrStdout(), true)
			return nil
		},
	}
}

func printCatalog(out io.Writer, params bool) {
	w := tabwriter.NewWriter(out, 2, 4, 2, ' ', 0)
	for _, d := range experiments.List() {
		fmt.Fprintf(w, "%s\t%s\n", d.Name, d.Summary)
		if params {
			for _, p := range d.Params {
				fmt.Fprintf(w, "\t  --set %s=%s\t%s (%s)\n", p.Name, p.Default, p.Help, p.Range())
			}
		}
	}
	w.Flush()
}

func newRunCmd() *cobra.Command {
	var substrate, cp, out, imagesDir string
	var sets []string
	cmd := &cobra.Command{
		Use:   "run EXPERIMENT [--substrate local] [--cp reference|reference:<switch>] [--set k=v]… [--out DIR]",
		Short: "Run an experiment and write its run directory (exit 0 pass, 1 a check failed, 2 could not run)",
		Args:  cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) != 1 {
				fmt.Fprintln(cmd.ErrOrStderr(), "experiments:")
				printCatalog(cmd.ErrOrStderr(), false)
				return Usagef("give one experiment to run")
			}
			def, ok := experiments.Lookup(args[0])
			if !ok {
				fmt.Fprintln(cmd.ErrOrStderr(), "experiments:")
				printCatalog(cmd.ErrOrStderr(), false)
				return Usagef("unknown experiment %q", args[0])
			}
			vals, err := def.Resolve(sets)
			if err != nil {
				return Usagef("%v", err)
			}
			sut, err := subject.Parse(cp)
			if err != nil {
				return Usagef("%v", err)
			}
			if substrate != "local" {
				return Usagef("--substrate %s: only the local substrate runs experiments today (kind and existing clusters are coming)", substrate)
			}
			if err := local.Preflight(); err != nil {
				return WithExitCode(2, err)
			}
			images, err := bins.ImagesDir(imagesDir)
			if err != nil {
				return WithExitCode(2, err)
			}
			if missing := imgs.Missing(images); len(missing) > 0 {
				return WithExitCode(2, fmt.Errorf("images directory %s lacks %s: run 'make images' (or pass --images DIR)", images, strings.Join(missing, ", ")))
			}
			exp, err := def.Build(experiment.Env{Substrate: local.Substrate{Home: local.Home(), ImagesDir: images}, ControlPlane: sut}, vals)
			if err != nil {
				return Usagef("%v", err)
			}
			if out, err = claimRunDir(out, def.Name, cp); err != nil {
				return WithExitCode(2, err)
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			s, err := runner.Execute(ctx, exp, runner.Options{Dir: out, Progress: runner.NewProgress(cmd.ErrOrStderr())})
			if err != nil && s.Verdict == "" {
				return WithExitCode(2, fmt.Errorf("run %s: %w", def.Name, err))
			}
			o := cmd.OutOrStdout()
			fmt.Fprintf(o, "%s (%s, %s): %s\n", def.Name, substrate, cp, strings.ToUpper(string(s.Verdict)))
			for _, c := range s.Checks {
				status := "FAIL"
				if c.Pass {
					status = "ok"
				}
				fmt.Fprintf(o, "  %-4s  %s\n", status, c.String())
			}
			fmt.Fprintf(o, "report: %s\n", filepath.Join(out, results.MarkdownFile))
			if s.Verdict == results.VerdictError && err != nil && s.Error == "" {
				s.Error = err.Error()
			}
			return verdictError(&s)
		},
	}
	cmd.Flags().StringVar(&substrate, "substrate", "local", "where to run: local (kind and existing come later)")
	cmd.Flags().StringVar(&cp, "cp", "reference", "control plane under test: reference, or reference:<switch>[,<switch>] to re-create a historical bug")
	cmd.Flags().StringArrayVar(&sets, "set", nil, "experiment parameter name=value (repeatable; see 'meshchaos list')")
	cmd.Flags().StringVar(&out, "out", "", "run directory (default runs/EXPERIMENT-CP-TIME)")
	cmd.Flags().StringVar(&imagesDir, "images", "", "image tarballs (from 'make images'; "+imagesDefault+")")
	return cmd
}

// claimRunDir prepares the run directory before anything starts: an explicit one must not hold an
// earlier run (its evidence would be overwritten) and must be writable; the default one
// (runs/EXPERIMENT-CP-TIME) gets a suffix when two runs start in the same second.
func claimRunDir(out, experiment, cp string) (string, error) {
	if out != "" {
		if _, err := os.Stat(filepath.Join(out, results.SummaryFile)); err == nil {
			return "", fmt.Errorf("--out %s already holds a run (%s): choose another directory or remove it", out, results.SummaryFile)
		}
		if err := os.MkdirAll(out, 0o755); err != nil {
			return "", fmt.Errorf("create run directory: %w", err)
		}
		return out, writable(out)
	}
	base := filepath.Join("runs", fmt.Sprintf("%s-%s-%s", experiment, strings.ReplaceAll(cp, ":", "-"), time.Now().Format("20060102-150405")))
	if err := os.MkdirAll(filepath.Dir(base), 0o755); err != nil {
		return "", fmt.Errorf("create run directory: %w", err)
	}
	for i := 1; ; i++ {
		dir := base
		if i > 1 {
			dir = fmt.Sprintf("%s-%d", base, i)
		}
		// Mkdir, not MkdirAll: creating it is how a run claims it.
		err := os.Mkdir(dir, 0o755)
		if err == nil {
			return dir, writable(dir)
		}
		if !errors.Is(err, fs.ErrExist) || i >= 100 {
			return "", fmt.Errorf("create run directory: %w", err)
		}
	}
}

// writable proves the run directory takes a file, so a full disk or a read-only mount is
// reported before a cluster is up rather than when the first summary is written.
func writable(dir string) error {
	f, err := os.CreateTemp(dir, ".write-probe-")
	if err == nil {
		_, err = f.Write(make([]byte, 64<<10))
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		_ = os.Remove(f.Name())
	}
	if err != nil {
		return fmt.Errorf("run directory %s is not writable (%w): free space or choose another --out", dir, err)
	}
	return nil
}
