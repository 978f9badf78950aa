package cli

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/meshchaos/meshchaos/harness/cluster/local"
	"github.com/meshchaos/meshchaos/harness/suite"
	"github.com/meshchaos/meshchaos/internal/prereq"
	"github.com/meshchaos/meshchaos/results"
)

// smallRun is a cp-oom-restart small enough to bring up many times: one node, a few
// ServiceEntries, a short traffic window. It goes through every phase (setup, steady, chaos with
// a kernel OOM kill, recovery, teardown).
var smallRun = []string{"run", "cp-oom-restart", "--set", "nodes=1", "--set", "serviceEntries=20", "--set", "hosts=2",
	"--set", "gateways=1", "--set", "duration=40s", "--set", "steady=8s", "--set", "throttleWindow=8s", "--set", "cpMemoryLimit=192Mi"}

// smallSets are smallRun's --set values.
func smallSets() []string {
	var sets []string
	for i := 2; i+1 < len(smallRun); i += 2 {
		sets = append(sets, smallRun[i+1])
	}
	return sets
}

// smallEntry is smallRun as a suite entry.
func smallEntry() string {
	return fmt.Sprintf("- experiment: %s\n  set: [%s]\n", smallRun[1], strings.Join(smallSets(), ", "))
}

// interruptSuites writes the suites TestInterruptAnywhere stops: two entries of smallRun for
// suite, one for upgrade-check (which runs it against base and candidate).
func interruptSuites(t *testing.T) (suiteYAML, upgradeYAML string) {
	t.Helper()
	dir := t.TempDir()
	suiteYAML = filepath.Join(dir, "two-small.yaml")
	require.NoError(t, os.WriteFile(suiteYAML, []byte("name: two-small\nentries:\n"+smallEntry()+smallEntry()), 0o644))
	upgradeYAML = filepath.Join(dir, "one-small.yaml")
	require.NoError(t, os.WriteFile(upgradeYAML, []byte("name: one-small\nentries:\n"+smallEntry()), 0o644))
	return suiteYAML, upgradeYAML
}

// TestInterruptSuitesResolve: the suites TestInterruptAnywhere stops are smallRun's parameters,
// valid, without a control plane (upgrade-check refuses one), so that a typo fails here rather
// than an hour into the nightly tests.
func TestInterruptSuitesResolve(t *testing.T) {
	suiteYAML, upgradeYAML := interruptSuites(t)
	for file, runs := range map[string]int{suiteYAML: 2, upgradeYAML: 1} {
		s, err := suite.Load(file)
		require.NoError(t, err, file)
		entries, err := resolveEntries(s, nil, "reference")
		require.NoError(t, err, file)
		require.Len(t, entries, runs)
		for _, e := range entries {
			assert.Equal(t, smallRun[1], e.Experiment)
			assert.Empty(t, e.ControlPlane, "upgrade-check refuses an entry with a control plane")
			assert.Equal(t, smallSets(), e.Sets, "smallRun's --set values")
		}
	}
}

// The commands TestInterruptAnywhere stops.
const (
	cmdRun          = "run"
	cmdSuite        = "suite"
	cmdUpgradeCheck = "upgrade-check"
)

// interruptPoint is a moment of a command, recognised by a line of its progress output, at which
// a signal is sent (after a random delay of up to defaultMaxDelay, teardownMaxDelay in teardown).
type interruptPoint struct {
	// command is what is stopped: a run, a suite of two small runs, or an upgrade-check of one
	// small entry (a base and a candidate run).
	command string
	// after, when set, is a line that must come before marker: the line that starts a suite's or
	// an upgrade-check's second run. marker is a substring of a progress line (empty: the after
	// line itself); phase is the run's phase when it is printed, run which run it is (1 or 2).
	after, marker, phase string
	run                  int
	sig                  syscall.Signal
}

