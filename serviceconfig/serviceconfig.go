// Package serviceconfig parses and validates the retry-related parts of a
// gRPC service config, as specified by gRFC A6 (gRPC retry design):
// per-method retry and hedging policies, timeouts, wait-for-ready and
// message size limits, and the channel-wide retry throttling settings.
//
// The package depends on the standard library only. The protocol packages
// (grpcretry, connectretry) convert the results: a [Code] equals the
// grpc-go status code of the same number, and durations are time.Duration
// values.
//
// [Parse] checks every rule of A6 and reports the problems all at once (the
// first 100), each named by its JSON path and located by line and column:
//
//	serviceconfig: methodConfig[1].retryPolicy.initialBackoff: must be greater than 0
//
// A config that grpc-go's own parser accepts is accepted too, with a warning
// for each spelling A6 does not use, so that configs move over from
// grpc-go's built-in retries unchanged. Parse's time and memory are linear
// in its input, which is limited to [DefaultMaxBytes] unless [MaxBytes]
// says otherwise.
//
// [Config.MethodConfig] finds the settings for a call without allocating,
// and [Lint] points out status codes that AIP-194 advises against retrying.
package serviceconfig

import (
	"encoding/json"
	"math"
	"slices"
	"strings"
	"time"
)

// DefaultMaxAttemptsCap is the client-side cap on maxAttempts that A6 sets
// by default. A service config may ask for more attempts; clients treat
// larger values as the cap, which a client may raise or lower
// (grpcretry's and connectretry's WithMaxAttemptsCap). See
// [RetryPolicy.Attempts].
const DefaultMaxAttemptsCap = 5

// Name selects the methods a [MethodConfig] applies to. A Name with Service
// and Method set selects one method; with only Service set, every method of
// that service; with neither set, every method (the default config). A
// Method without a Service is invalid. The zero value is the default name.
type Name struct {
	Service string // fully qualified, like "pkg.Service"
	Method  string // like "Method"
}

// String returns n in its service config JSON form, omitting empty fields:
// {"service":"a.B","method":"M"}, {"service":"a.B"} or {}.
func (n Name) String() string {
	var parts []string
	if n.Service != "" {
		parts = append(parts, `"service":`+quoteJSON(n.Service))
	}
	if n.Method != "" {
		parts = append(parts, `"method":`+quoteJSON(n.Method))
	}
	return "{" + strings.Join(parts, ",") + "}"
}

// RetryPolicy is an A6 retryPolicy: retry a failed call after an exponential,
// fully jittered backoff while its status code is retryable and attempts
// remain.
//
// [Parse] returns only policies that satisfy A6: MaxAttempts >= 2, both
// backoffs > 0, a finite BackoffMultiplier > 0 and a non-empty
// RetryableStatusCodes, which may be empty only if PerAttemptRecvTimeout
// is set. Values built by hand are used as given. The zero
// value retries nothing. A RetryPolicy is not modified by its methods and is
// safe for concurrent reads.
type RetryPolicy struct {
	// MaxAttempts is the maximum number of attempts, counting the first, as
	// written in the config. It may exceed the client's limit; use Attempts
	// for the number a client actually makes.
	MaxAttempts int
	// InitialBackoff bounds the random wait before the first retry.
	InitialBackoff time.Duration
	// MaxBackoff caps the bound on any wait.
	MaxBackoff time.Duration
	// BackoffMultiplier grows the bound after each retry.
	BackoffMultiplier float64
	// RetryableStatusCodes are the codes that allow a retry.
	RetryableStatusCodes CodeSet
	// PerAttemptRecvTimeout, if greater than 0, bounds each attempt from
	// when it is sent until it receives response headers, a message or its
	// status: an attempt that takes longer is cancelled and may be retried.
	// It is the config field perAttemptRecvTimeout of gRPC core and
	// grpc-java, which A6 does not define; 0 means none.
	PerAttemptRecvTimeout time.Duration
}

// Attempts returns the number of attempts a client makes under p: MaxAttempts
// clamped to maxAttemptsCap, the client-side limit of A6 (WithMaxAttemptsCap
// in grpcretry and connectretry). A maxAttemptsCap <= 0 means
// [DefaultMaxAttemptsCap]. The result is at least 1; a nil policy allows one
// attempt.
func (p *RetryPolicy) Attempts(maxAttemptsCap int) int {
	if p == nil {
		return 1
	}
	return clampAttempts(p.MaxAttempts, maxAttemptsCap)
}

func clampAttempts(n, maxAttemptsCap int) int {
	if maxAttemptsCap <= 0 {
		maxAttemptsCap = DefaultMaxAttemptsCap
	}
	return max(1, min(n, maxAttemptsCap))
}

