package serviceconfig

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// Parse parses and validates a service config in JSON.
//
// It returns a non-nil Config if and only if the error is nil. The error
// lists every problem found, one per line; its Unwrap() []error method (as
// for any errors.Join result) returns them one by one, each an [*Error].
// They come in document order, with problems of an object as a whole, such
// as a missing field, after those of its members. A JSON syntax error stops
// parsing and is the only one reported. Config.Warnings are ordered the same
// way.
//
// Beyond the rules of A6, which are enforced exactly, Parse decides:
//
//   - JSON integer means the integer form of a JSON number: 2 is an integer,
//     2.0, 2e0 and "2" are not. This applies to maxAttempts, maxTokens and
//     integer status codes.
//   - null for any field means the field is absent.
//   - A key may appear only once in each object that Parse interprets;
//     a repeat is an error. Objects in unknown fields are not inspected.
//   - Unknown fields are accepted for forward compatibility and reported in
//     Config.Warnings, with a hint when they differ from a known field only
//     in case or underscores. The gRPC fields loadBalancingConfig and
//     healthCheckConfig are kept as written, without being checked: grpc-go
//     checks them when grpcretry hands them over.
//   - A methodConfig entry without names applies to no method: it is kept
//     and draws a warning. A name with a method but no service is an error,
//     as is the same name appearing twice anywhere in the config.
//   - maxAttempts above [DefaultMaxAttempts] is kept as written, with a
//     warning; integers too large for an int saturate.
//   - Status codes may be listed more than once (with a warning). OK is
//     accepted, since it is a valid code; [Lint] flags it.
//   - Durations follow [ParseDuration], so values beyond the time.Duration
//     range are errors. hedgingDelay and timeout must not be negative. A
//     timeout of "0s" means no timeout, with a warning, since grpc-go would
//     instead fail every call at once.
//   - backoffMultiplier and tokenRatio must be finite and nonzero as
//     float64: values that overflow to infinity or underflow to zero are
//     errors. A tokenRatio that truncates to 0.000 draws a warning, since
//     successful calls would then never restore tokens.
//   - maxRequestMessageBytes and maxResponseMessageBytes may be JSON
//     integers or, as proto3 JSON allows for 64-bit integers, strings
//     holding one ("1024"); they must be in 0..math.MaxInt64.
//   - retryThrottling is checked whether or not methodConfig is present.
func Parse(data []byte) (*Config, error) {
	root, err := decodeJSON(data)
	if err != nil {
		return nil, errors.Join(err)
	}
	p := &parser{names: make(map[Name]path), codePos: make(map[codeKey]int)}
	c := p.config(root)
	if len(p.errs) > 0 {
		slices.SortStableFunc(p.errs, func(a, b located[*Error]) int { return cmp.Compare(a.pos, b.pos) })
		errs := make([]error, len(p.errs))
		for i, e := range p.errs {
			errs[i] = e.v
		}
		return nil, errors.Join(errs...)
	}
	slices.SortStableFunc(p.warns, func(a, b located[Warning]) int { return cmp.Compare(a.pos, b.pos) })
	for _, w := range p.warns {
		c.Warnings = append(c.Warnings, w.v)
	}
	if p.rawFields {
		var m map[string]json.RawMessage // exact keys, unlike a struct
		if err := json.Unmarshal(data, &m); err != nil {
			return nil, fmt.Errorf("serviceconfig: %w", err) // decodeJSON accepted what encoding/json does not
		}
		for _, k := range []string{"loadBalancingConfig", "healthCheckConfig"} {
			if string(m[k]) == "null" { // absent, as for every field
				delete(m, k)
			}
		}
		c.LoadBalancingConfig, c.HealthCheckConfig = m["loadBalancingConfig"], m["healthCheckConfig"]
	}
	c.codePos = p.codePos
	c.index = make(map[Name]*MethodConfig)
	for i := range c.MethodConfigs {
		for _, n := range c.MethodConfigs[i].Names {
			c.index[n] = &c.MethodConfigs[i]
		}
	}
	return c, nil
}

// parser collects errors and warnings while it walks a decoded document.
// Each problem carries a byte offset, so that the walk, which handles an
// object's own members before descending into them, can still report
// problems in document order.
type parser struct {
	errs    []located[*Error]
	warns   []located[Warning]
	names   map[Name]path // where each name was first seen
	codePos map[codeKey]int
	// rawFields says the config has loadBalancingConfig or
	// healthCheckConfig, which Parse keeps as written.
	rawFields bool
}

