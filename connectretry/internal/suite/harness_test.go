package suite

// The harness: a test service served by a real connect-go handler of
// either major, and its clients through either front door, behind one set
// of types, so that each behaviour test is written once and runs for both.

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/internal/clocktest"
	"github.com/rebound-go/rebound/internal/paralleltest"
	"github.com/rebound-go/rebound/internal/testmain"
	"github.com/rebound-go/rebound/serviceconfig"
)

func TestMain(m *testing.M) {
	// The tests that run in parallel wait out per-attempt timeouts on the
	// real clock: they wait, they hardly compute.
	paralleltest.Set()
	testmain.Run(m)
}

// The test service, written by hand: its messages are protobuf well-known
// types (google.protobuf.StringValue), which both majors' default codecs
// handle.
const (
	service      = "rebound.test.v1.TestService"
	unary        = "/" + service + "/Unary"
	serverStream = "/" + service + "/ServerStream"
	clientStream = "/" + service + "/ClientStream"
	bidiStream   = "/" + service + "/Bidi"
)

// code is a status code: connect's are gRPC's, in both majors.
type code = serviceconfig.Code

// failure is a handler's error, which each major's handler turns into its
// own connect error: code, message, details, and metadata (v1's error
// metadata, v2's response trailer).
type failure struct {
	code    code
	msg     string
	details []proto.Message
	meta    http.Header
}

func (f *failure) Error() string { return fmt.Sprintf("%v: %s", f.code, f.msg) }

// fail returns a handler's failure with code and a message.
func fail(c code, format string, args ...any) *failure {
	return &failure{code: c, msg: fmt.Sprintf(format, args...), meta: http.Header{}}
}

// with adds metadata to f.
func (f *failure) with(key, value string) *failure {
	f.meta.Add(key, value)
	return f
}

// call is one call as a handler sees it.
type call struct {
	ctx      context.Context
	n        int         // the 1-based number of the calls of this procedure the server has seen
	header   http.Header // the request header
	value    string      // the request message of a unary or server-streaming call
	previous int         // grpc-previous-rpc-attempts, as the major's PreviousAttempts reads it; -1 when absent

	// setHeader and setTrailer set response metadata, sent with the
	// response or the failure.
	setHeader, setTrailer func(key, value string)
	// sendHeaders sends a stream's response headers now, before any
	// message; nil for a unary call.
	sendHeaders func() error
}

// handlers script the server. A nil unary handler echoes the request; a
// nil server-stream handler sends the request back three times; a nil
// client-stream handler answers with the messages it received, joined by
// commas; a nil bidi handler echoes each message.
type handlers struct {
	unary        func(c *call) (string, error)
	serverStream func(c *call, send func(string) error) error
	clientStream func(c *call, recv func() (string, error)) (string, error)
	bidi         func(c *call, recv func() (string, error), send func(string) error) error
}

// attempt is one call as the server saw it.
type attempt struct {
	previous int    // grpc-previous-rpc-attempts, -1 when absent
	payload  string // the request message, or a stream's messages joined by commas
	header   http.Header
}

// server is the test service, served by one major's handlers.
type server struct {
	url    string       // "" in process
	client *http.Client // nil in process
	local  any          // the major's in-process server, when in process

	mu       sync.Mutex
	h        handlers
	attempts map[string][]attempt
}

// record notes the start of a call of procedure and returns its number and
// the handlers.
func (s *server) record(procedure string, h http.Header, previous int) (int, handlers) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.attempts[procedure] = append(s.attempts[procedure], attempt{previous: previous, header: h.Clone()})
	return len(s.attempts[procedure]), s.h
}

// payload records the request messages of call n of procedure.
func (s *server) payload(procedure string, n int, payload string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.attempts[procedure][n-1].payload = payload
}

// count returns how many calls of procedure the server has seen.
func (s *server) count(procedure string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.attempts[procedure])
}

// seen returns the calls of procedure the server has seen.
func (s *server) seen(procedure string) []attempt {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]attempt(nil), s.attempts[procedure]...)
}

// previous returns the grpc-previous-rpc-attempts of each call of
// procedure, -1 when absent.
func (s *server) previous(procedure string) []int {
	var p []int
	for _, a := range s.seen(procedure) {
		p = append(p, a.previous)
	}
	return p
}

