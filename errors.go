package rebound

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/rebound-go/rebound/internal/errtext"
)

// Reasons why retrying stopped. The [*Error] returned by [Do], [DoValue] and
// [Hedge] unwraps to one of them (or to the context's cause), so callers can
// test with errors.Is.
var (
	// ErrAttemptsExhausted: the maximum number of attempts was made.
	ErrAttemptsExhausted = errors.New("rebound: attempts exhausted")
	// ErrThrottled: the call was throttled. Its retry budget (a Throttle,
	// a TokenBucket, any Budget) refused another attempt, or an
	// AdaptiveThrottle rejected one locally ([ErrRejectedLocally]).
	ErrThrottled = errors.New("rebound: throttled")
	// ErrPushback: the server said not to retry.
	ErrPushback = errors.New("rebound: server pushback said not to retry")
	// ErrNotRetryable: the attempt's error is not one that may be retried.
	ErrNotRetryable = errors.New("rebound: error is not retryable")
	// ErrCommitted: the call was committed (A6: a response had started, or
	// the request outgrew the replay buffer), so it cannot be replayed.
	ErrCommitted = errors.New("rebound: call committed")
	// ErrDeadline: waiting for the next attempt would pass the context's
	// deadline, so it was not made.
	ErrDeadline = errors.New("rebound: next attempt would pass the deadline")
	// ErrRetryDelayTooLong: the server asked the client to wait longer
	// before retrying than the client's cap allows (a google.rpc.RetryInfo
	// retry_delay or an HTTP rate-limit reset beyond it), so no further
	// attempt was made.
	ErrRetryDelayTooLong = errors.New("rebound: server asked to wait longer than the cap")
	// ErrRejectedLocally is the error of an attempt that an
	// [AdaptiveThrottle] did not send. It wraps [ErrThrottled]: no strategy
	// retries it, and the call ends with ErrThrottled as its reason.
	ErrRejectedLocally = fmt.Errorf("rebound: attempt rejected locally by the adaptive throttle: %w", ErrThrottled)
	// ErrAttemptTimeout: an attempt was cut because it had not committed
	// (received response headers, a message or its status) within the
	// per-attempt timeout. It is carried by the attempt's error, not the
	// reason: a call whose last attempt timed out unwraps to it whatever
	// ended retrying (usually [ErrAttemptsExhausted]).
	ErrAttemptTimeout = errors.New("rebound: per-attempt timeout exceeded")
	// errInvalidToken: a token was refreshed or recorded with a strategy that
	// did not issue it, or a second time.
	errInvalidToken = errors.New("rebound: token was not issued by this strategy or was already used")
)

// DefaultRetryDelayCap is the longest wait a server may ask for before a
// retry (a google.rpc.RetryInfo retry_delay, an HTTP Retry-After or
// RateLimit-Reset) that a call waits out by default; a longer one ends the
// call with [ErrRetryDelayTooLong]. grpcretry, connectretry and httpretry
// each take another cap with their WithRetryDelayCap.
const DefaultRetryDelayCap = 60 * time.Second

// The default replay buffer limits of grpcretry's and httpretry's
// WithBufferLimits (A6 "Memory Management": retry_buffer_size_in_bytes and
// per_rpc_buffer_limit_in_bytes): the bytes a client may hold to replay
// its calls' requests, in all and for one call. A call whose request does
// not fit is sent once, not retried or hedged.
const (
	DefaultBufferTotal   = 16 << 20
	DefaultBufferPerCall = 1 << 20
)

// Error is returned when retrying stops without success. It carries the last
// attempt's error and the reason retrying stopped; errors.Is and errors.As
// see both.
type Error struct {
	// Err is the last attempt's error. It is nil only when no attempt ran
	// (for example the context ended during the initial delay).
	Err error
	// Reason says why no further attempt was made: one of the Err…
	// sentinels of this package, a strategy's own error, or the context's
	// cause.
	Reason error
	// Attempts is the number of attempts made.
	Attempts int
}

// Error returns "rebound: gave up after N attempts (reason): last error".
func (e *Error) Error() string { return errtext.GaveUp("rebound", e.Attempts, e.Reason, e.Err) }

