// Package results holds the run directory's contract: the versioned summary.json schema
// (meshchaos/v1, documented in SCHEMA.md), its crash-safe writer, and the readers and renderers
// built on it (JUnit, Markdown, HTML with charts, compare).
package results

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// SchemaVersion is the value of Summary.Schema this package writes and accepts.
const SchemaVersion = "meshchaos/v1"

// Files and directories inside a run directory.
const (
	SummaryFile  = "summary.json"
	JUnitFile    = "junit.xml"
	MarkdownFile = "report.md"
	HTMLFile     = "report.html"
	ChartsDir    = "charts"
	PprofDir     = "pprof"
	TrafficDir   = "traffic"
	// LogsDir holds the containers' logs of the run's pods: LogsDir/NAMESPACE/POD/CONTAINER.log
	// (CONTAINER.previous.log for the container before its last restart).
	LogsDir = "logs"
)

// Verdict is the outcome of a run.
type Verdict string

// Verdicts. A run that has not finished (in progress, crashed, interrupted) is VerdictError:
// the writer records that before anything else, so a summary read from disk never claims a pass
// it did not earn.
const (
	VerdictPass  Verdict = "pass"
	VerdictFail  Verdict = "fail"
	VerdictError Verdict = "error"
)

// ExitCode is the CLI exit code for a verdict (DESIGN.md contracts: 0 pass, 1 a check failed,
// 2 the run could not be carried out).
func (v Verdict) ExitCode() int {
	switch v {
	case VerdictPass:
		return 0
	case VerdictFail:
		return 1
	default:
		return 2
	}
}

// Summary is summary.json: everything a run measured, in one versioned document.
type Summary struct {
	Schema       string            `json:"schema"`
	Experiment   string            `json:"experiment"`
	Substrate    string            `json:"substrate,omitempty"`
	ControlPlane string            `json:"controlPlane,omitempty"`
	Params       map[string]string `json:"params,omitempty"`
	// HarnessVersion and HarnessCommit say which build of meshchaos measured the run (its
	// version and commit, as `meshchaos version` prints them): two runs compare only when one
	// knows whether the harness changed between them. HarnessCommit is empty when the build
	// recorded no revision (go test, go run).
	HarnessVersion string    `json:"harnessVersion,omitempty"`
	HarnessCommit  string    `json:"harnessCommit,omitempty"`
	StartedAt      time.Time `json:"startedAt"`
	// FinishedAt is nil while the run is in progress or when it never finished.
	FinishedAt *time.Time `json:"finishedAt,omitempty"`
	Phases     []Phase    `json:"phases,omitempty"`
	Traffic    *Traffic   `json:"traffic,omitempty"`
	// Attacks are further attacks measured separately from Traffic, by name (endpoint-flap's
	// traffic to the flapping service).
	Attacks           map[string]*Traffic `json:"attacks,omitempty"`
	ControlPlaneStats *ControlPlaneStats  `json:"controlPlaneStats,omitempty"`
	// Workloads are the pod figures of other roles than the control plane (e.g. "app").
	Workloads map[string]*WorkloadStats `json:"workloads,omitempty"`
	// Startup is how an app's pods came up, one entry per sidecar start mode (sidecar-startup).
	Startup []Startup `json:"startup,omitempty"`
	// Scale holds a scale experiment's steps, growth fit, projection and oracle mismatches.
	Scale *Scale `json:"scale,omitempty"`
	// Convergence is how long proxies took to receive endpoint changes, measured at the proxies.
	Convergence *Convergence `json:"convergence,omitempty"`
	// Fleet is what the run's adsload fleet held and cost when last read, pod by pod.
	Fleet *Fleet `json:"fleet,omitempty"`
	// Soak is the soak experiment's faults, memory and goroutine trends.
	Soak *Soak `json:"soak,omitempty"`
	// Interrupted says the run was stopped by a signal (verdict error): which, when, in which
	// phase. What was measured until then is in the other fields.
	Interrupted *Interruption `json:"interrupted,omitempty"`
	// Probes are active probes' time series (cp-cpu-starvation): what a component actually
	// served, sample by sample, next to what Kubernetes said of it.
	Probes *Probes `json:"probes,omitempty"`
	// Faults are the faults the run injected and how: a control plane without a fault's hook
	// gets a generic stand-in, and the report says so.
	Faults []Fault `json:"faults,omitempty"`
	// Measurements say how each measurement fared: a failed scrape is shown, not hidden.
	Measurements []Measurement `json:"measurements,omitempty"`
	// Logs lists the container logs of the run's pods kept in logs/, read at the teardown
	// before the cluster goes; nil when the run had no cluster to read them from.
	Logs *Logs `json:"logs,omitempty"`
	// Kept says the run's cluster was left up (meshchaos run --keep-cluster) and how to reach it.
	Kept    *KeptCluster `json:"keptCluster,omitempty"`
	Events  []Event      `json:"events"`
	Checks  []Check      `json:"checks"`
	Verdict Verdict      `json:"verdict"`
	// Error says why the verdict is error (setup failed, interrupted, still running).
	Error string `json:"error,omitempty"`
}

