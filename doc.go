// Package rebound is the protocol-agnostic retry engine behind rebound's
// packages for grpc-go (grpcretry), connect-go (connectretry) and net/http
// (httpretry). Most programs use one of those; this package is for
// retrying any other function, and for the names all of them share.
//
// # The three protocol packages
//
// Each protocol package speaks its library's idiom (a grpc.CallOption for
// grpc-go, the call's context for connect-go and net/http), but an idea has
// one name in all of them, and a name one meaning. The table below is that
// vocabulary: every idea of the three front doors, and its name in each;
// "none" says why a front door lacks one. grpcretry and connectretry take a
// gRPC service config (gRFC A6) parsed by package serviceconfig; httpretry
// takes options. connectretry/v2 is connectretry for connect-go v2, on the
// same engine, with connectretry's names in the column below but for how
// it is installed (connect.NewClient(transport,
// NewInterceptor(cfg).WrapClient)) and read in a handler
// (PreviousAttempts(ctx), from the server's connect.CallInfo).
//
//	                     grpcretry                     connectretry                  httpretry
//	install in one line  grpc.NewClient(target,        connect.WithInterceptors(     &http.Client{Transport:
//	                       DialOptions(cfg)...)          NewInterceptor(cfg))          NewTransport(nil)}
//	errors up front      New(cfg, opts...) (*Client,   New(cfg, opts...)             New(base, opts...)
//	                       error)                        (*Interceptor, error)         (*Transport, error)
//	an invalid option    grpc.NewClient fails, naming  calls fail with               requests fail with it;
//	                       it                            connect.CodeInternal;         Transport.Err()
//	                                                     Interceptor.Err()
//	by hand              Client.DialOptions, or the    Interceptor (a                Transport (an
//	                       interceptors of a Client      connect.Interceptor)          http.RoundTripper)
//	the policy           a gRFC A6 service config      a gRFC A6 service config      options: WithMaxAttempts,
//	                       (serviceconfig.Parse)         (serviceconfig.Parse)         WithBackoff,
//	                                                                                   WithRetryableStatus,
//	                                                                                   WithHedging; or
//	                                                                                   WithStrategy
//	policy from DNS      the resolver's config;        none: a URL is not resolved   none: a URL is not resolved
//	                       WithResolver                  by a gRPC resolver            by a gRPC resolver
//	AIP-194 defaults     AIP194Services                AIP194(specs),                Idempotent(req), the default
//	                                                     AIP194Services                of WithIdempotent
//	may be sent twice    none: grpc-go tells a call    Idempotent(spec)              Idempotent(req);
//	                       nothing of its method's                                     WithIdempotent,
//	                       idempotency                                                 WithIdempotencyKey
//	                       (AIP194Services reads the
//	                       .proto)
//	attempts at most     WithMaxAttemptsCap, a cap on  WithMaxAttemptsCap, a cap on  WithMaxAttempts (3)
//	                       the policy's maxAttempts      the policy's maxAttempts
//	                       (5)                           (5)
//	no retries           WithRetriesDisabled           WithRetriesDisabled           WithRetriesDisabled
//	count attempts       CountAttempts(&n), a          CountAttempts(ctx, &n) on     CountAttempts(ctx, &n) on
//	                       grpc.CallOption               the call's context            the request's context
//	narrow one call      Override(o), a                Override(ctx, o) on the       Override(ctx, o) on the
//	                       grpc.CallOption               call's context                request's context
//	loosen it            WithTrustedOverrides          WithTrustedOverrides          WithTrustedOverrides
//	per-attempt timeout  WithPerAttemptTimeout, or     WithPerAttemptTimeout, or     WithPerAttemptTimeout
//	                       perAttemptRecvTimeout         perAttemptRecvTimeout
//	hedging              hedgingPolicy                 hedgingPolicy (a stream's,    WithHedging(delay,
//	                                                     once its request is           maxAttempts)
//	                                                     complete)
//	adaptive hedging     WithAdaptiveHedging(c),       none yet: the hedgingDelay    none yet: the delay is fixed
//	                       AdaptiveHedgingConfig         is fixed
//	distinct backends    the rebound_distinct          none: net/http picks the      none: net/http picks the
//	                       balancer                      connection, no balancer       connection, no balancer
//	                       (grpcretry/distinct)
//	streams              all kinds, replayed from the  all kinds, replayed from the  none: a response body is the
//	                       buffer until committed        buffer until committed        caller's once returned
//	replay buffer        WithBufferLimits(total,       WithBufferLimits(total,       WithBufferLimits(total,
//	                       perCall)                      perCall), for streams; a      perCall), for bodies it
//	                                                     unary request is marshaled    must read to send them
//	                                                     again for each attempt        again
//	what is retryable    the policy's codes;           the policy's codes;           WithRetryableStatus;
//	                       WithClassifier                WithClassifier                WithClassifier
//	a classifier sees    Failure.Method,               Failure.Method, Failure.Err   Failure.Request,
//	                       Failure.Status                                              Failure.Response,
//	                                                                                   Failure.Err
//	server hint          grpc-retry-pushback-ms;       grpc-retry-pushback-ms;       Retry-After;
//	                       RetryInfo                     RetryInfo                     WithRateLimitReset
//	hint required        WithRetryInfoRequired         WithRetryInfoRequired         none: HTTP has no RetryInfo
//	longest hint waited  WithRetryDelayCap (60s)       WithRetryDelayCap (60s)       WithRetryDelayCap (60s)
//	peer                 the server name               the server name               the host of the request's
//	                       (WithServerName; the          (WithServerName; the URL's    URL
//	                       conn's target)                host)
//	retry budget         retryThrottling, per server   retryThrottling, per server   WithBudgetPerHost (a
//	                       name                          name                          rebound.TokenBucket per
//	                                                                                   host)
//	and one beside it    WithBudget                    WithBudget                    WithBudget
//	adaptive throttle    WithAdaptiveThrottle, per     WithAdaptiveThrottle, per     WithAdaptiveThrottle, per
//	                       server name                   server name                   host
//	adaptive rate limit  WithAdaptiveRateLimit, per    WithAdaptiveRateLimit, per    WithAdaptiveRateLimit, per
//	                       server name                   server name                   host
//	attempts before this PreviousAttempts(ctx)         PreviousAttempts(header)      PreviousAttempts(header,
//	  one, in a handler    (grpc-previous-rpc-attempts)  (grpc-previous-rpc-attempts)  name), name the header of
//	                                                                                   WithPreviousAttemptsHeader
//	a failed call        "grpcretry: gave up after N   "connectretry: gave up after  the last response, with a
//	                       attempts (reason): …",        N attempts (reason): …",      nil error, if one came;
//	                       with the last attempt's       unwrapping to the last        else "httpretry: gave up
//	                       status (status.Code)          attempt's *connect.Error      after N attempts …"
//	why it stopped       errors.As(err, &e) with e a *rebound.Error: e.Attempts, e.Reason (below)
//	statistics           Client.Stats(),               Interceptor.Stats()           Transport.Stats()
//	                       StatsOf(conn)
//	statistics by        "/pkg.Service/Method"         "/pkg.Service/Method"         "GET host"
//	metrics              WithMeterProvider:            WithMeterProvider:            WithMeterProvider:
//	                       grpc.client.call.* (A96)      grpc.client.call.* (A96)      rebound.client.call.*
//	                       and rebound.client.call.*     and rebound.client.call.*
//	decision log         WithLogger                    WithLogger                    WithLogger
//	traces               WithTracerProvider (A72)      WithTracerProvider (A72)      WithTracerProvider
//	time, in tests       WithClock, WithRandom         WithClock, WithRandom         WithClock, WithRandom
//
// So, in each of them: count a call's attempts with CountAttempts (the
// first attempt, retries and hedges all count; a call made once counts 1);
// learn why a failed call stopped from the [*Error] its error unwraps to
// (httpretry returns a request's last response, a 503 say, with a nil
// error: the WithLogger record of giving up, with its "reason", says why
// no retry followed); read the statistics with Stats, or
// grpcretry.StatsOf(conn) for a conn made with the one line. The examples
// of each package (ExampleDialOptions and ExampleNew in grpcretry,
// ExampleNewInterceptor and ExampleNew in connectretry,
// ExampleNewTransport and ExampleNew in httpretry) show all three against
// in-process servers.
//
// # Words
//
// An attempt is one try of a call, the first included. A retry is an
// attempt made after one failed; a hedge is an attempt made while others
// are still in flight, the first success winning. A call is throttled when
// its retry budget (an A6 [Throttle], a [TokenBucket], any [Budget])
// refuses it a retry or hedge, or an [AdaptiveThrottle] keeps an attempt
// home ([ErrThrottled]); the server's own refusal of an attempt sent too
// fast (HTTP 429, RESOURCE_EXHAUSTED) is what Smithy calls a throttling
// error, and a classifier marks it with [RetryInfo.SlowDown]. Server
// pushback is the server's own word on when, or whether, to retry. The
// peer whose state (budget, throttle, rate limit) a call shares is its
// server name in grpcretry and connectretry (WithServerName) and its host
// in httpretry. A call is committed once it cannot be
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
//   - Replay buffers are capped per call and per client by
//     WithBufferLimits in grpcretry, connectretry (streams) and httpretry
//     (1 MiB and 16 MiB by default, [DefaultBufferPerCall] and
//     [DefaultBufferTotal]), service configs by their size
//     (serviceconfig), and server hints by WithRetryDelayCap (60s by
//     default, [DefaultRetryDelayCap]) in all three.
package rebound