type located[T any] struct {
	pos int64
	v   T
}

// errorf records an error at byte offset pos. Problems with a value use the
// value's start; problems with an object as a whole, such as a missing
// field, use its end.
func (p *parser) errorf(pos int64, at path, format string, args ...any) {
	p.errs = append(p.errs, located[*Error]{pos, &Error{Path: string(at), Message: fmt.Sprintf(format, args...)}})
}

func (p *parser) warnf(pos int64, at path, format string, args ...any) {
	p.warns = append(p.warns, located[Warning]{pos, Warning{Path: string(at), Message: fmt.Sprintf(format, args...)}})
}

// object checks that v is an object and returns its known members by key,
// leaving out nulls. It reports repeated keys as errors and unknown keys as
// warnings.
func (p *parser) object(v *jsonValue, at path, known ...string) (map[string]*jsonValue, bool) {
	if v.kind != jsonObject {
		if at == "" {
			p.errorf(v.start, at, "a service config must be a JSON object, got %s", v.kind)
		} else {
			p.errorf(v.start, at, "must be a JSON object, got %s", v.kind)
		}
		return nil, false
	}
	fields := make(map[string]*jsonValue, len(v.members))
	seen := make(map[string]bool, len(v.members))
	for _, m := range v.members {
		if seen[m.key] {
			p.errorf(m.start, at.field(m.key), "duplicate key in object")
			continue
		}
		seen[m.key] = true
		if !slices.Contains(known, m.key) {
			p.warnf(m.start, at.field(m.key), "%s", unknownField(m.key, known))
			continue
		}
		if m.value.kind != jsonNull {
			fields[m.key] = m.value
		}
	}
	return fields, true
}

// unknownField describes an unknown key, suggesting the known one it most
// likely misspells: proto field names such as max_attempts and other
// casings are not accepted by every gRPC implementation.
func unknownField(key string, known []string) string {
	norm := func(s string) string {
		return strings.ToLower(strings.NewReplacer("_", "", "-", "").Replace(s))
	}
	for _, k := range known {
		if norm(k) == norm(key) {
			return fmt.Sprintf("unknown field, ignored (did you mean %q?)", k)
		}
	}
	return "unknown field, ignored"
}

func (p *parser) config(root *jsonValue) *Config {
	f, ok := p.object(root, "", "loadBalancingPolicy", "loadBalancingConfig", "healthCheckConfig", "methodConfig", "retryThrottling")
	if !ok {
		return nil
	}
	c := &Config{}
	p.rawFields = f["loadBalancingConfig"] != nil || f["healthCheckConfig"] != nil
	if v := f["loadBalancingPolicy"]; v != nil {
		c.LoadBalancingPolicy, _ = p.str(v, "loadBalancingPolicy")
	}
	if v := f["methodConfig"]; v != nil {
		at := path("methodConfig")
		if v.kind != jsonArray {
			p.errorf(v.start, at, "must be a JSON array of objects, got %s", v.kind)
		} else {
			for i, e := range v.elems {
				c.MethodConfigs = append(c.MethodConfigs, p.methodConfig(e, at.index(i), i))
			}
		}
	}
	if v := f["retryThrottling"]; v != nil {
		c.RetryThrottling = p.retryThrottling(v, "retryThrottling")
	}
	return c
}