// Fault is one injected fault and its implementation.
type Fault struct {
	// Name is the injector's name, as on the timeline (e.g. memory-ballast/control-plane).
	Name string `json:"name"`
	// Implementation says how the fault was brought about ("harness" for faults with one way).
	Implementation string `json:"implementation"`
	// Fallback is true when a generic stand-in replaced the control plane's own hook.
	Fallback bool `json:"fallback,omitempty"`
}

// Logs is what a run kept of its pods' container logs.
type Logs struct {
	// Namespaces are the namespaces whose pods were read: the run's own, never another's.
	Namespaces []string `json:"namespaces"`
	// MaxBytes bounds each file: a longer log keeps its last MaxBytes (Cut).
	MaxBytes int64     `json:"maxBytes"`
	Files    []LogFile `json:"files,omitempty"`
	// Errors say what could not be listed (a namespace's pods) or skipped and why.
	Errors []string `json:"errors,omitempty"`
}

// LogFile is one container's log.
type LogFile struct {
	Namespace string `json:"namespace"`
	Pod       string `json:"pod"`
	Container string `json:"container"`
	// Previous is the log of the container before its last restart (an OOM kill's last words).
	Previous bool `json:"previous,omitempty"`
	// Path is the file, relative to the run directory; empty when the log could not be read.
	Path string `json:"path,omitempty"`
	// Bytes is the file's size and Cut says the log was longer: the file holds its end only.
	Bytes int64 `json:"bytes"`
	Cut   bool  `json:"cut,omitempty"`
	// Error says why the log could not be read (the verdict does not depend on it).
	Error string `json:"error,omitempty"`
}

// KeptCluster is a cluster a run left up for debugging.
type KeptCluster struct {
	Name      string `json:"name"`
	Substrate string `json:"substrate"`
	// Kubeconfig reaches it from this host ("" on the existing substrate when the run used
	// the default kubeconfig).
	Kubeconfig string `json:"kubeconfig,omitempty"`
	Context    string `json:"context,omitempty"`
	// Namespaces are the run's namespaces left on it (existing substrate: they stay).
	Namespaces []string `json:"namespaces,omitempty"`
	// Why is the --keep-cluster policy and the verdict that decided it.
	Why string `json:"why"`
}

// Interruption is a signal that stopped a run.
type Interruption struct {
	Signal string    `json:"signal"`
	At     time.Time `json:"at"`
	// Phase is the phase running when the signal came ("" before the first).
	Phase string `json:"phase,omitempty"`
}

// Phase is one step of the experiment's lifecycle (setup, a load phase, chaos, teardown).
type Phase struct {
	Name       string     `json:"name"`
	StartedAt  time.Time  `json:"startedAt"`
	FinishedAt *time.Time `json:"finishedAt,omitempty"`
	Error      string     `json:"error,omitempty"`
}

