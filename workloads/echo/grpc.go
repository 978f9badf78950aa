package echo

import (
	"net/http"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// withGRPC serves gRPC's health service (grpc.health.v1.Health/Check: SERVING) on the HTTP
// port beside h, for proxyless gRPC clients: the control plane's clusters of a port point at
// that port, so a client that dials xds:///HOST:PORT reaches it with HTTP/2 in plaintext
// (prior knowledge), whatever protocol the ServiceEntry names. Serve enables unencrypted
// HTTP/2 for it; HTTP/1.1 clients are served by h as before.
func withGRPC(h http.Handler) http.Handler {
	gs := grpc.NewServer()
	healthpb.RegisterHealthServer(gs, health.NewServer())
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ProtoMajor == 2 && strings.HasPrefix(r.Header.Get("Content-Type"), "application/grpc") {
			gs.ServeHTTP(w, r)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// protocols are HTTP/1.1 and unencrypted HTTP/2 (gRPC's plaintext).
func protocols() *http.Protocols {
	p := new(http.Protocols)
	p.SetHTTP1(true)
	p.SetUnencryptedHTTP2(true)
	return p
}
