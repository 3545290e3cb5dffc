package serviceconfig

import (
	"bytes"
	"cmp"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
)

// DefaultMaxBytes is the size limit of Parse's input unless [MaxBytes] sets
// another: 4 MiB, the largest message a grpc-go client receives by default.
// Service configs are a few KiB; the limit bounds the time and memory that
// a corrupt or hostile one can cost.
const DefaultMaxBytes = 4 << 20

// utf8BOM is the UTF-8 encoding of U+FEFF, the byte order mark.
var utf8BOM = []byte("\xef\xbb\xbf")

// maxProblems is how many errors, and how many warnings, Parse reports; it
// counts the rest in a final "and N more" entry.
const maxProblems = 100

// ParseOption changes how [Parse] reads a config. [MaxBytes] makes one.
type ParseOption interface{ apply(*parseOptions) }

type parseOptions struct {
	maxBytes int
	lint     bool
}

type maxBytesOption int

func (o maxBytesOption) apply(p *parseOptions) { p.maxBytes = int(o) }

type lintOption struct{}

func (lintOption) apply(p *parseOptions) { p.lint = true }

// IncludeLint makes [Parse] report the warnings of [Lint] among its own, in
// document order, whether or not the config is valid: in Config.Warnings,
// or beside the errors in a [*ParseError]. A tool that shows every problem
// of a config at once needs nothing more; calling Lint on the Config as
// well would repeat them. Entries that name no method are not linted, as
// Lint leaves them out.
func IncludeLint() ParseOption { return lintOption{} }

// MaxBytes sets the size limit of Parse's input to n bytes; a larger input
// is rejected before it is read. n < 1 means [DefaultMaxBytes]; math.MaxInt
// means no limit.
func MaxBytes(n int) ParseOption {
	if n < 1 {
		n = DefaultMaxBytes
	}
	return maxBytesOption(n)
}

// Parse parses and validates a service config in JSON.
//
// It returns a non-nil Config if and only if the error is nil. The error is
// a [*ParseError] that lists every problem found, one per line; its
// Unwrap() []error method (as for any errors.Join result) returns them one
// by one, each an [*Error]. They come in document order, with problems of an
// object as a whole, such as a missing field, after those of its members. A
// JSON syntax error stops parsing and is the only one reported.
// Config.Warnings are ordered the same way. Each Error and Warning carries
// the line and column of the value or key it is about.
//
// Parse takes time and memory linear in the size of its input: it
// allocates at most about 5 bytes per byte of input, mostly the Config it
// returns (see BENCHMARKS.md for hostile inputs). Input longer
// than [DefaultMaxBytes], or the limit set with [MaxBytes], is rejected
// unread. Only the first 100 errors and the first 100 warnings are kept; a
// last entry, without a path, says how many more there were. Values and keys
// quoted in messages are shortened.
//
// Beyond the rules of A6, which are enforced exactly, Parse decides:
//
//   - JSON integer means the integer form of a JSON number: 2 is an integer,
//     2.0, 2e0 and "2" are not. This applies to maxAttempts and integer
//     status codes.
//   - null for any field means the field is absent.
//   - Unknown fields are accepted for forward compatibility and reported in
//     Config.Warnings, naming the known field of the same object that the
//     key most likely misspells: the nearest within 1 to 3 edits (a letter
//     added, dropped, changed, or two swapped; more for longer names),
//     ignoring letter case, underscores and dashes. Objects in unknown
//     fields are not inspected.
//   - A UTF-8 byte order mark before the JSON is read past, with a warning:
//     RFC 8259 allows a parser to ignore it, but grpc-go rejects a config
//     that starts with one. Lines and columns are counted after it.
//     The gRPC fields loadBalancingConfig and healthCheckConfig are kept as
//     written, without being checked: grpc-go checks them when grpcretry
//     hands them over.
//   - A methodConfig entry without names applies to no method: it draws a
//     warning and is left out of Config.MethodConfigs (its fields are still
//     checked). Kept, a list of "{}" would cost a 72-byte MethodConfig for
//     every 3 bytes of input. A name with a method but no service is an error,
//     as is the same name appearing twice anywhere in the config.
//   - maxAttempts above [DefaultMaxAttemptsCap] is kept as written, with a
//     warning; integers too large for an int saturate.
//   - Status codes may be listed more than once (with a warning). OK is
//     accepted, since it is a valid code; [Lint] flags it. Code names are
//     matched ignoring ASCII case, as A6 allows.
//   - Durations follow [ParseDuration]. hedgingDelay and timeout must not be
//     negative. A timeout of "0s" means no timeout, with a warning, since
//     grpc-go would instead fail every call at once.
//   - backoffMultiplier and tokenRatio must be finite and nonzero as
//     float64: values that overflow to infinity or underflow to zero are
//     errors. A tokenRatio that truncates to 0.000 draws a warning, since
//     successful calls would then never restore tokens.
//   - maxRequestMessageBytes and maxResponseMessageBytes may be JSON
//     integers or, as proto3 JSON allows for 64-bit integers, strings
//     holding one ("1024"); they must be in 0..math.MaxInt64.
//   - retryThrottling is checked whether or not methodConfig is present.
//   - retryPolicy may set perAttemptRecvTimeout, which gRPC core and
//     grpc-java read (A6 and grpc-go do not): a proto3 JSON duration greater
//     than 0. With it set, retryableStatusCodes may be empty or absent, as in
//     gRPC core. In a hedgingPolicy it is an error: hedgingDelay is how a
//     hedging policy bounds the wait for an attempt.
//
// A config that grpc-go's own parser accepts is accepted here too, so that
// one moved from grpc-go's built-in retries keeps working; each spelling
// that A6 does not use draws a warning naming A6's spelling:
//
//   - Field names in any letter case ("MaxAttempts", "retrypolicy"), matched
//     as encoding/json matches them.
//   - A field written more than once in an object, in the same or another
//     case: the last one is used. (grpc-go decodes a repeated object, or
//     array of objects, into the earlier one, merging them field by field;
//     Parse uses the last one whole.)
//   - Durations that grpc-go reads but proto3 JSON does not allow: ".5s",
//     "1.s", "01s", "+1s", and the odd forms grpc-go's reading gives a value
//     to ("--1s" is 1s); the warning shows the value in A6's spelling.
//     Durations beyond the time.Duration range but within the proto range
//     become the longest time.Duration, as in grpc-go.
//   - maxTokens written as a whole number in another form (10.0, 1e1).
//   - null where an object or a status code is expected: a null service
//     config or methodConfig entry is read as {}, a null name as {} (the
//     default name) and a null status code as OK, as grpc-go reads them.
//
// Where A6 and grpc-go differ, Parse follows A6: a config with an invalid
// retryPolicy is rejected; hedgingPolicy is checked (grpc-go ignores it);
// setting both policies is an error; maxTokens must be an integer;
// message size limits must not be negative.
func Parse(data []byte, opts ...ParseOption) (*Config, error) {
	o := parseOptions{maxBytes: DefaultMaxBytes}
	for _, opt := range opts {
		opt.apply(&o)
	}
	if len(data) > o.maxBytes {
		return nil, &ParseError{Errors: []*Error{{
			Message: fmt.Sprintf("the config is %d bytes, more than the limit of %d bytes (set with serviceconfig.MaxBytes)", len(data), o.maxBytes),
		}}}
	}
	// A byte order mark is read past with a warning: RFC 8259 lets a
	// parser ignore it, and editors on Windows write one, but grpc-go's
	// parser (encoding/json) rejects the config. Lines and columns are
	// counted after it, as editors count them.
	var bom []Warning
	if rest, ok := bytes.CutPrefix(data, utf8BOM); ok {
		data = rest
		bom = []Warning{{Line: 1, Column: 1, Message: "the config starts with a UTF-8 byte order mark (U+FEFF), ignored here; " +
			`grpc-go rejects it ("invalid character 'ï' looking for beginning of value"), so save the file without one`}}
	}
	if e := checkJSON(data); e != nil {
		e.Line, e.Column = position(data, e.offset)
		e.Message = fmt.Sprintf("%s (line %d, column %d)", e.Message, e.Line, e.Column)
		return nil, &ParseError{Errors: []*Error{e}, Warnings: bom}
	}
	p := &parser{d: doc{data: data}, names: make(map[Name]nameRef), codePos: make(map[codeKey]codeRef)}
	if bom != nil {
		p.reportAt(&p.warns, -1, 0, func() string { return "" }, func() string { return bom[0].Message })
	}
	c := p.config(p.d.valueAt(0))
	if o.lint {
		p.lint()
	}
	errs, warns := p.finish()
	if len(errs) > 0 {
		return nil, &ParseError{Errors: errs, Warnings: warns}
	}
	c.Warnings = warns
	c.codePos = p.codePos
	c.codeLists = p.codeLists
	c.index = p.names
	return c, nil
}