// Traffic is what the load generator saw.
type Traffic struct {
	// StartedAt is the first request's time; series seconds count from it.
	StartedAt time.Time        `json:"startedAt"`
	Rate      float64          `json:"rate,omitempty"` // requests per second asked for
	Requests  int64            `json:"requests"`
	Errors    int64            `json:"errors"`
	ErrorRate float64          `json:"errorRate"` // Errors / Requests, 0..1
	ByCode    map[string]int64 `json:"byCode"`    // "0" is a transport error (no response)
	ByFlag    map[string]int64 `json:"byFlag"`    // Envoy response flags of proxy-generated replies
	LatencyMs Latency          `json:"latencyMs"`
	// ErrorWindowSeconds is the number of seconds from the first to the last second with an error
	// (inclusive); 0 without errors.
	ErrorWindowSeconds float64      `json:"errorWindowSeconds"`
	ErrorWindow        *ErrorWindow `json:"errorWindow,omitempty"`
	// NoConfigSeconds, for proxyless gRPC clients, is the longest time one channel had no
	// usable config: from its first failed RPC after a success to its next success (to the end
	// of the traffic when none came). Nil for traffic through proxies, 0 when no channel lost it.
	NoConfigSeconds *float64 `json:"noConfigSeconds,omitempty"`
	Series          []Second `json:"series"`
}

// Latency holds latency quantiles in milliseconds.
type Latency struct {
	P50 float64 `json:"p50"`
	P90 float64 `json:"p90"`
	P99 float64 `json:"p99"`
	Max float64 `json:"max"`
}

// ErrorWindow locates the errors in time. Seconds are offsets from Traffic.StartedAt.
type ErrorWindow struct {
	FirstSecond       int `json:"firstSecond"`
	LastSecond        int `json:"lastSecond"`
	LongestRunSeconds int `json:"longestRunSeconds"` // longest run of consecutive seconds with errors
	// LongestRunStart is the first second of that run.
	LongestRunStart int `json:"longestRunStart"`
	// RelativeTo gives, per event name, the first and last error seconds as seconds after that event
	// (negative: before it), e.g. how long after "chaos injected" the errors began and ended.
	RelativeTo map[string]RelativeWindow `json:"relativeTo,omitempty"`
}

// RelativeWindow is an error window measured from an event.
type RelativeWindow struct {
	StartAfterSeconds float64 `json:"startAfterSeconds"`
	EndAfterSeconds   float64 `json:"endAfterSeconds"`
}

// Second is one second of traffic. T counts from Traffic.StartedAt.
type Second struct {
	T         int              `json:"t"`
	Requests  int64            `json:"requests"`
	Errors    int64            `json:"errors"`
	ByCode    map[string]int64 `json:"byCode,omitempty"`
	ByFlag    map[string]int64 `json:"byFlag,omitempty"`
	LatencyMs Latency          `json:"latencyMs"`
}

// ControlPlaneStats is what the observers saw of the control plane under test.
type ControlPlaneStats struct {
	Restarts int `json:"restarts"`
	OOMKills int `json:"oomKills"`
	// Pushes is nil when the control plane's push counters were never scraped.
	Pushes        *Pushes   `json:"pushes,omitempty"`
	PeakHeapBytes int64     `json:"peakHeapBytes"`
	MemoryLimit   int64     `json:"memoryLimitBytes,omitempty"`
	Memory        []Sample  `json:"memory,omitempty"` // memory in use over time (cgroup or metrics)
	Profiles      []Profile `json:"profiles,omitempty"`
	Metrics       []Series  `json:"metrics,omitempty"` // scraped control-plane metrics
	// PushTime is the distribution of push times over the run, from the control plane's
	// histogram (istiod's pilot_xds_push_time: each response's own generation and send,
	// initial fetches included); absent when it exposes none.
	PushTime *Histogram `json:"pushTime,omitempty"`
	// ChaosPushTime, ChaosCPUSeconds and ChaosPeakHeapBytes are the same figures over the chaos
	// phase alone: what the faults cost, without the initial connection of every proxy (which
	// dominates the whole-run figures with large fleets).
	ChaosPushTime *Histogram `json:"chaosPushTime,omitempty"`
	// ChaosPushes are the pushes over the chaos phase alone (istiod counts a full push per
	// proxy, and proxies that finish connecting after setup add to the whole run's).
	ChaosPushes        *Pushes  `json:"chaosPushes,omitempty"`
	ChaosCPUSeconds    *float64 `json:"chaosCpuSeconds,omitempty"`
	ChaosPeakHeapBytes *int64   `json:"chaosPeakHeapBytes,omitempty"`
	// CPUSeconds is the CPU time the control plane used over the run (its process counter);
	// absent when not scraped.
	CPUSeconds *float64 `json:"cpuSeconds,omitempty"`
	// XDSRejects is the configuration the proxies rejected (NACKs) over the run, from the control
	// plane's counter; absent when not scraped.
	XDSRejects *int64 `json:"xdsRejects,omitempty"`
	// PushRate is the pushes by kind in each second with any, from the push counters.
	PushRate []PushSecond `json:"pushRate,omitempty"`
}

