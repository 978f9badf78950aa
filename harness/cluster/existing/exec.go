package existing

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/httpstream"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/remotecommand"

	"github.com/meshchaos/meshchaos/harness/cgroup"
	"github.com/meshchaos/meshchaos/harness/cluster/existing/agent"
)

// podExec runs argv in a pod's container through the API server (WebSocket, SPDY when the server
// has no WebSocket exec), as kubectl exec does.
type podExec struct {
	cfg       *rest.Config
	client    kubernetes.Interface
	namespace string
	container string
}

func (e podExec) stream(ctx context.Context, pod string, argv []string, stdin io.Reader, stdout, stderr io.Writer) error {
	req := e.client.CoreV1().RESTClient().Post().Resource("pods").Namespace(e.namespace).Name(pod).SubResource("exec").
		VersionedParams(&corev1.PodExecOptions{Container: e.container, Command: argv, Stdin: stdin != nil, Stdout: true, Stderr: true}, scheme.ParameterCodec)
	ws, err := remotecommand.NewWebSocketExecutor(e.cfg, "GET", req.URL().String())
	if err != nil {
		return err
	}
	spdy, err := remotecommand.NewSPDYExecutor(e.cfg, "POST", req.URL())
	if err != nil {
		return err
	}
	ex, err := remotecommand.NewFallbackExecutor(ws, spdy, func(err error) bool {
		return httpstream.IsUpgradeFailure(err) || httpstream.IsHTTPSProxyError(err)
	})
	if err != nil {
		return err
	}
	return ex.StreamWithContext(ctx, remotecommand.StreamOptions{Stdin: stdin, Stdout: stdout, Stderr: stderr})
}

// run runs argv to completion and returns its standard output; the error carries its standard error.
func (e podExec) run(ctx context.Context, pod string, argv ...string) ([]byte, error) {
	var out, errb bytes.Buffer
	if err := e.stream(ctx, pod, argv, nil, &out, &errb); err != nil {
		return out.Bytes(), fmt.Errorf("exec %s in pod %s/%s: %w: %s", strings.Join(argv, " "), e.namespace, pod, err, strings.TrimSpace(errb.String()))
	}
	return out.Bytes(), nil
}

// dial opens a TCP connection from the agent's pod: `meshchaos agent dial ADDR` copies the exec's
// stdin and stdout to it. It returns once the agent's one-byte "connected" arrives.
func (e podExec) dial(ctx context.Context, pod, addr string) (net.Conn, error) {
	// The stream outlives ctx (a dial's context ends with the dial); Close ends it.
	sctx, cancel := context.WithCancel(context.Background())
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	c := &execConn{in: inW, out: outR, cancel: cancel, addr: addr}
	go func() {
		err := e.stream(sctx, pod, []string{"/" + agentBinary, "agent", "dial", addr}, inR, outW, &c.stderr)
		if err != nil {
			err = fmt.Errorf("dial %s from pod %s: %w: %s", addr, pod, err, strings.TrimSpace(c.stderr.String()))
		} else {
			err = io.EOF
		}
		outW.CloseWithError(err)
		inR.CloseWithError(err)
	}()
	ack := make(chan error, 1)
	go func() {
		var b [1]byte
		_, err := io.ReadFull(outR, b[:])
		ack <- err
	}()
	select {
	case err := <-ack:
		if err != nil {
			c.Close()
			return nil, err
		}
		return c, nil
	case <-ctx.Done():
		c.Close()
		return nil, fmt.Errorf("dial %s from pod %s: %w", addr, pod, ctx.Err())
	}
}

// execConn is a TCP connection carried by an exec stream.
type execConn struct {
	in     *io.PipeWriter
	out    *io.PipeReader
	cancel context.CancelFunc
	addr   string
	stderr syncBuffer
	once   sync.Once
}

func (c *execConn) Read(b []byte) (int, error)  { return c.out.Read(b) }
func (c *execConn) Write(b []byte) (int, error) { return c.in.Write(b) }
func (c *execConn) Close() error {
	c.once.Do(func() {
		c.in.Close()
		c.out.Close()
		c.cancel()
	})
	return nil
}
func (c *execConn) LocalAddr() net.Addr  { return execAddr("exec") }
func (c *execConn) RemoteAddr() net.Addr { return execAddr(c.addr) }

