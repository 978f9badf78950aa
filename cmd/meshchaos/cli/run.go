package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/meshchaos/meshchaos/experiments"
	"github.com/meshchaos/meshchaos/harness/cluster"
	"github.com/meshchaos/meshchaos/harness/cluster/bins"
	"github.com/meshchaos/meshchaos/harness/cluster/kind"
	"github.com/meshchaos/meshchaos/harness/cluster/local"
	"github.com/meshchaos/meshchaos/harness/cluster/reuse"
	"github.com/meshchaos/meshchaos/harness/kit"
	"github.com/meshchaos/meshchaos/harness/mesh"
	"github.com/meshchaos/meshchaos/harness/params"
	"github.com/meshchaos/meshchaos/harness/runner"
	"github.com/meshchaos/meshchaos/harness/subject"
	imgs "github.com/meshchaos/meshchaos/images"
	"github.com/meshchaos/meshchaos/results"
)

func init() {
	register(newRunCmd)
}

func newRunCmd() *cobra.Command {
	var (
		j      job
		output string
		dryRun bool
	)
	cmd := &cobra.Command{
		Use:   "run EXPERIMENT [--substrate local] [--cp reference|reference:<switch>|istiod[@PIN]|istiod:installed|external:FILE] [--set k=v]… [--out DIR] [--keep-cluster[=on-failure|always|never]] [--dry-run] [-o text|json]",
		Short: "Run an experiment and write its run directory (exit 0 pass, 1 a check failed, 2 could not run or its results could not be written)",
		Long: `Run one experiment on a cluster of its own (or in namespaces of its own on --substrate existing)
and write its run directory (--out): summary.json, report.md, report.html, junit.xml, charts/,
pprof/, traffic/, and logs/ (every container log of the run's pods, read before the cluster
goes). It prints the verdict — pass, fail or error, as summary.json spells it — and each check
as pass or fail.

--keep-cluster leaves the run's cluster up at the end instead of tearing it down, and prints how
to reach it (export KUBECONFIG=…) and how to remove it (meshchaos cluster down NAME):
on-failure keeps it when the verdict is not pass, always (what --keep-cluster alone means, as
does true) whatever the verdict, never (the default, as does false) tears it down. On the
existing substrate the run's namespaces, its agent and its node labels stay.`,
		Args: cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkOutput(output); err != nil {
				return err
			}
			x, err := experimentArg(cmd.ErrOrStderr(), args, "run")
			if err != nil {
				return err
			}
			j.Experiment = x
			if dryRun {
				return j.dryRun(cmd.OutOrStdout(), output)
			}
			var made results.Created
			p, err := j.prepare(&made)
			if err != nil {
				// Refused: the run directory it may have made goes again.
				made.RemoveEmpty()
				return err
			}
			ctx, stop := interruptible(cmd.Context(), cmd.ErrOrStderr(), newActivity("run "+j.Experiment))
			defer stop()
			return p.run(ctx, &made, output, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	j.flags(cmd)
	cmd.Flags().StringArrayVar(&j.Sets, "set", nil, "experiment parameter name=value (repeatable; see 'meshchaos list')")
	cmd.Flags().StringVar(&j.Out, "out", "", "the run directory to create: summary.json, reports, charts, logs (default runs/EXPERIMENT-CP-TIME; one holding a run is refused)")
	cmd.Flags().StringVar(&j.Keep, "keep-cluster", string(kit.KeepNever), "leave the run's cluster up at the end: never, on-failure (verdict fail or error) or always (--keep-cluster alone)")
	cmd.Flags().Lookup("keep-cluster").NoOptDefVal = string(kit.KeepAlways)
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "check every input as the run does and print its plan (as 'meshchaos describe'), creating nothing")
	outputFlag(cmd, &output)
	return cmd
}

// dryRun checks every input as a run does and prints the run's plan; it creates nothing (no run
// directory: an --out holding a run is refused as the run refuses it, but none is made).
func (j job) dryRun(w io.Writer, format string) error {
	c, err := j.check()
	if err != nil {
		return err
	}
	if j.Out != "" {
		if err := checkRunDirFree(j.Out); err != nil {
			return WithExitCode(2, err)
		}
	}
	p := newPlan(j, c.def, c.vals, c.sut)
	p.DryRun = true
	if keep, err := kit.ParseKeep(j.Keep); err == nil && keep != kit.KeepNever {
		p.KeepCluster = string(keep) // check refused a bad value already
	}
	return printPlan(w, format, p)
}

// job is one experiment run as the CLI asks for it: what `run` executes, and what commands that
// run many experiments (suites, upgrade checks) execute one after another.
type job struct {
	Experiment string
	Sets       []string
	// Substrate names the cluster provider: local, kind or existing.
	Substrate string
	// CP is the control plane under test as --cp spells it.
	CP string
	// Out is the run directory; empty picks runs/EXPERIMENT-CP-TIME.
	Out string
	// Images is the image tarball directory (--images).
	Images string
	// Name is the cluster's name (--name); empty: the experiment's short name and the pid.
	Name string
	// Existing is the existing substrate's flags (--kubeconfig, --context, --allow-node-chaos,
	// --allow-cp-chaos).
	Existing existingFlags
	// XDS is how the data plane reaches the control plane (--xds auto|tls|plaintext).
	XDS string
	// Keep is when the run's cluster stays up at the end (--keep-cluster; run only: "" is never).
	Keep string
	// ReuseCluster is --reuse-cluster (suite, upgrade-check, fidelity): pool is then the
	// clusters the runs share (newPool) and poolRun this run's number among them.
	ReuseCluster bool
	pool         *reuse.Pool
	poolRun      int
}

// flags registers the flags every command that runs experiments against one control plane shares.
func (j *job) flags(cmd *cobra.Command) {
	j.substrateFlags(cmd)
	cmd.Flags().StringVar(&j.CP, "cp", "reference", "control plane under test: reference, reference:<switch>[,<switch>] to re-create a historical bug (an item generation=per-proxy generates every proxy's CDS/LDS/RDS for that proxy, as istio ≤ 1.14), istiod or istiod@PIN (a build of 'make istiod', see hack/istiod/pins), istiod:installed (the istiod installed in istio-system, with --substrate existing: found, never changed), or external:FILE (a descriptor)")
}

// substrateFlags registers where experiments run: every command that runs them has these.
func (j *job) substrateFlags(cmd *cobra.Command) {
	cmd.Flags().StringVar(&j.Substrate, "substrate", "local", "where to run: local (network namespaces on this host, root), kind (Docker) or existing (a cluster you have: --kubeconfig)")
	cmd.Flags().StringVar(&j.Images, "images", "", "image tarballs (from 'make images'; "+imagesDefault+")")
	cmd.Flags().StringVar(&j.Name, "name", "", "the cluster's name, unique on this host (default: the experiment's first letters and the process id)")
	cmd.Flags().StringVar(&j.XDS, "xds", "auto", "how the proxies reach the control plane: tls (xDS over TLS with their ServiceAccount tokens, as sidecars dial istiod's 15012), plaintext (15010), or auto (tls when the control plane serves it)")
	j.Existing.flags(cmd)
}

// prepared is a job whose every input was checked and whose run directory is claimed; nothing
// has started yet.
type prepared struct {
	job
	Dir string
	exp runner.Experiment
	// nodes is how many nodes the run's cluster has (0: it brings up none).
	nodes int
}

// checked is a job whose every input was checked: what a run and a dry run share.
type checked struct {
	def  kit.Definition
	vals params.Values
	sut  subject.ControlPlane
	exp  runner.Experiment
}

// check checks everything a run needs before anything starts (bad input is exit 2 with a line
// saying what to do); it creates nothing.
func (j job) check() (*checked, error) {
	if err := j.checkSubstrate(); err != nil {
		return nil, err
	}
	def, ok := experiments.Lookup(j.Experiment)
	if !ok {
		return nil, Usagef("unknown experiment %q (see 'meshchaos list')", j.Experiment)
	}
	vals, err := def.Resolve(j.Sets)
	if err != nil {
		return nil, Usagef("--set: %v", err)
	}
	sut, err := subject.Parse(j.CP)
	if err != nil {
		return nil, Usagef("--cp: %v", err)
	}
	keep, err := kit.ParseKeep(j.Keep)
	if err != nil {
		return nil, Usagef("--keep-cluster: %v", err)
	}
	sub, err := j.provider()
	if err != nil {
		return nil, err
	}
	if err := checkNodeAccess(sub, def); err != nil {
		return nil, err
	}
	xds, err := mesh.ParseXDS(j.XDS)
	if err != nil {
		return nil, Usagef("--xds: %v", err)
	}
	exp, err := def.Build(kit.Env{Substrate: sub, ControlPlane: sut, ClusterName: j.Name, XDS: xds, AllowCPChaos: j.Existing.AllowCPChaos, Keep: keep}, vals)
	if errors.Is(err, kit.ErrCPChaosNotAllowed) {
		return nil, Usagef("%v; pass --allow-cp-chaos to allow it", err)
	}
	if err != nil {
		return nil, Usagef("%v", err)
	}
	if err := checkInstalled(sub, sut, def, vals); err != nil {
		return nil, err
	}
	return &checked{def: def, vals: vals, sut: sut, exp: exp}, nil
}

// prepare checks everything a run needs before anything starts (check) and claims the run
// directory, recording in made the directories it creates.
func (j job) prepare(made *results.Created) (*prepared, error) {
	c, err := j.check()
	if err != nil {
		return nil, err
	}
	dir, err := claimRunDir(made, j.Out, c.def.Name, j.CP)
	if err != nil {
		return nil, WithExitCode(2, err)
	}
	p := &prepared{job: j, Dir: dir, exp: c.exp}
	if c.def.Mesh != nil {
		p.nodes = c.def.MeshSpec(c.vals).Nodes
	}
	return p, nil
}

// checkSubstrate refuses an unknown --substrate and flags of another substrate than the one
// chosen; commands that create anything before their first prepare call it first.
func (j job) checkSubstrate() error {
	switch j.Substrate {
	case "local", "kind", "existing":
	default:
		return Usagef("--substrate %s: choose local, kind or existing", j.Substrate)
	}
	return j.Existing.check(j.Substrate)
}

// provider checks the substrate's preconditions and returns it.
func (j job) provider() (cluster.Substrate, error) {
	if j.pool != nil {
		return j.pool.Run(j.poolRun), nil
	}
	switch j.Substrate {
	case "local":
		if err := local.Preflight(); err != nil {
			return nil, WithExitCode(2, err)
		}
		images, err := j.imagesDir()
		if err != nil {
			return nil, err
		}
		if j.Name != "" {
			// A name in use is refused before anything starts; the bring-up claims it for good.
			if err := local.CheckName("", j.Name); err != nil {
				return nil, Usagef("--name: %v", err)
			}
		}
		return local.Substrate{Home: local.Home(), ImagesDir: images, Connect: connectCommand}, nil
	case "kind":
		// Docker missing or stopped: exit 2 with what to do (install/start Docker, or
		// 'sudo hack/docker.sh' on a machine like our CI).
		if err := kind.Preflight(); err != nil {
			return nil, WithExitCode(2, err)
		}
		images, err := j.imagesDir()
		if err != nil {
			return nil, err
		}
		return kind.Substrate{ImagesDir: images}, nil
	case "existing":
		return j.Existing.provider()
	default:
		return nil, Usagef("--substrate %s: choose local, kind or existing", j.Substrate)
	}
}

// imagesDir is the directory of image tarballs every substrate loads, complete.
func (j job) imagesDir() (string, error) {
	images, err := bins.ImagesDir(j.Images)
	if err != nil {
		return "", WithExitCode(2, err)
	}
	if missing := imgs.Missing(images); len(missing) > 0 {
		return "", WithExitCode(2, fmt.Errorf("images directory %s lacks %s: run 'make images' (or pass --images DIR)", images, strings.Join(missing, ", ")))
	}
	return images, nil
}

// run executes the prepared run as `meshchaos run` does: its verdict and checks on stdout and
// the verdict as the exit code — but exit 2 when the run directory does not hold the verdict
// (its final summary or reports could not be written), whatever the verdict in memory: a pass
// nobody can read back is no pass. made is what the command created; what the run wrote is
// handed to the user who ran it through sudo. format is -o: text or json.
func (p *prepared) run(ctx context.Context, made *results.Created, format string, stdout, stderr io.Writer) error {
	s, err := p.execute(ctx, runner.NewProgress(stderr))
	if err != nil && s.Verdict == "" {
		// Nothing was written: the run directory goes again if it is empty.
		made.RemoveEmpty()
		handOver(stderr, made.Paths()...)
		return WithExitCode(2, fmt.Errorf("run %s: %w", p.Experiment, err))
	}
	handOver(stderr, append(made.Paths(), p.Dir)...)
	if perr := printVerdict(stdout, format, newRunResult(p.job, p.Dir, &s, err == nil)); perr != nil {
		return WithExitCode(2, perr)
	}
	teardownNote(stderr, &s)
	if err != nil {
		return WithExitCode(2, fmt.Errorf("run %s: %w", p.Experiment, err))
	}
	return verdictError(&s)
}

// runResult is what `meshchaos run -o json` prints: summary.json's verdict, error and checks,
// and where the run's files are. Summary and Report are empty when the run could not write
// them (exit code 2 whatever the verdict).
type runResult struct {
	Experiment   string          `json:"experiment"`
	Substrate    string          `json:"substrate"`
	ControlPlane string          `json:"controlPlane"`
	Verdict      results.Verdict `json:"verdict"`
	Error        string          `json:"error,omitempty"`
	Checks       []results.Check `json:"checks"`
	RunDir       string          `json:"runDir"`
	Summary      string          `json:"summary,omitempty"`
	Report       string          `json:"report,omitempty"`
	// Kept is the cluster --keep-cluster left up, as summary.json's keptCluster.
	Kept *results.KeptCluster `json:"keptCluster,omitempty"`
}

// newRunResult is the verdict of the run of j into dir; written says whether its summary and
// reports are on disk.
func newRunResult(j job, dir string, s *results.Summary, written bool) runResult {
	r := runResult{Experiment: j.Experiment, Substrate: j.Substrate, ControlPlane: j.CP,
		Verdict: s.Verdict, Error: s.Error, Checks: append([]results.Check{}, s.Checks...), RunDir: dir, Kept: s.Kept}
	if written {
		r.Summary, r.Report = filepath.Join(dir, results.SummaryFile), filepath.Join(dir, results.MarkdownFile)
	}
	return r
}

// printVerdict prints a run's verdict on w: its checks and report in text, the document in json.
// Verdicts and checks are spelt as summary.json spells them (pass, fail, error).
func printVerdict(w io.Writer, format string, r runResult) error {
	if format == outputJSON {
		return writeJSON(w, r)
	}
	fmt.Fprintf(w, "%s (%s, %s): %s\n", r.Experiment, r.Substrate, r.ControlPlane, r.Verdict)
	for _, c := range r.Checks {
		fmt.Fprintf(w, "  %-4s  %s\n", checkResult(c), c.String())
	}
	if r.Report != "" {
		fmt.Fprintf(w, "report: %s\n", r.Report)
	}
	if k := r.Kept; k != nil {
		printKept(w, k)
	}
	return nil
}

// checkResult is a check's outcome as summary.json and the reports spell it.
func checkResult(c results.Check) string {
	if c.Pass {
		return string(results.VerdictPass)
	}
	return string(results.VerdictFail)
}

// handOver gives paths (and what is under them) to the user who ran meshchaos through sudo. A
// failure is said on w but does not change the exit code: the results are there and readable,
// only owned by root.
func handOver(w io.Writer, paths ...string) {
	if err := results.GiveToInvoker(paths...); err != nil {
		fmt.Fprintf(w, "warning: %v\n", err)
	}
}

// execute runs the prepared experiment into its directory. The summary's verdict is empty only
// when the run could not write one.
func (p *prepared) execute(ctx context.Context, progress runner.Progress) (results.Summary, error) {
	return runner.Execute(ctx, p.exp, runner.Options{Dir: p.Dir, Progress: progress})
}

// claimRunDir prepares the run directory before anything starts: an explicit one must not hold an
// earlier run (its evidence would be overwritten) and must be writable; the default one
// (runs/EXPERIMENT-CP-TIME) gets a suffix when two runs start in the same second. The
// directories it creates are recorded in made (so that a refusal removes them) and are 0755
// whatever the umask.
func claimRunDir(made *results.Created, out, experiment, cp string) (string, error) {
	if out != "" {
		if err := checkRunDirFree(out); err != nil {
			return "", err
		}
		if err := made.MkdirAll(out); err != nil {
			return "", fmt.Errorf("create run directory: %w", err)
		}
		return out, writable(out)
	}
	base := filepath.Join("runs", fmt.Sprintf("%s-%s-%s", experiment, strings.NewReplacer(":", "-", "/", "-").Replace(cp), time.Now().Format("20060102-150405")))
	if err := made.MkdirAll(filepath.Dir(base)); err != nil {
		return "", fmt.Errorf("create run directory: %w", err)
	}
	for i := 1; ; i++ {
		dir := base
		if i > 1 {
			dir = fmt.Sprintf("%s-%d", base, i)
		}
		// Mkdir, not MkdirAll: creating it is how a run claims it.
		err := made.Mkdir(dir)
		if err == nil {
			return dir, writable(dir)
		}
		if !errors.Is(err, fs.ErrExist) || i >= 100 {
			return "", fmt.Errorf("create run directory: %w", err)
		}
	}
}

// checkRunDirFree refuses an --out that already holds a run: its evidence would be overwritten.
func checkRunDirFree(out string) error {
	if _, err := os.Stat(filepath.Join(out, results.SummaryFile)); err == nil {
		return fmt.Errorf("--out %s already holds a run (%s): choose another directory or remove it", out, results.SummaryFile)
	}
	return nil
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

// teardownNote says on w what the run's teardown could not remove when the verdict does not say
// it already (a failed check is the verdict; the cluster left behind must not go unnoticed).
func teardownNote(w io.Writer, s *results.Summary) {
	for _, ph := range s.Phases {
		if ph.Name == "teardown" && ph.Error != "" && !strings.Contains(s.Error, ph.Error) {
			fmt.Fprintf(w, "meshchaos: the run's teardown did not finish: %s\n", ph.Error)
		}
	}
}

// experimentArg is the one experiment a command takes (run, describe): anything else is exit 2
// with the catalog on w.
func experimentArg(w io.Writer, args []string, verb string) (string, error) {
	if len(args) != 1 {
		fmt.Fprintln(w, "experiments:")
		printCatalog(w, false)
		return "", Usagef("give one experiment to %s", verb)
	}
	if _, ok := experiments.Lookup(args[0]); !ok {
		fmt.Fprintln(w, "experiments:")
		printCatalog(w, false)
		return "", Usagef("unknown experiment %q: choose one listed above", args[0])
	}
	return args[0], nil
}
