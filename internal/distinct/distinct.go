// Package distinct implements the "rebound_distinct" load-balancing
// policy that package grpcretry/distinct documents for users, and the
// per-call record it reads: the backends the attempts of one call were sent
// to. grpcretry puts a [Call] in the context of every call under a retry or
// hedging policy; the picker reads and extends it, so that hedges go to
// distinct backends and retries to a backend that has not failed the call
// yet, as gRFC A6 asks. Calls without a Call go to the child policy's
// choice untouched. Importing the package registers the policy.
//
// The record is internal because only grpcretry fills it: users select the
// policy in a service config and need nothing else.
package distinct

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"google.golang.org/grpc/balancer"
	"google.golang.org/grpc/balancer/roundrobin"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/serviceconfig"
)

// Name is the name of the policy in a service config.
const Name = "rebound_distinct"

func init() { balancer.Register(builder{}) }

// Call records the backend addresses that the attempts of one call were
// sent to, in the order they were picked. Put one in the context of every
// attempt of the call with [NewContext]; the policy reads and extends it on
// each pick. The zero value is an empty record, ready to use. A Call is
// safe for concurrent use.
type Call struct {
	mu    sync.Mutex
	addrs []string
	buf   [1]string // the first pick, without an allocation: a call that succeeds at once makes no other
}

// Addresses returns the addresses picked for the call's attempts so far,
// in order; an address repeats when every backend had been used. It returns
// nil before the first pick.
func (c *Call) Addresses() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.addrs)
}

func (c *Call) usedLocked(addr string) bool { return slices.Contains(c.addrs, addr) }

// inUse is set when the process builds its first balancer of this policy.
var inUse atomic.Bool

// InUse reports whether a balancer of this policy has been built in the
// process: until then no picker reads a [Call], and a caller may leave it
// out. A conn builds its balancer before its first pick, so a call that
// starts before the process's first rebound_distinct conn has one may
// miss it; its attempts then go where the child policy sends them.
func InUse() bool { return inUse.Load() }

type callKey struct{}

// NewContext returns a copy of ctx that carries c. A nil c returns ctx.
func NewContext(ctx context.Context, c *Call) context.Context {
	if c == nil {
		return ctx
	}
	return context.WithValue(ctx, callKey{}, c)
}

// Context is a context that carries a Call, as [NewContext]'s does, for a
// caller that keeps it in a value it has already allocated: set Context,
// and pass a pointer to the Context. The Call is made at the first pick,
// so that a call on a conn whose balancer is not this policy, the common
// case, carries only the room of a pointer for it.
type Context struct {
	context.Context
	call atomic.Pointer[Call]
}

// Value returns the Context itself for the policy's key, and otherwise
// asks the embedded context.
func (c *Context) Value(key any) any {
	if key == (callKey{}) {
		return c
	}
	return c.Context.Value(key)
}

// Call returns the context's Call, made on first use.
func (c *Context) Call() *Call {
	if call := c.call.Load(); call != nil {
		return call
	}
	c.call.CompareAndSwap(nil, new(Call))
	return c.call.Load()
}

// FromContext returns the Call in ctx, or nil if there is none.
func FromContext(ctx context.Context) *Call {
	switch v := ctx.Value(callKey{}).(type) {
	case *Call:
		return v
	case *Context:
		return v.Call()
	}
	return nil
}

// config is the parsed policy config.
type config struct {
	serviceconfig.LoadBalancingConfig
	child       string
	childConfig serviceconfig.LoadBalancingConfig
}

var defaultConfig = &config{child: roundrobin.Name}

type builder struct{}

func (builder) Name() string { return Name }

func (builder) Build(cc balancer.ClientConn, opts balancer.BuildOptions) balancer.Balancer {
	inUse.Store(true)
	return &distinctBalancer{cc: cc, opts: opts, addrs: map[balancer.SubConn]string{}}
}

