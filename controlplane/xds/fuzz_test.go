package xds

import (
	"encoding/json"
	"regexp"
	"slices"
	"testing"
	"time"

	"istio.io/api/networking/v1alpha3"

	"github.com/meshchaos/meshchaos/controlplane/model"
)

// The fuzz targets feed ServiceEntry and WorkloadEntry specs, as JSON (what the informers decode
// from the API server), through the whole path a real object takes: conversion, the model, and
// generation with Envoy's own validation. The seed corpus (below and testdata/fuzz/) runs in every
// `go test`; real fuzzing is by hand:
//
//	go test -run '^$' -fuzz FuzzServiceEntry -fuzztime 3m ./controlplane/xds
//	go test -run '^$' -fuzz FuzzWorkloadEntry -fuzztime 3m ./controlplane/xds
//
// Invariants: nothing panics; conversion either yields services or says why not; every skip
// reason is a fixed phrase (it is a metric label: a reason built from input would let one object
// mint unbounded label values); whatever the conversion accepts generates only resources that
// pass Validate (the conversion is the filter, generation must never drop what it let through);
// and deleting the object leaves the model empty.

var seedServiceEntries = []string{
	`{"hosts":["a.test"],"ports":[{"number":80,"name":"http","protocol":"HTTP"}],"resolution":"STATIC","endpoints":[{"address":"10.0.0.1"}]}`,
	`{"hosts":["ext.test"],"ports":[{"number":443,"name":"tls","protocol":"TLS"}],"resolution":"DNS","endpoints":[{"address":"backend.example.com","ports":{"tls":8443}}]}`,
	`{"hosts":["none.test"],"ports":[{"number":9000,"name":"tcp"}],"resolution":"NONE"}`,
	`{"hosts":["g.test","G.test","*.w.test",""],"ports":[{"number":7070,"name":"grpc","protocol":"GRPC","targetPort":7071},{"number":7070},{"number":0}],"endpoints":[{"address":"fe80::1%eth0"},{"address":"2001:db8::1","weight":7,"labels":{"app":"g"}},{"address":"unix:///s"}]}`,
	`{"hosts":["sel.test"],"ports":[{"number":15000,"name":"http-admin","protocol":"http"}],"workloadSelector":{"labels":{"app":"x"}}}`,
	`{"hosts":["p.test"],"ports":[{"number":80,"name":"http","protocol":"HTTP2","targetPort":65535}],"resolution":"STATIC","endpoints":[{"address":"10.0.0.2","ports":{"http":65535},"serviceAccount":"sa","network":"n","locality":"r/z"}]}`,
	`{"hosts":["r.test"],"ports":[{"number":80,"name":"http"}],"resolution":9}`,
}

var seedWorkloadEntries = []string{
	`{"address":"10.0.0.9","labels":{"app":"x"},"ports":{"http":8080}}`,
	`{"address":"10.0.0.9","labels":{"app":"y"}}`,
	`{"address":"2001:db8::9","labels":{"app":"x","v":"1"},"weight":3,"serviceAccount":"sa"}`,
	`{"address":"","labels":{"app":"x"}}`,
	`{"address":"bad address","labels":{"app":"x","bad key!":"v"}}`,
	`{"address":"10.0.0.10","labels":{"app":"x"},"ports":{"http":0}}`,
}

// reasonRE is what a skip reason may look like: a fixed phrase, no numbers or input.
var reasonRE = regexp.MustCompile(`^[a-z][a-z ]*[a-z]$`)

func checkSkips(t *testing.T, obj string, skips []model.Skip) {
	t.Helper()
	for _, s := range skips {
		if s.Object != obj {
			t.Fatalf("skip names object %q, want %q", s.Object, obj)
		}
		if !reasonRE.MatchString(s.Reason) {
			t.Fatalf("skip reason %q is not a fixed phrase (it becomes a metric label)", s.Reason)
		}
		if len(s.What) > 200 {
			t.Fatalf("skip description is %d bytes: input must be truncated before it is logged", len(s.What))
		}
	}
}

// generateClean generates every resource of m and fails on any the validation refuses.
func generateClean(t *testing.T, m *model.Model) *Resources {
	t.Helper()
	res, bad := Generate(m.Entries(), GenOptions{})
	if len(bad) > 0 {
		t.Fatalf("conversion accepted input that generates invalid resources: %v", bad)
	}
	return res
}

