package serviceconfig

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// jsonKind is the type of a JSON value, named as in error messages.
type jsonKind uint8

const (
	jsonNull jsonKind = iota
	jsonBool
	jsonNumber
	jsonString
	jsonArray
	jsonObject
)

func (k jsonKind) String() string {
	switch k {
	case jsonNull:
		return "null"
	case jsonBool:
		return "boolean"
	case jsonNumber:
		return "number"
	case jsonString:
		return "string"
	case jsonArray:
		return "array"
	default:
		return "object"
	}
}

// doc is a JSON document that encoding/json has found valid. Its methods
// read values where they lie in the input instead of building a tree, so a
// subtree that Parse does not interpret costs one pass over its bytes and
// no memory, and a long string is copied only if its text is needed.
type doc struct {
	data []byte
	buf  []byte // scratch for unescaping strings; see text
	// spans are the containers of at least minSpan bytes that skip has
	// passed over, sorted by start: Parse looks at an object or array
	// again after skipping it, and finds its end here instead of scanning
	// it again. Smaller containers cost little to scan again, and leaving
	// them out keeps spans to a fraction of the input's size.
	spans []span
	open  []int // starts of the containers skip is in
}

type span struct{ start, end int }

const minSpan = 256

// value is one JSON value of a doc: data[start:end]. A string's bytes
// include its quotes.
type value struct {
	kind       jsonKind
	start, end int
}

// maxJSONDepth is encoding/json's nesting limit, which checkJSON enforces.
const maxJSONDepth = 10000

// checkJSON reports a syntax error in data as an *Error located at the
// offending byte, or nil if data holds exactly one JSON value.
func checkJSON(data []byte) *Error {
	if json.Valid(data) {
		return nil
	}
	// Unmarshal checks the whole input before it decodes anything, so an
	// invalid document is never materialised; into struct{} a valid one
	// would not be either.
	var se *json.SyntaxError
	if err := json.Unmarshal(data, &struct{}{}); !errors.As(err, &se) {
		return &Error{Message: "invalid JSON"}
	}
	at := int(se.Offset) - 1 // Offset counts the offending byte
	msg := se.Error()
	switch {
	case strings.HasPrefix(msg, "unexpected end"):
		return &Error{Message: "invalid JSON: unexpected end of input", offset: len(data)}
	case strings.HasSuffix(msg, "exceeded max depth"):
		msg = "nested deeper than " + strconv.Itoa(maxJSONDepth) + " levels"
	}
	return &Error{Message: "invalid JSON: " + msg, offset: max(at, 0)}
}

// ws returns the offset of the first byte at or after i that is not JSON
// white space.
func (d *doc) ws(i int) int {
	for i < len(d.data) {
		switch d.data[i] {
		case ' ', '\t', '\n', '\r':
			i++
		default:
			return i
		}
	}
	return i
}

// valueAt returns the value that starts at or after i (after white space).
func (d *doc) valueAt(i int) value {
	i = d.ws(i)
	v := value{start: i}
	switch d.data[i] {
	case '{':
		v.kind = jsonObject
	case '[':
		v.kind = jsonArray
	case '"':
		v.kind = jsonString
	case 't', 'f':
		v.kind = jsonBool
	case 'n':
		v.kind = jsonNull
	default:
		v.kind = jsonNumber
	}
	v.end = d.skip(i, v.kind)
	return v
}

// skip returns the offset just after the value of kind k that starts at i.
// Nesting needs no stack to be skipped, since the document is valid and its
// brackets match; the stack open only records spans.
func (d *doc) skip(i int, k jsonKind) int {
	switch k {
	case jsonString:
		return d.skipString(i)
	case jsonArray, jsonObject:
		if j, ok := slices.BinarySearchFunc(d.spans, i, func(s span, i int) int { return s.start - i }); ok {
			return d.spans[j].end
		}
		first := len(d.spans)
		d.open = d.open[:0]
		for i < len(d.data) {
			switch c := d.data[i]; {
			case c == '"':
				i = d.skipString(i)
				continue
			case c == '{' || c == '[':
				d.open = append(d.open, i)
			case c == '}' || c == ']':
				start := d.open[len(d.open)-1]
				d.open = d.open[:len(d.open)-1]
				if i+1-start >= minSpan {
					d.spans = append(d.spans, span{start, i + 1})
				}
				if len(d.open) == 0 {
					// Containers close inner first; spans wants them
					// in document order.
					slices.SortFunc(d.spans[first:], func(a, b span) int { return a.start - b.start })
					return i + 1
				}
			}
			i++
		}
		return i
	default:
		for i < len(d.data) {
			switch d.data[i] {
			case ',', '}', ']', ' ', '\t', '\n', '\r':
				return i
			}
			i++
		}
		return i
	}
}

// skipString returns the offset just after the string whose opening quote
// is at i.
func (d *doc) skipString(i int) int {
	i++
	for {
		j := bytes.IndexByte(d.data[i:], '"')
		if j < 0 {
			return len(d.data)
		}
		q := i + j
		n := 0 // backslashes right before the quote
		for q-1-n >= i && d.data[q-1-n] == '\\' {
			n++
		}
		if n%2 == 0 {
			return q + 1
		}
		i = q + 1
	}
}

