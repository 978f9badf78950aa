// Package e2e_test is an example of meshchaos experiments in your own e2e-framework suite: the
// environment's cluster comes from meshchaos's local provider, and each experiment is a
// feature whose assessment is the experiment's checks. It runs in `make test` at a tiny scale.
//
//	MESHCHAOS_BIN_DIR=bin MESHCHAOS_IMAGES=bin/images go test ./examples/e2e/
package e2e_test

import (
	"fmt"
	"os"
	"testing"

	"sigs.k8s.io/e2e-framework/pkg/env"

	"github.com/meshchaos/meshchaos/e2e"
	"github.com/meshchaos/meshchaos/harness/cluster/local"
	"github.com/meshchaos/meshchaos/internal/prereq"
)

var testenv env.Environment

func TestMain(m *testing.M) {
	if os.Getenv(prereq.SkipIntegration) == "1" {
		os.Exit(m.Run()) // the tests skip themselves (or fail, in CI)
	}
	// A short state root keeps the cluster's unix socket paths under the kernel's limit.
	home, err := os.MkdirTemp("", "mc")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	name := fmt.Sprintf("ex%d", os.Getpid()%100000)
	testenv = env.New()
	testenv.Setup(e2e.CreateCluster(name, 1, local.WithHome(home))).Finish(e2e.DestroyCluster(name))
	code := testenv.Run(m)
	os.RemoveAll(home)
	os.Exit(code)
}

// TestServiceEntryScale runs serviceentry-scale on the environment's 1-node cluster against the
// reference control plane, at the both-ways test's steps (200/400/800: the smallest at which the
// growth exponent is resolved; at 50/100 it is the heap's jitter): every step reaches the oracle
// client, memory grows no faster than the checks allow. (e2e.FeatureWith runs a regression
// switch expecting fail; an environment's cluster holds one experiment.)
func TestServiceEntryScale(t *testing.T) {
	if testenv == nil {
		prereq.Integration(t)
	}
	testenv.Test(t, e2e.Feature("serviceentry-scale", "steps=200,400,800", "convergeTimeout=60s", "maxBytesPerEndpoint=3072"))
}