// ParseError is the error [Parse] returns: the problems that make a config
// invalid, and the warnings found beside them, each in document order, so
// that a tool can show both. Errors is never empty in an error from Parse.
// A ParseError is not modified after Parse returns it and is safe for
// concurrent reads.
type ParseError struct {
	Errors   []*Error
	Warnings []Warning
}

// Error returns the errors one per line, as "serviceconfig: path: message".
func (e *ParseError) Error() string {
	var b strings.Builder
	for i, err := range e.Errors {
		if i > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(err.Error())
	}
	return b.String()
}

// Unwrap returns the errors, each an [*Error].
func (e *ParseError) Unwrap() []error {
	out := make([]error, len(e.Errors))
	for i, err := range e.Errors {
		out[i] = err
	}
	return out
}

// parser collects errors and warnings while it walks a document. Each
// problem carries a byte offset, so that the walk, which handles an object's
// fields in a fixed order, can still report problems in document order.
type parser struct {
	d       doc
	path    []pathSeg // where the walk is; problems are reported here
	errs    problems
	warns   problems
	names   map[Name]nameRef // where each name was first seen
	codePos map[codeKey]codeRef
	// codeLists holds the path of each code list as written, for Lint.
	codeLists map[codeKey]string
	// service is the last service name read: names of one service share
	// its string.
	service string
}

// pathSeg is one step of a JSON path: an object member, named by a known
// field or by a key of the document, or an array index.
type pathSeg struct {
	name  string // a field name; empty when keyed or an index
	key   value  // the key as written in the document, when keyed
	keyed bool
	index int
}

func (p *parser) push(s pathSeg) { p.path = append(p.path, s) }
func (p *parser) pop()           { p.path = p.path[:len(p.path)-1] }

func field(name string) pathSeg { return pathSeg{name: name} }
func keyAt(key value) pathSeg   { return pathSeg{key: key, keyed: true} }
func index(i int) pathSeg       { return pathSeg{index: i} }

// pathString returns the current path, like "methodConfig[1].retryPolicy".
func (p *parser) pathString() string {
	var b []byte
	for _, s := range p.path {
		switch {
		case s.keyed:
			b = appendField(b, string(excerptBytes(p.d.text(s.key))))
		case s.name != "":
			b = appendField(b, s.name)
		default:
			b = appendIndex(b, s.index)
		}
	}
	return string(b)
}