// iter walks the members of an object or the elements of an array.
type iter struct {
	d     *doc
	i     int
	first bool
}

func (d *doc) iter(v value) iter { return iter{d: d, i: v.start + 1, first: true} }

// next returns the next element of an array.
func (it *iter) next() (value, bool) {
	if !it.advance() {
		return value{}, false
	}
	v := it.d.valueAt(it.i)
	it.i = v.end
	return v, true
}

// member returns the next member of an object: its key (a string value)
// and its value.
func (it *iter) member() (key, v value, ok bool) {
	if !it.advance() {
		return value{}, value{}, false
	}
	d := it.d
	key = value{kind: jsonString, start: it.i, end: d.skipString(it.i)}
	colon := d.ws(key.end) // the ':'
	v = d.valueAt(colon + 1)
	it.i = v.end
	return key, v, true
}

// advance moves past the separator before the next item and reports whether
// there is one.
func (it *iter) advance() bool {
	d := it.d
	it.i = d.ws(it.i)
	if !it.first {
		if d.data[it.i] != ',' {
			return false
		}
		it.i = d.ws(it.i + 1)
	}
	it.first = false
	if c := d.data[it.i]; c == '}' || c == ']' {
		return false
	}
	return true
}

// raw returns the bytes of v as written, without a string's quotes.
func (d *doc) raw(v value) []byte {
	if v.kind == jsonString {
		return d.data[v.start+1 : v.end-1]
	}
	return d.data[v.start:v.end]
}

// text returns the contents of the string v as encoding/json decodes them:
// escapes resolved and invalid UTF-8 replaced by U+FFFD. The result shares
// memory with the input or with a scratch buffer that the next call to text
// reuses; copy it to keep it.
func (d *doc) text(v value) []byte {
	raw := d.raw(v)
	if bytes.IndexByte(raw, '\\') < 0 && utf8.Valid(raw) {
		return raw
	}
	b := d.buf[:0]
	for i := 0; i < len(raw); {
		c := raw[i]
		switch {
		case c == '\\':
			i++
			switch e := raw[i]; e {
			case 'b':
				b = append(b, '\b')
			case 'f':
				b = append(b, '\f')
			case 'n':
				b = append(b, '\n')
			case 'r':
				b = append(b, '\r')
			case 't':
				b = append(b, '\t')
			case 'u':
				r := hex4(raw[i+1:])
				i += 4
				if utf16IsSurrogate(r) {
					r2 := rune(-1)
					if i+6 < len(raw) && raw[i+1] == '\\' && raw[i+2] == 'u' {
						r2 = hex4(raw[i+3:])
					}
					if dec := utf16Decode(r, r2); dec != utf8.RuneError {
						r = dec
						i += 6
					} else {
						r = utf8.RuneError
					}
				}
				b = utf8.AppendRune(b, r)
			default: // '"', '\\' and '/'
				b = append(b, e)
			}
			i++
		case c < utf8.RuneSelf:
			b = append(b, c)
			i++
		default:
			r, size := utf8.DecodeRune(raw[i:])
			if r == utf8.RuneError && size == 1 {
				b = utf8.AppendRune(b, utf8.RuneError)
			} else {
				b = append(b, raw[i:i+size]...)
			}
			i += size
		}
	}
	d.buf = b
	return b
}

// str returns the text of the string v as a new string.
func (d *doc) str(v value) string { return string(d.text(v)) }

func hex4(b []byte) rune {
	var r rune
	for _, c := range b[:4] {
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c = c - 'a' + 10
		default:
			c = c - 'A' + 10
		}
		r = r<<4 | rune(c)
	}
	return r
}

func utf16IsSurrogate(r rune) bool { return 0xd800 <= r && r < 0xe000 }

// utf16Decode returns the rune of the surrogate pair r1, r2, or
// utf8.RuneError if they are not one.
func utf16Decode(r1, r2 rune) rune {
	if 0xd800 <= r1 && r1 < 0xdc00 && 0xdc00 <= r2 && r2 < 0xe000 {
		return (r1-0xd800)<<10 | (r2 - 0xdc00) + 0x10000
	}
	return utf8.RuneError
}

// show returns a string or number value as written in JSON, shortened by
// excerpt.
func (d *doc) show(v value) string {
	if v.kind == jsonString {
		return quoteJSON(excerpt(string(excerptBytes(d.text(v)))))
	}
	return excerpt(string(excerptBytes(d.raw(v))))
}

// excerptBytes cuts b to a little more than excerpt keeps, so that a huge
// value is not copied whole only to be shortened.
func excerptBytes(b []byte) []byte {
	const keep = excerptLimit + utf8.UTFMax + 1
	if len(b) > keep {
		return b[:keep]
	}
	return b
}

const excerptLimit = 64

