// Command testreport reads `go test -json` events (test2json) on standard input and prints what a
// person needs from a long test run: each package's result as it ends, every test of 5 s or more
// as it ends, the whole output of every failed test, then the counts (passed, failed, skipped),
// every skipped test with its reason, and the ten slowest tests.
//
//	go test -json ./... | go run ./hack/testreport -tier 1 -save bin/test/tier1.json
//
// It exits 1 when a test or a package failed, when the input holds no test at all, and with
// -no-skips (CI: a skipped test there is a prerequisite that went missing unseen) when a test
// skipped. Bad usage exits 2.
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"time"
)

// event is one test2json event.
type event struct {
	Time    time.Time
	Action  string
	Package string
	Test    string
	Elapsed float64
	Output  string
}

// result is one test's (or, with an empty Test, one package's) outcome and output.
type result struct {
	pkg, test string
	action    string // pass, fail, skip; "" while running
	elapsed   float64
	started   time.Time // its run event
	output    []string
}

func (r *result) key() string { return r.pkg + " " + r.test }

// report accumulates events and writes progress to w.
type report struct {
	w       io.Writer
	tests   map[string]*result
	order   []*result
	pkgs    map[string]*result
	pkgFail []string
	started time.Time
	ended   time.Time
}

func newReport(w io.Writer) *report {
	return &report{w: w, tests: map[string]*result{}, pkgs: map[string]*result{}}
}

func (r *report) add(e event) {
	if e.Action == "build-output" { // a test binary that does not build (Go 1.24's -json)
		fmt.Fprint(r.w, e.Output)
		return
	}
	if r.started.IsZero() || (!e.Time.IsZero() && e.Time.Before(r.started)) {
		r.started = e.Time
	}
	if e.Time.After(r.ended) {
		r.ended = e.Time
	}
	if e.Test == "" {
		p := r.pkgs[e.Package]
		if p == nil {
			p = &result{pkg: e.Package}
			r.pkgs[e.Package] = p
		}
		switch e.Action {
		case "output":
			p.output = append(p.output, e.Output)
		case "pass", "fail", "skip":
			p.action, p.elapsed = e.Action, e.Elapsed
			r.packageEnded(p)
		}
		return
	}
	k := e.Package + " " + e.Test
	t := r.tests[k]
	if t == nil {
		t = &result{pkg: e.Package, test: e.Test}
		r.tests[k] = t
		r.order = append(r.order, t)
	}
	switch e.Action {
	case "run":
		t.started = e.Time
	case "output":
		t.output = append(t.output, e.Output)
	case "pass", "fail", "skip":
		t.action, t.elapsed = e.Action, e.Elapsed
		// A test whose subtests run in parallel returns (Elapsed 0) before they do: it took
		// until its end event.
		if !t.started.IsZero() && !e.Time.IsZero() {
			t.elapsed = max(t.elapsed, e.Time.Sub(t.started).Seconds())
		}
		r.testEnded(t)
	}
}

func topLevel(t *result) bool { return !strings.Contains(t.test, "/") }

func (r *report) testEnded(t *result) {
	switch {
	case t.action == "fail":
		fmt.Fprintf(r.w, "--- FAIL %s %s (%.1fs)\n", short(t.pkg), t.test, t.elapsed)
		for _, l := range t.output {
			fmt.Fprint(r.w, "    "+l)
		}
	case topLevel(t) && t.elapsed >= 5:
		fmt.Fprintf(r.w, "    %s %s %s (%.1fs)\n", strings.ToUpper(t.action), short(t.pkg), t.test, t.elapsed)
	}
}

func (r *report) packageEnded(p *result) {
	switch p.action {
	case "fail":
		r.pkgFail = append(r.pkgFail, p.pkg)
		fmt.Fprintf(r.w, "FAIL %s (%.1fs)\n", p.pkg, p.elapsed)
		// A build failure, a panic or a timeout is output of the package, not of a test.
		for _, l := range p.output {
			if !strings.HasPrefix(l, "FAIL") && !strings.HasPrefix(l, "ok ") {
				fmt.Fprint(r.w, "    "+l)
			}
		}
	case "pass":
		fmt.Fprintf(r.w, "ok   %s (%.1fs)\n", p.pkg, p.elapsed)
	}
}

