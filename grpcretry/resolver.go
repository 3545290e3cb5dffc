package grpcretry

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"weak"

	"google.golang.org/grpc"
	"google.golang.org/grpc/balancer"
	"google.golang.org/grpc/resolver"
	grpcsc "google.golang.org/grpc/serviceconfig"

	"github.com/rebound-go/rebound/internal/gopanic"
	"github.com/rebound-go/rebound/serviceconfig"
)

// A6 has the service config "transmitted to the client during DNS
// resolution", so that a service owner changes retry behaviour for every
// client without a redeploy. grpc-go hands the config a resolver delivers
// to its own retry code, which interceptors cannot reach; rebound therefore
// wraps the resolver: the wrapper sees the config's JSON as the resolver
// asks grpc-go to parse it, parses it with serviceconfig.Parse, and hands
// grpc-go only the fields grpc-go acts on and rebound does not (see
// grpcServiceConfig), so grpc-go never retries what rebound retries.

// WithResolver has the conns made with [Client.DialOptions] (or
// [DialOptions]) resolve b's scheme with b, and take the service config b
// delivers. It is the one call a custom resolver needs, in place of
// grpc.WithResolvers(b); grpc-go's dns resolver is wrapped without it. b
// must not be nil; a later WithResolver for the same scheme wins.
func WithResolver(b resolver.Builder) Option {
	return optionFunc(func(o *options) {
		if b == nil {
			o.Fail("WithResolver: nil resolver.Builder")
			return
		}
		o.resolvers[b.Scheme()] = b
	})
}

// resolverOptions returns the dial option that wraps the resolvers of c's
// schemes: the dns resolver registered with grpc-go (if any) and those of
// [WithResolver].
func (c *Client) resolverOptions() []grpc.DialOption {
	var bs []resolver.Builder
	for _, b := range c.opts.resolvers {
		bs = append(bs, &configBuilder{Builder: b, c: c})
	}
	if _, ok := c.opts.resolvers["dns"]; !ok {
		if b := resolver.Get("dns"); b != nil {
			bs = append(bs, &configBuilder{Builder: b, c: c})
		}
	}
	if len(bs) == 0 {
		return nil
	}
	return []grpc.DialOption{grpc.WithResolvers(bs...)}
}

// wraps reports whether c's DialOptions wrap the resolver of scheme.
func (c *Client) wraps(scheme string) bool {
	if _, ok := c.opts.resolvers[scheme]; ok {
		return true
	}
	return scheme == "dns"
}

// resolved is the service config in force for the conns of one Client
// that resolve one target: the resolver's last good config, or the
// Client's own until the resolver delivers one. Calls read it without a
// lock; a resolver replaces it whole.
type resolved struct {
	key  string // the target, as resolver.Target.String gives it
	cfg  atomic.Pointer[serviceconfig.Config]
	json atomic.Pointer[string] // the JSON cfg was parsed from; nil for the Client's own

	// panicked is a panic of the logger's on the resolver's goroutine,
	// for the next call to raise.
	panicked atomic.Pointer[gopanic.Panic]

	built   atomic.Bool   // a wrapped resolver was built for key
	readyMu sync.Once     // closes ready
	ready   chan struct{} // closed at the resolver's first update or error, or its close
}

func (s *resolved) markReady() { s.readyMu.Do(func() { close(s.ready) }) }

func (s *resolved) isReady() bool {
	select {
	case <-s.ready:
		return true
	default:
		return false
	}
}

// slot returns the resolved config of the target key, made on first use
// and kept while a resolver or a conn's target holds it.
func (c *Client) slot(key string) *resolved {
	for {
		v, ok := c.resolved.Load(key)
		if ok {
			if s := v.(weak.Pointer[resolved]).Value(); s != nil {
				return s
			}
		}
		s := &resolved{key: key, ready: make(chan struct{})}
		s.cfg.Store(c.cfg)
		wp := weak.Make(s)
		var stored bool
		if ok {
			stored = c.resolved.CompareAndSwap(key, v, wp)
		} else {
			_, loaded := c.resolved.LoadOrStore(key, wp)
			stored = !loaded
		}
		if stored {
			runtime.AddCleanup(s, func(wp weak.Pointer[resolved]) { c.resolved.CompareAndDelete(key, wp) }, wp)
			return s
		}
	}
}

// source returns the resolved config of cc's target, or nil when c does
// not wrap the resolver of its scheme: then c's own config applies.
func (c *Client) source(cc *grpc.ClientConn) *resolved {
	if cc == nil {
		return nil
	}
	// What configBuilder.Build keys the slot by: grpc-go's parsed
	// target, as resolver.Target.String gives it.
	key := cc.CanonicalTarget()
	scheme, _, ok := strings.Cut(key, ":")
	if !ok || !c.wraps(scheme) {
		return nil
	}
	return c.slot(key)
}

// await holds a call on a conn whose resolver rebound wraps until the
// resolver has spoken once, so that the first call runs under the
// resolver's config, as in grpc-go. It connects an idle conn, which builds
// the resolver; if the conn's resolver is not rebound's wrapper (the
// interceptors were installed by hand, or the application passed its own
// builder for the scheme first), it does not wait.
func (c *Client) await(ctx context.Context, cc *grpc.ClientConn) {
	t := c.target(cc)
	if t.src == nil || t.settled.Load() {
		return
	}
	s := t.src
	if !s.isReady() {
		cc.Connect()
		if s.built.Load() {
			select {
			case <-s.ready:
			case <-ctx.Done():
				return // the next call waits again
			}
		}
	}
	t.settled.Store(true)
}

