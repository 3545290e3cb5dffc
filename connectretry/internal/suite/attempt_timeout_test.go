package suite

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/internal/clocktest"
	"github.com/rebound-go/rebound/internal/stretch"
	"github.com/rebound-go/rebound/serviceconfig"
)

// attemptTimeout is short, so that hung attempts end quickly; tests
// assert counts and codes, never how long anything took.
const attemptTimeout = 100 * time.Millisecond

// countedTimeout is the per-attempt timeout of the tests that count the
// attempts a server sees while some hang: each hung attempt takes that
// long, so these tests and their subtests run in parallel (see
// TestMain). It is long because an attempt that answers must beat it on
// a loaded machine, under -race: there, on
// 2 CPUs with eight CPU-bound processes and other test binaries, a
// server stream's first message took up to 270ms, one call at a time.
const countedTimeout = time.Second

// maxCountedTimeout is as far as the counted tests stretch their
// per-attempt timeout (see internal/stretch) when the machine is too busy
// for an attempt to answer within countedTimeout.
const maxCountedTimeout = 8 * time.Second

// cutTooMany returns, for stretch.Run, an outcome that only a machine too
// slow for the per-attempt timeout explains, and nil for any other: of a
// call that was to end after want attempts, n were made, and their timers
// cut every one past want (all but the last when the call succeeded, all
// of them when it ended with ErrAttemptTimeout before it committed: a
// timer never cuts a committed attempt, however slow the machine). The
// caller fails the test on any outcome this does not excuse.
func cutTooMany(err error, n, want int, cut uint64) error {
	if n <= want {
		return nil
	}
	if err == nil && cut == uint64(n-1) ||
		err != nil && errors.Is(err, rebound.ErrAttemptTimeout) && !errors.Is(err, rebound.ErrCommitted) && cut == uint64(n) {
		return fmt.Errorf("%d attempts, %d cut by their timers, where %d were to be made (%v)", n, cut, want, err)
	}
	return nil
}

// dialCounted is dialAuto with the per-attempt timeout d, and returns
// the interceptor, whose Stats count the attempts cut.
func dialCounted(t *testing.T, e env, s *server, cfg *serviceconfig.Config, d time.Duration) (clients, interceptor) {
	t.Helper()
	return e.dialWith(t, s, cfg, withClock(clocktest.NewAuto()), withRandom(clocktest.NewRand(0.5)), withPerAttemptTimeout(d))
}

// hangFirstUnary hangs the first n unary calls until the server ends them
// and echoes the others; deadlines receives how long each call had left on
// its deadline (-1 for none).
func hangFirstUnary(n int, deadlines chan<- time.Duration) handlers {
	return handlers{unary: func(in *call) (string, error) {
		if deadlines != nil {
			left := time.Duration(-1)
			if dl, ok := in.ctx.Deadline(); ok {
				left = time.Until(dl)
			}
			select {
			case deadlines <- left:
			default: // an attempt more than the test counts: it fails on the count, not here
			}
		}
		if in.n <= n {
			<-in.ctx.Done()
			return "", fail(serviceconfig.DeadlineExceeded, "%v", in.ctx.Err())
		}
		return in.value, nil
	}}
}

func TestPerAttemptTimeoutUnary(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, e env) {
		t.Parallel()
		stretch.Run(t, countedTimeout, maxCountedTimeout, func(d time.Duration) error {
			deadlines := make(chan time.Duration, 3) // an attempt each, as many as maxAttempts
			s := e.start(t, hangFirstUnary(1, deadlines))
			warm(t, e, s, e.p, serverStream)
			c, i := e.dialWith(t, s, retryConfig(t, 3, `"UNAVAILABLE"`, ""), withPerAttemptTimeout(d))
			var n int
			r, err := c.unary(e.countAttempts(context.Background(), &n), "x", nil)
			if slow := cutTooMany(err, n, 2, i.Stats()[unary].AttemptTimeouts); slow != nil {
				return slow
			}
			if err != nil {
				t.Fatal(err)
			}
			if r.value != "x" || n != 2 || s.count(unary) != 2 {
				t.Fatalf("%q after %d attempts (server saw %d), want x after 2", r.value, n, s.count(unary))
			}
			// The server sees the per-attempt deadline, though the call
			// has none.
			for k := range 2 {
				if left := <-deadlines; left < 0 || left > d {
					t.Fatalf("attempt %d: server deadline %v away, want within %v", k+1, left, d)
				}
			}
			if st := i.Stats()[unary]; st.AttemptTimeouts != 1 {
				t.Fatalf("stats %+v, want 1 attempt timeout", st)
			}
			return nil
		})
	})
}