// problem is one error or warning.
type problem struct {
	order, seq int // document order; seq breaks ties in the order found
	at         int // byte offset of the value or key it is about
	path       string
	msg        string
	suggest    string // for an unknown field, the known one it likely misspells
}

func (a *problem) less(b *problem) bool {
	return a.order < b.order || (a.order == b.order && a.seq < b.seq)
}

// problems keeps the first maxProblems problems in document order and
// counts the rest, without formatting them.
type problems struct {
	kept  []problem
	last  int // index in kept of the problem that comes last
	total int
}

// report records a problem at byte offset at, ordered at order, under the
// current path. msg is called only if the problem is kept.
func (p *parser) report(ps *problems, order, at int, msg func() string) {
	p.reportAt(ps, order, at, p.pathString, msg)
}

// reportAt records a problem as report does, under the path that path
// returns; path and msg are called only if the problem is kept.
func (p *parser) reportAt(ps *problems, order, at int, path, msg func() string) {
	p.reportProblem(ps, order, at, path, func() (string, string) { return msg(), "" })
}

// reportProblem records a problem as reportAt does; fill returns its
// message and suggestion, and is called only if the problem is kept.
func (p *parser) reportProblem(ps *problems, order, at int, path func() string, fill func() (msg, suggest string)) {
	ps.total++
	pr := problem{order: order, seq: ps.total}
	if len(ps.kept) == maxProblems && !pr.less(&ps.kept[ps.last]) {
		return
	}
	pr.at, pr.path = at, path()
	pr.msg, pr.suggest = fill()
	if len(ps.kept) < maxProblems {
		ps.kept = append(ps.kept, pr)
		if ps.kept[ps.last].less(&pr) {
			ps.last = len(ps.kept) - 1
		}
		return
	}
	ps.kept[ps.last] = pr
	for i := range ps.kept {
		if ps.kept[ps.last].less(&ps.kept[i]) {
			ps.last = i
		}
	}
}

// errorf reports an error about v at the current path.
func (p *parser) errorf(v value, format string, args ...any) {
	p.report(&p.errs, v.start, v.start, func() string { return fmt.Sprintf(format, args...) })
}

// errorFn reports an error about v whose message msg builds only if the
// error is kept: use it where a value might repeat a million times.
func (p *parser) errorFn(v value, msg func() string) {
	p.report(&p.errs, v.start, v.start, msg)
}

// missing reports a problem with the object obj as a whole, such as a
// missing field: it comes after the problems of the object's members and
// points at the object's start.
func (p *parser) missing(obj value, name, msg string) {
	p.push(field(name))
	p.report(&p.errs, obj.end, obj.start, func() string { return msg })
	p.pop()
}

func (p *parser) warnf(v value, format string, args ...any) {
	p.report(&p.warns, v.start, v.start, func() string { return fmt.Sprintf(format, args...) })
}

func (p *parser) warnFn(v value, msg func() string) {
	p.report(&p.warns, v.start, v.start, msg)
}

// finish returns the kept errors and warnings in document order, located by
// line and column, each list followed by how many more were found.
func (p *parser) finish() ([]*Error, []Warning) {
	var offsets []*lineCol
	sortKept := func(ps *problems) []lineCol {
		slices.SortFunc(ps.kept, func(a, b problem) int {
			return cmp.Or(cmp.Compare(a.order, b.order), cmp.Compare(a.seq, b.seq))
		})
		lc := make([]lineCol, len(ps.kept))
		for i := range ps.kept {
			lc[i].offset = ps.kept[i].at
			offsets = append(offsets, &lc[i])
		}
		return lc
	}
	errLC, warnLC := sortKept(&p.errs), sortKept(&p.warns)
	codeKeys := make([]codeKey, 0, len(p.codePos))
	codeLC := make([]lineCol, 0, len(p.codePos))
	for k, ref := range p.codePos {
		codeKeys = append(codeKeys, k)
		codeLC = append(codeLC, lineCol{offset: ref.offset})
	}
	for i := range codeLC {
		offsets = append(offsets, &codeLC[i])
	}
	locate(p.d.data, offsets)
	for i, k := range codeKeys {
		ref := p.codePos[k]
		ref.line, ref.col = codeLC[i].line, codeLC[i].col
		p.codePos[k] = ref
	}

	var errs []*Error
	for i, pr := range p.errs.kept {
		errs = append(errs, &Error{Path: pr.path, Message: pr.msg, Line: errLC[i].line, Column: errLC[i].col})
	}
	if n := p.errs.total - len(p.errs.kept); n > 0 {
		errs = append(errs, &Error{Message: fmt.Sprintf("and %d more errors", n)})
	}
	var warns []Warning
	for i, pr := range p.warns.kept {
		warns = append(warns, Warning{Path: pr.path, Message: pr.msg, Suggestion: pr.suggest, Line: warnLC[i].line, Column: warnLC[i].col})
	}
	if n := p.warns.total - len(p.warns.kept); n > 0 {
		warns = append(warns, Warning{Message: fmt.Sprintf("and %d more warnings", n)})
	}
	return errs, warns
}

// lineCol is a byte offset and, once located, its line and column.
type lineCol struct {
	offset, line, col int
}