// Unwrap returns the last attempt's error and the reason.
func (e *Error) Unwrap() []error {
	switch {
	case e.Err == nil:
		return []error{e.Reason}
	case e.Reason == nil:
		return []error{e.Err}
	}
	return []error{e.Err, e.Reason}
}

// Safety says whether an error may be retried (Smithy RetrySafety). The zero
// value is SafetyNo: an error that says nothing is not retried, unless its
// [ErrorInfo] blames the server.
type Safety int8

const (
	// SafetyNo: retrying is not safe.
	SafetyNo Safety = iota
	// SafetyMaybe: not enough is known to tell.
	SafetyMaybe
	// SafetyYes: a retry is allowed (not promised).
	SafetyYes
)

// String returns "no", "maybe" or "yes".
func (s Safety) String() string {
	switch s {
	case SafetyNo:
		return "no"
	case SafetyMaybe:
		return "maybe"
	case SafetyYes:
		return "yes"
	}
	return "Safety(" + strconv.Itoa(int(s)) + ")"
}

// RetryInfo is what an error says about retrying it (Smithy RetryInfo). An
// error carries one by having a method RetryInfo() RetryInfo; [Mark] and its
// shorthands attach one to any error. The zero value means "not safe to
// retry, no hints".
type RetryInfo struct {
	// Safety says whether a retry is allowed.
	Safety Safety
	// SlowDown marks an error the server returned because the client
	// sends too fast (HTTP 429, gRPC RESOURCE_EXHAUSTED): what Smithy calls
	// a throttling error, and S3 SlowDown. It is not the client's own
	// retry throttling ([ErrThrottled]).
	SlowDown bool
	// Timeout marks an error caused by the service not answering in time.
	// The standard strategy charges more budget for it.
	Timeout bool
	// HasRetryAfter says RetryAfter holds a server hint.
	HasRetryAfter bool
	// RetryAfter is how long the server asked the client to wait. The
	// standard strategy treats it as a minimum delay; the A6 policy treats
	// it as gRPC pushback: retry after exactly that delay and reset the
	// backoff exponent.
	RetryAfter time.Duration
	// ServerStop says the server asked the client not to retry at all (A6
	// pushback that is negative or unparsable).
	ServerStop bool
	// Committed says the request can no longer be replayed: its response
	// had started, or its body outgrew the replay buffer (A6 "When Retries
	// are Valid"). No strategy retries a committed request.
	Committed bool
	// MinDelay is the least time the server asked the client to wait
	// before the next attempt (google.rpc.RetryInfo's retry_delay, an HTTP
	// RateLimit-Reset): advice, not pushback. The next attempt waits
	// max(backoff, MinDelay), and under hedging the next hedge waits
	// MinDelay. HasRetryAfter, when set, wins over it. 0 means none.
	MinDelay time.Duration
	// Stop, when not nil, ends retrying with Stop as the reason, as
	// ServerStop does with [ErrPushback]: [ErrRetryDelayTooLong] for a
	// server hint beyond the client's cap. A retryable failure still
	// counts against the budget.
	Stop error
	// Local marks a failure that never reached the server's capacity: an
	// open circuit breaker, a client-side limit. It neither takes from nor
	// refills any budget, and its retry costs none.
	Local bool
	// Backoff, when its Initial is set, replaces the strategy's backoff
	// for the retry of this failure: the AWS SDKs back off harder on
	// throttling errors than on others. It must be valid (see
	// [Backoff.Validate]); one that is not is ignored.
	Backoff Backoff
	// Class names a kind of failure with an attempt limit of its own,
	// ClassAttempts: a call makes no further attempt once ClassAttempts
	// of its attempts have failed with this Class, whatever its own limit
	// says (retry-go's AttemptsForError). Without a Class, or with
	// ClassAttempts 0, only the call's limit applies.
	Class         string
	ClassAttempts int
}

// Fault says who is at fault for an error (Smithy ErrorFault).
type Fault int8

const (
	// FaultOther: not known to be either side's fault. It is the zero value.
	FaultOther Fault = iota
	// FaultClient: the client sent something wrong.
	FaultClient
	// FaultServer: the server failed.
	FaultServer
)

// String returns "other", "client" or "server".
func (f Fault) String() string {
	switch f {
	case FaultOther:
		return "other"
	case FaultClient:
		return "client"
	case FaultServer:
		return "server"
	}
	return "Fault(" + strconv.Itoa(int(f)) + ")"
}