func TestPerAttemptTimeoutUnaryEveryAttemptHangs(t *testing.T) {
	each(t, func(t *testing.T, e env) {
		s := e.start(t, hangFirstUnary(1<<30, nil))
		c, _ := e.dialAuto(t, s, retryConfig(t, 2, `"UNAVAILABLE"`, ""), withPerAttemptTimeout(attemptTimeout))
		_, err := c.unary(context.Background(), "x", nil)
		if e.codeOf(err) != serviceconfig.DeadlineExceeded || !errors.Is(err, rebound.ErrAttemptTimeout) || !errors.Is(err, rebound.ErrAttemptsExhausted) {
			t.Fatalf("err %v, want deadline_exceeded from the per-attempt timeout, attempts exhausted", err)
		}
		if !strings.Contains(err.Error(), "per-attempt timeout (100ms)") {
			t.Fatalf("err %q does not name the per-attempt timeout", err)
		}
		if e.remote(err) {
			t.Fatal("the per-attempt timeout's error is reported as the server's verdict")
		}
		if got := s.count(unary); got != 2 {
			t.Fatalf("server saw %d attempts, want 2", got)
		}
	})
}

// streamHangFirst makes the first n attempts of a call hang, without
// headers, until the client gives up on them; later ones send "0,1,2".
// An attempt's number is the one its client gave it
// (grpc-previous-rpc-attempts), so that an attempt cut before it reached
// the server does not shift which attempts hang.
func streamHangFirst(n int) handlers {
	return handlers{serverStream: func(in *call, send func(string) error) error {
		if max(in.previous, 0) < n {
			<-in.ctx.Done()
			return in.ctx.Err()
		}
		for k := range 3 {
			if err := send(fmt.Sprint(k)); err != nil {
				return err
			}
		}
		return nil
	}}
}

// warm makes one call of procedure (unary or serverStream, whichever the
// test's handlers answer at once) that no interceptor governs, then has
// the server forget it, so that the attempts a test counts find a
// connection made: a TLS handshake on a loaded machine, under -race, may
// take longer than a per-attempt timeout.
func warm(t *testing.T, e env, s *server, p protocol, procedure string) {
	t.Helper()
	c := e.major.dial(t, s, p, e.zero())
	var err error
	if procedure == unary {
		_, err = c.unary(context.Background(), "warm", nil)
	} else {
		var st stream
		if st, err = c.open(context.Background(), serverStream, "warm", nil); err == nil {
			_, err = receiveAll(t, st)
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	s.forget()
}

// messages reads the stream to its end and closes it; it fails the test
// on an error.
func messages(t *testing.T, st stream) string {
	t.Helper()
	got, err := receiveAll(t, st)
	if err != nil {
		t.Fatal(err)
	}
	return strings.Join(got, ",")
}

// TestPerAttemptTimeoutServerStream: a server stream whose first attempt
// hangs is cut and answered by its second, and a stream keeps the call's
// deadline on the wire (here none), not its attempt's.
func TestPerAttemptTimeoutServerStream(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, e env) {
		t.Parallel()
		stretch.Run(t, countedTimeout, maxCountedTimeout, func(d time.Duration) error {
			s := e.start(t, streamHangFirst(1))
			warm(t, e, s, e.p, unary)
			c, i := dialCounted(t, e, s, retryConfig(t, 3, `"UNAVAILABLE"`, ""), d)
			var n int
			st, err := c.open(e.countAttempts(context.Background(), &n), serverStream, "x", nil)
			if err != nil {
				t.Fatal(err)
			}
			got, err := receiveAll(t, st)
			if slow := cutTooMany(err, n, 2, i.Stats()[serverStream].AttemptTimeouts); slow != nil {
				return slow
			}
			if err != nil || strings.Join(got, ",") != "0,1,2" || n != 2 || !slices.Equal(s.previous(serverStream), []int{-1, 1}) {
				t.Fatalf("got %q, %v after %d attempts, server saw grpc-previous-rpc-attempts %v; want 0,1,2 from attempt 2, [absent 1]", got, err, n, s.previous(serverStream))
			}
			for k, a := range s.seen(serverStream) {
				for _, h := range []string{"Connect-Timeout-Ms", "Grpc-Timeout"} {
					if v := a.header.Get(h); v != "" {
						t.Fatalf("attempt %d carried %s: %s", k+1, h, v)
					}
				}
			}
			return nil
		})
	})
}