// payloads returns the request payload of each call of procedure.
func (s *server) payloads(procedure string) []string {
	var p []string
	for _, a := range s.seen(procedure) {
		p = append(p, a.payload)
	}
	return p
}

// setHandlers replaces the handlers and forgets the calls seen.
func (s *server) setHandlers(h handlers) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.h = h
	s.attempts = map[string][]attempt{}
}

// forget forgets the calls the server has seen.
func (s *server) forget() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.attempts = map[string][]attempt{}
}

// serve runs the handlers of one call, whatever its major: it records the
// call, and falls back on the default handlers.
func (s *server) unary(c *call) (string, error) {
	var h handlers
	c.n, h = s.record(unary, c.header, c.previous)
	s.payload(unary, c.n, c.value)
	if h.unary != nil {
		return h.unary(c)
	}
	return c.value, nil
}

func (s *server) serverStream(c *call, send func(string) error) error {
	var h handlers
	c.n, h = s.record(serverStream, c.header, c.previous)
	s.payload(serverStream, c.n, c.value)
	if h.serverStream != nil {
		return h.serverStream(c, send)
	}
	for range 3 {
		if err := send(c.value); err != nil {
			return err
		}
	}
	return nil
}

func (s *server) clientStream(c *call, recv func() (string, error)) (string, error) {
	var h handlers
	c.n, h = s.record(clientStream, c.header, c.previous)
	recv = s.recording(clientStream, c.n, recv)
	if h.clientStream != nil {
		return h.clientStream(c, recv)
	}
	got, err := recvAll(recv)
	return strings.Join(got, ","), err
}

func (s *server) bidi(c *call, recv func() (string, error), send func(string) error) error {
	var h handlers
	c.n, h = s.record(bidiStream, c.header, c.previous)
	recv = s.recording(bidiStream, c.n, recv)
	if h.bidi != nil {
		return h.bidi(c, recv, send)
	}
	for {
		m, err := recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if err := send(m); err != nil {
			return err
		}
	}
}

// recording returns recv, recording each message received as call n of
// procedure's payload.
func (s *server) recording(procedure string, n int, recv func() (string, error)) func() (string, error) {
	var got []string
	return func() (string, error) {
		m, err := recv()
		if err == nil {
			got = append(got, m)
			s.payload(procedure, n, strings.Join(got, ","))
		}
		return m, err
	}
}

// recvAll receives until the end of the request stream.
func recvAll(recv func() (string, error)) ([]string, error) {
	var got []string
	for {
		m, err := recv()
		if errors.Is(err, io.EOF) {
			return got, nil
		}
		if err != nil {
			return got, err
		}
		got = append(got, m)
	}
}

// transport is how clients reach a test server over HTTP.
type transport int

const (
	overHTTP1 transport = iota // plain HTTP/1.1
	overH2                     // HTTP/2 with TLS
	overH2C                    // cleartext HTTP/2 (h2c), with prior knowledge
	inProcess                  // connect v2's connectinprocess: no network
)

func (tr transport) String() string { return [...]string{"http1", "h2", "h2c", "inprocess"}[tr] }

// serveHTTP serves mux over tr until the test ends, and returns its URL
// and a client of it.
func serveHTTP(t testing.TB, mux http.Handler, tr transport) (string, *http.Client) {
	t.Helper()
	hs := httptest.NewUnstartedServer(mux)
	// Connections the clients drop while a test ends make the server log
	// aborted TLS handshakes; they are expected.
	hs.Config.ErrorLog = log.New(io.Discard, "", 0)
	switch tr {
	case overH2:
		hs.EnableHTTP2 = true
		hs.StartTLS()
	case overH2C:
		hs.Config.Protocols = new(http.Protocols)
		hs.Config.Protocols.SetUnencryptedHTTP2(true)
		hs.Start()
	default:
		hs.Start()
	}
	// Close also closes the idle connections of hs.Client().
	t.Cleanup(hs.Close)
	client := hs.Client()
	if tr == overH2C {
		protocols := new(http.Protocols)
		protocols.SetUnencryptedHTTP2(true)
		ht := &http.Transport{Protocols: protocols}
		t.Cleanup(ht.CloseIdleConnections)
		client = &http.Client{Transport: ht}
	}
	return hs.URL, client
}

// protocol is one way of calling the server: a wire protocol over a
// transport.
type protocol struct {
	name string // "connect", "grpc", "grpcweb" or "inprocess"
	over transport
}