// name names the point's subtest.
func (p interruptPoint) name(i int) string {
	m := p.marker
	if m == "" {
		m = "start"
	}
	m = strings.ReplaceAll(strings.TrimSpace(m), " ", "_")
	if p.command == cmdRun {
		return fmt.Sprintf("%02d-%s-%s", i, m, p.sig)
	}
	return fmt.Sprintf("%02d-%s-run%d-%s-%s", i, p.command, p.run, m, p.sig)
}

// defaultMaxDelay spreads the signals over the few seconds after a marker; teardownMaxDelay
// keeps the signal inside the teardown, which takes about 1.5 s for one node (a 3 s delay let
// the run finish first).
const (
	defaultMaxDelay  = 3 * time.Second
	teardownMaxDelay = 300 * time.Millisecond
)

// runMarkers are progress lines of smallRun in the order they come, with their phase: every
// phase, and within the setup every step of the cluster's and the mesh's bring-up.
var runMarkers = []struct{ marker, phase string }{
	{"cluster ", "setup"}, // "cluster NAME: 1 node(s) on the local substrate"
	{"network: hub", "setup"},
	{"control plane: etcd", "setup"},
	{"nodes: containerd", "setup"},
	{"waiting for 1 node(s) Ready", "setup"},
	{"cluster DNS", "setup"},
	{"cluster.up", "setup"},
	{"gateway.ready", "setup"},
	{"phase steady", "steady"},
	{"traffic.start", "steady"},
	{"phase chaos", "chaos"},
	{"chaos.injected", "chaos"},
	{"cp.oomkilled", "chaos"},
	{"phase recovery", "recovery"},
	{"phase teardown", "teardown"},
}

// secondRun is the line that starts the second run of each multi-run command: the suite's
// "suite NAME: run 2/2 …" and upgrade-check's "[2/2] entry 1 …, candidate …".
var secondRun = map[string]string{cmdSuite: ": run 2/2 ", cmdUpgradeCheck: "[2/2] entry"}

// multiRunMarkers are the points of a suite or an upgrade-check: in its first run's setup, chaos
// and teardown, at the start of its second run, and in every phase of the second.
var multiRunMarkers = []struct {
	second        bool
	marker, phase string
}{
	{false, "network: hub", "setup"},
	{false, "cluster.up", "setup"},
	{false, "phase chaos", "chaos"},
	{false, "phase teardown", "teardown"},
	{true, "", ""}, // the signal may come before the run's first phase
	{true, "nodes: containerd", "setup"},
	{true, "traffic.start", "steady"},
	{true, "chaos.injected", "chaos"},
	{true, "phase recovery", "recovery"},
	{true, "phase teardown", "teardown"},
}

// interruptPoints: MESHCHAOS_INTERRUPT=full gives every run marker with every signal in turn,
// twice over with different signals (30 points), and every suite and upgrade-check point with
// SIGINT, SIGTERM, SIGHUP, SIGQUIT and SIGKILL in turn (20 points; `make interrupt`: 50 points,
// 11 of them SIGKILL); otherwise eight points: four runs, one per phase group and each of SIGINT,
// SIGTERM, SIGHUP and SIGKILL once, and two suites and two upgrade-checks, in their first run
// and their second, with each of those signals once.
func interruptPoints() []interruptPoint {
	sigs := []syscall.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGKILL}
	if os.Getenv("MESHCHAOS_INTERRUPT") == "full" {
		var out []interruptPoint
		for round := range 2 {
			for i, m := range runMarkers {
				out = append(out, interruptPoint{command: cmdRun, marker: m.marker, phase: m.phase, run: 1, sig: sigs[(i+round)%len(sigs)]})
			}
		}
		multi := []syscall.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGKILL}
		for c, command := range []string{cmdSuite, cmdUpgradeCheck} {
			for i, m := range multiRunMarkers {
				p := interruptPoint{command: command, marker: m.marker, phase: m.phase, run: 1, sig: multi[(i+2*c)%len(multi)]}
				if m.second {
					p.after, p.run = secondRun[command], 2
				}
				out = append(out, p)
			}
		}
		return out
	}
	return []interruptPoint{
		{command: cmdRun, marker: "nodes: containerd", phase: "setup", run: 1, sig: syscall.SIGINT},
		{command: cmdRun, marker: "traffic.start", phase: "steady", run: 1, sig: syscall.SIGTERM},
		{command: cmdRun, marker: "chaos.injected", phase: "chaos", run: 1, sig: syscall.SIGKILL},
		{command: cmdRun, marker: "phase recovery", phase: "recovery", run: 1, sig: syscall.SIGHUP},
		{command: cmdSuite, marker: "cluster DNS", phase: "setup", run: 1, sig: syscall.SIGHUP},
		{command: cmdSuite, after: secondRun[cmdSuite], run: 2, sig: syscall.SIGKILL},
		{command: cmdUpgradeCheck, marker: "traffic.start", phase: "steady", run: 1, sig: syscall.SIGINT},
		{command: cmdUpgradeCheck, after: secondRun[cmdUpgradeCheck], marker: "chaos.injected", phase: "chaos", run: 2, sig: syscall.SIGTERM},
	}
}