// BackoffCeiling returns the upper bound of the random wait before retry
// number retry (1 for the first retry, which is the second attempt):
// min(InitialBackoff × BackoffMultiplier^(retry-1), MaxBackoff). The wait
// itself is drawn uniformly from [0, ceiling). It returns 0 for retry < 1 or
// a nil policy. The product is computed in float64 and clamped before it is
// converted, so large retry numbers or multipliers give MaxBackoff rather
// than an overflow.
func (p *RetryPolicy) BackoffCeiling(retry int) time.Duration {
	if p == nil || retry < 1 {
		return 0
	}
	ceil := float64(p.InitialBackoff) * math.Pow(p.BackoffMultiplier, float64(retry-1))
	switch {
	case !(ceil < float64(p.MaxBackoff)): // also catches NaN and +Inf
		return max(p.MaxBackoff, 0)
	case ceil <= 0:
		return 0
	default:
		return time.Duration(ceil)
	}
}

// HedgingPolicy is an A6 hedgingPolicy: send the call again every
// HedgingDelay, or at once after a non-fatal status code, until one attempt
// succeeds, a fatal code arrives or attempts run out.
//
// [Parse] returns only policies with MaxAttempts >= 2 and HedgingDelay >= 0.
// The zero value hedges nothing. A HedgingPolicy is not modified by its
// methods and is safe for concurrent reads.
type HedgingPolicy struct {
	// MaxAttempts is the maximum number of attempts, counting the first, as
	// written in the config; see Attempts.
	MaxAttempts int
	// HedgingDelay is the wait between attempts; 0 sends all attempts at once.
	HedgingDelay time.Duration
	// NonFatalStatusCodes are the codes that let the other attempts go on.
	NonFatalStatusCodes CodeSet
}

// Attempts returns MaxAttempts clamped to maxAttemptsCap, as
// [RetryPolicy.Attempts] does. The result is at least 1; a nil policy allows
// one attempt.
func (p *HedgingPolicy) Attempts(maxAttemptsCap int) int {
	if p == nil {
		return 1
	}
	return clampAttempts(p.MaxAttempts, maxAttemptsCap)
}

// RetryThrottling is the channel-wide A6 retryThrottling: a token count that
// starts at MaxTokens, loses 1 per failed call and gains TokenRatio per
// successful call; while it is at or below [RetryThrottling.Threshold], no
// retries or hedged attempts are made.
//
// [Parse] returns only values with MaxTokens in 1..1000 and TokenRatio >= 0.
// The zero value is not a valid setting. It is safe for concurrent reads.
type RetryThrottling struct {
	// MaxTokens is the initial and largest token count.
	MaxTokens int
	// TokenRatio is the ratio with the decimal places beyond the third
	// dropped, as A6 requires: "0.5466" gives 0.546. Parse truncates the
	// decimal text, not a float64, so the result is exact ("0.29" gives
	// 0.29, never 0.289), and a ratio written with more precision than a
	// float64 holds is truncated correctly too. A ratio below 0.001 gives 0
	// (with a warning): successful calls then restore no tokens.
	TokenRatio float64
}

// Threshold returns MaxTokens / 2: retries and hedges stop while the token
// count is at or below it. A nil t returns 0.
func (t *RetryThrottling) Threshold() float64 {
	if t == nil {
		return 0
	}
	return float64(t.MaxTokens) / 2
}

// MethodConfig is one entry of the service config's methodConfig list: the
// settings for the methods it names. At most one of RetryPolicy and
// HedgingPolicy is set; nil means calls are neither retried nor hedged. The
// zero value names no method and sets nothing.
type MethodConfig struct {
	// Names are the methods, services or default this entry applies to.
	Names []Name
	// RetryPolicy, if not nil, retries failed calls.
	RetryPolicy *RetryPolicy
	// HedgingPolicy, if not nil, hedges calls.
	HedgingPolicy *HedgingPolicy
	// Timeout is the default deadline for a call; 0 means none. A
	// configured "0s" also means none (see Parse).
	Timeout time.Duration
	// WaitForReady, if not nil, sets whether calls wait for a connection
	// instead of failing fast.
	WaitForReady *bool
	// MaxRequestMessageBytes and MaxResponseMessageBytes, if not nil, limit
	// the size of one message in bytes.
	MaxRequestMessageBytes  *int64
	MaxResponseMessageBytes *int64
}

