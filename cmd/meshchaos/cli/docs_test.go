package cli

import (
	"bufio"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"unicode"

	"github.com/spf13/cobra"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshchaos/meshchaos/experiments"
)

// The documentation names commands a reader will type. TestDocsNameRealCommands holds every
// `meshchaos …` command line of README.md and the other Markdown pages (code blocks and inline
// code) against the command tree, and every `make TARGET` against the Makefile, so that a
// renamed flag or target breaks the build instead of the reader's first run.

// codeFragment is a piece of code in a Markdown file: one line of a code block (backslash
// continuations joined) or one inline code span, with where it starts.
type codeFragment struct {
	file  string
	line  int
	text  string
	block bool // a line of a code block, not inline code
}

func (f codeFragment) String() string { return fmt.Sprintf("%s:%d: %s", f.file, f.line, f.text) }

// codeFragments returns the code of a Markdown text.
func codeFragments(file, text string) []codeFragment {
	var out []codeFragment
	lines := strings.Split(text, "\n")
	inBlock := false
	var par []string // the current paragraph's lines, for inline code spanning lines
	parStart := 0
	flushPar := func() {
		if len(par) > 0 {
			out = append(out, inlineCode(file, parStart, par)...)
		}
		par = nil
	}
	for i := 0; i < len(lines); i++ {
		l := lines[i]
		if strings.HasPrefix(strings.TrimSpace(l), "```") {
			flushPar()
			inBlock = !inBlock
			continue
		}
		if inBlock {
			start := i
			for strings.HasSuffix(l, `\`) && i+1 < len(lines) {
				i++
				l = strings.TrimSuffix(l, `\`) + " " + strings.TrimSpace(lines[i])
			}
			out = append(out, codeFragment{file: file, line: start + 1, text: l, block: true})
			continue
		}
		if strings.TrimSpace(l) == "" {
			flushPar()
			continue
		}
		if len(par) == 0 {
			parStart = i + 1
		}
		par = append(par, l)
	}
	flushPar()
	return out
}

// inlineCode returns the `…` spans of a paragraph whose first line is line start.
func inlineCode(file string, start int, lines []string) []codeFragment {
	var out []codeFragment
	inSpan, spanLine := false, 0
	var span strings.Builder
	for k, l := range lines {
		for j, part := range strings.Split(l, "`") {
			if j > 0 {
				if inSpan {
					out = append(out, codeFragment{file: file, line: spanLine, text: span.String()})
					span.Reset()
				} else {
					spanLine = start + k
				}
				inSpan = !inSpan
			}
			if inSpan {
				span.WriteString(part)
			}
		}
		if inSpan {
			span.WriteString(" ")
		}
	}
	return out
}

// ends cut a command line short: a comment, a pipe or redirection, the next command, or
// (after "--") the arguments of another program.
var ends = []string{"#", "|", "||", "&&", ";", ">", "<", "--", "2>&1", "&"}

// trimToken drops the brackets and punctuation that usage lines and prose put around a word.
func trimToken(s string) string {
	s = strings.TrimLeft(s, "[(")
	return strings.TrimRight(s, "]),.;:…'\"")
}

var (
	flagName  = regexp.MustCompile(`^--?([A-Za-z0-9][A-Za-z0-9-]*)(=.*)?$`)
	paramName = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9]*$`)
)

// isMeshchaos tells the token that invokes the CLI: meshchaos, bin/meshchaos, ./bin/meshchaos, …
func isMeshchaos(tok string) bool {
	return tok == "meshchaos" || strings.HasSuffix(tok, "bin/meshchaos")
}

// checkCommandLine finds every meshchaos invocation in a fragment and returns what it names that
// the command tree does not have: a subcommand, a flag, an experiment, an experiment's parameter.
func checkCommandLine(root *cobra.Command, text string) []string {
	toks := strings.Fields(text)
	var problems []string
	for i, t := range toks {
		if isMeshchaos(t) {
			problems = append(problems, checkInvocation(root, toks[i+1:])...)
		}
	}
	return problems
}

func checkInvocation(root *cobra.Command, args []string) []string {
	var problems []string
	cmd := root
	var positional []string
	flagsStarted := false
	for k := 0; k < len(args); k++ {
		raw := args[k]
		if slices.Contains(ends, raw) || strings.HasPrefix(raw, "#") || isMeshchaos(raw) {
			break
		}
		tok := trimToken(raw)
		if tok == "" {
			continue
		}
		if strings.HasPrefix(tok, "-") {
			flagsStarted = true
			m := flagName.FindStringSubmatch(tok)
			if m == nil {
				continue // a negative number or a placeholder, not a flag
			}
			name := m[1]
			if strings.HasPrefix(tok, "--") {
				if cmd.Flags().Lookup(name) == nil && cmd.InheritedFlags().Lookup(name) == nil && name != "help" {
					problems = append(problems, fmt.Sprintf("%s has no flag --%s", cmd.CommandPath(), name))
				}
			} else if len(name) == 1 && cmd.Flags().ShorthandLookup(name) == nil && cmd.InheritedFlags().ShorthandLookup(name) == nil && name != "h" {
				problems = append(problems, fmt.Sprintf("%s has no flag -%s", cmd.CommandPath(), name))
			}
			if name == "set" && cmd.Name() == "run" && len(positional) > 0 && k+1 < len(args) && !strings.Contains(tok, "=") {
				problems = append(problems, checkSet(positional[0], trimToken(args[k+1]))...)
			}
			continue
		}
		if !flagsStarted && len(positional) == 0 {
			if sub := subcommand(cmd, tok); sub != nil {
				cmd = sub
				continue
			}
			if !cmd.Runnable() {
				problems = append(problems, fmt.Sprintf("%s has no subcommand %q", cmd.CommandPath(), tok))
				break
			}
		}
		if cmd.Name() == "run" && len(positional) == 0 && isLowerWord(tok) {
			if _, ok := experiments.Lookup(tok); !ok {
				problems = append(problems, fmt.Sprintf("%s: no experiment %q", cmd.CommandPath(), tok))
			}
		}
		positional = append(positional, tok)
	}
	return problems
}

// placeholders stand for a parameter's name in usage lines (--set k=v, --set name=value).
var placeholders = []string{"k", "key", "name"}

// checkSet checks the parameter names of --set name=value[,…] against the experiment's.
func checkSet(experiment, assignment string) []string {
	d, ok := experiments.Lookup(experiment)
	name, _, ok2 := strings.Cut(assignment, "=")
	if !ok || !ok2 || !paramName.MatchString(name) || slices.Contains(placeholders, name) {
		return nil
	}
	if _, ok := d.Params.Lookup(name); !ok {
		return []string{fmt.Sprintf("experiment %s has no parameter %q (--set %s)", experiment, name, assignment)}
	}
	return nil
}

func isLowerWord(s string) bool { return regexp.MustCompile(`^[a-z][a-z0-9-]*$`).MatchString(s) }

func subcommand(cmd *cobra.Command, name string) *cobra.Command {
	for _, c := range cmd.Commands() {
		if c.Name() == name || slices.Contains(c.Aliases, name) {
			return c
		}
	}
	return nil
}

// makeTargets lists the targets a Makefile defines.
func makeTargets(makefile string) map[string]bool {
	targets := map[string]bool{}
	rule := regexp.MustCompile(`^([A-Za-z0-9_.-]+(?:\s+[A-Za-z0-9_.-]+)*)\s*:([^=]|$)`)
	sc := bufio.NewScanner(strings.NewReader(makefile))
	for sc.Scan() {
		if m := rule.FindStringSubmatch(sc.Text()); m != nil && !strings.HasPrefix(m[1], ".") {
			for _, t := range strings.Fields(m[1]) {
				targets[t] = true
			}
		}
	}
	return targets
}

// checkMake returns the targets of every `make …` in a fragment that the Makefile lacks.
func checkMake(targets map[string]bool, text string) []string {
	toks := strings.Fields(text)
	var problems []string
	for i, t := range toks {
		if t != "make" {
			continue
		}
		// The first word after make's flags is a target; more targets count while they are
		// ones ("make build bins"), since a code block's prose goes on after one ("make test
		// runs …").
		first := true
		for _, a := range toks[i+1:] {
			a = trimToken(a)
			if strings.HasPrefix(a, "-") && first {
				continue // make's own flags
			}
			if a == "" || slices.Contains(ends, a) || strings.Contains(a, "=") || !isLowerWord(a) {
				break // variables, the end of the command
			}
			if !targets[a] {
				if first {
					problems = append(problems, fmt.Sprintf("the Makefile has no target %q", a))
				}
				break
			}
			first = false
		}
	}
	return problems
}

// repoRoot is the module's root directory: the first parent with go.mod.
func repoRoot(t *testing.T) string {
	dir, err := os.Getwd()
	require.NoError(t, err)
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		require.NotEqual(t, dir, parent, "no go.mod above the test's directory")
		dir = parent
	}
}

// docPages are the Markdown pages checked: README.md and every page under docs/, plus the other
// Markdown files of the repository (controlplane/README.md, results/SCHEMA.md, …), outside build
// output and nested tools.
func docPages(t *testing.T, root string) []string {
	var pages []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		if d.IsDir() && rel != "." && (strings.HasPrefix(d.Name(), ".") || rel == "bin" || rel == "runs" || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(p, ".md") {
			pages = append(pages, filepath.ToSlash(rel))
		}
		return nil
	})
	require.NoError(t, err)
	require.Contains(t, pages, "README.md")
	return pages
}

// TestDocsNameRealCommands: every meshchaos subcommand, flag, experiment and --set parameter
// and every make target the documentation names exists.
func TestDocsNameRealCommands(t *testing.T) {
	root := repoRoot(t)
	mk, err := os.ReadFile(filepath.Join(root, "Makefile"))
	require.NoError(t, err)
	targets := makeTargets(string(mk))
	require.True(t, targets["test"] && targets["run"], "Makefile targets not found: %v", targets)
	cmds := NewRoot()
	invocations := 0
	for _, page := range docPages(t, root) {
		text, err := os.ReadFile(filepath.Join(root, page))
		require.NoError(t, err)
		for _, f := range codeFragments(page, string(text)) {
			for _, tok := range strings.Fields(f.text) {
				if isMeshchaos(tok) {
					invocations++
				}
			}
			for _, p := range append(checkCommandLine(cmds, f.text), checkMake(targets, f.text)...) {
				t.Errorf("%s\n\t%s", f, p)
			}
		}
	}
	assert.Greater(t, invocations, 20, "the pages name meshchaos commands: the parser finds none")
}

// TestReadmeTestCommandIsMakeTest: CI and the README agree on how the tests run.
func TestReadmeTestCommandIsMakeTest(t *testing.T) {
	text, err := os.ReadFile(filepath.Join(repoRoot(t), "README.md"))
	require.NoError(t, err)
	found := false
	for _, f := range codeFragments("README.md", string(text)) {
		found = found || f.block && regexp.MustCompile(`^(sudo )?make test(\s|$)`).MatchString(strings.TrimSpace(f.text))
	}
	assert.True(t, found, "README.md must give the tests' command in a code block as `make test`, the command CI runs")
}

// TestDocsCheckFindsMadeUpNames runs the checks over made-up lines: each wrong name is reported,
// and the names of other programs are not checked.
func TestDocsCheckFindsMadeUpNames(t *testing.T) {
	md := "# t\n\nRun `meshchaos run cp-oom-restart --no-such-flag` or\n`bin/meshchaos cluster\nup --nmae x`.\n\n" +
		"```sh\nsudo bin/meshchaos run cp-oom-restart --set rate=5 --set nosuch=1 \\\n   --substrate kind   # ok --not-checked\n" +
		"meshchaos clster down\nmeshchaos run no-such-experiment\nmeshchaos cluster exec --name d -- ip --brief route\n" +
		"dockerd --iptables=false\nmake run RUN_ARGS='--cp x' && make tset\nmake test runs and make build bins\nmeshchaos: --set rate=0 (an error message)\n```\n"
	frags := codeFragments("x.md", md)
	var got []string
	for _, f := range frags {
		for _, p := range append(checkCommandLine(NewRoot(), f.text), checkMake(map[string]bool{"run": true, "test": true, "build": true, "bins": true}, f.text)...) {
			got = append(got, fmt.Sprintf("%d: %s", f.line, p))
		}
	}
	assert.Equal(t, []string{
		"3: meshchaos run has no flag --no-such-flag",
		"4: meshchaos cluster up has no flag --nmae",
		"8: experiment cp-oom-restart has no parameter \"nosuch\" (--set nosuch=1)",
		"10: meshchaos has no subcommand \"clster\"",
		"11: meshchaos run: no experiment \"no-such-experiment\"",
		"14: the Makefile has no target \"tset\"",
	}, got)
}

