// Package runner carries out an experiment: setup, phases (load, chaos), observation and a
// teardown that always runs; it keeps the timeline, evaluates the checks and writes the run
// directory (summary.json incrementally, then junit.xml and the reports).
package runner

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"sync"
	"time"

	"github.com/meshchaos/meshchaos/harness/observe"
	"github.com/meshchaos/meshchaos/harness/traffic"
	"github.com/meshchaos/meshchaos/internal/version"
	"github.com/meshchaos/meshchaos/results"
	"github.com/meshchaos/meshchaos/results/render"
)

// Timeline event kinds the runner itself records. Chaos injectors use "chaos.<what>"
// (e.g. chaos.injected, chaos.cleared); the pod watcher uses observe's pod.* kinds.
const (
	EventPhaseStart   = "phase.start"
	EventPhaseEnd     = "phase.end"
	EventTrafficStart = "traffic.start"
	EventTrafficStop  = "traffic.stop"
	EventProfile      = "pprof.captured"
)

// Experiment is what to run.
type Experiment struct {
	Name         string
	Substrate    string
	ControlPlane string
	Params       map[string]string
	// Setup prepares the system (cluster, control plane, workloads); its failure skips the phases.
	Setup func(ctx context.Context, r *Run) error
	// Phases run in order; the first failure ends the run (teardown still runs).
	Phases []Phase
	// Teardown always runs, with its own context, even after a failure or an interrupt.
	Teardown func(ctx context.Context, r *Run) error
	// Checks are evaluated on the summary once the phases are over.
	Checks []Check
}

// Phase is one named step.
type Phase struct {
	Name string
	Do   func(ctx context.Context, r *Run) error
}

// Options configure Execute.
type Options struct {
	// Dir is the run directory (created).
	Dir string
	// Progress shows the run (default: NewProgress(os.Stderr)).
	Progress Progress
	// TeardownTimeout bounds the teardown (default 2 min).
	TeardownTimeout time.Duration
	// FlushInterval is how often the in-progress summary is rewritten (default 5 s).
	FlushInterval time.Duration
}

// Run is the handle phases use to record and observe.
type Run struct {
	rec      *results.Recorder
	progress Progress
	bgCtx    context.Context
	bg       sync.WaitGroup

	mu         sync.Mutex
	attack     *traffic.Attack
	attackDone chan struct{} // closed when the attack has ended; attackErr is then set
	attackErr  error
	measures   []observe.Measurement
	// soFar is the verdict the run would have if its teardown went well: set before the
	// teardown, which may act on it (keep a failed run's cluster).
	soFar results.Verdict
}

