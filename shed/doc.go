// Package shed protects a server from more work than it can do, and tells
// retrying clients when to come back.
//
// A [Shedder] holds an adaptive concurrency limit. A request that finds
// the limit reached is rejected at once, before it costs the server
// anything, with UNAVAILABLE (HTTP 503) and a pushback: gRPC's
// grpc-retry-pushback-ms (gRFC A6), which grpcretry and connectretry obey,
// or HTTP's Retry-After. The pushback comes from the server's own state:
// while the requests it recently shed, or saw its handlers fail with a
// sign of overload, are few beside those it served ([Config.RetryShare],
// a tenth by default), it invites a retry after the time a request of
// that method takes plus the time needed to work off the retries it has
// already invited; beyond that, the retries could not all be served, and
// it says "don't retry" (a negative pushback). Since it invites a retry
// only while its recent rejections are at most RetryShare of the requests
// it served, the load stays within about 1 + RetryShare of what the
// clients ask, from retries that obey its pushback: a client's own
// retry budget sees only its own thin slice of the traffic, while the
// server sees all of it. On loopback, 200 client processes with 5
// attempts each, offering 75% of a server's capacity through a 1.5s
// outage, made 1.05-1.06 attempts per call during it in gRPC, Connect and
// HTTP, whether half the capacity went, requests hung or a dependency
// failed fast (4.8 without a Shedder in the last), and their calls
// succeeded as often as before within 0.9s of its end (go test
// ./internal/shedload -run TestOutages -v). In the simulation, through a
// 30s outage of every shape, the load stayed at 1.00x from 50 clients at
// 20 requests a second as from 10,000 at 0.1 (rebound sim -fleet).
//
// # When the handler fails
//
// A handler's own failure with UNAVAILABLE or RESOURCE_EXHAUSTED (HTTP 429
// or 503) that carries no pushback of its own (a grpc-retry-pushback-ms
// trailer or metadata, a google.rpc.RetryInfo detail, a Retry-After) gets
// the Shedder's, by the same rule, and counts in the share: when a
// dependency fails fast, retries stop as they do when the Shedder sheds. A
// pushback the handler set is left as it is. These failures do not shrink
// the limit: a quota aimed at one client, a missing shard or a dependency
// that fails in microseconds says nothing of this server's capacity. A
// handler that knows the server itself is overloaded says so with
// [ReportOverload].
//
// # The limit
//
// The limit follows latency, as Netflix's concurrency-limits (Gradient2)
// and Envoy's adaptive concurrency filter do: while requests take about as
// long as they do on an idle server, it grows by the square root of the
// limit; when they take longer than [Config.Tolerance] times that,
// requests are queueing somewhere inside the server, and it shrinks toward
// what the server handles without queueing. How long requests take now is
// a moving lower quartile of their ratios to their method's idle latency:
// it rises slowly with slower requests and falls fast with faster ones,
// so that once requests take their usual time again the limit grows back
// at once. Within one idle latency the limit at most halves, however many
// requests end in it: requests a hung dependency held together end
// together, and tell of one event.
//
// Anyone who can send a request can try to teach it; so only a request that
// succeeded, and that its client did not cut short by a deadline or a
// cancellation, is a sample of the server's work. Time its handler spent
// waiting on the client, reading a message or a body that has not come,
// writing to a client that does not read, is not: that wait holds no slot
// either, so that clients that send nothing cannot take the capacity.
//
// Each method (gRPC method, Connect procedure, [Shedder.Handler]) has its
// own idle latency, so that a health check answering in microseconds does
// not make a heavy method look queued. It is robust: the median of each
// interval of at least a second and eight samples, and the lower quartile
// of those medians over the last 20 seconds, in which each peer (an IPv4
// address or an IPv6 /64, whatever its port) adds at most 16 samples plus
// an eighth of an interval's and, beside two or more other peers, at most
// half as many as they do. No single request moves it, one client among
// several moves it little (on a method called ten times a second, as on a
// busy one), and a sustained overload is taken for normal only after
// about 15 seconds.
//
// # Front doors
//
// The same Shedder serves grpc-go ([Shedder.UnaryServerInterceptor],
// [Shedder.StreamServerInterceptor], and [Shedder.TapHandle] to reject
// before a request is read) and net/http ([Shedder.Handler]); connect-go
// has a package per major, shed/connectshed for v1 and
// shed/connectshed/v2, so that package shed builds neither (each
// package's Interceptor). One Shedder per server (or per resource the
// handlers share) lets them share one limit. Its metrics are
// OpenTelemetry instruments ([WithMeterProvider]).
package shed