// PushSecond is the pushes counted in one second (At, truncated to the second).
type PushSecond struct {
	At   time.Time `json:"at"`
	Full int64     `json:"full"`
	EDS  int64     `json:"eds"`
}

// Histogram is a distribution in milliseconds: cumulative buckets and quantiles estimated from
// them (linear within a bucket, as Prometheus's histogram_quantile), or exact when computed from
// every sample.
type Histogram struct {
	Count int64   `json:"count"`
	P50Ms float64 `json:"p50Ms"`
	P99Ms float64 `json:"p99Ms"`
	MaxMs float64 `json:"maxMs,omitempty"` // exact samples only
	// Buckets are cumulative: Count of values ≤ LeMs; the last LeMs may be +Inf, written as -1.
	Buckets []Bucket `json:"buckets,omitempty"`
}

// Bucket is one cumulative histogram bucket.
type Bucket struct {
	LeMs  float64 `json:"leMs"`
	Count int64   `json:"count"`
}

// Convergence follows one service's endpoint changes from the API to the proxies: for each
// change, when every proxy received the new endpoints.
type Convergence struct {
	// Service is namespace/name of the service followed; Proxies how many proxies reported.
	Service string `json:"service"`
	Proxies int    `json:"proxies"`
	// Changes are the service's ready-endpoint changes the API showed after the baseline.
	Changes []EndpointChange `json:"changes"`
	// Latency is over every (change, proxy) receipt, exact.
	Latency Histogram `json:"latency"`
	// Missed counts (change, proxy) pairs never received.
	Missed int `json:"missed"`
	// Coalesced counts changes reverted within the control plane's debounce window (a change and
	// the one that undid it): a control plane merges them, so no proxy is expected to see them.
	Coalesced int `json:"coalesced,omitempty"`
	// Early counts receipts that arrived before the harness saw the change in the API (the
	// control plane acted on an earlier object, e.g. the pod, than the EndpointSlice); their
	// latency counts as 0.
	Early int `json:"early"`
}

// Flaps counts the service's returns from no ready endpoint to some (0→1 in the API): how many
// times a flapping endpoint came back.
func (c *Convergence) Flaps() int {
	n := 0
	for i, ch := range c.Changes {
		if ch.Ready > 0 && (i == 0 || c.Changes[i-1].Ready == 0) {
			n++
		}
	}
	return n
}

// EndpointChange is one change of a service's ready endpoints and how the proxies received it.
type EndpointChange struct {
	At time.Time `json:"at"`
	// Ready is the number of ready endpoints after the change.
	Ready int `json:"ready"`
	// Coalesced: this change and its neighbour undid each other within the debounce window;
	// not expected at the proxies.
	Coalesced bool `json:"coalesced,omitempty"`
	// FirstReceivedAt is when the first proxy received it (absent when none did).
	FirstReceivedAt *time.Time `json:"firstReceivedAt,omitempty"`
	// Received counts the proxies that received it; P50Ms, P99Ms, MaxMs their latencies.
	Received int     `json:"received"`
	P50Ms    float64 `json:"p50Ms"`
	P99Ms    float64 `json:"p99Ms"`
	MaxMs    float64 `json:"maxMs"`
	// Pushes are the control plane's pushes from this change to the next (when attributed): from
	// the earlier of At and FirstReceivedAt, since a control plane may act on an object the
	// harness sees later (the pod before its EndpointSlice), to the next change's start. The
	// counters are scraped every 500 ms, so a push may land next to its change.
	Pushes *Pushes `json:"pushes,omitempty"`
}