// Execute runs the experiment and writes its run directory. The returned summary's verdict is
// pass, fail or error; the error is only for a run directory that could not be written: with
// an empty verdict when the run could not start one, with the verdict when its final summary.json
// or its reports could not be written (the error says which, and the verdict). A caller must
// not take the verdict's exit code then: the run directory does not hold that verdict.
func Execute(ctx context.Context, exp Experiment, o Options) (results.Summary, error) {
	if o.Progress == nil {
		o.Progress = NewProgress(os.Stderr)
	}
	if o.TeardownTimeout <= 0 {
		o.TeardownTimeout = 2 * time.Minute
	}
	if o.FlushInterval <= 0 {
		o.FlushInterval = 5 * time.Second
	}
	defer o.Progress.Done()
	build := version.Get()
	rec, err := results.NewRecorder(o.Dir, results.Summary{
		Experiment: exp.Name, Substrate: exp.Substrate, ControlPlane: exp.ControlPlane, Params: exp.Params,
		HarnessVersion: build.Version, HarnessCommit: build.Revision,
	})
	if err != nil {
		return results.Summary{}, err
	}
	bgCtx, stopBg := context.WithCancel(context.WithoutCancel(ctx))
	r := &Run{rec: rec, progress: o.Progress, bgCtx: bgCtx}

	flushDone := make(chan struct{})
	go func() {
		defer close(flushDone)
		t := time.NewTicker(o.FlushInterval)
		defer t.Stop()
		for {
			select {
			case <-bgCtx.Done():
				return
			case <-t.C:
				r.flush()
			}
		}
	}()

	runErr := r.phase(ctx, "setup", exp.Setup)
	if runErr == nil {
		for _, p := range exp.Phases {
			if err := ctx.Err(); err != nil {
				runErr = fmt.Errorf("interrupted before phase %s: %w", p.Name, context.Cause(ctx))
				break
			}
			if runErr = r.phase(ctx, p.Name, p.Do); runErr != nil {
				break
			}
		}
	}
	// Observation ends with the phases; traffic still running is stopped.
	stopBg()
	r.bg.Wait()
	<-flushDone

	if runErr == nil {
		runErr = r.evaluate(exp.Checks)
	}
	r.setVerdictSoFar(ctx, runErr)
	tdCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), o.TeardownTimeout)
	if err := r.phase(tdCtx, "teardown", exp.Teardown); err != nil {
		if runErr == nil {
			runErr = err
		} else {
			r.Logf("teardown: %v", err)
		}
	}
	cancel()
	// An interrupted run (even in its teardown) is not a clean result, whatever its checks said:
	// verdict error, and the summary says which signal came in which phase.
	if in, ok := AsInterrupt(context.Cause(ctx)); ok {
		r.interrupted(in)
		if _, wraps := AsInterrupt(runErr); runErr == nil {
			runErr = in
		} else if !wraps {
			// The step the signal cut short failed in its own words: say why first.
			runErr = fmt.Errorf("%s: %w", in.Error(), runErr)
		}
	}
	r.flush()
	s, err := rec.Finish(runErr)
	if err != nil {
		// The verdict exists in memory only: summary.json on disk still says the run is in
		// progress. No report is rendered from it (it would contradict the summary), and the
		// error carries the verdict so that the caller can say what was lost.
		return s, fmt.Errorf("%w: the verdict was %s", err, s.Verdict)
	}
	if err := render.Render(o.Dir, &s); err != nil {
		return s, fmt.Errorf("write the run's reports: %w: the verdict was %s", err, s.Verdict)
	}
	r.Logf("verdict %s — %s", s.Verdict, filepath.Join(o.Dir, results.HTMLFile))
	return s, nil
}

// setVerdictSoFar records the verdict the run has before its teardown: error when it could not
// be carried out or was interrupted, else what its checks say.
func (r *Run) setVerdictSoFar(ctx context.Context, runErr error) {
	v := results.VerdictError
	if _, interrupted := AsInterrupt(context.Cause(ctx)); runErr == nil && !interrupted {
		v = results.DecideVerdict(r.rec.Snapshot().Checks)
	}
	r.mu.Lock()
	r.soFar = v
	r.mu.Unlock()
}

// VerdictSoFar is the verdict the run has when its teardown starts (before it, error): what a
// teardown may act on. A teardown that fails still makes the final verdict error.
func (r *Run) VerdictSoFar() results.Verdict {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.soFar == "" {
		return results.VerdictError
	}
	return r.soFar
}

// RecordLogs lists the container logs the run kept in the summary.
func (r *Run) RecordLogs(l *results.Logs) {
	if err := r.rec.Update(func(s *results.Summary) { s.Logs = l }); err != nil {
		r.Logf("%v", err)
	}
}

// RecordFleet records the run's adsload fleet as last read.
func (r *Run) RecordFleet(f results.Fleet) {
	if err := r.rec.Update(func(s *results.Summary) { s.Fleet = &f }); err != nil {
		r.Logf("%v", err)
	}
}

// RecordKept records that the run's cluster was left up, and how to reach it.
func (r *Run) RecordKept(k results.KeptCluster) {
	if err := r.rec.Update(func(s *results.Summary) { s.Kept = &k }); err != nil {
		r.Logf("%v", err)
	}
}

// Interrupt is the cause a run's context is cancelled with when a signal stops it (the CLI's
// signal handler sets it): the run records it in summary.interrupted.
type Interrupt struct {
	Signal string
	At     time.Time
}

func (i *Interrupt) Error() string { return "interrupted by " + i.Signal }