// ErrorInfo is implemented by errors that know whose fault they are (Smithy
// ErrorInfo).
type ErrorInfo interface {
	Fault() Fault
}

// Classifier turns an attempt's error into what a strategy needs to decide.
// It must be safe for concurrent use.
type Classifier func(err error) RetryInfo

type retryInfoer interface{ RetryInfo() RetryInfo }

// Classify is the default [Classifier]. In order:
//   - nil, context.Canceled and context.DeadlineExceeded are not retryable;
//   - an error in the chain with a RetryInfo() RetryInfo method (the
//     outermost one) decides;
//   - a net.Error whose Timeout() is true is a timeout, safety maybe;
//   - an [ErrorInfo] with [FaultServer] gives safety maybe, anything else no
//     (Smithy: absent a retryable trait, client errors are NO and server
//     errors MAYBE).
func Classify(err error) RetryInfo {
	if err == nil {
		return RetryInfo{}
	}
	_, ctxErr := errKinds(err)
	return classifyWalked(err, ctxErr)
}

// classifyWalked is Classify of a non-nil err whose tree errKinds has
// walked.
func classifyWalked(err error, ctxErr bool) RetryInfo {
	if ctxErr {
		return RetryInfo{}
	}
	// The outermost error first, as errors.As would, but without its
	// allocation: an error a front door marked is the common case.
	if ri, ok := err.(retryInfoer); ok {
		return ri.RetryInfo()
	}
	var ri retryInfoer
	if errors.As(err, &ri) {
		return ri.RetryInfo()
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return RetryInfo{Safety: SafetyMaybe, Timeout: true}
	}
	if FaultOf(err) == FaultServer {
		return RetryInfo{Safety: SafetyMaybe}
	}
	return RetryInfo{}
}

// errKinds reports what errors.Is(err, target) says of ErrRejectedLocally
// (rejected) and of context.Canceled or context.DeadlineExceeded (ctxErr),
// from one walk of err's tree rather than one a target: a built-in
// strategy asks all three of every failure.
func errKinds(err error) (rejected, ctxErr bool) {
	for err != nil {
		// No target's type can fail the comparison.
		rejected = rejected || err == ErrRejectedLocally
		ctxErr = ctxErr || err == context.Canceled || err == context.DeadlineExceeded
		if x, ok := err.(interface{ Is(error) bool }); ok {
			rejected = rejected || x.Is(ErrRejectedLocally)
			ctxErr = ctxErr || x.Is(context.Canceled) || x.Is(context.DeadlineExceeded)
		}
		switch x := err.(type) {
		case interface{ Unwrap() error }:
			err = x.Unwrap()
		case interface{ Unwrap() []error }:
			for _, e := range x.Unwrap() {
				r, c := errKinds(e)
				rejected, ctxErr = rejected || r, ctxErr || c
			}
			return rejected, ctxErr
		default:
			return rejected, ctxErr
		}
	}
	return rejected, ctxErr
}

// FaultOf returns the fault of the first [ErrorInfo] in err's chain, or
// FaultOther.
func FaultOf(err error) Fault {
	var ei ErrorInfo
	if errors.As(err, &ei) {
		return ei.Fault()
	}
	return FaultOther
}

// Mark returns err annotated with info; [Classify] finds it through any
// further wrapping. Mark(nil, …) is nil.
func Mark(err error, info RetryInfo) error {
	if err == nil {
		return nil
	}
	return &markedError{err: err, info: info}
}

// Retryable marks err as safe to retry.
func Retryable(err error) error { return Mark(err, RetryInfo{Safety: SafetyYes}) }

// Permanent marks err as never to be retried.
func Permanent(err error) error { return Mark(err, RetryInfo{Safety: SafetyNo}) }

// RetryAfter marks err as retryable no sooner than d (a server's hint).
// A negative d is treated as 0.
func RetryAfter(err error, d time.Duration) error {
	return Mark(err, RetryInfo{Safety: SafetyYes, HasRetryAfter: true, RetryAfter: max(d, 0)})
}

type markedError struct {
	err  error
	info RetryInfo
}

func (m *markedError) Error() string        { return m.err.Error() }
func (m *markedError) Unwrap() error        { return m.err }
func (m *markedError) RetryInfo() RetryInfo { return m.info }