// Deadlines are not supported by an exec stream; HTTP and gRPC clients here end connections by
// closing them.
func (c *execConn) SetDeadline(time.Time) error      { return nil }
func (c *execConn) SetReadDeadline(time.Time) error  { return nil }
func (c *execConn) SetWriteDeadline(time.Time) error { return nil }

type execAddr string

func (a execAddr) Network() string { return "tcp" }
func (a execAddr) String() string  { return string(a) }

// syncBuffer is a buffer written by the exec's stderr copier and read after it ends.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// session is one long `meshchaos agent serve` exec on a node: cgroup reads and writes are lines
// on its stdin and stdout, so a probe every few hundred milliseconds costs no exec each. It is
// reopened after a failure. It is the cgroup.FS of the node's groups.
type session struct {
	exec podExec
	pod  string

	mu     sync.Mutex
	enc    *json.Encoder
	dec    *json.Decoder
	closer func()
}

var _ cgroup.FS = (*session)(nil)

func (s *session) open() {
	ctx, cancel := context.WithCancel(context.Background())
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	go func() {
		err := s.exec.stream(ctx, s.pod, []string{"/" + agentBinary, "agent", "serve"}, inR, outW, io.Discard)
		if err == nil {
			err = io.EOF
		}
		outW.CloseWithError(err)
		inR.CloseWithError(err)
	}()
	s.enc, s.dec = json.NewEncoder(inW), json.NewDecoder(outR)
	s.closer = func() { inW.Close(); outR.Close(); cancel() }
}

func (s *session) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closer != nil {
		s.closer()
		s.closer, s.enc, s.dec = nil, nil, nil
	}
}

// sessionTimeout bounds one request to the agent.
const sessionTimeout = 30 * time.Second

// do sends one request; a broken or stalled stream is reopened once.
func (s *session) do(req agent.Request) (agent.Response, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var err error
	for attempt := 0; attempt < 2; attempt++ {
		if s.enc == nil {
			s.open()
		}
		var resp agent.Response
		done := make(chan error, 1)
		enc, dec := s.enc, s.dec
		go func() {
			err := enc.Encode(req)
			if err == nil {
				err = dec.Decode(&resp)
			}
			done <- err
		}()
		select {
		case err = <-done:
		case <-time.After(sessionTimeout):
			// A stream that stalls (an overloaded API server or kubelet) is closed and reopened.
			s.closer()
			<-done
			err = fmt.Errorf("no answer from the agent in %s", sessionTimeout)
		}
		if err == nil {
			if resp.Err != "" {
				return resp, fmt.Errorf("agent on %s: %s", s.pod, resp.Err)
			}
			return resp, nil
		}
		s.closer()
		s.closer, s.enc, s.dec = nil, nil, nil
	}
	return agent.Response{}, fmt.Errorf("agent %s: %w", s.pod, err)
}

// ReadFile implements cgroup.FS.
func (s *session) ReadFile(name string) ([]byte, error) {
	r, err := s.do(agent.Request{Op: "read", Path: name})
	return r.Data, err
}

// WriteFile implements cgroup.FS.
func (s *session) WriteFile(name string, data []byte) error {
	_, err := s.do(agent.Request{Op: "write", Path: name, Data: data})
	return err
}

// run runs a node command (agent.Exec) in the session and returns its stdout.
func (s *session) run(argv []string) ([]byte, error) {
	r, err := s.do(agent.Request{Op: "exec", Argv: argv})
	return r.Data, err
}

// group finds a cgroup on the node (op kube-proxy, pods or pod) and opens it on the node's files.
func (s *session) group(op, uid string) (*cgroup.Group, error) {
	hs, err := s.do(agent.Request{Op: "mounts"})
	if err != nil {
		return nil, err
	}
	r, err := s.do(agent.Request{Op: op, UID: uid})
	if err != nil {
		return nil, err
	}
	if r.Path == "" {
		return nil, errors.New("agent answered no cgroup path")
	}
	return cgroup.OpenOn(s, hs.Hierarchies, r.Path), nil
}