// ResolverConfigErrors returns the number of service configs that name
// resolvers delivered and c rejected. A rejected config changes nothing:
// the last good one (or c's own) stays in force, and the error is logged
// at slog.LevelWarn to the [WithLogger] logger, or slog.Default().
func (c *Client) ResolverConfigErrors() uint64 { return c.configErrors.Load() }

// reject counts and logs a config the resolver of s delivered and c
// could not apply. It runs on the resolver's goroutine, where a panic of
// the logger's would end the process: the next call on a conn of s raises
// it instead (see package gopanic).
func (c *Client) reject(s *resolved, err error) {
	c.configErrors.Add(1)
	l := c.opts.Logger
	if l == nil {
		l = slog.Default()
	}
	gopanic.Run(func() {
		l.LogAttrs(context.Background(), slog.LevelWarn, "grpcretry: rejected the service config from the name resolver; the last good config stays in force",
			slog.String("target", s.key), slog.String("error", err.Error()))
	}, func(p *gopanic.Panic) { s.panicked.CompareAndSwap(nil, p) })
}

// raise raises, on the goroutine of a call on a conn of s, a panic of the
// logger's while it logged a config of s's resolver, once.
func (s *resolved) raise() {
	if p := s.panicked.Load(); p != nil && s.panicked.CompareAndSwap(p, nil) {
		p.Raise()
	}
}

// configBuilder wraps the resolver.Builder of one scheme.
type configBuilder struct {
	resolver.Builder
	c *Client
}

func (b *configBuilder) Build(t resolver.Target, cc resolver.ClientConn, opts resolver.BuildOptions) (resolver.Resolver, error) {
	s := b.c.slot(t.String())
	s.built.Store(true)
	w := &configConn{ClientConn: cc, c: b.c, s: s, disabled: opts.DisableServiceConfig, parsed: map[*grpcsc.ParseResult]parsedConfig{}}
	r, err := b.Builder.Build(t, w, opts)
	if err != nil {
		s.markReady() // grpc-go fails the calls; none should wait
		return nil, err
	}
	return &configResolver{Resolver: r, s: s}, nil
}

// configResolver releases the calls waiting for a resolver that closes
// before it has spoken.
type configResolver struct {
	resolver.Resolver
	s *resolved
}

func (r *configResolver) Close() {
	r.Resolver.Close()
	r.s.markReady()
}

// parsedConfig is what rebound made of a config the resolver had parsed.
type parsedConfig struct {
	cfg  *serviceconfig.Config // nil when err is set
	json string
	err  error
}

// configConn is the resolver.ClientConn a wrapped resolver reports to.
type configConn struct {
	resolver.ClientConn
	c        *Client
	s        *resolved
	disabled bool // grpc.WithDisableServiceConfig: the Client's own config stays

	mu     sync.Mutex
	parsed map[*grpcsc.ParseResult]parsedConfig // parsed since the last UpdateState
}

// ParseServiceConfig parses js with serviceconfig.Parse, and has grpc-go
// parse the fields it acts on (see grpcServiceConfig); grpc-go's result is
// returned, and rebound's kept for the UpdateState that carries it.
func (w *configConn) ParseServiceConfig(js string) *grpcsc.ParseResult {
	var (
		p  = parsedConfig{json: js}
		pr *grpcsc.ParseResult
	)
	cfg, err := serviceconfig.Parse([]byte(js))
	if err == nil {
		var gjs []byte
		if gjs, err = grpcConfigJSON(cfg); err == nil {
			if pr = w.ClientConn.ParseServiceConfig(string(gjs)); pr.Err != nil {
				err = fmt.Errorf("grpc-go: %w", pr.Err)
			}
		}
	}
	if err != nil {
		p.err = err
		pr = &grpcsc.ParseResult{Err: err}
	} else {
		p.cfg = cfg
	}
	w.mu.Lock()
	w.parsed[pr] = p
	w.mu.Unlock()
	return pr
}

// errUnparsed is the error of a config that did not come from
// ParseServiceConfig: rebound cannot read it.
var errUnparsed = errors.New("the service config was not parsed by the resolver.ClientConn's ParseServiceConfig")

// UpdateState applies the state's service config, as grpc-go would: a
// valid one replaces the config in force, none keeps it, an invalid one
// is rejected (see [Client.ResolverConfigErrors]). grpc-go gets the state
// with its part of a valid config, or with none, so that a rejected config
// changes nothing there either; the resolver is then told the state was
// bad, and resolves again.
func (w *configConn) UpdateState(st resolver.State) error {
	defer w.s.markReady()
	w.mu.Lock()
	p, ok := w.parsed[st.ServiceConfig]
	clear(w.parsed)
	w.mu.Unlock()
	if w.disabled || st.ServiceConfig == nil {
		return w.ClientConn.UpdateState(st)
	}
	if !ok {
		// A resolver's own error (grpc-go's dns resolver reports a failed
		// TXT lookup so), or a config rebound cannot read.
		p.err = st.ServiceConfig.Err
		if p.err == nil {
			p.err = errUnparsed
		}
	}
	if p.err != nil {
		w.c.reject(w.s, p.err)
		st.ServiceConfig = nil
		if err := w.ClientConn.UpdateState(st); err != nil {
			return err
		}
		return balancer.ErrBadResolverState
	}
	if cur := w.s.json.Load(); cur == nil || *cur != p.json {
		w.s.json.Store(&p.json)
		w.s.cfg.Store(p.cfg)
	}
	return w.ClientConn.UpdateState(st)
}

// ReportError passes err on, and releases the calls waiting for the
// resolver's first word.
func (w *configConn) ReportError(err error) {
	defer w.s.markReady()
	w.mu.Lock()
	clear(w.parsed) // parsed for a state that never came
	w.mu.Unlock()
	w.ClientConn.ReportError(err)
}