// TestInterruptPoints: the nightly set keeps the four run points and adds two suite and two
// upgrade-check points with four different signals, one of them SIGKILL; the full matrix stops
// every command at 20 points or more with each of SIGINT, SIGTERM and SIGHUP, and at least 5 with
// SIGKILL. Every point after a second run's start line is in run 2.
func TestInterruptPoints(t *testing.T) {
	count := func(points []interruptPoint) (map[string]int, map[string]map[syscall.Signal]int) {
		byCommand, sigs := map[string]int{}, map[string]map[syscall.Signal]int{}
		for _, p := range points {
			byCommand[p.command]++
			if sigs[p.command] == nil {
				sigs[p.command] = map[syscall.Signal]int{}
			}
			sigs[p.command][p.sig]++
			assert.Equal(t, p.after != "", p.run == 2, "%+v", p)
			assert.False(t, p.marker == "" && p.after == "", "%+v: no line to wait for", p)
		}
		return byCommand, sigs
	}
	t.Setenv("MESHCHAOS_INTERRUPT", "")
	byCommand, sigs := count(interruptPoints())
	assert.Equal(t, map[string]int{cmdRun: 4, cmdSuite: 2, cmdUpgradeCheck: 2}, byCommand)
	newSigs := map[syscall.Signal]int{}
	for _, c := range []string{cmdSuite, cmdUpgradeCheck} {
		for sig, n := range sigs[c] {
			newSigs[sig] += n
		}
	}
	assert.Len(t, newSigs, 4, "four different signals: %v", newSigs)
	assert.Equal(t, 1, newSigs[syscall.SIGKILL])

	t.Setenv("MESHCHAOS_INTERRUPT", "full")
	full := interruptPoints()
	byCommand, sigs = count(full)
	kills := 0
	for _, c := range []string{cmdRun, cmdSuite, cmdUpgradeCheck} {
		assert.GreaterOrEqual(t, byCommand[c], 10, c)
		for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP} {
			assert.Positive(t, sigs[c][sig], "%s with %s", c, sig)
		}
		kills += sigs[c][syscall.SIGKILL]
	}
	assert.GreaterOrEqual(t, len(full), 20)
	assert.GreaterOrEqual(t, kills, 5)
}

