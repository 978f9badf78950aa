// Package kind_test is the e2e-framework example on the kind substrate: the environment's cluster
// is a kind cluster from meshchaos's kind provider. It runs in `make test` when Docker can run
// kind nodes here (and skips, saying why, when not).
//
//	MESHCHAOS_BIN_DIR=bin MESHCHAOS_IMAGES=bin/images go test ./examples/e2e/kind/
package kind_test

import (
	"fmt"
	"os"
	"testing"

	"sigs.k8s.io/e2e-framework/pkg/env"

	"github.com/meshchaos/meshchaos/e2e"
	"github.com/meshchaos/meshchaos/harness/cluster/kind"
	"github.com/meshchaos/meshchaos/internal/prereq"
)

var (
	testenv env.Environment
	skip    string
)

func TestMain(m *testing.M) {
	switch {
	case os.Getenv(prereq.SkipIntegration) == "1":
		skip = prereq.SkipIntegration + "=1"
	case kind.Preflight() != nil:
		skip = fmt.Sprintf("kind substrate not usable here: %v", kind.Preflight())
	case !kind.ImagePresent(kind.DefaultImage()):
		skip = fmt.Sprintf("kind node image %s is not in Docker and there is no registry to pull it from: run 'make kind-node-image'", kind.DefaultImage())
	}
	if skip != "" {
		os.Exit(m.Run()) // the tests skip themselves (or fail, in CI)
	}
	name := fmt.Sprintf("ex%d", os.Getpid()%100000)
	testenv = env.New()
	testenv.Setup(e2e.CreateKindCluster(name, 1)).Finish(e2e.DestroyCluster(name))
	os.Exit(testenv.Run(m))
}

// TestServiceEntryScale runs serviceentry-scale on the environment's 1-worker kind cluster
// against the reference control plane, at the both-ways test's steps (see examples/e2e).
func TestServiceEntryScale(t *testing.T) {
	if skip != "" {
		prereq.Missing(t, "%s", skip)
	}
	testenv.Test(t, e2e.Feature("serviceentry-scale", "steps=200,400,800", "convergeTimeout=60s", "maxBytesPerEndpoint=3072"))
}