// WorkloadStats are a role's pod figures.
type WorkloadStats struct {
	Restarts int `json:"restarts"`
	OOMKills int `json:"oomKills"`
	// Ready and NotReady count readiness transitions.
	Ready    int `json:"ready"`
	NotReady int `json:"notReady"`
}

// Startup is how the pods of one app Deployment came up in one sidecar start mode.
type Startup struct {
	Mode string `json:"mode"`
	// Pods were watched from creation; Started is how many reported their start-up (the app
	// answered with its attempts).
	Pods    int `json:"pods"`
	Started int `json:"started"`
	// AppRestarts sums the app containers' restart counts; ExitCodes counts their last
	// terminations by exit code.
	AppRestarts int            `json:"appRestarts"`
	ExitCodes   map[string]int `json:"exitCodes,omitempty"`
	// FailedFirstCalls counts pods whose first start-up call failed (in a run that exited, or
	// retried by the app itself).
	FailedFirstCalls int `json:"failedFirstCalls"`
	// FirstSuccessMs is pod creation → the app's first successful call; ReadyMs pod creation →
	// Ready; ProxyFirstConfigMs the proxy's start → its first configuration applied.
	FirstSuccessMs     Latency `json:"firstSuccessMs"`
	ReadyMs            Latency `json:"readyMs"`
	ProxyFirstConfigMs Latency `json:"proxyFirstConfigMs"`
	// PodSpec is the injected pod spec of one pod, relative to the run directory.
	PodSpec string `json:"podSpec,omitempty"`
}

// Measurement is how one measurement fared over the run.
type Measurement struct {
	Name string `json:"name"`
	Role string `json:"role,omitempty"`
	// OK is false when the measurement produced nothing usable; checks built on it then give
	// verdict error.
	OK bool `json:"ok"`
	// Samples and Failures count successful and failed reads (scrapes, polls).
	Samples  int    `json:"samples"`
	Failures int    `json:"failures"`
	Error    string `json:"error,omitempty"` // the last failure
}

// Pushes counts xDS pushes by kind.
type Pushes struct {
	Full int64 `json:"full"`
	EDS  int64 `json:"eds"`
}

// Sample is one timestamped value.
type Sample struct {
	At    time.Time `json:"at"`
	Value float64   `json:"value"`
}

// Series is a named, labelled time series (a scraped metric).
type Series struct {
	Name    string            `json:"name"`
	Labels  map[string]string `json:"labels,omitempty"`
	Samples []Sample          `json:"samples"`
}

// Profile is one captured pprof profile in the run directory's pprof/.
type Profile struct {
	File   string    `json:"file"` // relative to the run directory
	Kind   string    `json:"kind"` // heap, goroutine, cpu
	Reason string    `json:"reason"`
	At     time.Time `json:"at"`
	// InUseBytes is the heap profile's total in-use space.
	InUseBytes int64 `json:"inUseBytes,omitempty"`
	// Top lists the heaviest in-use allocation sites (heap profiles).
	Top []AllocSite `json:"top,omitempty"`
}

// AllocSite is an allocation site and the bytes it holds in use.
type AllocSite struct {
	Function   string `json:"function"`
	InUseBytes int64  `json:"inUseBytes"`
	Flat       bool   `json:"flat"` // true: bytes allocated by this function itself (flat)
}

// Event is a timeline entry: chaos injected/cleared, pod killed/restarted/ready, traffic start/stop.
type Event struct {
	At     time.Time `json:"at"`
	Kind   string    `json:"kind"`
	Object string    `json:"object,omitempty"`
	Detail string    `json:"detail,omitempty"`
	// ObservedAt is when the harness saw it, where that differs from At (At then comes from the API).
	ObservedAt *time.Time `json:"observedAt,omitempty"`
}

