package serviceconfig

import (
	"slices"
	"strconv"
	"time"
)

// AIP194 returns a method config that retries the named methods as AIP-194
// recommends. Name only methods that are safe to run more than once, are not
// part of a transaction and are unary; whether a method qualifies is the
// caller's knowledge, not something a service config can express.
//
// The policy retries only UNAVAILABLE, the one code AIP-194 calls retryable.
// It makes at most DefaultMaxAttemptsCap (5) attempts, since more would be
// clamped by default anyway. The backoff bound starts at 0.1s and doubles,
// giving bounds of 0.1s, 0.2s, 0.4s and 0.8s: at most 1.5s of waiting in all,
// short enough for a call with a typical deadline, long enough to outlast a
// connection being re-established. MaxBackoff of 5s matters only to clients
// that raise their attempt limit, and keeps their later retries from
// spreading out indefinitely.
//
// The names are copied. The result has no timeout, wait-for-ready or size
// settings.
func AIP194(names ...Name) MethodConfig {
	return MethodConfig{
		Names: slices.Clone(names),
		RetryPolicy: &RetryPolicy{
			MaxAttempts:          DefaultMaxAttemptsCap,
			InitialBackoff:       100 * time.Millisecond,
			MaxBackoff:           5 * time.Second,
			BackoffMultiplier:    2,
			RetryableStatusCodes: NewCodeSet(Unavailable),
		},
	}
}

// aip194Never and aip194Generally are the codes AIP-194 says should never,
// and should generally not, be retried automatically.
var (
	aip194Never = NewCodeSet(OK, Cancelled, DeadlineExceeded, InvalidArgument, DataLoss,
		NotFound, AlreadyExists, PermissionDenied, Unauthenticated, FailedPrecondition,
		OutOfRange, Unimplemented)
	aip194Generally = NewCodeSet(ResourceExhausted, Internal, Unknown, Aborted)
)

// Lint returns warnings for status codes that AIP-194 advises against
// retrying automatically, wherever a retry policy lists them as retryable or
// a hedging policy lists them as non-fatal (a non-fatal code sends the next
// hedged attempt, which is a retry too). The message tells the two kinds
// apart:
//
//	methodConfig[0].retryPolicy.retryableStatusCodes[1]: INVALID_ARGUMENT should never be retried automatically (AIP-194)
//	methodConfig[0].retryPolicy.retryableStatusCodes[2]: INTERNAL should generally not be retried automatically (AIP-194)
//
// For a Config from Parse the path names the array element as written; for
// one built by hand it names the array. Warnings come in document order. Lint
// does not repeat c.Warnings and cannot tell whether a method is streaming or
// transactional, which AIP-194 also rules out. A nil c, or one with nothing
// to report, gives nil.
func Lint(c *Config) []Warning {
	if c == nil {
		return nil
	}
	var ws []Warning
	for i := range c.MethodConfigs {
		mc := &c.MethodConfigs[i]
		if mc.RetryPolicy != nil {
			ws = c.lintCodes(ws, codeKey{methodConfig: i}, mc.RetryPolicy.RetryableStatusCodes)
		}
		if mc.HedgingPolicy != nil {
			ws = c.lintCodes(ws, codeKey{methodConfig: i, hedging: true}, mc.HedgingPolicy.NonFatalStatusCodes)
		}
	}
	return ws
}

// lintCodes appends the warnings for the code list of key (code 0) holding
// set, ordered by where each code was written.
func (c *Config) lintCodes(ws []Warning, key codeKey, set CodeSet) []Warning {
	at, ok := c.codeLists[key]
	if !ok {
		field := "retryPolicy.retryableStatusCodes"
		if key.hedging {
			field = "hedgingPolicy.nonFatalStatusCodes"
		}
		at = "methodConfig[" + strconv.Itoa(key.methodConfig) + "]." + field
	}
	type found struct {
		ref  codeRef
		ok   bool
		code Code
	}
	var list []found
	for _, code := range (set & (aip194Never | aip194Generally)).Codes() {
		key.code = code
		ref, ok := c.codePos[key]
		list = append(list, found{ref, ok, code})
	}
	slices.SortStableFunc(list, func(a, b found) int { return a.ref.offset - b.ref.offset })
	for _, f := range list {
		w := Warning{Path: at, Message: lintMessage(f.code)}
		if f.ok {
			w.Path = string(appendIndex([]byte(at), f.ref.index))
			w.Line, w.Column = f.ref.line, f.ref.col
		}
		ws = append(ws, w)
	}
	return ws
}

// lintMessage is Lint's warning about code, which AIP-194 advises
// against retrying.
func lintMessage(code Code) string {
	switch {
	case code == OK:
		return "OK should never be retried automatically (AIP-194); it is a success, so listing it has no effect"
	case aip194Never.Has(code):
		return code.String() + " should never be retried automatically (AIP-194)"
	}
	return code.String() + " should generally not be retried automatically (AIP-194)"
}

// lint reports Lint's warnings for every code list the parser read, as
// [IncludeLint] asks, valid or not: the lists of entries that name a
// method, where each code was first written.
func (p *parser) lint() {
	for key, ref := range p.codePos {
		if key.methodConfig < 0 || !(aip194Never | aip194Generally).Has(key.code) {
			continue
		}
		list := key
		list.code = 0
		p.reportAt(&p.warns, ref.offset, ref.offset,
			func() string { return string(appendIndex([]byte(p.codeLists[list]), ref.index)) },
			func() string { return lintMessage(key.code) })
	}
}