// short is a package path without the module's prefix.
func short(pkg string) string {
	if i := strings.Index(pkg, "/meshchaos/meshchaos/"); i >= 0 {
		return pkg[i+len("/meshchaos/meshchaos/"):]
	}
	return pkg
}

// skipReason is what a skipped test said before its --- SKIP line.
func skipReason(t *result) string {
	reason := ""
	for _, l := range t.output {
		s := strings.TrimSpace(l)
		if s == "" || strings.HasPrefix(s, "=== ") || strings.HasPrefix(s, "--- SKIP") {
			continue
		}
		reason = s
	}
	return reason
}

// summary writes the counts, the skips and the slowest tests; it returns the exit code.
func (r *report) summary(tier string, noSkips bool) int {
	var passed, failed, skipped []*result
	for _, t := range r.order {
		switch t.action {
		case "pass":
			passed = append(passed, t)
		case "fail":
			failed = append(failed, t)
		case "skip":
			skipped = append(skipped, t)
		}
	}
	fmt.Fprintf(r.w, "\n== tier %s: %d tests passed, %d failed, %d skipped; %d packages failed; %s\n",
		tier, len(passed), len(failed), len(skipped), len(r.pkgFail), r.ended.Sub(r.started).Round(time.Second))
	for _, t := range skipped {
		fmt.Fprintf(r.w, "   SKIP %s %s: %s\n", short(t.pkg), t.test, skipReason(t))
	}
	var top []*result
	for _, t := range r.order {
		if topLevel(t) && t.action != "" {
			top = append(top, t)
		}
	}
	sort.SliceStable(top, func(i, j int) bool { return top[i].elapsed > top[j].elapsed })
	if len(top) > 10 {
		top = top[:10]
	}
	fmt.Fprintf(r.w, "== the %d slowest tests\n", len(top))
	for _, t := range top {
		fmt.Fprintf(r.w, "  %7.1fs  %s %s\n", t.elapsed, short(t.pkg), t.test)
	}
	for _, t := range r.order {
		if t.action == "" {
			fmt.Fprintf(r.w, "   UNFINISHED %s %s (the run was cut off)\n", short(t.pkg), t.test)
			failed = append(failed, t)
		}
	}
	switch {
	case len(failed) > 0 || len(r.pkgFail) > 0:
		fmt.Fprintf(r.w, "== tier %s FAILED\n", tier)
		return 1
	case len(r.order) == 0:
		fmt.Fprintf(r.w, "== tier %s FAILED: no test ran\n", tier)
		return 1
	case noSkips && len(skipped) > 0:
		fmt.Fprintf(r.w, "== tier %s FAILED: %d tests skipped where none may (a missing prerequisite must fail, not hide a test)\n", tier, len(skipped))
		return 1
	}
	fmt.Fprintf(r.w, "== tier %s passed\n", tier)
	return 0
}

func main() {
	tier := flag.String("tier", "", "the tier's name, for the summary")
	noSkips := flag.Bool("no-skips", false, "fail when any test skipped (CI)")
	save := flag.String("save", "", "also write the events to this file")
	flag.Parse()
	if flag.NArg() != 0 {
		fmt.Fprintln(os.Stderr, "usage: go test -json ... | testreport [-tier NAME] [-no-skips] [-save FILE]")
		os.Exit(2)
	}
	var saved io.Writer = io.Discard
	if *save != "" {
		f, err := os.Create(*save)
		if err != nil {
			fmt.Fprintln(os.Stderr, "testreport:", err)
			os.Exit(2)
		}
		defer f.Close()
		saved = f
	}
	os.Exit(run(os.Stdin, os.Stdout, saved, *tier, *noSkips))
}

// run reads events from in (lines that are not events, such as go's own messages, are printed
// as they are) and returns the exit code.
func run(in io.Reader, out, saved io.Writer, tier string, noSkips bool) int {
	r := newReport(out)
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		line := sc.Bytes()
		fmt.Fprintf(saved, "%s\n", line)
		var e event
		if len(line) == 0 || line[0] != '{' || json.Unmarshal(line, &e) != nil {
			fmt.Fprintf(out, "%s\n", line)
			continue
		}
		r.add(e)
	}
	if err := sc.Err(); err != nil {
		fmt.Fprintln(out, "testreport: read:", err)
		return 1
	}
	return r.summary(tier, noSkips)
}