// AsInterrupt finds an Interrupt in err.
func AsInterrupt(err error) (*Interrupt, bool) {
	var in *Interrupt
	ok := errors.As(err, &in)
	return in, ok
}

// interrupted records the interruption with the phase that was running when it came.
func (r *Run) interrupted(in *Interrupt) {
	_ = r.rec.Update(func(s *results.Summary) {
		x := &results.Interruption{Signal: in.Signal, At: in.At.UTC()}
		for _, p := range s.Phases {
			if !p.StartedAt.After(in.At) {
				x.Phase = p.Name
			}
		}
		s.Interrupted = x
	})
}

// phase runs one lifecycle step with its timeline entries and profile captures; a panic in it
// becomes its error.
func (r *Run) phase(ctx context.Context, name string, do func(context.Context, *Run) error) (err error) {
	if do == nil {
		return nil
	}
	r.progress.Phase(name)
	start := time.Now().UTC()
	_ = r.rec.Update(func(s *results.Summary) {
		s.Phases = append(s.Phases, results.Phase{Name: name, StartedAt: start})
	})
	r.Event(EventPhaseStart, name, "")
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("phase %s panicked: %v\n%s", name, p, debug.Stack())
		}
		end := time.Now().UTC()
		_ = r.rec.Update(func(s *results.Summary) {
			for i := len(s.Phases) - 1; i >= 0; i-- {
				if s.Phases[i].Name == name && s.Phases[i].FinishedAt == nil {
					s.Phases[i].FinishedAt = &end
					if err != nil {
						s.Phases[i].Error = err.Error()
					}
					break
				}
			}
		})
		// One set per boundary: after setup (the baseline) and after every phase; the teardown
		// takes the control plane away.
		if name != "teardown" {
			r.phaseEnded(ctx, name)
		}
		detail := ""
		if err != nil {
			detail = firstLine(err.Error())
			r.Logf("%v", err)
		}
		r.Event(EventPhaseEnd, name, detail)
	}()
	if err := do(ctx, r); err != nil {
		return fmt.Errorf("phase %s: %w", name, err)
	}
	return nil
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}

// Dir is the run directory.
func (r *Run) Dir() string { return r.rec.Dir() }

// Logf prints through the progress display.
func (r *Run) Logf(format string, args ...any) { r.progress.Logf(format, args...) }

// Event adds a timeline entry now.
func (r *Run) Event(kind, object, detail string) {
	r.RecordEvent(results.Event{At: time.Now().UTC(), Kind: kind, Object: object, Detail: detail})
}

// RecordEvent adds a timeline entry and writes the summary.
func (r *Run) RecordEvent(e results.Event) {
	if !strings.HasPrefix(e.Kind, "phase.") {
		msg := e.Kind
		if e.Object != "" {
			msg += " " + e.Object
		}
		if e.Detail != "" {
			msg += ": " + e.Detail
		}
		r.Logf("%s", msg)
	}
	if err := r.rec.Update(func(s *results.Summary) { s.Events = append(s.Events, e) }); err != nil {
		r.Logf("%v", err)
	}
}

// RecordFault lists an injected fault and its implementation in the summary.
func (r *Run) RecordFault(f results.Fault) {
	if err := r.rec.Update(func(s *results.Summary) { s.Faults = append(s.Faults, f) }); err != nil {
		r.Logf("%v", err)
	}
}

// Background runs fn until the phases end; the run waits for it before the checks.
func (r *Run) Background(fn func(ctx context.Context)) {
	r.bg.Add(1)
	go func() {
		defer r.bg.Done()
		fn(r.bgCtx)
	}()
}

