package results

import (
	"fmt"
	"sync"
	"time"
)

// inProgress is the error a summary carries until the run finishes: if the process dies, the
// summary on disk already says why it has no pass/fail verdict.
const inProgress = "run did not finish (in progress, crashed or interrupted)"

// Recorder owns a run directory's summary.json while the run goes on. Every Update rewrites the
// file atomically, and until Finish the verdict on disk is error, so a crashed or interrupted run
// leaves a valid summary with what was measured so far.
type Recorder struct {
	mu  sync.Mutex
	dir string
	s   Summary
}

// NewRecorder creates dir and writes the initial summary (verdict error, "in progress").
func NewRecorder(dir string, s Summary) (*Recorder, error) {
	if err := MkdirAll(dir); err != nil {
		return nil, fmt.Errorf("create run directory: %w", err)
	}
	s.Schema = SchemaVersion
	s.Verdict = VerdictError
	s.Error = inProgress
	s.FinishedAt = nil
	if s.StartedAt.IsZero() {
		s.StartedAt = time.Now().UTC()
	}
	if s.Events == nil {
		s.Events = []Event{}
	}
	if s.Checks == nil {
		s.Checks = []Check{}
	}
	r := &Recorder{dir: dir, s: s}
	if err := Write(dir, &r.s); err != nil {
		return nil, err
	}
	return r, nil
}

// Dir is the run directory.
func (r *Recorder) Dir() string { return r.dir }

// Update applies fn to the summary and writes it. fn must not change the verdict; Finish does.
func (r *Recorder) Update(fn func(s *Summary)) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	fn(&r.s)
	r.s.Verdict, r.s.Error, r.s.FinishedAt = VerdictError, inProgress, nil
	return Write(r.dir, &r.s)
}

// Snapshot returns a copy of the summary as recorded so far (shallow: do not modify slices).
func (r *Recorder) Snapshot() Summary {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.s
}

// Finish stamps finishedAt and the verdict and writes the final summary. runErr, when not nil,
// means the run could not be carried out: verdict error with runErr as the reason. Otherwise the
// checks decide.
func (r *Recorder) Finish(runErr error) (Summary, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := time.Now().UTC()
	if now.Before(r.s.StartedAt) {
		now = r.s.StartedAt
	}
	r.s.FinishedAt = &now
	r.s.Error = ""
	if runErr != nil {
		r.s.Verdict, r.s.Error = VerdictError, runErr.Error()
	} else {
		r.s.Verdict = DecideVerdict(r.s.Checks)
		if r.s.Verdict == VerdictError {
			r.s.Error = "the experiment recorded no checks"
		}
	}
	return r.s, Write(r.dir, &r.s)
}