// excerpt shortens s for an error message, so that a huge value in a config
// still gives one readable line.
func excerpt(s string) string {
	if len(s) <= excerptLimit {
		return s
	}
	i := excerptLimit
	for i > 0 && !utf8.RuneStart(s[i]) {
		i--
	}
	return s[:i] + "..."
}

// appendField appends to the JSON path p the step to member key. Keys that
// are not plain identifiers are written in brackets as JSON strings, so that
// every path reads back unambiguously. Long keys are shortened.
func appendField(p []byte, key string) []byte {
	if !isIdent(key) {
		p = append(p, '[')
		p = append(p, quoteJSON(excerpt(key))...)
		return append(p, ']')
	}
	if len(p) > 0 {
		p = append(p, '.')
	}
	return append(p, excerpt(key)...)
}

// appendIndex appends to the JSON path p the step to element i.
func appendIndex(p []byte, i int) []byte {
	p = append(p, '[')
	p = strconv.AppendInt(p, int64(i), 10)
	return append(p, ']')
}

func isIdent(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c != '_' && !('a' <= c && c <= 'z') && !('A' <= c && c <= 'Z') && !(i > 0 && '0' <= c && c <= '9') {
			return false
		}
	}
	return true
}

// quoteJSON returns s as a JSON string literal, without the HTML escaping
// that json.Marshal adds.
func quoteJSON(s string) string {
	var b strings.Builder
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s) // encoding a string cannot fail
	return strings.TrimSuffix(b.String(), "\n")
}

// jsonNumberParts is the decomposed text of a JSON number: -?int(.frac)?(e exp)?
type jsonNumberParts struct {
	neg       bool
	intDigits string
	frac      string
	exp       int64 // saturated to ±maxExp
	hasFrac   bool
	hasExp    bool
}

const maxExp = 1 << 40

// splitNumber decomposes text, which the JSON decoder has already checked is
// a valid JSON number.
func splitNumber(text string) jsonNumberParts {
	var n jsonNumberParts
	s := text
	if strings.HasPrefix(s, "-") {
		n.neg = true
		s = s[1:]
	}
	mant, exp := s, ""
	if i := strings.IndexAny(s, "eE"); i >= 0 {
		mant, exp = s[:i], s[i+1:]
		n.hasExp = true
	}
	n.intDigits, n.frac, n.hasFrac = strings.Cut(mant, ".")
	if n.hasExp {
		expNeg := false
		switch {
		case strings.HasPrefix(exp, "-"):
			expNeg = true
			exp = exp[1:]
		case strings.HasPrefix(exp, "+"):
			exp = exp[1:]
		}
		for i := 0; i < len(exp) && n.exp < maxExp; i++ {
			n.exp = n.exp*10 + int64(exp[i]-'0')
		}
		n.exp = min(n.exp, maxExp)
		if expNeg {
			n.exp = -n.exp
		}
	}
	return n
}

// isZero reports whether the number's value is zero (or minus zero).
func (n jsonNumberParts) isZero() bool {
	return strings.Trim(n.intDigits, "0") == "" && strings.Trim(n.frac, "0") == ""
}

// isInteger reports whether the number is written in JSON integer form: no
// fraction and no exponent, so "2" is an integer and "2.0" and "2e0" are not.
func (n jsonNumberParts) isInteger() bool {
	return !n.hasFrac && !n.hasExp
}

// isWhole reports whether the number's value is an integer, however it is
// written: 10, 10.0, 1e1 and 1.5e1 are whole, 10.5 and 1e-1 are not.
func (n jsonNumberParts) isWhole() bool {
	shift := n.exp - int64(len(n.frac)) // value = digits × 10^shift
	if shift >= 0 {
		return true
	}
	digits := n.intDigits + n.frac
	if -shift >= int64(len(digits)) {
		return strings.Trim(digits, "0") == ""
	}
	return strings.Trim(digits[int64(len(digits))+shift:], "0") == ""
}

// milli returns the number times 1000, truncated toward zero, computed on
// the decimal digits so that "0.29" gives 290 where float64 arithmetic would
// give 289. Magnitudes beyond int64 saturate to ±math.MaxInt64.
func (n jsonNumberParts) milli() int64 {
	digits := strings.TrimLeft(n.intDigits+n.frac, "0")
	shift := n.exp - int64(len(n.frac)) + 3 // value*1000 = digits × 10^shift
	switch {
	case digits == "":
		return 0
	case shift < 0:
		if -shift >= int64(len(digits)) {
			return 0
		}
		digits = digits[:int64(len(digits))+shift]
	case shift > 0:
		if int64(len(digits))+shift > 19 {
			return n.signed(math.MaxInt64)
		}
		digits += strings.Repeat("0", int(shift))
	}
	v, err := strconv.ParseInt(digits, 10, 64)
	if err != nil { // too many digits
		return n.signed(math.MaxInt64)
	}
	return n.signed(v)
}

func (n jsonNumberParts) signed(v int64) int64 {
	if n.neg {
		return -v
	}
	return v
}
