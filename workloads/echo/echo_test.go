package echo

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestEchoAnswersWithPodName(t *testing.T) {
	srv := httptest.NewServer(Handler(Options{PodName: "echo-1", PodIP: "10.244.0.5"}))
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/x")
	require.NoError(t, err)
	defer resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Equal(t, "echo-1", resp.Header.Get("X-Echo-Pod"))
	var r Reply
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&r))
	assert.Equal(t, Reply{Pod: "echo-1", IP: "10.244.0.5", Host: srv.Listener.Addr().String(), Path: "/x"}, r)

	h, err := http.Get(srv.URL + "/healthz")
	require.NoError(t, err)
	h.Body.Close()
	assert.Equal(t, http.StatusOK, h.StatusCode)
}

func TestLookupResolvesAndReportsErrors(t *testing.T) {
	srv := httptest.NewServer(Handler(Options{PodName: "echo-1"}))
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/lookup?host=localhost")
	require.NoError(t, err)
	var r LookupReply
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&r))
	resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Contains(t, r.Addrs, "127.0.0.1")

	resp, err = http.Get(srv.URL + "/lookup")
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusBadRequest, resp.StatusCode)
}