// Check is a named SLO assertion: Observed Op Threshold must hold.
type Check struct {
	Name      string  `json:"name"`
	Pass      bool    `json:"pass"`
	Observed  float64 `json:"observed"`
	Op        Op      `json:"op"`
	Threshold float64 `json:"threshold"`
	Unit      string  `json:"unit,omitempty"`
	// Detail explains a failure in words (e.g. which seconds had errors).
	Detail string `json:"detail,omitempty"`
}

// Op is a check's comparison.
type Op string

// Comparisons a check may use.
const (
	LE Op = "<="
	GE Op = ">="
	LT Op = "<"
	GT Op = ">"
	EQ Op = "=="
)

// Holds reports whether observed op threshold is true.
func (o Op) Holds(observed, threshold float64) bool {
	switch o {
	case LE:
		return observed <= threshold
	case GE:
		return observed >= threshold
	case LT:
		return observed < threshold
	case GT:
		return observed > threshold
	case EQ:
		return observed == threshold
	}
	return false
}

// Symbol is the operator as people write it.
func (o Op) Symbol() string {
	switch o {
	case LE:
		return "≤"
	case GE:
		return "≥"
	}
	return string(o)
}

// NewCheck evaluates observed against threshold and returns the check.
func NewCheck(name string, observed float64, op Op, threshold float64, unit string) Check {
	return Check{Name: name, Observed: observed, Op: op, Threshold: threshold, Unit: unit, Pass: op.Holds(observed, threshold)}
}

// String renders a check as "name: observed (want op threshold)".
func (c Check) String() string {
	return fmt.Sprintf("%s: observed %s, want %s %s", c.Name, FormatValue(c.Observed, c.Unit), c.Op.Symbol(), FormatValue(c.Threshold, c.Unit))
}

// FormatValue formats a number with its unit compactly.
func FormatValue(v float64, unit string) string {
	s := fmt.Sprintf("%.4g", v)
	if v == math.Trunc(v) && math.Abs(v) < 1e15 {
		s = fmt.Sprintf("%.0f", v)
	}
	if unit == "" {
		return s
	}
	return s + " " + unit
}

// DecideVerdict is pass when every check passed, fail otherwise. A run without checks proves
// nothing and is an error.
func DecideVerdict(checks []Check) Verdict {
	if len(checks) == 0 {
		return VerdictError
	}
	for _, c := range checks {
		if !c.Pass {
			return VerdictFail
		}
	}
	return VerdictPass
}

