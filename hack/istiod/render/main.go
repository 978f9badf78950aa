// Command render renders a Helm chart to YAML on standard output, client-side only, as
// `helm template --include-crds` does: no cluster is contacted, there is no helm binary.
//
//	render -chart DIR -values FILE [-set key=value]… -namespace istio-system -release NAME > out.yaml
//
// It uses Helm's own SDK (chart/loader, chartutil, engine, releaseutil), so a chart renders
// exactly as Helm renders it: values coalesced with the chart's defaults and checked against
// its schema, templates run in Helm's order, manifests sorted in Helm's install order.
package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path"
	"strings"

	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	"helm.sh/helm/v3/pkg/releaseutil"
	"helm.sh/helm/v3/pkg/strvals"
)

// kubeVersion is what .Capabilities.KubeVersion says: the Kubernetes the local substrate runs.
var kubeVersion = chartutil.KubeVersion{Version: "v1.36.0", Major: "1", Minor: "36"}

type setFlags []string

func (s *setFlags) String() string     { return strings.Join(*s, ",") }
func (s *setFlags) Set(v string) error { *s = append(*s, v); return nil }

func main() {
	chartDir := flag.String("chart", "", "chart directory")
	valuesFile := flag.String("values", "", "values file (optional)")
	namespace := flag.String("namespace", "default", "release namespace (.Release.Namespace)")
	release := flag.String("release", "release", "release name (.Release.Name)")
	var sets setFlags
	flag.Var(&sets, "set", "key=value over the values file, as helm's --set (repeatable)")
	flag.Parse()
	if *chartDir == "" || flag.NArg() > 0 {
		fmt.Fprintln(os.Stderr, "usage: render -chart DIR [-values FILE] [-set k=v]… [-namespace NS] [-release NAME]")
		os.Exit(2)
	}
	if err := render(*chartDir, *valuesFile, sets, *namespace, *release); err != nil {
		fmt.Fprintln(os.Stderr, "render:", err)
		os.Exit(1)
	}
}

func render(chartDir, valuesFile string, sets []string, namespace, release string) error {
	chrt, err := loader.Load(chartDir)
	if err != nil {
		return err
	}
	// User values: the file, then each -set on top (helm's order).
	vals := map[string]any{}
	if valuesFile != "" {
		if vals, err = chartutil.ReadValuesFile(valuesFile); err != nil {
			return err
		}
	}
	for _, s := range sets {
		if err := strvals.ParseInto(s, vals); err != nil {
			return fmt.Errorf("-set %s: %w", s, err)
		}
	}
	caps := chartutil.DefaultCapabilities.Copy()
	caps.KubeVersion = kubeVersion
	if v := chrt.Metadata.KubeVersion; v != "" && !chartutil.IsCompatibleRange(v, kubeVersion.Version) {
		return fmt.Errorf("chart requires kubeVersion %s, not %s", v, kubeVersion.Version)
	}
	// A first install (IsInstall): templates that differ on upgrade render their install form.
	top, err := chartutil.ToRenderValues(chrt, vals,
		chartutil.ReleaseOptions{Name: release, Namespace: namespace, Revision: 1, IsInstall: true}, caps)
	if err != nil {
		return err
	}
	files, err := engine.Render(chrt, top) // no client: lookup returns nothing, as in helm template
	if err != nil {
		return err
	}
	// NOTES.txt is text for a human, not a manifest.
	for name := range files {
		if path.Base(name) == "NOTES.txt" {
			delete(files, name)
		}
	}
	hooks, manifests, err := releaseutil.SortManifests(files, nil, releaseutil.InstallOrder)
	if err != nil {
		return err
	}
	var w bytes.Buffer
	// CRDs from the chart's crds/ directory first (helm template --include-crds). Istio's base
	// chart has none there: it renders its CRDs from a template, so they are among the manifests.
	for _, crd := range chrt.CRDObjects() {
		fmt.Fprintf(&w, "---\n# Source: %s\n%s\n", crd.Filename, crd.File.Data)
	}
	for _, m := range manifests {
		fmt.Fprintf(&w, "---\n# Source: %s\n%s\n", m.Name, m.Content)
	}
	// Hooks last, as helm template prints them (istio's charts have none).
	for _, h := range hooks {
		fmt.Fprintf(&w, "---\n# Source: %s\n%s\n", h.Path, h.Manifest)
	}
	_, err = os.Stdout.Write(w.Bytes())
	return err
}