func (p *parser) methodConfig(v *jsonValue, at path, i int) MethodConfig {
	var mc MethodConfig
	f, ok := p.object(v, at, "name", "retryPolicy", "hedgingPolicy", "timeout", "waitForReady", "maxRequestMessageBytes", "maxResponseMessageBytes")
	if !ok {
		return mc
	}
	if nv := f["name"]; nv != nil {
		mc.Names = p.nameList(nv, at.field("name"))
	} else {
		p.warnf(v.end, at, `no "name" list, so this entry applies to no method`)
	}
	rv, hv := f["retryPolicy"], f["hedgingPolicy"]
	if rv != nil {
		mc.RetryPolicy = p.retryPolicy(rv, at.field("retryPolicy"), i)
	}
	if hv != nil {
		mc.HedgingPolicy = p.hedgingPolicy(hv, at.field("hedgingPolicy"), i)
	}
	if rv != nil && hv != nil {
		p.errorf(v.end, at, "retryPolicy and hedgingPolicy are mutually exclusive; set at most one")
	}
	if tv := f["timeout"]; tv != nil {
		at := at.field("timeout")
		if d, ok := p.duration(tv, at); ok {
			switch {
			case d < 0:
				p.errorf(tv.start, at, "must not be negative")
			case d == 0:
				p.warnf(tv.start, at, "a timeout of 0 is treated as no timeout (grpc-go instead fails every call at once); omit the field to say so")
			}
			mc.Timeout = max(d, 0)
		}
	}
	if bv := f["waitForReady"]; bv != nil {
		if bv.kind == jsonBool {
			b := bv.boolean
			mc.WaitForReady = &b
		} else {
			p.errorf(bv.start, at.field("waitForReady"), "must be a boolean, got %s", bv.kind)
		}
	}
	if nv := f["maxRequestMessageBytes"]; nv != nil {
		mc.MaxRequestMessageBytes = p.byteLimit(nv, at.field("maxRequestMessageBytes"))
	}
	if nv := f["maxResponseMessageBytes"]; nv != nil {
		mc.MaxResponseMessageBytes = p.byteLimit(nv, at.field("maxResponseMessageBytes"))
	}
	return mc
}

func (p *parser) nameList(v *jsonValue, at path) []Name {
	if v.kind != jsonArray {
		p.errorf(v.start, at, "must be a JSON array of objects, got %s", v.kind)
		return nil
	}
	if len(v.elems) == 0 {
		p.warnf(v.start, at, "empty, so this entry applies to no method")
		return nil
	}
	var names []Name
	for j, e := range v.elems {
		at := at.index(j)
		f, ok := p.object(e, at, "service", "method")
		if !ok {
			continue
		}
		var n Name
		okS, okM := true, true
		if sv := f["service"]; sv != nil {
			n.Service, okS = p.str(sv, at.field("service"))
		}
		if mv := f["method"]; mv != nil {
			n.Method, okM = p.str(mv, at.field("method"))
		}
		if !okS || !okM {
			continue
		}
		if n.Service == "" && n.Method != "" {
			p.errorf(e.start, at, "method %s needs a service", quoteJSON(excerpt(n.Method)))
			continue
		}
		if strings.Contains(n.Service, "/") || strings.Contains(n.Method, "/") {
			p.warnf(e.start, at, `contains "/", so it matches no call`)
		}
		if prev, dup := p.names[n]; dup {
			p.errorf(e.start, at, "duplicate name %s (also in %s)", excerpt(n.String()), prev)
			continue
		}
		p.names[n] = at
		names = append(names, n)
	}
	return names
}

func (p *parser) retryPolicy(v *jsonValue, at path, i int) *RetryPolicy {
	f, ok := p.object(v, at, "maxAttempts", "initialBackoff", "maxBackoff", "backoffMultiplier", "retryableStatusCodes")
	if !ok {
		return nil
	}
	rp := &RetryPolicy{MaxAttempts: p.maxAttempts(v, f, at)}
	initialOK, maxOK := false, false
	for _, b := range []struct {
		name string
		d    *time.Duration
		ok   *bool
	}{
		{"initialBackoff", &rp.InitialBackoff, &initialOK},
		{"maxBackoff", &rp.MaxBackoff, &maxOK},
	} {
		at := at.field(b.name)
		dv := f[b.name]
		if dv == nil {
			p.errorf(v.end, at, "must be specified")
			continue
		}
		d, ok := p.duration(dv, at)
		if ok && d <= 0 {
			p.errorf(dv.start, at, "must be greater than 0")
			ok = false
		}
		*b.d, *b.ok = d, ok
	}
	if initialOK && maxOK && rp.MaxBackoff < rp.InitialBackoff {
		p.warnf(f["maxBackoff"].start, at.field("maxBackoff"), "is less than initialBackoff, so every backoff is capped at maxBackoff")
	}
	if mv := f["backoffMultiplier"]; mv != nil {
		rp.BackoffMultiplier, _, _ = p.positiveNumber(mv, at.field("backoffMultiplier"))
	} else {
		p.errorf(v.end, at.field("backoffMultiplier"), "must be specified")
	}
	at = at.field("retryableStatusCodes")
	if cv := f["retryableStatusCodes"]; cv != nil {
		set, ok := p.codeList(cv, at, codeKey{methodConfig: i})
		if ok && len(cv.elems) == 0 {
			p.errorf(cv.start, at, "must be non-empty")
		}
		rp.RetryableStatusCodes = set
	} else {
		p.errorf(v.end, at, "must be specified")
	}
	return rp
}