// locate sets the line and column, counted from 1 with columns in bytes, of
// every offset, in one pass over data.
func locate(data []byte, offsets []*lineCol) {
	slices.SortFunc(offsets, func(a, b *lineCol) int { return cmp.Compare(a.offset, b.offset) })
	line, lineStart, pos := 1, 0, 0
	for _, lc := range offsets {
		off := min(lc.offset, len(data))
		for pos < off {
			i := bytes.IndexByte(data[pos:off], '\n')
			if i < 0 {
				pos = off
				break
			}
			line++
			pos += i + 1
			lineStart = pos
		}
		lc.line, lc.col = line, off-lineStart+1
	}
}

// position returns the line and column of one offset.
func position(data []byte, offset int) (line, col int) {
	lc := lineCol{offset: offset}
	locate(data, []*lineCol{&lc})
	return lc.line, lc.col
}

// fields are the members of an object that Parse interprets: for each
// known field, the last value written for it and its key.
type fields struct {
	v    [8]value
	key  [8]value
	seen [8]bool
}

// get returns the value of field i, or false if it is absent or null.
func (f *fields) get(i int) (value, bool) {
	return f.v[i], f.seen[i] && f.v[i].kind != jsonNull
}

// at pushes the path of field i (as written) before a report about it.
func (p *parser) at(f *fields, i int) { p.push(keyAt(f.key[i])) }

// object checks that v is an object and returns the members that name the
// fields names, matched as grpc-go (encoding/json) matches them: ignoring
// case, the last member naming a field winning. It warns of spellings other
// than A6's, repeated fields and unknown keys.
func (p *parser) object(f *fields, v value, names []string) bool {
	if v.kind != jsonObject {
		if len(p.path) == 0 {
			p.errorf(v, "a service config must be a JSON object, got %s", v.kind)
		} else {
			p.errorf(v, "must be a JSON object, got %s", v.kind)
		}
		return false
	}
	it := p.d.iter(v)
	for {
		key, val, more := it.member()
		if !more {
			break
		}
		i, isExact := matchField(p.d.text(key), names)
		p.push(keyAt(key))
		switch {
		case i < 0:
			p.reportProblem(&p.warns, key.start, key.start, p.pathString, func() (string, string) {
				if guess := likelyField(p.d.text(key), names); guess != "" {
					return fmt.Sprintf("unknown field, ignored (did you mean %q?)", guess), guess
				}
				return "unknown field, ignored", ""
			})
		case !isExact:
			p.warnFn(key, func() string {
				return fmt.Sprintf("A6 spells this field %q; grpc-go accepts any letter case, other gRPC implementations do not", names[i])
			})
		}
		if i >= 0 && f.seen[i] {
			p.warnFn(key, func() string {
				return fmt.Sprintf("%q is set more than once in this object; the last is used, as in grpc-go, but other gRPC implementations may reject the config", names[i])
			})
		}
		p.pop()
		if i >= 0 {
			f.v[i], f.key[i], f.seen[i] = val, key, true
		}
	}
	return true
}

// matchField returns the index of the name that key names, and whether it
// is spelled exactly so; -1 if none.
func matchField(key []byte, names []string) (int, bool) {
	for i, n := range names {
		if string(key) == n {
			return i, true
		}
	}
	// A fold-equal key is at most 3 bytes per byte of the name (the Kelvin
	// sign is 3 bytes, K is 1), so longer keys need no comparison.
	for i, n := range names {
		if len(key) <= 3*len(n) && bytes.EqualFold(key, []byte(n)) {
			return i, false
		}
	}
	return -1, false
}

// likelyField returns the known field an unknown key most likely
// misspells: the nearest by edit distance (letters added, dropped, changed
// or swapped), ignoring letter case and the separators '_' and '-', if near
// enough for the field's length; or "" for none. Proto field names such as
// max_attempts, which not every gRPC implementation accepts (grpc-go does
// not), are at distance 0.
func likelyField(key []byte, known []string) string {
	// No known field is longer than 25 bytes, nor 3 edits from a key more
	// than 3 bytes longer: longer keys need no comparison.
	const longest = 25 + 3
	var k []byte
	for _, c := range key {
		if c == '_' || c == '-' {
			continue
		}
		if len(k) == longest {
			return ""
		}
		k = append(k, lower(c))
	}
	best, bestD := "", -1
	for _, name := range known {
		limit := min(3, max(1, len(name)/5))
		if d := distance(k, name, limit); d >= 0 && (bestD < 0 || d < bestD) {
			best, bestD = name, d
		}
	}
	return best
}