// Config is a parsed service config. The zero value is an empty config under
// which no method has settings.
//
// A Config is safe for concurrent reads, including [Config.MethodConfig].
// Parse builds a lookup index; treat a parsed Config as read-only, since
// changes to its MethodConfigs are not seen by the index. A Config built by
// hand has no index, and MethodConfig searches its entries in order instead.
type Config struct {
	// LoadBalancingPolicy is the deprecated loadBalancingPolicy field as
	// written, such as "round_robin"; it is not checked against any registry.
	LoadBalancingPolicy string
	// LoadBalancingConfig and HealthCheckConfig are the gRPC fields
	// loadBalancingConfig (such as [{"rebound_distinct": {}}], which sends
	// hedges to distinct backends) and healthCheckConfig as written, or nil.
	// Parse does not check them; grpcretry hands them to grpc-go, which
	// does when the conn is made.
	LoadBalancingConfig json.RawMessage
	HealthCheckConfig   json.RawMessage
	// MethodConfigs are the methodConfig entries that name a method, in
	// document order; Parse leaves out those that name none, which apply
	// to no call (see Parse). Error and Warning paths number the entries
	// as written.
	MethodConfigs []MethodConfig
	// RetryThrottling, if not nil, throttles retries and hedges on the
	// channel.
	RetryThrottling *RetryThrottling
	// Warnings are problems that do not make the config invalid, such as
	// unknown fields, in document order.
	Warnings []Warning

	index     map[Name]nameRef
	codePos   map[codeKey]codeRef // where each code of a code list was written, for Lint
	codeLists map[codeKey]string  // the path of each code list as written (code 0), for Lint
}

// codeRef locates the first mention of a code in a code list.
type codeRef struct {
	index     int // in the list
	offset    int // in the input
	line, col int
}

// codeKey locates one status code within a method config's code list.
type codeKey struct {
	methodConfig int
	hedging      bool
	code         Code
}

// MethodConfig returns the settings for the call fullMethod, given as
// "/pkg.Service/Method" (the leading slash is optional). It returns the entry
// naming that service and method if there is one, else the entry naming only
// the service, else the default entry (the name {}), else nil. A string
// without a '/' after the optional leading one names no method, so only the
// default entry can match it. A nil c returns nil.
//
// MethodConfig does not allocate. The result is shared: do not modify it.
func (c *Config) MethodConfig(fullMethod string) *MethodConfig {
	if c == nil {
		return nil
	}
	s := strings.TrimPrefix(fullMethod, "/")
	if i := strings.LastIndexByte(s, '/'); i >= 0 {
		service, method := s[:i], s[i+1:]
		if mc := c.find(Name{Service: service, Method: method}); mc != nil {
			return mc
		}
		if mc := c.find(Name{Service: service}); mc != nil {
			return mc
		}
	}
	return c.find(Name{})
}

func (c *Config) find(n Name) *MethodConfig {
	if c.index != nil {
		if ref, ok := c.index[n]; ok {
			return &c.MethodConfigs[ref.slot]
		}
		return nil
	}
	for i := range c.MethodConfigs {
		if slices.Contains(c.MethodConfigs[i].Names, n) {
			return &c.MethodConfigs[i]
		}
	}
	return nil
}

// Warning is a problem in a service config that does not make it invalid.
// Path is the JSON path of the offending value or key as written, like
// "methodConfig[0].retryPolicy.jitter", or empty for the whole document.
// Line and Column locate it in the input, counting from 1, with columns in
// bytes as in go/token; they are 0 where there is no such place, as for the
// "and N more" entry that ends a long list.
//
// Suggestion is set on the warning of an unknown field that is near a
// known one ("retryThrotling"): the known field it most likely misspells.
// Such a field is ignored, here and by grpc-go, so the setting it was
// meant to make is silently off; `rebound validate` reports it as an error.
type Warning struct {
	Path       string
	Message    string
	Suggestion string
	Line       int
	Column     int
}

// String returns "path: message", or the message alone if Path is empty.
func (w Warning) String() string {
	if w.Path == "" {
		return w.Message
	}
	return w.Path + ": " + w.Message
}

// Error is one reason a service config is invalid. Path is the JSON path of
// the offending value, like "methodConfig[1].retryPolicy.initialBackoff", or
// empty for problems with the document as a whole, such as a JSON syntax
// error. Parse reports all of its Errors together; see [Parse]. Line and
// Column locate the problem in the input as for a [Warning].
type Error struct {
	Path    string
	Message string
	Line    int
	Column  int

	offset int // in the input, until Line and Column are set
}

// Error returns a one-line message: "serviceconfig: path: message".
func (e *Error) Error() string {
	if e.Path == "" {
		return "serviceconfig: " + e.Message
	}
	return "serviceconfig: " + e.Path + ": " + e.Message
}