// firstThenQuiet makes every server stream send one message, go quiet
// for two counted timeouts, and send two more.
func firstThenQuiet() handlers {
	return handlers{serverStream: func(in *call, send func(string) error) error {
		if err := send("0"); err != nil {
			return err
		}
		select {
		case <-time.After(2 * countedTimeout):
		case <-in.ctx.Done():
			return in.ctx.Err()
		}
		for k := 1; k < 3; k++ {
			if err := send(fmt.Sprint(k)); err != nil {
				return err
			}
		}
		return nil
	}}
}

// TestPerAttemptTimeoutNeverCutsCommittedStream: the first message
// commits a stream; however long the next takes, it is not cut.
func TestPerAttemptTimeoutNeverCutsCommittedStream(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, e env) {
		t.Parallel()
		s := e.start(t, firstThenQuiet())
		warm(t, e, s, e.p, unary)
		c, _ := e.dialAuto(t, s, retryConfig(t, 3, `"UNAVAILABLE"`, ""), withPerAttemptTimeout(countedTimeout))
		st, err := c.open(context.Background(), serverStream, "x", nil)
		if err != nil {
			t.Fatal(err)
		}
		if got := messages(t, st); got != "0,1,2" || s.count(serverStream) != 1 {
			t.Fatalf("got %q, server saw %d attempts; want 0,1,2 from the one attempt", got, s.count(serverStream))
		}
	})
}

// headersThenQuiet makes every server stream send its headers and then go
// quiet for two counted timeouts before answering.
func headersThenQuiet() handlers {
	return handlers{serverStream: func(in *call, send func(string) error) error {
		in.setHeader("X-Early", "1")
		if err := in.sendHeaders(); err != nil {
			return err
		}
		select {
		case <-time.After(2 * countedTimeout):
		case <-in.ctx.Done():
			return in.ctx.Err()
		}
		for k := range 3 {
			if err := send(fmt.Sprint(k)); err != nil {
				return err
			}
		}
		return nil
	}}
}

// TestPerAttemptTimeoutHeaders: in connect v1, response headers stop the
// timer though the caller only calls Receive: a stream that sends its
// headers and then goes quiet past the timeout is read to its end on the
// one attempt, in every protocol. connect v2 shows a response to an
// interceptor only through Receive, so there the timer runs until the
// first message, and every attempt of such a stream is cut.
func TestPerAttemptTimeoutHeaders(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, e env) {
		t.Parallel()
		s := e.start(t, headersThenQuiet())
		warm(t, e, s, e.p, unary)
		c, _ := e.dialAuto(t, s, retryConfig(t, 3, `"UNAVAILABLE"`, ""), withPerAttemptTimeout(countedTimeout))
		st, err := c.open(context.Background(), serverStream, "x", nil)
		if err != nil {
			t.Fatal(err)
		}
		got, err := receiveAll(t, st)
		if e.major == v1 {
			if err != nil || strings.Join(got, ",") != "0,1,2" || s.count(serverStream) != 1 {
				t.Fatalf("got %q, %v, server saw %d attempts; want 0,1,2 from the one attempt", got, err, s.count(serverStream))
			}
			return
		}
		if e.codeOf(err) != serviceconfig.DeadlineExceeded || !errors.Is(err, rebound.ErrAttemptTimeout) || s.count(serverStream) != 3 {
			t.Fatalf("got %q, %v, server saw %d attempts; want each of 3 cut", got, err, s.count(serverStream))
		}
	})
}

// TestPerAttemptTimeoutHeaderReadCommits: in connect v1, an application
// that reads a stream's response headers commits it: it is never cut
// after, however long its first message takes.
func TestPerAttemptTimeoutHeaderReadCommits(t *testing.T) {
	t.Parallel()
	e := env{v1, grpcH2C}
	s := e.start(t, headersThenQuiet())
	warm(t, e, s, e.p, unary)
	c, _ := e.dialAuto(t, s, retryConfig(t, 3, `"UNAVAILABLE"`, ""), withPerAttemptTimeout(countedTimeout))
	st, err := c.open(context.Background(), serverStream, "x", nil)
	if err != nil {
		t.Fatal(err)
	}
	if st.Header().Get("X-Early") != "1" {
		t.Fatalf("headers %v", st.Header())
	}
	if got := messages(t, st); got != "0,1,2" || s.count(serverStream) != 1 {
		t.Fatalf("got %q, server saw %d attempts; want 0,1,2 from the one attempt", got, s.count(serverStream))
	}
}