// Validate reports every way s breaks the schema, joined.
func (s *Summary) Validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if s.Schema != SchemaVersion {
		bad("schema is %q, want %q", s.Schema, SchemaVersion)
	}
	if strings.TrimSpace(s.Experiment) == "" {
		bad("experiment is empty")
	}
	if s.StartedAt.IsZero() {
		bad("startedAt is missing")
	}
	if s.FinishedAt != nil && s.FinishedAt.Before(s.StartedAt) {
		bad("finishedAt %s is before startedAt %s", s.FinishedAt.Format(time.RFC3339), s.StartedAt.Format(time.RFC3339))
	}
	switch s.Verdict {
	case VerdictPass, VerdictFail:
		if s.FinishedAt == nil {
			bad("verdict %s without finishedAt", s.Verdict)
		}
		if want := DecideVerdict(s.Checks); want != s.Verdict {
			bad("verdict %s disagrees with the checks (they say %s)", s.Verdict, want)
		}
	case VerdictError:
	default:
		bad("verdict is %q, want pass, fail or error", s.Verdict)
	}
	if s.Interrupted != nil && s.Verdict != VerdictError {
		bad("interrupted by %s but verdict %s: an interrupted run has verdict error", s.Interrupted.Signal, s.Verdict)
	}
	for i, c := range s.Checks {
		if c.Name == "" {
			bad("checks[%d]: name is empty", i)
		}
		switch c.Op {
		case LE, GE, LT, GT, EQ:
			if c.Op.Holds(c.Observed, c.Threshold) != c.Pass {
				bad("checks[%d] %q: pass=%v but %v %s %v is %v", i, c.Name, c.Pass, c.Observed, c.Op, c.Threshold, !c.Pass)
			}
		default:
			bad("checks[%d] %q: op %q is not one of <= >= < > ==", i, c.Name, c.Op)
		}
	}
	if t := s.Traffic; t != nil {
		if t.Requests < 0 || t.Errors < 0 || t.Errors > t.Requests {
			bad("traffic: errors %d out of requests %d", t.Errors, t.Requests)
		}
		if t.ErrorRate < 0 || t.ErrorRate > 1 || math.IsNaN(t.ErrorRate) {
			bad("traffic: errorRate %v outside 0..1", t.ErrorRate)
		}
		var sum, errSum int64
		last := -1
		for i, sec := range t.Series {
			if sec.T <= last {
				bad("traffic.series[%d]: t=%d not after %d", i, sec.T, last)
			}
			last = sec.T
			sum += sec.Requests
			errSum += sec.Errors
		}
		if len(t.Series) > 0 && (sum != t.Requests || errSum != t.Errors) {
			bad("traffic: series add up to %d requests/%d errors, totals say %d/%d", sum, errSum, t.Requests, t.Errors)
		}
	}
	for i, e := range s.Events {
		if e.Kind == "" || e.At.IsZero() {
			bad("events[%d]: kind and at are required", i)
		}
	}
	return errors.Join(errs...)
}

// ErrBadRunDir marks errors caused by a missing or unreadable run directory (exit code 2).
var ErrBadRunDir = errors.New("bad run directory")

// Read loads and validates dir/summary.json.
func Read(dir string) (*Summary, error) {
	st, err := os.Stat(dir)
	if os.IsNotExist(err) {
		return nil, fmt.Errorf("%w: %s does not exist (give a directory written by meshchaos run)", ErrBadRunDir, dir)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadRunDir, err)
	}
	if !st.IsDir() {
		return nil, fmt.Errorf("%w: %s is not a directory", ErrBadRunDir, dir)
	}
	path := filepath.Join(dir, SummaryFile)
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %v (is %s a meshchaos run directory?)", ErrBadRunDir, err, dir)
	}
	return Decode(path, b)
}

// Decode parses and validates a summary; name is used in errors.
func Decode(name string, b []byte) (*Summary, error) {
	var s Summary
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&s); err != nil {
		return nil, fmt.Errorf("%w: %s is not a valid %s summary: %v", ErrBadRunDir, name, SchemaVersion, err)
	}
	if err := s.Validate(); err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrBadRunDir, name, err)
	}
	return &s, nil
}

// WriteFileAtomic writes b to path through a temporary file in path's directory and a rename,
// so readers (and a crash) see either the old or the new file, never half of one. The file has
// mode 0644, as the run's other files.
func WriteFileAtomic(path string, b []byte) error {
	if err := MkdirAll(filepath.Dir(path)); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	// CreateTemp makes it 0600: a report only its writer can read would be no report.
	if err := tmp.Chmod(FileMode); err != nil {
		tmp.Close()
		return err
	}
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// Write validates s and writes dir/summary.json atomically.
func Write(dir string, s *Summary) error {
	if err := s.Validate(); err != nil {
		return fmt.Errorf("write the run's summary: %w", err)
	}
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return fmt.Errorf("write the run's summary: %w", err)
	}
	if err := WriteFileAtomic(filepath.Join(dir, SummaryFile), append(b, '\n')); err != nil {
		return fmt.Errorf("write the run's summary: %w", err)
	}
	return nil
}

// SortedKeys returns m's keys in order, for stable output.
func SortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// Probes are time series of active probes. Seconds count from StartedAt.
type Probes struct {
	StartedAt time.Time `json:"startedAt"`
	// Window marks the fault (e.g. the CPU-starvation window), nil if none was marked.
	Window *Window `json:"window,omitempty"`
	// Series are keyed by probe name, e.g. "xds", "inject", "cp-cpu".
	Series map[string][]ProbeSample `json:"series"`
}