// ParseConfig reads {"childPolicy": [{"name": {config}}, …]}: the first
// policy of the list that is registered is the child. Without childPolicy
// the child is round_robin.
func (builder) ParseConfig(js json.RawMessage) (serviceconfig.LoadBalancingConfig, error) {
	var raw struct {
		ChildPolicy *[]map[string]json.RawMessage `json:"childPolicy"`
	}
	if len(js) > 0 {
		if err := json.Unmarshal(js, &raw); err != nil {
			return nil, fmt.Errorf("distinct: %v", err)
		}
	}
	if raw.ChildPolicy == nil {
		return defaultConfig, nil
	}
	var names []string
	for i, entry := range *raw.ChildPolicy {
		if len(entry) != 1 {
			return nil, fmt.Errorf("distinct: childPolicy[%d]: want exactly one policy name, got %d", i, len(entry))
		}
		for name, cfg := range entry {
			if strings.EqualFold(name, Name) {
				return nil, fmt.Errorf("distinct: childPolicy[%d]: %s cannot be its own child", i, Name)
			}
			b := balancer.Get(name)
			if b == nil {
				names = append(names, name)
				continue
			}
			c := &config{child: b.Name()}
			if p, ok := b.(balancer.ConfigParser); ok {
				var err error
				if c.childConfig, err = p.ParseConfig(cfg); err != nil {
					return nil, fmt.Errorf("distinct: childPolicy[%d].%s: %v", i, name, err)
				}
			}
			return c, nil
		}
	}
	return nil, fmt.Errorf("distinct: childPolicy: no registered policy among %q", names)
}

// distinctBalancer runs the child policy on a ClientConn that records the
// address of each SubConn and wraps each picker. gRPC calls its methods one
// at a time; the child may call back from other goroutines, hence mu.
type distinctBalancer struct {
	cc   balancer.ClientConn
	opts balancer.BuildOptions

	child     balancer.Balancer
	childName string

	mu    sync.Mutex
	addrs map[balancer.SubConn]string // the address of every live SubConn
}

func (b *distinctBalancer) UpdateClientConnState(s balancer.ClientConnState) error {
	cfg, _ := s.BalancerConfig.(*config)
	if cfg == nil {
		cfg = defaultConfig
	}
	if err := b.ensureChild(cfg.child); err != nil {
		return err
	}
	s.BalancerConfig = cfg.childConfig
	return b.child.UpdateClientConnState(s)
}

// ensureChild builds the child policy, replacing one of another name.
func (b *distinctBalancer) ensureChild(name string) error {
	if b.child != nil && b.childName == name {
		return nil
	}
	bb := balancer.Get(name)
	if bb == nil {
		return fmt.Errorf("distinct: child policy %q is not registered", name)
	}
	if b.child != nil {
		b.child.Close()
	}
	b.child, b.childName = bb.Build(&childConn{ClientConn: b.cc, b: b}, b.opts), name
	return nil
}

func (b *distinctBalancer) ResolverError(err error) {
	if b.child == nil {
		if b.ensureChild(defaultConfig.child) != nil {
			return
		}
	}
	b.child.ResolverError(err)
}

// UpdateSubConnState forwards the deprecated notification to the child.
func (b *distinctBalancer) UpdateSubConnState(sc balancer.SubConn, s balancer.SubConnState) {
	if b.child != nil {
		//lint:ignore SA1019 a parent policy forwards what gRPC still calls
		b.child.UpdateSubConnState(sc, s)
	}
}

func (b *distinctBalancer) ExitIdle() {
	if b.child != nil {
		b.child.ExitIdle()
	}
}

func (b *distinctBalancer) Close() {
	if b.child != nil {
		b.child.Close()
	}
	b.mu.Lock()
	clear(b.addrs)
	b.mu.Unlock()
}

// childConn is the ClientConn the child sees.
type childConn struct {
	balancer.ClientConn
	b *distinctBalancer
}

func addrKey(addrs []resolver.Address) string {
	if len(addrs) == 1 {
		return addrs[0].Addr
	}
	keys := make([]string, len(addrs))
	for i, a := range addrs {
		keys[i] = a.Addr
	}
	return strings.Join(keys, ",")
}