// overEveryTransport runs f for each major in each protocol over each
// transport it runs on: HTTP/1.1 (not gRPC), HTTP/2 with TLS, h2c, and,
// for v2, in process (over one of them with -short; see shortMatrix). The
// subtests run in parallel, since each waits out per-attempt timeouts.
func overEveryTransport(t *testing.T, f func(t *testing.T, e env)) {
	for _, m := range majors {
		var ps []protocol
		for _, name := range []string{"connect", "grpc", "grpcweb"} {
			for _, tr := range []transport{overHTTP1, overH2, overH2C} {
				if name == "grpc" && tr == overHTTP1 {
					continue // gRPC needs HTTP/2
				}
				ps = append(ps, protocol{name, tr})
			}
		}
		if slices.Contains(m.protocols, inprocess) {
			ps = append(ps, inprocess)
		}
		for _, p := range shortMatrix(t, m, ps) {
			e := env{m, p}
			t.Run(e.String(), func(t *testing.T) {
				t.Parallel()
				f(t, e)
			})
		}
	}
}

// TestPerAttemptTimeoutServerStreamRetries: a server stream whose first
// two attempts hang is retried past each cut attempt, not only the
// first, and answered by the third, in every protocol over every
// transport.
func TestPerAttemptTimeoutServerStreamRetries(t *testing.T) {
	t.Parallel()
	overEveryTransport(t, func(t *testing.T, e env) {
		stretch.Run(t, countedTimeout, maxCountedTimeout, func(d time.Duration) error {
			s := e.start(t, streamHangFirst(2))
			warm(t, e, s, e.p, unary)
			c, i := dialCounted(t, e, s, retryConfig(t, 5, `"UNAVAILABLE"`, ""), d)
			var n int
			st, err := c.open(e.countAttempts(context.Background(), &n), serverStream, "x", nil)
			if err != nil {
				t.Fatal(err)
			}
			got, err := receiveAll(t, st)
			if slow := cutTooMany(err, n, 3, i.Stats()[serverStream].AttemptTimeouts); slow != nil {
				return slow
			}
			if err != nil || strings.Join(got, ",") != "0,1,2" || n != 3 {
				t.Fatalf("got %q, %v after %d attempts; want 0,1,2 from attempt 3", got, err, n)
			}
			if got := s.previous(serverStream); !slices.Equal(got, []int{-1, 1, 2}) {
				t.Fatalf("server saw attempts with grpc-previous-rpc-attempts %v, want [absent 1 2]", got)
			}
			return nil
		})
	})
}

// TestPerAttemptTimeoutServerStreamEveryAttemptHangs: when every attempt
// of a server stream hangs, each is cut and retried up to maxAttempts,
// and the call ends DEADLINE_EXCEEDED from the per-attempt timeout, in
// every protocol over every transport, for short timeouts too (which may
// cut an attempt before it reaches the server, or while it connects).
func TestPerAttemptTimeoutServerStreamEveryAttemptHangs(t *testing.T) {
	t.Parallel()
	const maxAttempts = 5
	for _, timeout := range []time.Duration{20 * time.Millisecond, attemptTimeout} {
		t.Run(timeout.String(), func(t *testing.T) {
			t.Parallel()
			overEveryTransport(t, func(t *testing.T, e env) {
				s := e.start(t, streamHangFirst(1<<30))
				warm(t, e, s, e.p, unary)
				c, _ := e.dialAuto(t, s, retryConfig(t, maxAttempts, `"UNAVAILABLE"`, ""), withPerAttemptTimeout(timeout))
				var n int
				st, err := c.open(e.countAttempts(context.Background(), &n), serverStream, "x", nil)
				if err != nil {
					t.Fatal(err)
				}
				got, err := receiveAll(t, st)
				if e.codeOf(err) != serviceconfig.DeadlineExceeded || !errors.Is(err, rebound.ErrAttemptTimeout) || !errors.Is(err, rebound.ErrAttemptsExhausted) || n != maxAttempts {
					t.Fatalf("got %q, err %v after %d attempts; want deadline_exceeded from the per-attempt timeout, attempts exhausted after %d", got, err, n, maxAttempts)
				}
				// A short timeout may cut an attempt before the server
				// sees it, or while its request is on the way, so that a
				// later one overtakes it; those it saw are distinct
				// attempts of this call.
				seen := slices.Sorted(slices.Values(s.previous(serverStream)))
				if len(seen) > maxAttempts || len(slices.Compact(slices.Clone(seen))) != len(seen) || len(seen) > 0 && (seen[0] < -1 || seen[0] == 0 || seen[len(seen)-1] >= maxAttempts) {
					t.Fatalf("server saw attempts with grpc-previous-rpc-attempts %v, want distinct attempts of the call", s.previous(serverStream))
				}
			})
		})
	}
}

