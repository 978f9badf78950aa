package hog

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// DefaultMiB is the size of one download: the incident's neighbour served 150 MB files.
const DefaultMiB = 150

// chunk is what the server writes per call: a file server's read buffer. It is made on first
// use: every process of the meshchaos binary (the reference control plane too) links this
// package, and a buffer made at init was the top site of the control plane's heap profile.
var chunk = sync.OnceValue(func() []byte {
	b := make([]byte, 1<<20)
	for i := range b {
		b[i] = byte(i*31 + i>>8)
	}
	return b
})

// Handler serves GET /download?mib=N: N MiB (default DefaultMiB) of bytes, written chunk by
// chunk as a file server streams a file. Its CPU is the neighbour's load: the copies and
// the network stack work for every byte.
func Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/download", func(w http.ResponseWriter, r *http.Request) {
		chunk := chunk()
		mib := DefaultMiB
		if s := r.URL.Query().Get("mib"); s != "" {
			n, err := strconv.Atoi(s)
			if err != nil || n < 1 || n > 1<<20 {
				http.Error(w, "mib: a whole number of MiB from 1", http.StatusBadRequest)
				return
			}
			mib = n
		}
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Header().Set("Content-Length", strconv.Itoa(mib<<20))
		for i := 0; i < mib; i++ {
			if _, err := w.Write(chunk); err != nil {
				return // the client went away
			}
		}
	})
	mux.HandleFunc("/ready", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok\n") })
	return mux
}

// Serve serves Handler on addr until ctx ends.
func Serve(ctx context.Context, addr string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("hog: listen %s: %w", addr, err)
	}
	srv := &http.Server{Handler: Handler(), ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		_ = srv.Close()
	}()
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("hog: serve: %w", err)
	}
	return nil
}

// Drive keeps parallel downloads of url running until ctx ends, discarding the bytes, and
// returns how many bytes it received. A failed download is retried after a short pause (the
// server may not be up yet); report, when set, is called every interval with the total so far.
func Drive(ctx context.Context, url string, parallel int, interval time.Duration, report func(total int64)) (int64, error) {
	if parallel < 1 {
		return 0, fmt.Errorf("hog: --parallel %d: at least 1", parallel)
	}
	var total atomic.Int64
	client := &http.Client{Transport: &http.Transport{DisableCompression: true}}
	var wg sync.WaitGroup
	for i := 0; i < parallel; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				if err := fetch(ctx, client, url, &total); err != nil && ctx.Err() == nil {
					select {
					case <-ctx.Done():
					case <-time.After(200 * time.Millisecond):
					}
				}
			}
		}()
	}
	if report != nil && interval > 0 {
		go func() {
			t := time.NewTicker(interval)
			defer t.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case <-t.C:
					report(total.Load())
				}
			}
		}()
	}
	wg.Wait()
	return total.Load(), nil
}

func fetch(ctx context.Context, c *http.Client, url string, total *atomic.Int64) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	buf := make([]byte, 256<<10)
	for {
		n, err := resp.Body.Read(buf)
		total.Add(int64(n))
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
	}
}