// TestInterruptAnywhere starts real runs, suites of two runs and upgrade-checks of two runs, and
// stops each with a signal at a chosen moment. After SIGINT, SIGTERM, SIGHUP or SIGQUIT the
// command exits 2 having torn its cluster down by itself; the run the signal cut short leaves a
// valid summary (verdict error, the signal and the phase it came in, what was measured until
// then); a suite's suite.json and junit.xml and an upgrade-check's comparison.json and .md say
// which signal came during which run and that there is no verdict, and the suite's history is
// not appended to. After SIGKILL `cluster down --stale --prefix` (only this test's clusters)
// finds the cluster by its dead owner, and after any signal nothing is left on the host under
// the one cluster name (--name) every run of the command used.
func TestInterruptAnywhere(t *testing.T) {
	bin, home, env := integrationCLI(t)
	seed := time.Now().UnixNano()
	rng := rand.New(rand.NewPCG(uint64(seed), 0))
	t.Logf("delays seeded with %d", seed)
	prefix := fmt.Sprintf("rlbi%d-", os.Getpid()%10000)
	suiteYAML, upgradeYAML := interruptSuites(t)
	for i, p := range interruptPoints() {
		maxDelay := defaultMaxDelay
		if p.phase == "teardown" {
			maxDelay = teardownMaxDelay
		}
		delay := time.Duration(rng.Int64N(int64(maxDelay)))
		t.Run(p.name(i), func(t *testing.T) {
			name := fmt.Sprintf("%s%d", prefix, i)
			// Not under t.TempDir(): its path holds the subtest's name, and so the marker
			// ("traffic.start", "cluster.up"), which the command's first line (naming its --out)
			// then matched before the run began.
			dir, err := os.MkdirTemp("", "intr")
			require.NoError(t, err)
			t.Cleanup(func() { os.RemoveAll(dir) })
			out := filepath.Join(dir, "out")
			switch p.command {
			case cmdRun:
				r := startRun(t, bin, env, append(slices.Clone(smallRun), "--name", name, "--out", out))
				code := r.stopAt(p, delay)
				checkInterruptedRun(t, r, p, code, out)
			case cmdSuite:
				history := filepath.Join(dir, "history")
				r := startProc(t, bin, env, 25*time.Minute, "suite", suiteYAML, "--name", name, "--out", out, "--history", history)
				code := r.stopAt(p, delay)
				checkInterruptedSuite(t, r, p, code, out, history)
			case cmdUpgradeCheck:
				r := startProc(t, bin, env, 25*time.Minute, "upgrade-check", "--base", "reference", "--candidate", "reference",
					"--suite", upgradeYAML, "--repeats", "1", "--name", name, "--out", out)
				code := r.stopAt(p, delay)
				checkInterruptedUpgradeCheck(t, r, p, code, out)
			}
			if p.sig != syscall.SIGKILL {
				// The command cleaned up after itself: nothing is left before `cluster down`.
				assert.Empty(t, local.Leftovers(home, name), "left by the interrupted %s itself", p.command)
			}
			// What a killed command left is stale (its owner is gone): --stale finds it; after
			// the other signals there is nothing left to find.
			code, downOut := cli(t, bin, env, "cluster", "down", "--stale", "--prefix", prefix)
			assert.Equal(t, 0, code, downOut)
			if p.sig == syscall.SIGKILL {
				assert.Contains(t, downOut, "removed "+name, "the killed %s's cluster is stale", p.command)
			}
			assert.Empty(t, local.Leftovers(home, name), "after cluster down --stale --prefix %s", prefix)
		})
	}
}

// stopAt sends p's signal delay after p's marker (after p's after line, when it has one), waits
// for the process and returns its exit code; the test fails when the process ended first.
func (r *runProc) stopAt(p interruptPoint, delay time.Duration) int {
	switch {
	case p.after == "":
		r.signalAt(p.marker, delay, p.sig)
	case p.marker == "":
		r.signalAt(p.after, delay, p.sig)
	default:
		r.on(p.after, func() { r.signalAt(p.marker, delay, p.sig) })
	}
	code := r.wait()
	at := strings.TrimSpace(p.after + " " + p.marker)
	require.True(r.t, r.sent(), "the %s ended (exit %d) before %q: %s", p.command, code, at, r.tail())
	r.t.Logf("%s %s after %q: exit %d", p.sig, delay.Round(time.Millisecond), at, code)
	return code
}