func (c *childConn) NewSubConn(addrs []resolver.Address, opts balancer.NewSubConnOptions) (balancer.SubConn, error) {
	var sc balancer.SubConn
	listener := opts.StateListener
	opts.StateListener = func(s balancer.SubConnState) {
		if s.ConnectivityState == connectivity.Shutdown {
			c.b.mu.Lock()
			delete(c.b.addrs, sc)
			c.b.mu.Unlock()
		}
		if listener != nil {
			listener(s)
		}
	}
	//lint:ignore SA1019 the ClientConn has no other way to make a SubConn
	sc, err := c.ClientConn.NewSubConn(addrs, opts)
	if err != nil {
		return nil, err
	}
	c.b.mu.Lock()
	c.b.addrs[sc] = addrKey(addrs)
	c.b.mu.Unlock()
	return sc, nil
}

func (c *childConn) UpdateAddresses(sc balancer.SubConn, addrs []resolver.Address) {
	c.b.mu.Lock()
	if _, ok := c.b.addrs[sc]; ok {
		c.b.addrs[sc] = addrKey(addrs)
	}
	c.b.mu.Unlock()
	//lint:ignore SA1019 a child policy may still call it
	c.ClientConn.UpdateAddresses(sc, addrs)
}

func (c *childConn) UpdateState(s balancer.State) {
	if s.Picker != nil {
		c.b.mu.Lock()
		p := &picker{child: s.Picker, index: make(map[balancer.SubConn]int, len(c.b.addrs))}
		p.cands = make([]candidate, 0, len(c.b.addrs))
		for sc, addr := range c.b.addrs {
			p.index[sc] = len(p.cands)
			p.cands = append(p.cands, candidate{sc: sc, addr: addr})
		}
		c.b.mu.Unlock()
		s.Picker = p
	}
	c.ClientConn.UpdateState(s)
}

// errReplaced ends a pick of the child's that the policy did not use, for
// children that count the picks they hand out.
var errReplaced = errors.New("distinct: pick replaced by an unused backend")

// candidate is a SubConn the picker may choose instead of the child.
type candidate struct {
	sc     balancer.SubConn
	addr   string
	picked atomic.Bool // the child has picked it: it is eligible
}

// picker wraps the child's picker. Only SubConns the child has picked since
// the picker was made are eligible as substitutes: that keeps the child's
// judgement of which backends may take calls (readiness, health, ejection).
type picker struct {
	child balancer.Picker
	index map[balancer.SubConn]int // read-only after construction
	cands []candidate
	next  atomic.Uint32
}

func (p *picker) Pick(info balancer.PickInfo) (balancer.PickResult, error) {
	res, err := p.child.Pick(info)
	if err != nil {
		return res, err
	}
	i, ok := p.index[res.SubConn]
	if !ok {
		return res, nil
	}
	cand := &p.cands[i]
	if !cand.picked.Load() {
		cand.picked.Store(true)
	}
	call := FromContext(info.Ctx)
	if call == nil {
		return res, nil
	}
	call.mu.Lock()
	defer call.mu.Unlock()
	if call.addrs == nil {
		call.addrs = call.buf[:0]
	}
	if call.usedLocked(cand.addr) {
		if j := p.unusedLocked(call); j >= 0 {
			if res.Done != nil {
				res.Done(balancer.DoneInfo{Err: errReplaced})
			}
			call.addrs = append(call.addrs, p.cands[j].addr)
			return balancer.PickResult{SubConn: p.cands[j].sc}, nil
		}
	}
	call.addrs = append(call.addrs, cand.addr)
	return res, nil
}

// unusedLocked returns the index of an eligible candidate whose address the
// call has not used, or -1. The search starts at a rotating offset so that
// substitutes spread over the backends.
func (p *picker) unusedLocked(call *Call) int {
	n := len(p.cands)
	if n == 0 {
		return -1
	}
	start := int(p.next.Add(1) % uint32(n))
	for k := range n {
		j := (start + k) % n
		if p.cands[j].picked.Load() && !call.usedLocked(p.cands[j].addr) {
			return j
		}
	}
	return -1
}