func (p *parser) hedgingPolicy(v *jsonValue, at path, i int) *HedgingPolicy {
	f, ok := p.object(v, at, "maxAttempts", "hedgingDelay", "nonFatalStatusCodes")
	if !ok {
		return nil
	}
	hp := &HedgingPolicy{MaxAttempts: p.maxAttempts(v, f, at)}
	if dv := f["hedgingDelay"]; dv != nil {
		at := at.field("hedgingDelay")
		if d, ok := p.duration(dv, at); ok {
			if d < 0 {
				p.errorf(dv.start, at, "must not be negative")
			}
			hp.HedgingDelay = max(d, 0)
		}
	}
	if cv := f["nonFatalStatusCodes"]; cv != nil {
		hp.NonFatalStatusCodes, _ = p.codeList(cv, at.field("nonFatalStatusCodes"), codeKey{methodConfig: i, hedging: true})
	}
	return hp
}

func (p *parser) retryThrottling(v *jsonValue, at path) *RetryThrottling {
	f, ok := p.object(v, at, "maxTokens", "tokenRatio")
	if !ok {
		return nil
	}
	t := &RetryThrottling{}
	if mv := f["maxTokens"]; mv != nil {
		at := at.field("maxTokens")
		if n, ok := p.integer(mv, at); ok {
			if n <= 0 || n > 1000 {
				p.errorf(mv.start, at, "must be in the range (0, 1000], got %s", show(mv))
			} else {
				t.MaxTokens = int(n)
			}
		}
	} else {
		p.errorf(v.end, at.field("maxTokens"), "must be specified")
	}
	if rv := f["tokenRatio"]; rv != nil {
		at := at.field("tokenRatio")
		if _, n, ok := p.positiveNumber(rv, at); ok {
			t.TokenRatio = float64(n.milli()) / 1000
			if t.TokenRatio == 0 {
				p.warnf(rv.start, at, "%s is 0.000 once the decimal places beyond 3 are dropped, so successful calls never restore tokens", show(rv))
			}
		}
	} else {
		p.errorf(v.end, at.field("tokenRatio"), "must be specified")
	}
	return t
}

// maxAttempts checks the maxAttempts field of the retry or hedging policy
// obj, whose known fields are f.
func (p *parser) maxAttempts(obj *jsonValue, f map[string]*jsonValue, at path) int {
	at = at.field("maxAttempts")
	v := f["maxAttempts"]
	if v == nil {
		p.errorf(obj.end, at, "must be specified")
		return 0
	}
	n, ok := p.integer(v, at)
	switch {
	case !ok:
		return 0
	case n <= 1:
		p.errorf(v.start, at, "must be greater than 1, got %s", show(v))
		return 0
	case n > DefaultMaxAttempts:
		p.warnf(v.start, at, "%s is above the default client limit of %d; clients make at most %d attempts unless their limit is raised",
			show(v), DefaultMaxAttempts, DefaultMaxAttempts)
	}
	return int(min(n, math.MaxInt))
}

func (p *parser) str(v *jsonValue, at path) (string, bool) {
	if v.kind != jsonString {
		p.errorf(v.start, at, "must be a string, got %s", v.kind)
		return "", false
	}
	return v.text, true
}

// integer returns the value of a number in JSON integer form, saturated to
// the int64 range.
func (p *parser) integer(v *jsonValue, at path) (int64, bool) {
	if v.kind != jsonNumber {
		p.errorf(v.start, at, "must be a JSON integer, got %s", v.kind)
		return 0, false
	}
	n := splitNumber(v.text)
	if !n.isInteger() {
		p.errorf(v.start, at, "must be a JSON integer, got %s", show(v))
		return 0, false
	}
	i, err := strconv.ParseInt(v.text, 10, 64)
	if err != nil { // out of range: the syntax is already checked
		i = math.MaxInt64
		if n.neg {
			i = math.MinInt64
		}
	}
	return i, true
}

