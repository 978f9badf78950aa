package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/meshchaos/meshchaos/harness/suite"
	"github.com/meshchaos/meshchaos/results"
)

func newSuiteMergeCmd() *cobra.Command {
	var o suiteOpts // Out, History, Nights and Output: as suite's
	cmd := &cobra.Command{
		Use:   "merge DIR… [--out DIR] [--history DIR] [-o text|json]",
		Short: "Combine the output directories of a suite's shards (suite --shard I/N) into one result: exit 0 every run gave its expected verdict, 1 not, 2 refused or not written",
		Long: `Combine the output directories of the N shards of one suite ('meshchaos suite NAME --shard I/N'
on N machines) into one output directory: the run directories, suite.json, junit.xml and
index.html the whole suite gives on one machine (the same runs in the same order, the same
verdicts, the same exit code), and with --history DIR one line appended to DIR/NAME.jsonl for the
merged night.

It refuses (exit 2, nothing written) directories of different suites, of different plans of one
suite (another suite file, --set or --cp), of different splits, builds of meshchaos or substrates,
a shard given twice or missing, and a shard that was interrupted or did not finish, naming each.
What differs from the whole suite run on one machine is time alone: startedAt is the first
shard's start, finishedAt the last shard's end, and suite.json says mergedShards.`,
		Args: cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkOutput(o.Output); err != nil {
				return err
			}
			if len(args) == 0 {
				return Usagef("give the shards' output directories: meshchaos suite merge DIR… --out DIR")
			}
			return mergeSuite(args, o, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	cmd.Flags().StringVar(&o.Out, "out", "", "the merged suite's directory to create: the shards' run directories, suite.json, junit.xml, index.html (default runs/suite-NAME-TIME)")
	cmd.Flags().StringVar(&o.History, "history", "", "history directory: append the merged result and show trends across nights")
	cmd.Flags().IntVar(&o.Nights, "nights", 30, "how many executions of the history the trends show")
	outputFlag(cmd, &o.Output)
	return cmd
}

// mergeSuite reads the shards in dirs, merges them and writes the whole suite's result into
// o.Out, with its run directories copied from the shards.
func mergeSuite(dirs []string, o suiteOpts, stdout, stderr io.Writer) error {
	if o.Nights < 2 {
		return Usagef("--nights %d: at least 2 (a trend needs two nights)", o.Nights)
	}
	shards := make([]results.ShardResult, len(dirs))
	for i, d := range dirs {
		r, err := readSuiteResult(d)
		if err != nil {
			return Usagef("%v", err)
		}
		shards[i] = results.ShardResult{Dir: d, Result: r}
	}
	merged, err := results.MergeShards(shards)
	if err != nil {
		return Usagef("suite merge: %v", err)
	}
	// Every run directory is where its shard says, and stays inside it, before anything is made.
	type move struct{ from, to string }
	var moves []move
	for _, sh := range shards {
		for _, r := range sh.Result.Runs {
			from, err := runDirIn(sh.Dir, r.Dir)
			if err == nil {
				var fi os.FileInfo
				if fi, err = os.Lstat(from); err == nil && !fi.IsDir() {
					err = fmt.Errorf("%s is not a directory", from)
				}
			}
			if err != nil {
				return Usagef("suite merge: shard %s (%s): run %s: %v (give each shard's whole output directory)", sh.Result.Shard, sh.Dir, r.Key(), err)
			}
			moves = append(moves, move{from: from, to: r.Dir})
		}
	}
	past, err := readPast(o, merged.Suite, stderr)
	if err != nil {
		return err
	}
	x := &suiteExec{suite: suite.Suite{Name: merged.Suite, Summary: merged.Summary}, substrate: merged.Substrate,
		opts: o, past: past}
	if x.out, err = claimSuiteDir(&x.made, o.Out, merged.Suite); err != nil {
		x.made.RemoveEmpty()
		return err
	}
	defer x.handOver(stderr)
	fmt.Fprintf(stderr, "suite %s: merging %d shards (%d runs) into %s\n", merged.Suite, merged.MergedShards, len(merged.Runs), x.out)
	for _, m := range moves {
		to, err := runDirIn(x.out, m.to)
		if err == nil {
			err = copyRunDir(&x.made, m.from, to)
		}
		if err != nil {
			return WithExitCode(2, fmt.Errorf("suite merge: copy run directory %s into %s: %w", m.from, x.out, err))
		}
	}
	return x.conclude(merged, nil, stdout, stderr)
}

// readSuiteResult reads dir/suite.json.
func readSuiteResult(dir string) (*results.SuiteResult, error) {
	b, err := os.ReadFile(filepath.Join(dir, results.SuiteFile))
	if err != nil {
		return nil, fmt.Errorf("%s holds no suite result (a suite's --out): %w", dir, err)
	}
	var r results.SuiteResult
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("%s: %w", filepath.Join(dir, results.SuiteFile), err)
	}
	return &r, nil
}

// copyRunDir copies the run directory from into to, which must not exist: directories and
// regular files with their permissions (whatever the umask), recording what it creates. Anything
// else — a symbolic link above all, which could point out of the shard — is refused: a run
// directory holds none.
func copyRunDir(made *results.Created, from, to string) error {
	return filepath.WalkDir(from, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(from, p)
		if err != nil {
			return err
		}
		dst := filepath.Join(to, rel)
		switch {
		case d.IsDir():
			return made.Mkdir(dst)
		case d.Type().IsRegular():
			return copyFile(p, dst)
		}
		return fmt.Errorf("%s: %s, not a regular file or directory: refused", p, d.Type())
	})
}

// copyFile copies the regular file from into the new file to, with from's permissions.
func copyFile(from, to string) (err error) {
	src, err := os.Open(from)
	if err != nil {
		return err
	}
	defer src.Close()
	fi, err := src.Stat()
	if err != nil {
		return err
	}
	dst, err := os.OpenFile(to, os.O_WRONLY|os.O_CREATE|os.O_EXCL, fi.Mode().Perm())
	if err != nil {
		return err
	}
	defer func() {
		if cerr := dst.Close(); err == nil {
			err = cerr
		}
	}()
	if _, err := io.Copy(dst, src); err != nil {
		return err
	}
	return dst.Chmod(fi.Mode().Perm())
}