// checkInterruptedRun checks what `meshchaos run` left in out after p's signal.
func checkInterruptedRun(t *testing.T, r *runProc, p interruptPoint, code int, out string) {
	t.Helper()
	s, err := results.Read(out)
	require.NoError(t, err, "the run directory holds a valid summary.json")
	assert.Equal(t, results.VerdictError, s.Verdict)
	if p.sig == syscall.SIGKILL {
		assert.Equal(t, -1, code, "killed")
		assert.Contains(t, phaseNames(s), "setup", "the phases reached")
		assert.Nil(t, s.FinishedAt, "a killed run never finished")
		return
	}
	assert.Equal(t, 2, code, r.tail())
	checkRunCutShort(t, r, s, p.sig, p.phase)
}

// checkRunCutShort checks the summary of a run a signal other than SIGKILL stopped in phase or
// a later one ("": any).
func checkRunCutShort(t *testing.T, r *runProc, s *results.Summary, sig syscall.Signal, phase string) {
	t.Helper()
	assert.Equal(t, results.VerdictError, s.Verdict)
	reached := phaseNames(s)
	assert.Contains(t, reached, "setup", "the phases reached")
	require.NotNil(t, s.Interrupted, r.tail())
	assert.Equal(t, sig.String(), s.Interrupted.Signal)
	assert.Contains(t, s.Error, "interrupted by "+sig.String())
	// The delay may carry the signal into a later phase, never an earlier one.
	assert.GreaterOrEqual(t, slices.Index(phaseOrder, s.Interrupted.Phase), slices.Index(phaseOrder, phase), "interrupted in %s", s.Interrupted.Phase)
	assert.Equal(t, "teardown", reached[len(reached)-1], "the teardown ran")
	if slices.Index(phaseOrder, s.Interrupted.Phase) >= slices.Index(phaseOrder, "steady") {
		assert.NotNil(t, s.Traffic, "the traffic measured until the signal is kept")
		assert.NotEmpty(t, s.Measurements, "the measurements' health is kept")
	}
}

// checkInterruption checks where a suite's or an upgrade-check's record says p's signal came: in
// p's run and phase or later (the delay may carry it on, never back), of two runs.
func checkInterruption(t *testing.T, in *results.SuiteInterruption, p interruptPoint) {
	t.Helper()
	assert.Equal(t, p.sig.String(), in.Signal)
	assert.Equal(t, 2, in.Runs)
	assert.GreaterOrEqual(t, in.Run, p.run, "interrupted in run %d", in.Run)
	if in.Run == p.run && !in.BetweenRuns {
		assert.GreaterOrEqual(t, slices.Index(phaseOrder, in.Phase), slices.Index(phaseOrder, p.phase), "interrupted in %s", in.Phase)
	}
}

// checkKilledRun checks a run directory a SIGKILL left: a valid summary that never finished,
// verdict error — unless the kill came after the run had finished (the delay carried it past a
// teardown marker), or before the run had written its first summary (at the line that starts
// it).
func checkKilledRun(t *testing.T, dir string, p interruptPoint) {
	t.Helper()
	if _, err := os.Stat(filepath.Join(dir, results.SummaryFile)); err != nil && p.marker == "" {
		t.Logf("killed before run %d wrote its summary: %v", p.run, err)
		return
	}
	s, err := results.Read(dir)
	require.NoError(t, err, "the killed run's directory holds a valid summary.json")
	if p.phase != "teardown" {
		assert.Nil(t, s.FinishedAt, "a killed run never finished")
	}
	if s.FinishedAt == nil {
		assert.Equal(t, results.VerdictError, s.Verdict)
	}
}

// phaseIn is the earliest phase p's signal can have come in run: p's own phase in p's run, any
// in a later one (the delay carried it on).
func phaseIn(p interruptPoint, run int) string {
	if run == p.run {
		return p.phase
	}
	return ""
}

