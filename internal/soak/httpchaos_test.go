package soak

import (
	"context"
	"errors"
	"io"
	"log"
	"math/rand/v2"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/rebound-go/rebound/internal/chaos"
)

// The Connect procedure of the soak, written by hand: its messages are a
// protobuf well-known type, which connect's default codec handles.
const (
	soakService   = "rebound.soak.v1.SoakService"
	soakProcedure = "/" + soakService + "/Echo"
	echoPath      = "/echo"
)

// httpChaos is the HTTP twin of chaos.Server: it serves soakProcedure to
// connect-go clients and echoPath to net/http clients, with the same
// faults (UNAVAILABLE as 503, INVALID_ARGUMENT as 500), and can be stopped
// and restarted on the same port. Failed plain-HTTP responses may carry a
// Retry-After, and some of their bodies trickle, one byte at a time, until
// the client hangs up.
type httpChaos struct {
	Addr string

	port        *chaos.Port
	faults      chaos.Faults
	trickleRate float64
	retryAfter  []string
	start       time.Time
	mux         *http.ServeMux
	active      atomic.Int64 // handlers running

	mu   sync.Mutex
	rng  *rand.Rand
	srv  *http.Server
	done chan struct{}
}

func startHTTPChaos(f chaos.Faults, trickleRate float64, seed uint64) (*httpChaos, error) {
	if err := f.Validate(); err != nil {
		return nil, err
	}
	port, err := chaos.ListenPort()
	if err != nil {
		return nil, err
	}
	s := &httpChaos{
		Addr: port.Addr(), port: port, faults: f, trickleRate: trickleRate, start: time.Now(),
		retryAfter: []string{"0", "1", "soon", ""},
		rng:        rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)),
	}
	s.mux = http.NewServeMux()
	s.mux.Handle(soakProcedure, connect.NewUnaryHandler(soakProcedure, s.echoConnect))
	s.mux.HandleFunc(echoPath, s.echoHTTP)
	s.serve()
	return s, nil
}

// serve starts an HTTP server on the port; called with mu held, or before
// s is shared.
func (s *httpChaos) serve() {
	lis := s.port.Listener()
	// Connections cut by a restart make the server log; that is the point.
	srv := &http.Server{Handler: s.mux, ErrorLog: log.New(io.Discard, "", 0), ReadHeaderTimeout: 5 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(lis)
	}()
	s.srv, s.done = srv, done
}

// Down closes the server and every connection at once, failing requests
// in flight, and waits for its handlers to return. It keeps the address,
// where connections are refused (reset) until Restart.
func (s *httpChaos) Down() {
	s.mu.Lock()
	srv, done := s.srv, s.done
	s.srv, s.done = nil, nil
	s.mu.Unlock()
	if srv != nil {
		_ = srv.Close()
		<-done
	}
	// Close does not wait for handlers; their requests' contexts are
	// cancelled with their connections, so they end soon.
	for i := 0; s.active.Load() > 0 && i < 5000; i++ {
		time.Sleep(time.Millisecond)
	}
}

// Restart brings the server up again on the same address.
func (s *httpChaos) Restart() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.srv != nil {
		return errors.New("soak: HTTP server is running")
	}
	s.serve()
	return nil
}

// Stop takes the server down and gives up its address.
func (s *httpChaos) Stop() {
	s.Down()
	_ = s.port.Close()
}

// verdict is what the server does to one request.
type verdict struct {
	status     int // 200, 503 or 500
	latency    time.Duration
	pushback   string // grpc-retry-pushback-ms, for Connect
	retryAfter string // Retry-After, for plain HTTP
	trickle    bool
}

func (s *httpChaos) decide() verdict {
	now := time.Since(s.start)
	s.mu.Lock()
	defer s.mu.Unlock()
	f := s.faults
	for _, w := range f.Outages {
		if now >= w.Start && now < w.End {
			return verdict{status: http.StatusServiceUnavailable}
		}
	}
	v := verdict{status: http.StatusOK, latency: f.Latency}
	if s.rng.Float64() < f.StragglerRate {
		v.latency = f.StragglerLatency
	}
	switch r := s.rng.Float64(); {
	case r < f.ErrorRate:
		v.status = http.StatusServiceUnavailable
	case r < f.ErrorRate+f.FatalRate:
		v.status = http.StatusInternalServerError
	}
	if v.status != http.StatusOK {
		if len(f.PushbackValues) > 0 && s.rng.Float64() < f.PushbackRate {
			v.pushback = f.PushbackValues[s.rng.IntN(len(f.PushbackValues))]
			v.retryAfter = s.retryAfter[s.rng.IntN(len(s.retryAfter))]
		}
		v.trickle = s.rng.Float64() < s.trickleRate
	}
	return v
}

// wait sleeps for d unless ctx ends first.
func wait(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (s *httpChaos) echoConnect(ctx context.Context, req *connect.Request[wrapperspb.StringValue]) (*connect.Response[wrapperspb.StringValue], error) {
	s.active.Add(1)
	defer s.active.Add(-1)
	v := s.decide()
	if err := wait(ctx, v.latency); err != nil {
		return nil, connect.NewError(connect.CodeCanceled, err)
	}
	if v.status != http.StatusOK {
		code := connect.CodeUnavailable
		if v.status == http.StatusInternalServerError {
			code = connect.CodeInvalidArgument
		}
		err := connect.NewError(code, errors.New("soak: injected "+code.String()))
		if v.pushback != "" {
			err.Meta().Set("grpc-retry-pushback-ms", v.pushback)
		}
		return nil, err
	}
	return connect.NewResponse(wrapperspb.String(req.Msg.GetValue())), nil
}

func (s *httpChaos) echoHTTP(w http.ResponseWriter, r *http.Request) {
	s.active.Add(1)
	defer s.active.Add(-1)
	v := s.decide()
	if wait(r.Context(), v.latency) != nil {
		return
	}
	if v.retryAfter != "" {
		w.Header().Set("Retry-After", v.retryAfter)
	}
	w.WriteHeader(v.status)
	if v.status == http.StatusOK {
		_, _ = io.WriteString(w, r.URL.Query().Get("p"))
		return
	}
	if !v.trickle {
		_, _ = io.WriteString(w, "soak: injected "+strconv.Itoa(v.status))
		return
	}
	// A body that trickles until the client hangs up (at most 10s): the
	// Transport must not wait for it before retrying.
	for range 500 {
		if _, err := w.Write([]byte{'.'}); err != nil {
			return
		}
		w.(http.Flusher).Flush()
		if wait(r.Context(), 20*time.Millisecond) != nil {
			return
		}
	}
}