// StartTraffic starts an attack in the background; its raw results go to traffic/results.json
// unless o.ResultsFile says otherwise. WaitTraffic waits for it; the end of the phases stops it.
func (r *Run) StartTraffic(o traffic.Options) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.attack != nil {
		return errors.New("start traffic: an attack is already running")
	}
	if o.ResultsFile == "" {
		o.ResultsFile = filepath.Join(r.Dir(), results.TrafficDir, "results.json")
	}
	prev := o.Progress
	o.Progress = func(p traffic.Progress) {
		r.progress.Traffic(p)
		if prev != nil {
			prev(p)
		}
	}
	a, err := traffic.New(o)
	if err != nil {
		return fmt.Errorf("start traffic: %w", err)
	}
	done := make(chan struct{})
	r.attack, r.attackDone = a, done
	r.Background(func(ctx context.Context) {
		r.Event(EventTrafficStart, o.Name, fmt.Sprintf("%d rps for %s", o.Rate, o.Duration))
		agg, err := a.Run(ctx)
		detail := ""
		if agg != nil {
			detail = fmt.Sprintf("%d requests, %d errors", agg.Requests(), agg.Errors())
		}
		r.Event(EventTrafficStop, o.Name, detail)
		r.mu.Lock()
		r.attackErr = err
		r.mu.Unlock()
		close(done)
	})
	return nil
}

// WaitTraffic waits for the running attack to finish.
func (r *Run) WaitTraffic(ctx context.Context) error {
	r.mu.Lock()
	done := r.attackDone
	r.mu.Unlock()
	if done == nil {
		return errors.New("wait traffic: no attack was started")
	}
	select {
	case <-done:
		r.mu.Lock()
		defer r.mu.Unlock()
		return r.attackErr
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// Measure starts measurements; they run until the phases end and fill the summary. A
// measurement that cannot start is an error of the phase that asked for it.
func (r *Run) Measure(ms ...observe.Measurement) error {
	for _, m := range ms {
		if err := m.Start(r.bgCtx, r); err != nil {
			return fmt.Errorf("start measurement %s (%s): %w", m.Name(), m.Role(), err)
		}
		r.mu.Lock()
		r.measures = append(r.measures, m)
		r.mu.Unlock()
	}
	r.flush()
	return nil
}

func (r *Run) phaseEnded(ctx context.Context, phase string) {
	r.mu.Lock()
	ms := append([]observe.Measurement(nil), r.measures...)
	r.mu.Unlock()
	for _, m := range ms {
		if h, ok := m.(observe.PhaseHook); ok {
			h.PhaseEnded(ctx, phase, r)
		}
	}
}

// Summary is the summary as measured so far (traffic and control-plane stats included).
func (r *Run) Summary() results.Summary {
	s := r.rec.Snapshot()
	r.fill(&s)
	return s
}

// fill adds the observers' current measurements to s.
func (r *Run) fill(s *results.Summary) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.attack != nil {
		if agg := r.attack.Aggregator(); !agg.Start().IsZero() {
			t := agg.Summary(eventTimes(s.Events))
			s.Traffic = &t
		}
	}
	for _, m := range r.measures {
		m.Gather(s)
	}
}

// eventTimes picks the instants an error window is measured from: the first event of each kind
// that happens to the system (chaos, pods, gates), not the harness's own bookkeeping.
func eventTimes(events []results.Event) map[string]time.Time {
	out := map[string]time.Time{}
	for _, e := range events {
		switch {
		case strings.HasPrefix(e.Kind, "phase."), strings.HasPrefix(e.Kind, "traffic."), strings.HasPrefix(e.Kind, "pprof."):
			continue
		}
		if _, ok := out[e.Kind]; !ok {
			out[e.Kind] = e.At
		}
	}
	return out
}

// flush writes the summary with what the observers measured so far.
func (r *Run) flush() {
	if err := r.rec.Update(r.fill); err != nil {
		r.Logf("%v", err)
	}
}

// evaluate runs the checks on the final measurements. A check that cannot be evaluated (its
// measurement is missing) is a run error, not a pass.
func (r *Run) evaluate(checks []Check) error {
	r.flush()
	s := r.Summary()
	var out []results.Check
	var errs []error
	for _, c := range checks {
		res, err := c(&s)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		out = append(out, res)
		status := results.VerdictPass
		if !res.Pass {
			status = results.VerdictFail
		}
		r.Logf("check %s — %s", status, res.String())
	}
	if err := r.rec.Update(func(s *results.Summary) { s.Checks = out }); err != nil {
		return err
	}
	return errors.Join(errs...)
}