// checkInterruptedSuite checks what a suite of two runs left in out after p's signal: exit 2,
// suite.json, junit.xml and index.html say which signal came during which run, the run it cut
// short says so itself, the history was not appended to.
func checkInterruptedSuite(t *testing.T, r *runProc, p interruptPoint, code int, out, history string) {
	t.Helper()
	assert.NoFileExists(t, results.HistoryFile(history, "two-small"), "an interrupted suite is no night of the history")
	if p.sig == syscall.SIGKILL {
		assert.Equal(t, -1, code, "killed")
		if p.run == 2 {
			res := readSuite(t, out)
			assert.Nil(t, res.Interrupted, "a killed suite records nothing after its last write")
			if p.phase != "teardown" { // else run 2 may have ended before the kill
				assert.Len(t, res.Runs, 1, "written after run 1")
			}
		}
		checkKilledRun(t, filepath.Join(out, suiteRunName(p.run-1, smallRun[1], "reference", 1, 1)), p)
		return
	}
	assert.Equal(t, 2, code, r.tail())
	assert.Contains(t, r.output(), "no verdict")
	assert.Contains(t, r.output(), "not appended to the history")
	res := readSuite(t, out)
	require.NotNil(t, res.Interrupted, r.tail())
	checkInterruption(t, res.Interrupted, p)
	in := res.Interrupted
	if in.BetweenRuns {
		assert.Len(t, res.Runs, in.Run-1, "the runs before the signal")
	} else {
		require.Len(t, res.Runs, in.Run, "no run after the one cut short")
		s, err := results.Read(filepath.Join(out, res.Runs[in.Run-1].Dir))
		require.NoError(t, err)
		checkRunCutShort(t, r, s, p.sig, phaseIn(p, in.Run))
	}
	junit, err := os.ReadFile(filepath.Join(out, results.JUnitFile))
	require.NoError(t, err)
	assert.Contains(t, string(junit), in.String(), "junit.xml says what stopped the suite")
	page, err := os.ReadFile(filepath.Join(out, results.SuiteIndexFile))
	require.NoError(t, err)
	assert.Contains(t, string(page), "Interrupted — no verdict: "+in.String())
}

// checkInterruptedUpgradeCheck checks what an upgrade-check of two runs (base, then candidate)
// left in out after p's signal: exit 2, and comparison.json and comparison.md say which signal
// came during which run and that there is no verdict.
func checkInterruptedUpgradeCheck(t *testing.T, r *runProc, p interruptPoint, code int, out string) {
	t.Helper()
	dirs := []string{filepath.Join(out, "base", "01-cp-oom-restart-r1"), filepath.Join(out, "candidate", "01-cp-oom-restart-r1")}
	if p.sig == syscall.SIGKILL {
		assert.Equal(t, -1, code, "killed")
		assert.Empty(t, results.ComparisonIn(out), "a killed upgrade-check compares nothing")
		checkKilledRun(t, dirs[p.run-1], p)
		return
	}
	assert.Equal(t, 2, code, r.tail())
	assert.NotContains(t, r.output(), "no regression", "an interrupted upgrade-check gives no verdict")
	b, err := os.ReadFile(filepath.Join(out, results.ComparisonJSONFile))
	require.NoError(t, err, "an interrupted upgrade-check writes its comparison: %s", r.tail())
	var c results.Comparison
	require.NoError(t, json.Unmarshal(b, &c))
	require.NotNil(t, c.Interrupted, r.tail())
	checkInterruption(t, c.Interrupted, p)
	assert.True(t, strings.HasPrefix(c.Outcome(), "INTERRUPTED: "+c.Interrupted.String()+": no verdict"), c.Outcome())
	md, err := os.ReadFile(filepath.Join(out, results.ComparisonMarkdownFile))
	require.NoError(t, err)
	assert.Contains(t, string(md), c.Outcome())
	if !c.Interrupted.BetweenRuns {
		s, err := results.Read(dirs[c.Interrupted.Run-1])
		require.NoError(t, err)
		checkRunCutShort(t, r, s, p.sig, phaseIn(p, c.Interrupted.Run))
	}
	if c.Interrupted.Run == 1 {
		assert.NoFileExists(t, filepath.Join(dirs[1], results.SummaryFile), "the candidate run never started")
	}
}

