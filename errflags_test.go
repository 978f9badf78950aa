package meshchaos_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// libraryDirs are the packages Go callers use (e2e.Feature, a user's own program): their errors
// reach callers that set Go values, not command-line flags.
var libraryDirs = []string{"harness", "experiments", "results", "e2e"}

// inputFlags are flag spellings that are a library's input itself, by file and flag, with why:
// the check passes them there and fails on one no longer found.
var inputFlags = map[string]string{
	"harness/cluster/internal/e2eprov/e2eprov.go --nodes": "the e2e-framework providers' Create takes its arguments as flags (\"--nodes=2\"): the Go caller's own input",
}

// flagMention is a command-line flag at the start of a message or after a space or '(':
// "--cp %q: ...", "use --substrate kind".
var flagMention = regexp.MustCompile(`(^|[\s(])--[a-z][a-z-]*`)

// meshchaosCommand is a quoted whole meshchaos command line ('meshchaos cluster down --name X'):
// an operator command to run, which a Go caller can run as well as a CLI user.
var meshchaosCommand = regexp.MustCompile(`'meshchaos [^']*'|"meshchaos [^"]*"`)

// flagsNamed returns the flags message names outside quoted meshchaos commands.
func flagsNamed(message string) []string {
	var out []string
	for _, m := range flagMention.FindAllString(meshchaosCommand.ReplaceAllString(message, "''"), -1) {
		out = append(out, strings.TrimLeft(m, " \t\n("))
	}
	return out
}

// errorLiterals returns the string literals passed to fmt.Errorf and errors.New in the Go source
// src, and to the file's own functions that hand a parameter on to fmt.Errorf as its format
// (bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }),
// each with its position.
func errorLiterals(fset *token.FileSet, name string, src any) ([]string, []token.Position, error) {
	file, err := parser.ParseFile(fset, name, src, 0)
	if err != nil {
		return nil, nil, err
	}
	wrappers := errorWrappers(file)
	var lits []string
	var pos []token.Position
	var walkErr error
	ast.Inspect(file, func(n ast.Node) bool {
		call, ok := n.(*ast.CallExpr)
		if !ok {
			return true
		}
		if id, isIdent := call.Fun.(*ast.Ident); !isErrorConstructor(call.Fun) && !(isIdent && wrappers[id.Name]) {
			return true
		}
		for _, a := range call.Args {
			ast.Inspect(a, func(n ast.Node) bool {
				lit, ok := n.(*ast.BasicLit)
				if !ok || lit.Kind != token.STRING {
					return true
				}
				s, err := strconv.Unquote(lit.Value)
				if err != nil && walkErr == nil {
					walkErr = err
				}
				lits = append(lits, s)
				pos = append(pos, fset.Position(lit.Pos()))
				return true
			})
		}
		return true
	})
	return lits, pos, walkErr
}

// errorWrappers names the file's functions (declared, or function literals assigned to a name)
// that pass one of their parameters to fmt.Errorf as its format.
func errorWrappers(file *ast.File) map[string]bool {
	out := map[string]bool{}
	check := func(name string, typ *ast.FuncType, body *ast.BlockStmt) {
		if body == nil {
			return
		}
		params := map[string]bool{}
		for _, f := range typ.Params.List {
			for _, n := range f.Names {
				params[n.Name] = true
			}
		}
		ast.Inspect(body, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if ok && isErrorConstructor(call.Fun) && len(call.Args) > 0 {
				if id, isIdent := call.Args[0].(*ast.Ident); isIdent && params[id.Name] {
					out[name] = true
				}
			}
			return true
		})
	}
	ast.Inspect(file, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.FuncDecl:
			if n.Recv == nil {
				check(n.Name.Name, n.Type, n.Body)
			}
		case *ast.AssignStmt:
			for i, r := range n.Rhs {
				lit, isLit := r.(*ast.FuncLit)
				id, isIdent := n.Lhs[min(i, len(n.Lhs)-1)].(*ast.Ident)
				if isLit && isIdent {
					check(id.Name, lit.Type, lit.Body)
				}
			}
		}
		return true
	})
	return out
}

// isErrorConstructor reports whether fn is fmt.Errorf or errors.New.
func isErrorConstructor(fn ast.Expr) bool {
	sel, ok := fn.(*ast.SelectorExpr)
	if !ok {
		return false
	}
	pkg, ok := sel.X.(*ast.Ident)
	return ok && (pkg.Name == "fmt" && sel.Sel.Name == "Errorf" || pkg.Name == "errors" && sel.Sel.Name == "New")
}

// TestLibraryErrorsNameNoFlags fails on an error message in a library package that names a
// command-line flag: a Go caller (e2e.Feature, a program using the kit) sets no flags, so such a
// message tells it to fix something it does not have. A library error names the input itself
// ("control plane %q: ..."); the CLI adds the flag where it passes the value ("--cp: %w").
func TestLibraryErrorsNameNoFlags(t *testing.T) {
	fset := token.NewFileSet()
	files, used := 0, map[string]bool{}
	for _, dir := range libraryDirs {
		err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
				return err
			}
			files++
			lits, pos, err := errorLiterals(fset, p, nil)
			if err != nil {
				return err
			}
			for i, s := range lits {
				var flags []string
				for _, f := range flagsNamed(s) {
					if key := filepath.ToSlash(p) + " " + strings.SplitN(f, "=", 2)[0]; inputFlags[key] != "" {
						used[key] = true
						continue
					}
					flags = append(flags, f)
				}
				if len(flags) > 0 {
					t.Errorf("%s: error message names flag(s) %s: name the input instead and let the CLI add its flag: %q", pos[i], strings.Join(flags, ", "), s)
				}
			}
			return nil
		})
		require.NoError(t, err)
	}
	assert.Greater(t, files, 100, "the library's Go files were read")
	for key, why := range inputFlags {
		assert.True(t, used[key], "inputFlags holds %s (%s), which no error message names any more: delete it", key, why)
	}
}

// TestLibraryErrorsCheckFindsFlags holds the check to the messages it must and must not flag.
func TestLibraryErrorsCheckFindsFlags(t *testing.T) {
	src := `package p

import ("errors"; "fmt")

func f(s string) error {
	_ = fmt.Errorf("--cp %q: unknown control plane", s)
	_ = errors.New("the local substrate needs root; use --substrate kind")
	_ = fmt.Errorf("needs a control plane (--cp reference or istiod)")
	_ = fmt.Errorf("%s: " + "pass --allow-cp-chaos", s)
	_ = fmt.Errorf("cluster %q is running; run 'meshchaos cluster down --name %s'", s, s)
	_ = fmt.Errorf("control plane %q: want a-b--c or x - y", s)
	_ = fmt.Sprintf("--cp %q", s)
	bad := func(format string, args ...any) error { return fmt.Errorf(format, args...) }
	_ = bad("run with --set %s=1", s)
	_ = wrap("use --xds plaintext")
	return nil
}

func wrap(f string) error { return fmt.Errorf(f) }
`
	lits, _, err := errorLiterals(token.NewFileSet(), "p.go", src)
	require.NoError(t, err)
	var named [][]string
	for _, s := range lits {
		named = append(named, flagsNamed(s))
	}
	assert.Equal(t, [][]string{{"--cp"}, {"--substrate"}, {"--cp"}, nil, {"--allow-cp-chaos"}, nil, nil, {"--set"}, {"--xds"}}, named)
}
