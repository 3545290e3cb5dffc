// Package rebound is the protocol-agnostic retry engine behind rebound's
// packages for grpc-go (grpcretry), connect-go (connectretry) and net/http
// (httpretry). Most programs use one of those; this package is for
// retrying any other function, and for the names all of them share.
//
// # The three protocol packages
//
// Each protocol package speaks its library's idiom, but a concept has one
// name everywhere. grpcretry and connectretry take a gRPC service config
// (gRFC A6) parsed by package serviceconfig; httpretry takes options.
// connectretry/v2 is connectretry for connect-go v2, with connectretry's
// names in the column below, but for how it is installed
// (connect.NewClient(transport, NewInterceptor(cfg).WrapClient)) and read
// in a handler (PreviousAttempts(ctx)).
//
//	                     grpcretry                     connectretry                  httpretry
//	install in one line  grpc.NewClient(target,        connect.WithInterceptors(     &http.Client{Transport:
//	                       DialOptions(cfg)...)          NewInterceptor(cfg))          NewTransport(nil)}
//	an invalid option    grpc.NewClient fails          calls fail with               requests fail with it;
//	                                                     connect.CodeInternal;         Transport.Err()
//	                                                     Interceptor.Err()
//	errors up front      New(cfg, opts...)             New(cfg, opts...)             New(base, opts...)
//	                       (*Client, error)              (*Interceptor, error)         (*Transport, error)
//	count attempts       CountAttempts(&n),            CountAttempts(ctx, &n)        CountAttempts(ctx, &n)
//	                       a grpc.CallOption             on the call's context         on the request's context
//	a failed call        the last attempt's status     the last attempt's            the last response, with a
//	                       error (status.Code)           *connect.Error                nil error, if one came
//	why it stopped       errors.As(err, &e) with e a *rebound.Error: e.Attempts, e.Reason (below)
//	statistics           Client.Stats(),               Interceptor.Stats()           Transport.Stats()
//	                       StatsOf(conn)
//	statistics by        "/pkg.Service/Method"         "/pkg.Service/Method"         "GET host"
//	metrics              WithMeterProvider:            WithMeterProvider:            WithMeterProvider:
//	                       grpc.client.call.*            grpc.client.call.*            http.client.request.*
//	decision log         WithLogger                    WithLogger                    WithLogger
//	traces               WithTracerProvider (A72)      WithTracerProvider (A72)      WithTracerProvider
//	attempts at most     WithMaxAttemptsCap, a cap     WithMaxAttemptsCap, a cap     WithMaxAttempts (default 3)
//	                       on the policy's maxAttempts   on the policy's maxAttempts
//	                       (default 5)                   (default 5)
//	no retries           WithRetriesDisabled           WithRetriesDisabled           WithRetriesDisabled
//	retry budget         retryThrottling, per server   retryThrottling, per server   a rebound.TokenBucket per
//	                       name (WithServerName)         name (WithServerName)         host (WithBudgetPerHost)
//	and one beside it    WithBudget                    WithBudget                    WithBudget
//	adaptive throttle    WithAdaptiveThrottle, per     WithAdaptiveThrottle, per     WithAdaptiveThrottle, per
//	                       server name                   server name                   host
//	adaptive rate limit  WithAdaptiveRateLimit, per    WithAdaptiveRateLimit, per    WithAdaptiveRateLimit, per
//	                       server name                   server name                   host
//	hedging              hedgingPolicy                 hedgingPolicy                 WithHedging(delay, n)
//	server hint          grpc-retry-pushback-ms;       grpc-retry-pushback-ms;       Retry-After;
//	                       RetryInfo                     RetryInfo                     WithRateLimitReset
//	longest hint waited  WithRetryDelayCap (60s)       WithRetryDelayCap (60s)       WithRetryDelayCap (60s)
//	what is retryable    the policy's codes;           the policy's codes;           WithRetryableStatus,
//	                       WithClassifier                WithClassifier                WithIdempotent,
//	                                                                                   WithIdempotencyKey;
//	                                                                                   WithClassifier
//	attempts before      PreviousAttempts(ctx)         PreviousAttempts(header)      PreviousAttempts(header,
//	  this one, in a       (grpc-previous-rpc-           (grpc-previous-rpc-           name), the header of
//	  handler              attempts)                     attempts)                     WithPreviousAttemptsHeader
//	per-attempt timeout  WithPerAttemptTimeout, or     WithPerAttemptTimeout, or     WithPerAttemptTimeout
//	                       perAttemptRecvTimeout         perAttemptRecvTimeout
//	narrow one call      Override(o), a call option;   Override(ctx, o), on the      Override(ctx, o), on the
//	                                                     call's context;               request's context;
//	                       loosening it takes            loosening it takes            loosening it takes
//	                       WithTrustedOverrides          WithTrustedOverrides          WithTrustedOverrides
//	time, in tests       WithClock, WithRandom         WithClock, WithRandom         WithClock, WithRandom
//
// So, in each of them: count a call's attempts with CountAttempts (the
// first attempt, retries and hedges all count; a call made once counts 1);
// learn why a failed call stopped from the [*Error] its error unwraps to
// (httpretry returns a request's last response, a 503 say, with a nil
// error: the WithLogger record of giving up, with its "reason", says why
// no retry followed); read the statistics with Stats, or
// grpcretry.StatsOf(conn) for a conn made with the one line. The examples of each package (ExampleDialOptions
// and ExampleNew in grpcretry, ExampleNewInterceptor and ExampleNew in
// connectretry, ExampleNewTransport and ExampleNew in httpretry) show all
// three against in-process servers.
//
// # Words
//
// An attempt is one try of a call, the first included. A retry is an
// attempt made after one failed; a hedge is an attempt made while others
// are still in flight, the first success winning. A call is throttled when
// its retry budget (an A6 [Throttle], a [TokenBucket], any [Budget])
// refuses it a retry or hedge. Server pushback is the server's own word on
// when, or whether, to retry. A call is committed once it cannot be
// replayed (its response has started, or its request outgrew the replay
// buffer), and no further attempt is made. An attempt that has not
// committed within the per-attempt timeout is cut and, within the policy,
// retried; its error unwraps to [ErrAttemptTimeout]. An [Override] narrows
// the policy of one call.
//
// When a call gives up, its error unwraps to an [*Error] holding the number
// of attempts, the last attempt's error, and the Reason, one of
// [ErrAttemptsExhausted], [ErrThrottled], [ErrPushback], [ErrNotRetryable],
// [ErrCommitted], [ErrDeadline], [ErrRetryDelayTooLong], or the context's
// cause; errors.Is finds
// the reason and the last attempt's error through the call's error.
// Statistics ([Stats], [MethodStats]) count the same things under the same
// names in every package.
//
// # The engine
//
// The engine follows the Smithy retry design: a [Strategy] hands out a
// [Token] before the first attempt and refreshes it after each failure; the
// token says how long to wait before the next attempt. [Do] and [DoValue] run
// that loop. Two strategies are provided:
//
//   - [NewStandard], the Smithy/AWS "standard" strategy: exponential backoff
//     with full jitter, a server retry-after hint as a minimum delay, and a
//     [TokenBucket] retry budget.
//   - [NewRetrier], the gRPC A6 retryPolicy: maxAttempts, exponential backoff
//     random(0, min(initial*multiplier^(n-1), max)), retryable
//     classification, exact server pushback that resets the exponent, and an
//     A6 [Throttle].
//
// [Hedge] runs hedged attempts per the A6 hedgingPolicy ([HedgingPolicy],
// [NewHedger]).
//
// Errors describe themselves to strategies through [RetryInfo] (carried by
// an error with a RetryInfo() RetryInfo method, see [Mark]) and [ErrorInfo].
// A RetryInfo is also the verdict a user's classifier returns in each
// protocol package (WithClassifier), within guardrails that are the same
// in all three: it may stop a retry, start one only where the package
// allows retries, and never undo a commit or what the server said.
//
// Beside the A6 [Throttle] and the Smithy [TokenBucket], two budgets
// follow the traffic, as service meshes keep them: [RatioBudget] (Finagle,
// Linkerd) and [ConcurrencyBudget] (Envoy). [AllBudgets] combines any of
// them; a refusal by one costs the others nothing.
//
// # Overload at fleet scale
//
// A retry budget learns from its own client's failures, and a client with
// a thin slice of a fleet's traffic sees too few of them. Two tools do not
// depend on that. The server's package shed sheds what it cannot serve and
// tells the clients when to retry, or not to. On the client,
// [AdaptiveThrottle] (the Google SRE book's adaptive throttling, behind
// WithAdaptiveThrottle in each protocol package) keeps attempts home once
// the server accepts fewer than 1/K of those sent; an attempt it keeps home
// fails with [ErrRejectedLocally] and ends its call with [ErrThrottled].
//
// # Rate-limited APIs
//
// A server that limits each client's rate refuses what is beyond it (HTTP
// 429, 503 with Retry-After; RESOURCE_EXHAUSTED, pushback), and retrying
// each refused request does not slow the ones that follow. [AdaptiveRateLimit],
// behind WithAdaptiveRateLimit in each protocol package, paces every
// attempt to the rate the server accepts, learnt as the AWS SDKs' adaptive
// retry mode learns it and from the server's own hints; an attempt whose
// turn would come after its deadline fails at once with [ErrRateLimited].
//
// Time and randomness are injected: every strategy takes [WithClock] and
// [WithRandom], so tests drive a fake clock instead of sleeping.
//
// # Resource bounds
//
// A client that runs for months and talks to ever new servers keeps
// bounded state, by one rule in every protocol package:
//
//   - The A6 throttle of a server name, and its adaptive throttle, are
//     shared by every client of the process with that name (and config),
//     for as long as any of them holds it; then they are freed.
//   - grpcretry keeps its state per ClientConn and drops it once the conn
//     is closed and collected.
//   - connectretry (per server name) and httpretry (per host) keep the
//     state of the 1024 peers used most recently; an evicted peer that
//     comes back starts afresh.
//   - Replay buffers are capped per call and per client
//     (grpcretry.WithBufferLimits; httpretry.WithMaxBufferedBody), service
//     configs by their size (serviceconfig), and server hints by
//     WithRetryDelayCap (60s by default, [DefaultRetryDelayCap]) in all
//     three.
package rebound