// phaseOrder is the lifecycle's order of phases.
var phaseOrder = []string{"setup", "steady", "chaos", "recovery", "teardown"}

func phaseNames(s *results.Summary) []string {
	var out []string
	for _, p := range s.Phases {
		out = append(out, p.Name)
	}
	return out
}

// integrationCLI skips without integration, builds the CLI and gives it a home of its own.
func integrationCLI(t *testing.T) (bin, home string, env []string) {
	t.Helper()
	prereq.Integration(t)
	require.NoError(t, local.Preflight())
	bin = buildCLI(t)
	home, err := os.MkdirTemp("", "mc")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(home) })
	return bin, home, append(os.Environ(), "MESHCHAOS_HOME="+home, "CI=true")
}

// cli runs the CLI to completion and returns its exit code and output.
func cli(t *testing.T, bin string, env []string, args ...string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	c := exec.CommandContext(ctx, bin, args...)
	c.Env = env
	out, err := c.CombinedOutput()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode(), string(out)
	}
	require.NoError(t, err)
	return 0, string(out)
}

// runProc is a meshchaos subprocess (a run, a suite, an upgrade-check) whose progress lines are
// watched.
type runProc struct {
	t    *testing.T
	cmd  *exec.Cmd
	mu   sync.Mutex
	out  bytes.Buffer
	subs []lineWatch
	done chan struct{}
}

type lineWatch struct {
	substr string
	fn     func()
}

func startRun(t *testing.T, bin string, env, args []string) *runProc {
	t.Helper()
	return startProc(t, bin, env, 12*time.Minute, args...)
}

// startProc starts the CLI with args, killed after timeout.
func startProc(t *testing.T, bin string, env []string, timeout time.Duration, args ...string) *runProc {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	t.Cleanup(cancel)
	r := &runProc{t: t, cmd: exec.CommandContext(ctx, bin, args...), done: make(chan struct{})}
	r.cmd.Env = env
	r.cmd.Stdout = lockedWriter{r}
	stderr, err := r.cmd.StderrPipe()
	require.NoError(t, err)
	require.NoError(t, r.cmd.Start())
	go func() {
		defer close(r.done)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			line := sc.Text()
			r.mu.Lock()
			r.out.WriteString(line + "\n")
			subs := r.subs
			r.subs = nil
			for _, s := range subs {
				if strings.Contains(line, s.substr) {
					go s.fn()
				} else {
					r.subs = append(r.subs, s)
				}
			}
			r.mu.Unlock()
		}
	}()
	return r
}

// lockedWriter appends the process's stdout to the output under the lock the stderr reader
// takes.
type lockedWriter struct{ r *runProc }

func (w lockedWriter) Write(p []byte) (int, error) {
	w.r.mu.Lock()
	defer w.r.mu.Unlock()
	return w.r.out.Write(p)
}

// on calls fn once, when a progress line containing substr appears.
func (r *runProc) on(substr string, fn func()) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.subs = append(r.subs, lineWatch{substr, fn})
}

// signalAt sends sig delay after the first line containing marker (sent says whether it did).
func (r *runProc) signalAt(marker string, delay time.Duration, sig syscall.Signal) {
	r.on(marker, func() {
		time.Sleep(delay)
		if r.cmd.Process.Signal(sig) == nil {
			r.mu.Lock()
			r.out.WriteString(fmt.Sprintf("--- test: sent %s\n", sig))
			r.mu.Unlock()
		}
	})
}

// wait waits for the process and returns its exit code (-1: killed by a signal).
func (r *runProc) wait() int {
	<-r.done
	err := r.cmd.Wait()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	require.NoError(r.t, err)
	return 0
}

// sent says whether the test's signal reached the process.
func (r *runProc) sent() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return strings.Contains(r.out.String(), "--- test: sent")
}

// output is everything the process printed so far (stderr and stdout).
func (r *runProc) output() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.out.String()
}

// tail is the end of the output, for failure messages.
func (r *runProc) tail() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.out.String()
	return s[max(0, len(s)-3000):]
}