var (
	mdLink  = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	heading = regexp.MustCompile("^#{1,6} +(.*?) *#*$")
)

// anchors lists the anchors GitHub gives a Markdown page's headings: lower case, punctuation
// dropped, spaces as hyphens, "-1", "-2" … on repeats.
func anchors(text string) map[string]bool {
	out := map[string]bool{}
	seen := map[string]int{}
	inBlock := false
	for _, l := range strings.Split(text, "\n") {
		if strings.HasPrefix(strings.TrimSpace(l), "```") {
			inBlock = !inBlock
		}
		m := heading.FindStringSubmatch(l)
		if inBlock || m == nil {
			continue
		}
		var b strings.Builder
		for _, r := range strings.ToLower(m[1]) {
			switch {
			case r == ' ':
				b.WriteRune('-')
			case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
				b.WriteRune(r)
			}
		}
		a := b.String()
		if n := seen[a]; n > 0 {
			out[fmt.Sprintf("%s-%d", a, n)] = true
		} else {
			out[a] = true
		}
		seen[a]++
	}
	return out
}

// brokenLinks returns the relative links of page (a slash path under root) whose file does not
// exist, or whose #anchor names no heading of the Markdown file it points to.
func brokenLinks(root, page, text string) []string {
	var out []string
	for _, l := range strings.Split(stripCode(text), "\n") {
		for _, m := range mdLink.FindAllStringSubmatch(l, -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			file, anchor, _ := strings.Cut(target, "#")
			path, body, err := page, []byte(text), error(nil)
			if file != "" {
				path = filepath.ToSlash(filepath.Join(filepath.Dir(page), file))
				body, err = os.ReadFile(filepath.Join(root, path))
			}
			if err != nil {
				if fi, serr := os.Stat(filepath.Join(root, path)); serr == nil && fi.IsDir() && anchor == "" {
					continue
				}
				out = append(out, fmt.Sprintf("link %s: no file %s", target, path))
				continue
			}
			if anchor != "" && strings.HasSuffix(path, ".md") && !anchors(string(body))[anchor] {
				out = append(out, fmt.Sprintf("link %s: no heading of %s has the anchor #%s", target, path, anchor))
			}
		}
	}
	return out
}

