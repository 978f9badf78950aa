package meshchaos_test

import (
	"bufio"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// designDoc holds the one layout of the repository: its "## Layout" section's code block.
const designDoc = "docs/DESIGN.md"

// notInLayout are top-level directories that are not the project's source: build output and run
// directories (both in .gitignore).
var notInLayout = []string{"bin", "runs"}

// layoutEntry is one line of the layout block: a path (a directory ends with "/") and its line.
type layoutEntry struct {
	path string
	line int
}

// continuationIndent: a line of the block indented this far or more goes on the description of
// the entry above it; an entry is indented two spaces per level below its parent.
const continuationIndent = 12

// parseLayout reads the code block of the "## Layout" section: one entry a line, each path
// relative to the entry one level up (two spaces of indentation per level), then its
// description.
func parseLayout(text string) ([]layoutEntry, error) {
	sc := bufio.NewScanner(strings.NewReader(text))
	n, inSection, inBlock, done := 0, false, false, false
	var entries []layoutEntry
	var parents []string // parents[d] is the path of the last entry at depth d
	for sc.Scan() && !done {
		n++
		line := sc.Text()
		switch {
		case !inSection:
			inSection = line == "## Layout"
			continue
		case !inBlock:
			if strings.HasPrefix(line, "## ") {
				return nil, fmt.Errorf("line %d: the Layout section ends before its code block", n)
			}
			inBlock = strings.HasPrefix(line, "```")
			continue
		case strings.HasPrefix(line, "```"):
			done = true
			continue
		}
		body := strings.TrimLeft(line, " ")
		indent := len(line) - len(body)
		if body == "" || indent >= continuationIndent {
			continue
		}
		if indent%2 != 0 {
			return nil, fmt.Errorf("line %d: indented %d spaces, not a multiple of two: %q", n, indent, line)
		}
		depth := indent / 2
		if depth > len(parents) {
			return nil, fmt.Errorf("line %d: indented deeper than one level below the entry above: %q", n, line)
		}
		name := strings.Fields(body)[0]
		if !strings.HasSuffix(name, "/") && !strings.Contains(name, ".") {
			return nil, fmt.Errorf("line %d: %q is neither a directory (ending with /) nor a file: %q", n, name, line)
		}
		if depth > 0 && !strings.HasSuffix(parents[depth-1], "/") {
			return nil, fmt.Errorf("line %d: %q is under %s, a file", n, name, parents[depth-1])
		}
		p := name
		if depth > 0 {
			p = parents[depth-1] + name
		}
		parents = append(parents[:depth], p)
		entries = append(entries, layoutEntry{path: p, line: n})
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if !done {
		return nil, fmt.Errorf("no closed code block under a \"## Layout\" heading")
	}
	return entries, nil
}

// mustName lists what the layout has to name: every top-level directory but notInLayout and
// hidden ones, and every directory below root that holds Go files (nested modules included;
// testdata and hidden directories skipped), as slash paths ending with "/".
func mustName(root string) ([]string, error) {
	var out []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			name := d.Name()
			if rel != "." && (strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") || name == "testdata" ||
				(!strings.Contains(rel, "/") && slices.Contains(notInLayout, name))) {
				return filepath.SkipDir
			}
			if rel != "." && !strings.Contains(rel, "/") {
				out = append(out, rel+"/")
			}
			return nil
		}
		if dir := filepath.ToSlash(filepath.Dir(rel)); strings.HasSuffix(rel, ".go") && dir != "." && strings.Contains(dir, "/") {
			if !slices.Contains(out, dir+"/") {
				out = append(out, dir+"/")
			}
		}
		return nil
	})
	return out, err
}

// layoutProblems holds the entries against the tree at root: what the tree has and the layout
// does not name, what the layout names and the tree does not have, and names given twice.
func layoutProblems(root string, entries []layoutEntry) ([]string, error) {
	var problems []string
	named := map[string]int{}
	for _, e := range entries {
		if l, ok := named[e.path]; ok {
			problems = append(problems, fmt.Sprintf("line %d names %s again (first on line %d)", e.line, e.path, l))
			continue
		}
		named[e.path] = e.line
		fi, err := os.Stat(filepath.Join(root, filepath.FromSlash(strings.TrimSuffix(e.path, "/"))))
		switch {
		case err != nil:
			problems = append(problems, fmt.Sprintf("line %d names %s, which does not exist", e.line, e.path))
		case strings.HasSuffix(e.path, "/") != fi.IsDir():
			problems = append(problems, fmt.Sprintf("line %d names %s, but it is a %s", e.line, e.path, map[bool]string{true: "directory (end it with /)", false: "file"}[fi.IsDir()]))
		}
	}
	must, err := mustName(root)
	if err != nil {
		return nil, err
	}
	for _, p := range must {
		if _, ok := named[p]; !ok {
			problems = append(problems, fmt.Sprintf("%s is not in the layout: add a line for it, under its parent", p))
		}
	}
	return problems, nil
}

// TestLayoutMatchesTree: DESIGN.md's layout names every top-level directory and every directory
// of Go code, and nothing that does not exist.
func TestLayoutMatchesTree(t *testing.T) {
	text, err := os.ReadFile(designDoc)
	require.NoError(t, err)
	entries, err := parseLayout(string(text))
	require.NoError(t, err, designDoc)
	problems, err := layoutProblems(".", entries)
	require.NoError(t, err)
	for _, p := range problems {
		t.Errorf("%s's layout: %s", designDoc, p)
	}
}

// TestLayoutCheckFindsProblems runs the check over a made-up tree and layout.
func TestLayoutCheckFindsProblems(t *testing.T) {
	root := t.TempDir()
	for _, f := range []string{"a/x.go", "a/b/y.go", "a/b/c/z_test.go", "a/testdata/t.go", "docs/d.md", "bin/tool.go", ".git/h.go", "top.go", "notes/n.txt"} {
		p := filepath.Join(root, filepath.FromSlash(f))
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
		require.NoError(t, os.WriteFile(p, nil, 0o644))
	}
	doc := "# x\n## Layout\ntext\n```\na/          the a\n  b/        the b\n" +
		"            its description, continued: c/ is not an entry\n  gone/     not there\ndocs/       docs\n  d.md      a file\na/b/        twice\n```\n"
	entries, err := parseLayout(doc)
	require.NoError(t, err)
	var paths []string
	for _, e := range entries {
		paths = append(paths, e.path)
	}
	assert.Equal(t, []string{"a/", "a/b/", "a/gone/", "docs/", "docs/d.md", "a/b/"}, paths)
	problems, err := layoutProblems(root, entries)
	require.NoError(t, err)
	assert.ElementsMatch(t, []string{
		"line 11 names a/b/ again (first on line 6)",
		"line 8 names a/gone/, which does not exist",
		"a/b/c/ is not in the layout: add a line for it, under its parent",
		"notes/ is not in the layout: add a line for it, under its parent",
	}, problems)

	for _, bad := range []string{
		"## Layout\n```\na/\n   b/  odd indent\n```\n",
		"## Layout\n```\na/\n    b/  two levels at once\n```\n",
		"## Layout\n```\nREADME  neither\n```\n",
		"## Layout\n```\na/\n",
		"## Layout\ntext\n## Next\n```\na/\n```\n",
	} {
		_, err := parseLayout(bad)
		assert.Error(t, err, bad)
	}
}
