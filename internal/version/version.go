// Package version says which build of meshchaos is running, for `meshchaos version` and for
// every run's summary.json: a result is only comparable with another when one knows which
// harness measured it.
package version

import (
	"runtime/debug"
	"strings"
	"time"
)

// Set by the Makefile with -ldflags -X (git describe --always --dirty, git rev-parse HEAD,
// git log -1 --format=%cI). go build stamps vcs.* itself only when it finds a .git directory
// above the package: in a linked git worktree .git is a file and it stamps nothing, or the
// enclosing checkout's revision (golang/go#58218). When set, these win over the build info.
var (
	describe   string
	commit     string
	commitTime string
)

// Info is what a binary knows of its own build.
type Info struct {
	// Version is `git describe --always --dirty` when the Makefile built the binary, else the
	// module version go build recorded ("(devel)" without VCS stamping; since Go 1.24 a
	// pseudo-version with +dirty when it stamped a modified tree).
	Version string `json:"version"`
	// Revision is the full commit hash; empty when the build recorded none (go test, go run,
	// go build in a linked worktree or outside a checkout).
	Revision string `json:"revision,omitempty"`
	// Time is the commit's time; nil when unknown.
	Time *time.Time `json:"time,omitempty"`
	// Modified says the working tree had uncommitted changes; nil when the build did not say
	// (no revision recorded).
	Modified *bool `json:"modified,omitempty"`
	// GoVersion is the toolchain that built the binary.
	GoVersion string `json:"goVersion"`
}

// Get reads the running binary's build information.
func Get() Info {
	bi, _ := debug.ReadBuildInfo()
	return from(bi, describe, commit, commitTime)
}

// from is Get with its inputs passed in, for tests. bi may be nil (a binary built without
// module support).
func from(bi *debug.BuildInfo, describe, commit, commitTime string) Info {
	var in Info
	if bi != nil {
		in.Version, in.GoVersion = bi.Main.Version, bi.GoVersion
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				in.Revision = s.Value
			case "vcs.time":
				if t, err := time.Parse(time.RFC3339, s.Value); err == nil {
					in.Time = &t
				}
			case "vcs.modified":
				m := s.Value == "true"
				in.Modified = &m
			}
		}
	}
	if describe != "" {
		m := strings.HasSuffix(describe, "-dirty")
		in.Version, in.Modified = describe, &m
	}
	if commit != "" {
		in.Revision, in.Time = commit, nil
		if t, err := time.Parse(time.RFC3339, commitTime); err == nil {
			t = t.UTC()
			in.Time = &t
		}
	}
	if in.Version == "" {
		in.Version = "(devel)"
	}
	return in
}