func (p protocol) String() string {
	if p.over == inProcess {
		return p.name
	}
	return p.name + "/" + p.over.String()
}

// The protocols every test runs in: Connect and gRPC-Web over HTTP/1.1,
// gRPC over h2c. Bidirectional streams need HTTP/2 in every protocol.
var (
	connectHTTP1 = protocol{"connect", overHTTP1}
	grpcH2C      = protocol{"grpc", overH2C}
	grpcwebHTTP1 = protocol{"grpcweb", overHTTP1}
	inprocess    = protocol{"inprocess", inProcess}
)

// option is an option of both front doors.
type option struct {
	v1 any // a connectretry.Option
	v2 any // a connectretry/v2 Option
}

// interceptor is what both majors' Interceptors offer beside the client
// side.
type interceptor interface {
	Stats() rebound.Stats
	Err() error
}

// result is a unary call's answer: its response message, and the response
// metadata (for a failure, v1's error metadata or v2's CallInfo).
type result struct {
	value string
	meta  http.Header // the response header and trailer together
}

// stream is a streaming call, of any shape, as a test drives it.
type stream interface {
	Send(value string) error
	CloseSend() error
	// Receive returns the next message, or an error that is io.EOF at
	// the end.
	Receive() (string, error)
	// Header returns the response header, as the major shows it: v1's
	// ResponseHeader (which commits the call), v2's CallInfo.
	Header() http.Header
	Close() error
}

// clients are the clients of the test service through one interceptor.
type clients interface {
	// unary calls Unary with value and request header h.
	unary(ctx context.Context, value string, h http.Header) (result, error)
	// open opens a stream of procedure with request header h; a server
	// stream is sent value.
	open(ctx context.Context, procedure, value string, h http.Header) (stream, error)
}

// major is one major of connect-go: its front door, handlers and clients.
type major struct {
	name      string
	scope     string // the instrumentation scope of its metrics and spans
	protocols []protocol
	// serve serves the test service over tr.
	serve func(t testing.TB, s *server, tr transport)
	// newInterceptor returns the front door's Interceptor, as New does.
	newInterceptor func(cfg *serviceconfig.Config, opts ...option) (interceptor, error)
	// mustInterceptor returns it as NewInterceptor does.
	mustInterceptor func(cfg *serviceconfig.Config, opts ...option) interceptor
	// zero returns the zero Interceptor.
	zero func() interceptor
	// dial returns clients of s in p through i.
	dial func(t testing.TB, s *server, p protocol, i interceptor) clients
	// dialInject is dial with an interceptor after i that sends each
	// attempt's trace context, as otelconnect does.
	dialInject func(t testing.TB, s *server, p protocol, i interceptor) clients
	// dialHooked is dial with an interceptor after i that runs h on each
	// attempt's stream.
	dialHooked func(t testing.TB, s *server, p protocol, i interceptor, h hooks) clients
	// codeOf returns the code of err, as the major's connect.CodeOf.
	codeOf func(err error) code
	// remote reports whether err carries a server's verdict: v1's
	// IsWireError, v2's IsRemote.
	remote func(err error) bool
	// lastError returns the message and the string details of the
	// connect error err wraps, and the text the major's call error has
	// when the last attempt said msg after attempts attempts.
	lastError func(err error) (message string, details []string)
	// countAttempts and override are the front door's own functions.
	countAttempts func(ctx context.Context, n *int) context.Context
	override      func(ctx context.Context, o rebound.Override) context.Context
}

// hooks are what an interceptor of the application's, installed after
// rebound's, does on each attempt of a streaming call: send runs before
// each message the attempt sends, closed as its stream is closed (v1's
// CloseResponse, v2's Close). Each is given the attempt's
// grpc-previous-rpc-attempts ("" for the first); either may be nil.
type hooks struct {
	send, closed func(previous string)
}

// majors are the two front doors (see major_v1_test.go and
// major_v2_test.go).
var majors []*major

// startServer serves the test service with handlers h over tr.
func (m *major) startServer(t testing.TB, h handlers, tr transport) *server {
	t.Helper()
	s := &server{h: h, attempts: map[string][]attempt{}}
	m.serve(t, s, tr)
	return s
}