// stripCode blanks the code blocks and inline code of a Markdown text, where ](…) is no link.
func stripCode(text string) string {
	var b strings.Builder
	inBlock := false
	for _, l := range strings.Split(text, "\n") {
		if strings.HasPrefix(strings.TrimSpace(l), "```") {
			inBlock = !inBlock
			b.WriteString("\n")
			continue
		}
		if inBlock {
			b.WriteString("\n")
			continue
		}
		parts := strings.Split(l, "`")
		for i, p := range parts {
			if i%2 == 0 {
				b.WriteString(p)
			}
		}
		b.WriteString("\n")
	}
	return b.String()
}

// TestDocsLinksResolve: every relative link of the Markdown pages reaches a file, and its
// #anchor a heading of that file (README's sections moved to docs/; a link into one must follow).
func TestDocsLinksResolve(t *testing.T) {
	root := repoRoot(t)
	for _, page := range docPages(t, root) {
		text, err := os.ReadFile(filepath.Join(root, page))
		require.NoError(t, err)
		for _, p := range brokenLinks(root, page, string(text)) {
			t.Errorf("%s: %s", page, p)
		}
	}
}

func TestDocsLinkCheckFindsBrokenLinks(t *testing.T) {
	root := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(root, "docs"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(root, "docs", "a.md"), []byte("# A page\n## The cluster's own istiod: `--cp istiod:installed`\n## Twice\n## Twice\n```\n# not a heading\n```\n"), 0o644))
	page := "# R\n[ok](docs/a.md) [ok](docs/a.md#the-clusters-own-istiod---cp-istiodinstalled) [ok](docs/a.md#twice-1) [dir](docs/)\n" +
		"[gone](docs/b.md) [bad anchor](docs/a.md#not-a-heading) [self](#r) [self bad](#s) [web](https://example.com/x#y)\n`[code](nowhere.md)`\n"
	assert.Equal(t, []string{
		"link docs/b.md: no file docs/b.md",
		"link docs/a.md#not-a-heading: no heading of docs/a.md has the anchor #not-a-heading",
		"link #s: no heading of README.md has the anchor #s",
	}, brokenLinks(root, "README.md", page))
}