// answerBeforeDeadline makes every unary attempt end with c a little
// (countedTimeout/40, within the last twentieth in which an answer counts
// as the timeout's) before the deadline it received, as a server does
// whose clock sees the attempt's deadline pass first (Connect-Timeout-Ms
// is rounded down to the millisecond and starts when the request arrives;
// a proxy may keep a margin) and answers with a code of its own, such as
// the CANCELED of an aborted handler or of a reset HTTP/2 stream.
func answerBeforeDeadline(c code) handlers {
	return handlers{unary: func(in *call) (string, error) {
		dl, ok := in.ctx.Deadline()
		if !ok {
			return "", fail(serviceconfig.Internal, "no deadline")
		}
		select {
		case <-time.After(time.Until(dl) - countedTimeout/40):
			return "", fail(c, "deadline")
		case <-in.ctx.Done():
			return "", fail(c, "%v", in.ctx.Err())
		}
	}}
}

// TestPerAttemptTimeoutUnaryServerAnswersFirst: when the server ends each
// attempt at the deadline the attempt carried, before the client's timer,
// the attempt was cut by its timeout whatever code the server gave: it is
// retried, and the call ends DEADLINE_EXCEEDED with ErrAttemptTimeout
// after maxAttempts, in every protocol.
//
// Each call waits out maxAttempts counted timeouts and computes little.
// With -short, where each code runs in one protocol of each major (the one
// each would pick for the code's subtest), a major's three calls wait side
// by side in one test: as parallel subtests, six of them held as many of
// the parallel tests' turns for 3s.
func TestPerAttemptTimeoutUnaryServerAnswersFirst(t *testing.T) {
	t.Parallel()
	const maxAttempts = 3
	codes := []code{serviceconfig.Cancelled, serviceconfig.Unavailable, serviceconfig.DeadlineExceeded}
	top := t.Name()
	// call starts the call in e against a server that answers with c, and
	// returns what waits for its end and judges it.
	call := func(t *testing.T, e env, c code) func(t *testing.T) {
		t.Helper()
		s := e.start(t, answerBeforeDeadline(c))
		warm(t, e, s, e.p, serverStream)
		cl, _ := e.dialAuto(t, s, retryConfig(t, maxAttempts, `"RESOURCE_EXHAUSTED"`, ""), withPerAttemptTimeout(countedTimeout))
		var n int
		done := make(chan error, 1)
		go func() {
			_, err := cl.unary(e.countAttempts(context.Background(), &n), "x", nil)
			done <- err
		}()
		return func(t *testing.T) {
			t.Helper()
			err := <-done
			if e.codeOf(err) != serviceconfig.DeadlineExceeded || !errors.Is(err, rebound.ErrAttemptTimeout) || !errors.Is(err, rebound.ErrAttemptsExhausted) {
				t.Fatalf("err %v, want deadline_exceeded from the per-attempt timeout, attempts exhausted", err)
			}
			if n != maxAttempts || s.count(unary) != maxAttempts {
				t.Fatalf("%d attempts, server saw %d; want %d", n, s.count(unary), maxAttempts)
			}
		}
	}
	if !testing.Short() {
		for _, c := range codes {
			t.Run(codeName(c), func(t *testing.T) {
				t.Parallel()
				each(t, func(t *testing.T, e env) {
					t.Parallel()
					call(t, e, c)(t)
				})
			})
		}
		return
	}
	for _, m := range majors {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			envs := make([]env, len(codes))
			judges := make([]func(*testing.T), len(codes))
			for i, c := range codes {
				envs[i] = env{m, m.protocols[shortPick(top+"/"+codeName(c), m, len(m.protocols))]}
				judges[i] = call(t, envs[i], c)
			}
			for i, c := range codes {
				t.Run(codeName(c)+"/"+envs[i].p.String(), judges[i])
			}
		})
	}
}