// Window is a span of seconds from Probes.StartedAt; End is 0 while it is open.
type Window struct {
	Start float64 `json:"start"`
	End   float64 `json:"end"`
}

// ProbeSample is one probe: when it started, whether it succeeded, how long it took, and a
// value when the probe reads one (e.g. CPUs used).
type ProbeSample struct {
	T     float64 `json:"t"`
	OK    bool    `json:"ok"`
	Ms    float64 `json:"ms"`
	Value float64 `json:"value,omitempty"`
	Error string  `json:"error,omitempty"`
}

// checkJSON is Check on the wire: JSON has no infinities, so a non-finite figure (a recovery
// that never came: +Inf) is written as the string "+Inf", "-Inf" or "NaN".
type checkJSON struct {
	Name      string `json:"name"`
	Pass      bool   `json:"pass"`
	Observed  any    `json:"observed"`
	Op        Op     `json:"op"`
	Threshold any    `json:"threshold"`
	Unit      string `json:"unit,omitempty"`
	Detail    string `json:"detail,omitempty"`
}

func jsonNumber(v float64) any {
	switch {
	case math.IsInf(v, 1):
		return "+Inf"
	case math.IsInf(v, -1):
		return "-Inf"
	case math.IsNaN(v):
		return "NaN"
	}
	return v
}

func fromJSONNumber(v any) (float64, error) {
	switch x := v.(type) {
	case float64:
		return x, nil
	case string:
		switch x {
		case "+Inf":
			return math.Inf(1), nil
		case "-Inf":
			return math.Inf(-1), nil
		case "NaN":
			return math.NaN(), nil
		}
	case nil:
		return 0, nil
	}
	return 0, fmt.Errorf("not a number: %v", v)
}

// MarshalJSON writes non-finite figures as strings (see checkJSON).
func (c Check) MarshalJSON() ([]byte, error) {
	return json.Marshal(checkJSON{Name: c.Name, Pass: c.Pass, Observed: jsonNumber(c.Observed), Op: c.Op,
		Threshold: jsonNumber(c.Threshold), Unit: c.Unit, Detail: c.Detail})
}

// UnmarshalJSON reads what MarshalJSON writes.
func (c *Check) UnmarshalJSON(b []byte) error {
	var w checkJSON
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	obs, err := fromJSONNumber(w.Observed)
	if err != nil {
		return fmt.Errorf("check %q observed: %w", w.Name, err)
	}
	thr, err := fromJSONNumber(w.Threshold)
	if err != nil {
		return fmt.Errorf("check %q threshold: %w", w.Name, err)
	}
	*c = Check{Name: w.Name, Pass: w.Pass, Observed: obs, Op: w.Op, Threshold: thr, Unit: w.Unit, Detail: w.Detail}
	return nil
}

// Fleet is an adsload fleet (ADS clients standing in for sidecars, spread over pods) as read
// once: endpoint-flap at the end of its chaos, serviceentry-scale after its last step.
type Fleet struct {
	At         time.Time `json:"at"`
	Clients    int       `json:"clients"`
	Connected  int64     `json:"connected"`
	Configured int64     `json:"configured"`
	// RSSBytes is the pods' processes' resident memory summed; RSSBytesPerClient that over
	// Clients, what one client of the fleet costs (each pod also pays its runtime).
	RSSBytes          int64      `json:"rssBytes"`
	RSSBytesPerClient float64    `json:"rssBytesPerClient"`
	Pods              []FleetPod `json:"pods"`
}

// FleetPod is one adsload pod of a Fleet: the node it was pinned to (0: any), its clients and
// what it held and cost.
type FleetPod struct {
	Name       string `json:"name"`
	Node       int    `json:"node,omitempty"`
	Clients    int    `json:"clients"`
	Configured int64  `json:"configured"`
	RSSBytes   int64  `json:"rssBytes"`
}