// distance returns the optimal string alignment distance between a and the
// lower case of name (edits: insert, delete, substitute, swap two adjacent
// letters), or -1 if it is more than limit.
func distance(a []byte, name string, limit int) int {
	n := len(name)
	if len(a)-n > limit || n-len(a) > limit {
		return -1
	}
	// Three rows of the table: two back for the swaps.
	prev2, prev, cur := make([]int, n+1), make([]int, n+1), make([]int, n+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= n; j++ {
			cost := 1
			if a[i-1] == lower(name[j-1]) {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == lower(name[j-2]) && a[i-2] == lower(name[j-1]) {
				cur[j] = min(cur[j], prev2[j-2]+1)
			}
		}
		prev2, prev, cur = prev, cur, prev2
	}
	if d := prev[n]; d <= limit {
		return d
	}
	return -1
}

func lower(c byte) byte {
	if 'A' <= c && c <= 'Z' {
		return c + 'a' - 'A'
	}
	return c
}

var rootFields = []string{"loadBalancingPolicy", "loadBalancingConfig", "healthCheckConfig", "methodConfig", "retryThrottling"}

const (
	rootLBPolicy = iota
	rootLBConfig
	rootHealthCheck
	rootMethodConfig
	rootRetryThrottling
)

func (p *parser) config(root value) *Config {
	c := &Config{}
	if root.kind == jsonNull {
		p.warnf(root, "a null service config is read as {}, as grpc-go reads it; write {}")
		return c
	}
	var f fields
	ok := p.object(&f, root, rootFields)
	if !ok {
		return c
	}
	if v, ok := f.get(rootLBPolicy); ok {
		p.at(&f, rootLBPolicy)
		c.LoadBalancingPolicy, _ = p.str(v)
		p.pop()
	}
	// loadBalancingConfig and healthCheckConfig are kept as written, for
	// grpcretry to hand to grpc-go, which checks them.
	if v, ok := f.get(rootLBConfig); ok {
		c.LoadBalancingConfig = bytes.Clone(p.d.data[v.start:v.end])
	}
	if v, ok := f.get(rootHealthCheck); ok {
		c.HealthCheckConfig = bytes.Clone(p.d.data[v.start:v.end])
	}
	if v, ok := f.get(rootMethodConfig); ok {
		p.at(&f, rootMethodConfig)
		if v.kind != jsonArray {
			p.errorf(v, "must be a JSON array of objects, got %s", v.kind)
		} else {
			// Count first, so that the entries are allocated once; an
			// entry that is not an object makes the config invalid, and
			// then none are kept. Only entries that name a method are
			// kept: one that names none applies to no call, and keeping
			// it would let a list of "{}" (3 bytes each) allocate a
			// 72-byte MethodConfig apiece.
			n, named, valid := 0, 0, p.errs.total == 0
			for it := p.d.iter(v); ; n++ {
				e, more := it.next()
				if !more {
					break
				}
				valid = valid && (e.kind == jsonObject || e.kind == jsonNull)
				if valid && p.namesMethods(e) {
					named++
				}
			}
			if valid && named > 0 {
				c.MethodConfigs = make([]MethodConfig, named)
			}
			// An entry is read into scratch, and copied to its slot if
			// it names a method.
			var scratch MethodConfig
			it := p.d.iter(v)
			slot := 0
			for i := range n {
				e, _ := it.next()
				scratch = MethodConfig{}
				p.push(index(i))
				p.methodConfig(&scratch, e, i, slot)
				p.pop()
				if len(scratch.Names) > 0 && slot < len(c.MethodConfigs) {
					c.MethodConfigs[slot] = scratch
					slot++
				}
			}
		}
		p.pop()
	}
	if v, ok := f.get(rootRetryThrottling); ok {
		p.at(&f, rootRetryThrottling)
		c.RetryThrottling = p.retryThrottling(v)
		p.pop()
	}
	return c
}

var methodFields = []string{"name", "retryPolicy", "hedgingPolicy", "timeout", "waitForReady", "maxRequestMessageBytes", "maxResponseMessageBytes"}

const (
	mcName = iota
	mcRetryPolicy
	mcHedgingPolicy
	mcTimeout
	mcWaitForReady
	mcMaxRequest
	mcMaxResponse
)

// namesMethods reports whether the methodConfig entry v names a method:
// its "name" field, matched as [parser.object] matches it (the last one
// when repeated), is a non-empty array. An entry whose names are all
// invalid makes the config invalid.
func (p *parser) namesMethods(v value) bool {
	if v.kind != jsonObject {
		return false
	}
	named := false
	it := p.d.iter(v)
	for {
		key, val, more := it.member()
		if !more {
			return named
		}
		if i, _ := matchField(p.d.text(key), methodFields); i == mcName {
			elems := p.d.iter(val)
			_, nonEmpty := elems.next()
			named = val.kind == jsonArray && nonEmpty
		}
	}
}

// methodConfig reads entry i of the methodConfig list into mc, which goes
// to MethodConfigs[slot] if it names a method.
func (p *parser) methodConfig(mc *MethodConfig, v value, i, slot int) {
	if v.kind == jsonNull {
		p.warnf(v, "null is read as {}, an entry that applies to no method, as grpc-go reads it; remove it")
		return
	}
	var f fields
	ok := p.object(&f, v, methodFields)
	if !ok {
		return
	}
	if nv, ok := f.get(mcName); ok {
		p.at(&f, mcName)
		mc.Names = p.nameList(nv, i, slot)
		p.pop()
	} else {
		p.report(&p.warns, v.end, v.start, func() string { return `no "name" list, so this entry applies to no method` })
	}
	// The entry's code lists are keyed by its slot, for Lint; those of an
	// entry left out, apart from every slot.
	key := slot
	if len(mc.Names) == 0 {
		key = -1 - i
	}
	rv, hasRetry := f.get(mcRetryPolicy)
	hv, hasHedge := f.get(mcHedgingPolicy)
	if hasRetry {
		p.at(&f, mcRetryPolicy)
		mc.RetryPolicy = p.retryPolicy(rv, key)
		p.pop()
	}
	if hasHedge {
		p.at(&f, mcHedgingPolicy)
		mc.HedgingPolicy = p.hedgingPolicy(hv, key)
		p.pop()
	}
	if hasRetry && hasHedge {
		p.report(&p.errs, v.end, v.start, func() string {
			return "retryPolicy and hedgingPolicy are mutually exclusive; set at most one"
		})
	}
	if tv, ok := f.get(mcTimeout); ok {
		p.at(&f, mcTimeout)
		if d, ok := p.duration(tv, true); ok {
			switch {
			case d < 0:
				p.errorf(tv, "must not be negative")
			case d == 0:
				p.warnf(tv, "a timeout of 0 is treated as no timeout (grpc-go instead fails every call at once); omit the field to say so")
			}
			mc.Timeout = max(d, 0)
		}
		p.pop()
	}
	if bv, ok := f.get(mcWaitForReady); ok {
		p.at(&f, mcWaitForReady)
		if bv.kind == jsonBool {
			b := p.d.data[bv.start] == 't'
			mc.WaitForReady = &b
		} else {
			p.errorf(bv, "must be a boolean, got %s", bv.kind)
		}
		p.pop()
	}
	if nv, ok := f.get(mcMaxRequest); ok {
		p.at(&f, mcMaxRequest)
		mc.MaxRequestMessageBytes = p.byteLimit(nv)
		p.pop()
	}
	if nv, ok := f.get(mcMaxResponse); ok {
		p.at(&f, mcMaxResponse)
		mc.MaxResponseMessageBytes = p.byteLimit(nv)
		p.pop()
	}
}

// nameRef locates a name: entry mc of methodConfig, element j of its name
// list, kept in MethodConfigs[slot]. A parsed Config's index maps each name
// to it.
type nameRef struct{ mc, slot, j int32 }

var nameFields = []string{"service", "method"}

func (p *parser) nameList(v value, mcIndex, slot int) []Name {
	if v.kind != jsonArray {
		p.errorf(v, "must be a JSON array of objects, got %s", v.kind)
		return nil
	}
	var names []Name
	it := p.d.iter(v)
	j := 0
	for ; ; j++ {
		e, more := it.next()
		if !more {
			break
		}
		p.push(index(j))
		n, ok := p.name(e)
		if ok {
			if prev, dup := p.names[n]; dup {
				p.errorFn(e, func() string {
					return fmt.Sprintf("duplicate name %s (also in methodConfig[%d].name[%d])", excerpt(n.String()), prev.mc, prev.j)
				})
			} else {
				p.names[n] = nameRef{int32(mcIndex), int32(slot), int32(j)}
				names = append(names, n)
			}
		}
		p.pop()
	}
	if j == 0 {
		p.warnf(v, "empty, so this entry applies to no method")
	}
	return names
}

func (p *parser) name(e value) (Name, bool) {
	var n Name
	if e.kind == jsonNull {
		p.warnf(e, "null is read as {}, the default name, as grpc-go reads it; write {}")
		return n, true
	}
	var f fields
	ok := p.object(&f, e, nameFields)
	if !ok {
		return n, false
	}
	okS, okM := true, true
	if sv, ok := f.get(0); ok {
		p.at(&f, 0)
		if okS = p.isString(sv); okS {
			if t := p.d.text(sv); string(t) != p.service {
				p.service = string(t)
			}
			n.Service = p.service
		}
		p.pop()
	}
	if mv, ok := f.get(1); ok {
		p.at(&f, 1)
		n.Method, okM = p.str(mv)
		p.pop()
	}
	if !okS || !okM {
		return n, false
	}
	if n.Service == "" && n.Method != "" {
		p.errorFn(e, func() string { return fmt.Sprintf("method %s needs a service", quoteJSON(excerpt(n.Method))) })
		return n, false
	}
	if strings.Contains(n.Service, "/") || strings.Contains(n.Method, "/") {
		p.warnf(e, `contains "/", so it matches no call`)
	}
	return n, true
}

var retryFields = []string{"maxAttempts", "initialBackoff", "maxBackoff", "backoffMultiplier", "retryableStatusCodes", "perAttemptRecvTimeout"}

const (
	rpMaxAttempts = iota
	rpInitialBackoff
	rpMaxBackoff
	rpMultiplier
	rpCodes
	rpPerAttempt
)

func (p *parser) retryPolicy(v value, i int) *RetryPolicy {
	var f fields
	ok := p.object(&f, v, retryFields)
	if !ok {
		return nil
	}
	rp := &RetryPolicy{MaxAttempts: p.maxAttempts(v, &f, rpMaxAttempts)}
	initialOK, maxOK := false, false
	for _, b := range []struct {
		field int
		d     *time.Duration
		ok    *bool
	}{
		{rpInitialBackoff, &rp.InitialBackoff, &initialOK},
		{rpMaxBackoff, &rp.MaxBackoff, &maxOK},
	} {
		dv, ok := f.get(b.field)
		if !ok {
			p.missing(v, retryFields[b.field], "must be specified")
			continue
		}
		p.at(&f, b.field)
		d, ok := p.duration(dv, true)
		if ok && d <= 0 {
			p.errorf(dv, "must be greater than 0")
			ok = false
		}
		*b.d, *b.ok = d, ok
		p.pop()
	}
	// perAttemptRecvTimeout is gRPC core's and grpc-java's extension of
	// A6; grpc-go does not know it, so only proto3 JSON is accepted.
	tv, hasPerAttempt := f.get(rpPerAttempt)
	if hasPerAttempt {
		p.at(&f, rpPerAttempt)
		if d, ok := p.duration(tv, false); ok {
			if d <= 0 {
				p.errorf(tv, "must be greater than 0")
			} else {
				rp.PerAttemptRecvTimeout = d
			}
		}
		p.pop()
	}
	if initialOK && maxOK && rp.MaxBackoff < rp.InitialBackoff {
		p.at(&f, rpMaxBackoff)
		p.warnf(f.v[rpMaxBackoff], "is less than initialBackoff, so every backoff is capped at maxBackoff")
		p.pop()
	}
	if mv, ok := f.get(rpMultiplier); ok {
		p.at(&f, rpMultiplier)
		rp.BackoffMultiplier, _, _ = p.positiveNumber(mv)
		p.pop()
	} else {
		p.missing(v, "backoffMultiplier", "must be specified")
	}
	// As in gRPC core, a policy with a per-attempt timeout may retry on
	// that timeout alone.
	if cv, ok := f.get(rpCodes); ok {
		p.at(&f, rpCodes)
		set, n, ok := p.codeList(cv, codeKey{methodConfig: i})
		if ok && n == 0 && !hasPerAttempt {
			p.errorf(cv, "must be non-empty unless perAttemptRecvTimeout is set")
		}
		rp.RetryableStatusCodes = set
		p.pop()
	} else if !hasPerAttempt {
		p.missing(v, "retryableStatusCodes", "must be specified unless perAttemptRecvTimeout is set")
	}
	return rp
}

var hedgingFields = []string{"maxAttempts", "hedgingDelay", "nonFatalStatusCodes", "perAttemptRecvTimeout"}

func (p *parser) hedgingPolicy(v value, i int) *HedgingPolicy {
	var f fields
	ok := p.object(&f, v, hedgingFields)
	if !ok {
		return nil
	}
	hp := &HedgingPolicy{MaxAttempts: p.maxAttempts(v, &f, 0)}
	if tv, ok := f.get(3); ok {
		p.at(&f, 3)
		p.errorf(tv, "applies to retryPolicy only; a hedging policy starts the next attempt after hedgingDelay instead")
		p.pop()
	}
	if dv, ok := f.get(1); ok {
		p.at(&f, 1)
		if d, ok := p.duration(dv, true); ok {
			if d < 0 {
				p.errorf(dv, "must not be negative")
			}
			hp.HedgingDelay = max(d, 0)
		}
		p.pop()
	}
	if cv, ok := f.get(2); ok {
		p.at(&f, 2)
		hp.NonFatalStatusCodes, _, _ = p.codeList(cv, codeKey{methodConfig: i, hedging: true})
		p.pop()
	}
	return hp
}

var throttlingFields = []string{"maxTokens", "tokenRatio"}

func (p *parser) retryThrottling(v value) *RetryThrottling {
	var f fields
	ok := p.object(&f, v, throttlingFields)
	if !ok {
		return nil
	}
	t := &RetryThrottling{}
	if mv, ok := f.get(0); ok {
		p.at(&f, 0)
		t.MaxTokens = p.maxTokens(mv)
		p.pop()
	} else {
		p.missing(v, "maxTokens", "must be specified")
	}
	if rv, ok := f.get(1); ok {
		p.at(&f, 1)
		if _, n, ok := p.positiveNumber(rv); ok {
			t.TokenRatio = float64(n.milli()) / 1000
			if t.TokenRatio == 0 {
				p.warnf(rv, "%s is 0.000 once the decimal places beyond 3 are dropped, so successful calls never restore tokens", p.d.show(rv))
			}
		}
		p.pop()
	} else {
		p.missing(v, "tokenRatio", "must be specified")
	}
	return t
}

// maxTokens checks maxTokens: an integer in (0, 1000]. grpc-go reads it as
// a float64, so a whole number written as 10.0 or 1e1 is accepted with a
// warning; a fraction is an error, as A6 makes it an integer.
func (p *parser) maxTokens(v value) int {
	if v.kind != jsonNumber {
		p.errorf(v, "must be a JSON integer, got %s", v.kind)
		return 0
	}
	text := string(p.d.raw(v))
	n := splitNumber(text)
	if !n.isInteger() {
		if !n.isWhole() {
			p.errorf(v, "must be a JSON integer, got %s", p.d.show(v))
			return 0
		}
		f, err := strconv.ParseFloat(text, 64)
		if err == nil && f > 0 && f <= 1000 {
			p.warnf(v, "%s is read as %d, as grpc-go reads it; A6 writes maxTokens as an integer: %d", p.d.show(v), int(f), int(f))
			return int(f)
		}
	} else if i, err := strconv.ParseInt(text, 10, 64); err == nil && i > 0 && i <= 1000 {
		return int(i)
	}
	p.errorf(v, "must be in the range (0, 1000], got %s", p.d.show(v))
	return 0
}

// maxAttempts checks the maxAttempts field of the retry or hedging policy
// obj, whose known fields are f.
func (p *parser) maxAttempts(obj value, f *fields, i int) int {
	v, ok := f.get(i)
	if !ok {
		p.missing(obj, "maxAttempts", "must be specified")
		return 0
	}
	p.at(f, i)
	defer p.pop()
	n, ok := p.integer(v)
	switch {
	case !ok:
		return 0
	case n <= 1:
		p.errorf(v, "must be greater than 1, got %s", p.d.show(v))
		return 0
	case n > DefaultMaxAttemptsCap:
		p.warnf(v, "%s is above the default client limit of %d; clients make at most %d attempts unless their limit is raised",
			p.d.show(v), DefaultMaxAttemptsCap, DefaultMaxAttemptsCap)
	}
	return int(min(n, math.MaxInt))
}

func (p *parser) isString(v value) bool {
	if v.kind != jsonString {
		p.errorf(v, "must be a string, got %s", v.kind)
		return false
	}
	return true
}

func (p *parser) str(v value) (string, bool) {
	if !p.isString(v) {
		return "", false
	}
	return p.d.str(v), true
}

// integer returns the value of a number in JSON integer form, saturated to
// the int64 range.
func (p *parser) integer(v value) (int64, bool) {
	if v.kind != jsonNumber {
		p.errorf(v, "must be a JSON integer, got %s", v.kind)
		return 0, false
	}
	text := string(p.d.raw(v))
	n := splitNumber(text)
	if !n.isInteger() {
		p.errorf(v, "must be a JSON integer, got %s", p.d.show(v))
		return 0, false
	}
	i, err := strconv.ParseInt(text, 10, 64)
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
func (p *parser) positiveNumber(v value) (float64, jsonNumberParts, bool) {
	if v.kind != jsonNumber {
		p.errorf(v, "must be a JSON number, got %s", v.kind)
		return 0, jsonNumberParts{}, false
	}
	text := string(p.d.raw(v))
	n := splitNumber(text)
	if n.neg || n.isZero() {
		p.errorf(v, "must be greater than 0, got %s", p.d.show(v))
		return 0, n, false
	}
	f, err := strconv.ParseFloat(text, 64)
	switch {
	case err != nil || math.IsInf(f, 0):
		p.errorf(v, "%s is too large for a float64", p.d.show(v))
		return 0, n, false
	case f == 0:
		p.errorf(v, "%s is too small for a float64 and would round to 0", p.d.show(v))
		return 0, n, false
	}
	return f, n, true
}

// duration reads a duration string. If grpcGo, a spelling that proto3 JSON
// does not allow but grpc-go reads is accepted with a warning that shows
// its value in A6's spelling.
func (p *parser) duration(v value, grpcGo bool) (time.Duration, bool) {
	if v.kind != jsonString {
		p.errorf(v, `must be a duration string like "1.5s", got %s`, v.kind)
		return 0, false
	}
	s := p.d.str(v)
	d, err := parseDuration(s)
	if err == nil {
		return d, true
	}
	if gd, ok := parseDurationGRPCGo(s); ok && grpcGo {
		if err == errDurationRange {
			p.warnf(v, "%s is beyond the longest time.Duration, so it is read as %q (about 292 years), as grpc-go reads it",
				p.d.show(v), FormatDuration(gd))
		} else {
			p.warnf(v, "%s is not a proto3 JSON duration; grpc-go reads it as %q, A6's spelling", p.d.show(v), FormatDuration(gd))
		}
		return gd, true
	}
	p.errorf(v, "invalid duration %s: %v", p.d.show(v), err)
	return 0, false
}

// codeList parses an array of status codes, recording where each code was
// first written under key (whose code field it sets). It returns the set
// and the number of elements.
func (p *parser) codeList(v value, key codeKey) (CodeSet, int, bool) {
	if v.kind != jsonArray {
		p.errorf(v, "must be a JSON array of status codes, got %s", v.kind)
		return 0, 0, false
	}
	if p.codeLists == nil {
		p.codeLists = make(map[codeKey]string)
	}
	listPath := p.pathString()
	p.codeLists[key] = listPath
	var set CodeSet
	it := p.d.iter(v)
	j := 0
	for ; ; j++ {
		e, more := it.next()
		if !more {
			break
		}
		p.push(index(j))
		c, ok := p.code(e)
		if ok {
			key.code = c
			if set.Has(c) {
				first := p.codePos[key].index
				p.warnFn(e, func() string {
					return fmt.Sprintf("duplicate status code %s (also at %s[%d])", c, listPath, first)
				})
			} else {
				set |= 1 << c
				p.codePos[key] = codeRef{index: j, offset: e.start}
			}
		}
		p.pop()
	}
	return set, j, true
}

func (p *parser) code(v value) (Code, bool) {
	switch v.kind {
	case jsonNumber:
		raw := p.d.raw(v)
		digits := raw
		if raw[0] == '-' {
			digits = raw[1:]
		}
		c := 0
		for _, b := range digits {
			if b < '0' || b > '9' { // a fraction or an exponent
				p.errorFn(v, func() string { return "status code must be an integer or a name, got " + p.d.show(v) })
				return 0, false
			}
			if c <= int(maxCode) {
				c = c*10 + int(b-'0')
			}
		}
		if c > int(maxCode) || (len(raw) > len(digits) && c != 0) {
			p.errorFn(v, func() string {
				return fmt.Sprintf("invalid status code %s; valid codes are 0 to %d", p.d.show(v), maxCode)
			})
			return 0, false
		}
		return Code(c), true
	case jsonString:
		text := p.d.text(v)
		for i, name := range codeNames {
			if asciiEqualFold(text, name) {
				return Code(i), true
			}
		}
		p.errorFn(v, func() string { return "unknown status code name " + p.d.show(v) })
		return 0, false
	case jsonNull:
		p.warnFn(v, func() string { return `null is read as OK (0), as grpc-go reads it; write "OK" if that is meant` })
		return OK, true
	default:
		p.errorFn(v, func() string { return "status code must be a name or an integer, got " + v.kind.String() })
		return 0, false
	}
}

// byteLimit parses a message size limit: a non-negative JSON integer, or a
// string holding one as proto3 JSON allows for 64-bit integers.
func (p *parser) byteLimit(v value) *int64 {
	var text string
	switch v.kind {
	case jsonNumber:
		text = string(p.d.raw(v))
		if !splitNumber(text).isInteger() {
			p.errorf(v, "must be an integer number of bytes, got %s", p.d.show(v))
			return nil
		}
	case jsonString:
		text = p.d.str(v)
		if !isJSONInteger(text) {
			p.errorf(v, "must be an integer number of bytes, got %s", p.d.show(v))
			return nil
		}
	default:
		p.errorf(v, "must be a JSON integer, got %s", v.kind)
		return nil
	}
	n, err := strconv.ParseInt(text, 10, 64)
	switch {
	case strings.HasPrefix(text, "-") && (n != 0 || err != nil):
		p.errorf(v, "must not be negative, got %s", p.d.show(v))
		return nil
	case err != nil:
		p.errorf(v, "%s is out of range; the limit is %d", p.d.show(v), int64(math.MaxInt64))
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