// dialWith returns clients of s in p through an Interceptor for cfg with
// opts, failing the test if an option is invalid.
func (m *major) dialWith(t testing.TB, s *server, p protocol, cfg *serviceconfig.Config, opts ...option) (clients, interceptor) {
	t.Helper()
	i, err := m.newInterceptor(cfg, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return m.dial(t, s, p, i), i
}

// dialAuto returns clients of s in p through an Interceptor for cfg with an
// auto-advancing fake clock, whose sleeps it also returns, and jitter 0.5.
func (m *major) dialAuto(t testing.TB, s *server, p protocol, cfg *serviceconfig.Config, opts ...option) (clients, *clocktest.Clock) {
	t.Helper()
	clk := clocktest.NewAuto()
	c, _ := m.dialWith(t, s, p, cfg, append([]option{withClock(clk), withRandom(clocktest.NewRand(0.5))}, opts...)...)
	return c, clk
}

// dialManual is dialWith with a clock that moves only when the test says.
func (m *major) dialManual(t testing.TB, s *server, p protocol, cfg *serviceconfig.Config, opts ...option) (clients, *clocktest.Clock) {
	t.Helper()
	clk := clocktest.New()
	c, _ := m.dialWith(t, s, p, cfg, append([]option{withClock(clk)}, opts...)...)
	return c, clk
}

// env is one major in one protocol, for a test to run in.
type env struct {
	*major
	p protocol
}

func (e env) String() string { return e.major.name + "/" + e.p.String() }

// start serves the test service with handlers h in e's protocol.
func (e env) start(t testing.TB, h handlers) *server { return e.startServer(t, h, e.p.over) }

// dialAuto is major.dialAuto in e's protocol.
func (e env) dialAuto(t testing.TB, s *server, cfg *serviceconfig.Config, opts ...option) (clients, *clocktest.Clock) {
	t.Helper()
	return e.major.dialAuto(t, s, e.p, cfg, opts...)
}

// dialManual is major.dialManual in e's protocol.
func (e env) dialManual(t testing.TB, s *server, cfg *serviceconfig.Config, opts ...option) (clients, *clocktest.Clock) {
	t.Helper()
	return e.major.dialManual(t, s, e.p, cfg, opts...)
}

// dialWith is major.dialWith in e's protocol.
func (e env) dialWith(t testing.TB, s *server, cfg *serviceconfig.Config, opts ...option) (clients, interceptor) {
	t.Helper()
	return e.major.dialWith(t, s, e.p, cfg, opts...)
}

// each runs f as a subtest for each major in each of its protocols (in
// one of them with -short; see shortMatrix).
func each(t *testing.T, f func(t *testing.T, e env)) {
	t.Helper()
	for _, m := range majors {
		for _, p := range shortMatrix(t, m, m.protocols) {
			e := env{m, p}
			t.Run(e.String(), func(t *testing.T) { f(t, e) })
		}
	}
}

// eachOnce is each for a behaviour of the engine alone that takes
// seconds: with -short, it runs in one major in one protocol.
func eachOnce(t *testing.T, f func(t *testing.T, e env)) {
	t.Helper()
	for _, m := range shortMatrix(t, nil, majors) {
		for _, p := range shortMatrix(t, m, m.protocols) {
			e := env{m, p}
			t.Run(e.String(), func(t *testing.T) { f(t, e) })
		}
	}
}

// shortMatrix returns the protocols of ps that a test runs m in (or the
// majors, for a nil m): all of them, or with -short one, so that the suite stays quick to run while
// working (go test -race -short ./connectretry/...) and still shows every
// behaviour for both majors. The one is chosen from the test's name and
// the major's, so that across the suite every protocol and transport runs
// in -short too; the full matrix runs without it, as CI does.
func shortMatrix[P any](t *testing.T, m *major, ps []P) []P {
	if !testing.Short() || len(ps) <= 1 {
		return ps
	}
	k := shortPick(t.Name(), m, len(ps))
	return ps[k : k+1]
}

// shortPick is the index, of n, that shortMatrix picks in the test named
// name: a test that runs as one what would be subtests picks for each as
// the subtest would.
func shortPick(name string, m *major, n int) int {
	h := fnv.New32a()
	_, _ = io.WriteString(h, name)
	if m != nil {
		_, _ = io.WriteString(h, "/"+m.name)
	}
	return int(h.Sum32() % uint32(n))
}

// eachMajor runs f as a subtest for each major in one protocol, p, or in
// the major's first (the Connect protocol over HTTP/1.1) when p is zero.
func eachMajor(t *testing.T, p protocol, f func(t *testing.T, e env)) {
	t.Helper()
	for _, m := range majors {
		q := p
		if q == (protocol{}) {
			q = m.protocols[0]
		}
		e := env{m, q}
		t.Run(e.String(), func(t *testing.T) { f(t, e) })
	}
}

// retryConfig is a service config with a retry policy on the test service.
func retryConfig(t testing.TB, maxAttempts int, codes, extra string) *serviceconfig.Config {
	t.Helper()
	return parse(t, fmt.Sprintf(`{"methodConfig":[{"name":[{"service":%q}],"retryPolicy":{
		"maxAttempts":%d,"initialBackoff":"0.1s","maxBackoff":"1s","backoffMultiplier":2,
		"retryableStatusCodes":[%s]}}]%s}`, service, maxAttempts, codes, extra))
}

// hedgeConfig is a service config with a hedging policy on the test service.
func hedgeConfig(t testing.TB, maxAttempts int, delay, codes, extra string) *serviceconfig.Config {
	t.Helper()
	return parse(t, fmt.Sprintf(`{"methodConfig":[{"name":[{"service":%q}],"hedgingPolicy":{
		"maxAttempts":%d,"hedgingDelay":%q,"nonFatalStatusCodes":[%s]}}]%s}`, service, maxAttempts, delay, codes, extra))
}

func parse(t testing.TB, js string) *serviceconfig.Config {
	t.Helper()
	cfg, err := serviceconfig.Parse([]byte(js))
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// failFirst fails the first n unary calls with c, then echoes as "value
// from attempt i".
func failFirst(n int, c code) handlers {
	return handlers{unary: func(in *call) (string, error) {
		if in.n <= n {
			return "", fail(c, "attempt %d fails", in.n)
		}
		return fmt.Sprintf("%s from attempt %d", in.value, in.n), nil
	}}
}

// streamFailFirst fails the first n server-stream calls with c before any
// message, then sends three messages "value i/j".
func streamFailFirst(n int, c code) handlers {
	return handlers{serverStream: func(in *call, send func(string) error) error {
		if in.n <= n {
			return fail(c, "attempt %d fails", in.n)
		}
		for j := range 3 {
			if err := send(fmt.Sprintf("%s %d/%d", in.value, in.n, j)); err != nil {
				return err
			}
		}
		return nil
	}}
}

// receiveAll reads the stream to its end and closes it.
func receiveAll(t testing.TB, st stream) ([]string, error) {
	t.Helper()
	var got []string
	var err error
	for {
		var m string
		if m, err = st.Receive(); err != nil {
			break
		}
		got = append(got, m)
	}
	if errors.Is(err, io.EOF) {
		err = nil
	}
	if cerr := st.Close(); cerr != nil && err == nil {
		t.Fatalf("Close: %v", cerr)
	}
	return got, err
}

// checkLastAttempt checks that err, the error of a call that gave up,
// carries the last attempt's message and details, and says why retrying
// stopped.
func checkLastAttempt(t testing.TB, e env, err error, msg string, details ...string) {
	t.Helper()
	gotMsg, gotDetails := e.lastError(err)
	if gotMsg != msg || !slices.Equal(gotDetails, details) {
		t.Fatalf("the last attempt's error says %q with details %q, want %q with %q", gotMsg, gotDetails, msg, details)
	}
	var re *rebound.Error
	if !errors.As(err, &re) {
		t.Fatalf("%v does not unwrap to a *rebound.Error", err)
	}
	reason := strings.TrimPrefix(re.Reason.Error(), "rebound: ")
	// Both majors' text says why retrying stopped, as grpcretry's and
	// httpretry's do.
	if want := fmt.Sprintf("connectretry: gave up after %d attempts (%s): %s: %s", re.Attempts, reason, codeName(e.codeOf(err)), msg); err.Error() != want {
		t.Fatalf("err says %q, want %q", err.Error(), want)
	}
}

// codeName returns connect's name of c.
func codeName(c code) string {
	if c == serviceconfig.Cancelled {
		return "canceled"
	}
	return strings.ToLower(c.String())
}

// uniqueName returns a server name of this test alone, so that the
// process-wide throttle of one test does not meet another's.
func uniqueName(t testing.TB) string {
	return fmt.Sprintf("%s-%p", t.Name(), t)
}