// positiveNumber checks that v is a JSON number greater than 0 that is finite
// and nonzero as a float64.
func (p *parser) positiveNumber(v *jsonValue, at path) (float64, jsonNumberParts, bool) {
	if v.kind != jsonNumber {
		p.errorf(v.start, at, "must be a JSON number, got %s", v.kind)
		return 0, jsonNumberParts{}, false
	}
	n := splitNumber(v.text)
	if n.neg || n.isZero() {
		p.errorf(v.start, at, "must be greater than 0, got %s", show(v))
		return 0, n, false
	}
	f, err := strconv.ParseFloat(v.text, 64)
	switch {
	case err != nil || math.IsInf(f, 0):
		p.errorf(v.start, at, "%s is too large for a float64", show(v))
		return 0, n, false
	case f == 0:
		p.errorf(v.start, at, "%s is too small for a float64 and would round to 0", show(v))
		return 0, n, false
	}
	return f, n, true
}

func (p *parser) duration(v *jsonValue, at path) (time.Duration, bool) {
	if v.kind != jsonString {
		p.errorf(v.start, at, `must be a duration string like "1.5s", got %s`, v.kind)
		return 0, false
	}
	d, err := parseDuration(v.text)
	if err != nil {
		p.errorf(v.start, at, "invalid duration %s: %v", show(v), err)
		return 0, false
	}
	return d, true
}

// codeList parses an array of status codes, recording where each code was
// first written under key (whose code field it sets).
func (p *parser) codeList(v *jsonValue, at path, key codeKey) (CodeSet, bool) {
	if v.kind != jsonArray {
		p.errorf(v.start, at, "must be a JSON array of status codes, got %s", v.kind)
		return 0, false
	}
	var set CodeSet
	for j, e := range v.elems {
		c, ok := p.code(e, at.index(j))
		if !ok {
			continue
		}
		key.code = c
		if set.Has(c) {
			p.warnf(e.start, at.index(j), "duplicate status code %s (also at %s)", c, at.index(p.codePos[key]))
			continue
		}
		set |= 1 << c
		p.codePos[key] = j
	}
	return set, true
}

func (p *parser) code(v *jsonValue, at path) (Code, bool) {
	switch v.kind {
	case jsonNumber:
		if !splitNumber(v.text).isInteger() {
			p.errorf(v.start, at, "status code must be an integer or a name, got %s", show(v))
			return 0, false
		}
		i, err := strconv.ParseInt(v.text, 10, 64)
		if err != nil || i < 0 || i > int64(maxCode) {
			p.errorf(v.start, at, "invalid status code %s; valid codes are 0 to %d", show(v), maxCode)
			return 0, false
		}
		return Code(i), true
	case jsonString:
		c, err := ParseCode(v.text)
		if err != nil {
			p.errorf(v.start, at, "unknown status code name %s", show(v))
			return 0, false
		}
		return c, true
	default:
		p.errorf(v.start, at, "status code must be a name or an integer, got %s", v.kind)
		return 0, false
	}
}

// byteLimit parses a message size limit: a non-negative JSON integer, or a
// string holding one as proto3 JSON allows for 64-bit integers.
func (p *parser) byteLimit(v *jsonValue, at path) *int64 {
	text := v.text
	switch {
	case v.kind == jsonNumber && splitNumber(text).isInteger():
	case v.kind == jsonString && isJSONInteger(text):
	case v.kind == jsonNumber || v.kind == jsonString:
		p.errorf(v.start, at, "must be an integer number of bytes, got %s", show(v))
		return nil
	default:
		p.errorf(v.start, at, "must be a JSON integer, got %s", v.kind)
		return nil
	}
	n, err := strconv.ParseInt(text, 10, 64)
	switch {
	case strings.HasPrefix(text, "-") && (n != 0 || err != nil):
		p.errorf(v.start, at, "must not be negative, got %s", show(v))
		return nil
	case err != nil:
		p.errorf(v.start, at, "%s is out of range; the limit is %d", show(v), int64(math.MaxInt64))
		return nil
	}
	return &n
}

// isJSONInteger reports whether s is -?(0|[1-9][0-9]*).
func isJSONInteger(s string) bool {
	s = strings.TrimPrefix(s, "-")
	if s == "" || (s[0] == '0' && len(s) > 1) {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// show returns a string or number value as written in JSON, shortened by
// excerpt.
func show(v *jsonValue) string {
	if v.kind == jsonString {
		return quoteJSON(excerpt(v.text))
	}
	return excerpt(v.text)
}

// excerpt shortens s for an error message, so that a huge value in a config
// still gives one readable line.
func excerpt(s string) string {
	const limit = 64
	if len(s) <= limit {
		return s
	}
	i := limit
	for i > 0 && !utf8.RuneStart(s[i]) {
		i--
	}
	return s[:i] + "..."
}