func FuzzServiceEntry(f *testing.F) {
	for _, s := range seedServiceEntries {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var spec v1alpha3.ServiceEntry
		if json.Unmarshal(data, &spec) != nil {
			return // the API server would not have stored it
		}
		conv, skips, err := model.ConvertServiceEntry("ns", "se", &spec)
		checkSkips(t, "ServiceEntry/ns/se", skips)
		if (err == nil) == (conv == nil) {
			t.Fatalf("conversion returned %v and error %v: exactly one of them must be set", conv, err)
		}
		m := quietModel()
		m.SetServiceEntry("ns", "se", time.Unix(0, 0), conv)
		res := generateClean(t, m)
		if conv == nil {
			if hosts, _ := m.Stats(); hosts != 0 {
				t.Fatalf("a refused ServiceEntry left %d hosts in the model", hosts)
			}
			return
		}
		for _, s := range conv.Services {
			for _, p := range s.Ports {
				if p.Number == 0 || p.Number > 65535 || p.TargetPort > 65535 {
					t.Fatalf("port %+v of %s out of range", p, s.Hostname)
				}
				if _, ok := res.Clusters[model.ClusterName(s.Hostname, p.Number)]; !ok {
					t.Fatalf("no cluster for %s port %d", s.Hostname, p.Number)
				}
			}
		}
		m.DeleteServiceEntry("ns", "se")
		if hosts, eps := m.Stats(); hosts != 0 || eps != 0 {
			t.Fatalf("after the delete the model still holds %d hosts, %d endpoints", hosts, eps)
		}
	})
}

// FuzzWorkloadEntry puts a WorkloadEntry under a ServiceEntry whose workloadSelector is app=x,
// then replaces it with a second one of the same name (a relabel or an update), then deletes it:
// the selecting ServiceEntry must hold exactly the entry's address while it is selected and valid,
// and nothing of it afterwards.
func FuzzWorkloadEntry(f *testing.F) {
	for i, a := range seedWorkloadEntries {
		f.Add([]byte(a), []byte(seedWorkloadEntries[(i+1)%len(seedWorkloadEntries)]))
	}
	se := &v1alpha3.ServiceEntry{Hosts: []string{"sel.test"}, Resolution: v1alpha3.ServiceEntry_STATIC,
		Ports:            []*v1alpha3.ServicePort{{Number: 80, Name: "http", Protocol: "HTTP"}},
		WorkloadSelector: &v1alpha3.WorkloadSelector{Labels: map[string]string{"app": "x"}}}
	f.Fuzz(func(t *testing.T, first, second []byte) {
		var specs [2]v1alpha3.WorkloadEntry
		if json.Unmarshal(first, &specs[0]) != nil || json.Unmarshal(second, &specs[1]) != nil {
			return
		}
		m := quietModel()
		conv, _, err := model.ConvertServiceEntry("ns", "se", se)
		if err != nil {
			t.Fatal(err)
		}
		m.SetServiceEntry("ns", "se", time.Unix(0, 0), conv)
		for i := range specs {
			ep, skip := model.ConvertWorkloadEntry("ns", "we", &specs[i])
			if skip != nil {
				checkSkips(t, "WorkloadEntry/ns/we", []model.Skip{*skip})
			}
			m.SetWorkloadEntry("ns", "we", ep, skip == nil)
			generateClean(t, m)
			var got []string
			for _, e := range m.Entry("sel.test").Endpoints[80] {
				got = append(got, e.Address)
			}
			selected := skip == nil && specs[i].GetLabels()["app"] == "x"
			switch {
			case selected && !slices.Equal(got, []string{ep.Address}):
				t.Fatalf("entry %d (%s) selected, but the ServiceEntry holds %v", i, ep.Address, got)
			case !selected && len(got) > 0:
				t.Fatalf("entry %d not selected (skip %v, labels %v), but the ServiceEntry holds %v", i, skip, specs[i].GetLabels(), got)
			}
		}
		m.DeleteWorkloadEntry("ns", "we")
		if _, eps := m.Stats(); eps != 0 {
			t.Fatalf("after the delete the model still holds %d endpoints", eps)
		}
	})
}