// readmeExperiments reads README's experiments table: each row's experiment name and its cells.
func readmeExperiments(text string) (map[string][]string, error) {
	rows := map[string][]string{}
	inSection := false
	name := regexp.MustCompile(`^\[([a-z0-9-]+)\]\(docs/experiments/([a-z0-9-]+)\.md\)`)
	for _, l := range strings.Split(text, "\n") {
		if strings.HasPrefix(l, "## ") {
			inSection = l == "## Experiments"
			continue
		}
		if !inSection || !strings.HasPrefix(l, "| [") {
			continue
		}
		cells := strings.Split(strings.Trim(l, "| "), " | ")
		m := name.FindStringSubmatch(cells[0])
		if m == nil || m[1] != m[2] {
			return nil, fmt.Errorf("experiments table: %q does not start with [NAME](docs/experiments/NAME.md)", l)
		}
		rows[m[1]] = cells
	}
	return rows, nil
}

// TestReadmeListsEveryExperiment: README's experiments table has a row, and a page, for every
// experiment of the catalog and none other, and says "none" for node access exactly where the
// experiment needs none (Definition.NodeAccess, what the existing substrate refuses without
// --allow-node-chaos).
func TestReadmeListsEveryExperiment(t *testing.T) {
	root := repoRoot(t)
	text, err := os.ReadFile(filepath.Join(root, "README.md"))
	require.NoError(t, err)
	rows, err := readmeExperiments(string(text))
	require.NoError(t, err)
	const nodeAccessColumn = 3 // experiment, time, faults, node access, substrates
	for _, d := range experiments.List() {
		cells, ok := rows[d.Name]
		if !assert.True(t, ok, "README's experiments table has no row for %s", d.Name) {
			continue
		}
		delete(rows, d.Name)
		assert.FileExists(t, filepath.Join(root, "docs", "experiments", d.Name+".md"))
		require.Greater(t, len(cells), nodeAccessColumn, "README's row of %s", d.Name)
		assert.Equal(t, len(d.NodeAccess) == 0, cells[nodeAccessColumn] == "none",
			"README's row of %s says node access %q; the experiment declares %q", d.Name, cells[nodeAccessColumn], d.NodeAccess)
	}
	for n := range rows {
		t.Errorf("README's experiments table lists %s, which is no experiment", n)
	}
}
