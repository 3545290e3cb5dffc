package serviceconfig

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
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

// jsonValue is a decoded JSON value that keeps what encoding/json into any
// would lose: the exact text of numbers, the order of object members and
// duplicate keys.
type jsonValue struct {
	kind    jsonKind
	boolean bool
	text    string // a string's contents or a number's literal text
	elems   []*jsonValue
	members []jsonMember // in document order, duplicates included
	// start and end are byte offsets that order problems by where they are
	// in the document. start is at or before the value; end is after it for
	// arrays and objects, and equal to start otherwise.
	start, end int64
}

type jsonMember struct {
	key   string
	start int64 // at or before the key
	value *jsonValue
}

// maxJSONDepth bounds nesting like encoding/json's scanner does, so that a
// document of nothing but '[' cannot make the decoder hold a node for every
// byte of it.
const maxJSONDepth = 10000

// decodeJSON decodes exactly one JSON value from data. It works from a
// token stream with an explicit stack, so deep nesting costs heap, not Go
// stack, and is bounded by maxJSONDepth.
func decodeJSON(data []byte) (*jsonValue, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	type frame struct {
		v        *jsonValue
		key      string
		keyStart int64
		hasKey   bool
	}
	var (
		root  *jsonValue
		stack []frame
	)
	for {
		start := dec.InputOffset()
		tok, err := dec.Token()
		if err != nil {
			return nil, syntaxError(err, dec.InputOffset())
		}
		var v *jsonValue
		switch t := tok.(type) {
		case json.Delim:
			switch t {
			case '{', '[':
				if len(stack) >= maxJSONDepth {
					return nil, &Error{Message: fmt.Sprintf("invalid JSON near byte offset %d: nested deeper than %d levels", dec.InputOffset(), maxJSONDepth)}
				}
				v = &jsonValue{kind: jsonArray}
				if t == '{' {
					v.kind = jsonObject
				}
			default: // '}' or ']': the decoder has checked that it matches
				stack[len(stack)-1].v.end = dec.InputOffset()
				stack = stack[:len(stack)-1]
				if len(stack) == 0 {
					return root, expectEOF(dec)
				}
				continue
			}
		case string:
			if len(stack) > 0 {
				if top := &stack[len(stack)-1]; top.v.kind == jsonObject && !top.hasKey {
					top.key, top.keyStart, top.hasKey = t, start, true
					continue
				}
			}
			v = &jsonValue{kind: jsonString, text: t}
		case json.Number:
			v = &jsonValue{kind: jsonNumber, text: string(t)}
		case bool:
			v = &jsonValue{kind: jsonBool, boolean: t}
		case nil:
			v = &jsonValue{kind: jsonNull}
		}
		v.start, v.end = start, start
		if len(stack) == 0 {
			root = v
		} else {
			top := &stack[len(stack)-1]
			if top.v.kind == jsonArray {
				top.v.elems = append(top.v.elems, v)
			} else {
				top.v.members = append(top.v.members, jsonMember{top.key, top.keyStart, v})
				top.key, top.hasKey = "", false
			}
		}
		if v.kind == jsonArray || v.kind == jsonObject {
			stack = append(stack, frame{v: v})
		} else if len(stack) == 0 {
			return root, expectEOF(dec)
		}
	}
}

// expectEOF reports an error if anything but white space follows the value.
func expectEOF(dec *json.Decoder) error {
	_, err := dec.Token()
	if err == io.EOF {
		return nil
	}
	if err != nil {
		return syntaxError(err, dec.InputOffset())
	}
	return &Error{Message: fmt.Sprintf("invalid JSON near byte offset %d: unexpected data after the top-level value", dec.InputOffset())}
}

// syntaxError reports a decoder error. The offset is where the offending
// token starts: json.SyntaxError.Offset is relative to different points for
// different errors, so it is not used.
func syntaxError(err error, offset int64) error {
	if err == io.EOF || err == io.ErrUnexpectedEOF {
		return &Error{Message: "invalid JSON: unexpected end of input"}
	}
	return &Error{Message: fmt.Sprintf("invalid JSON near byte offset %d: %v", offset, err)}
}

// path is a JSON path such as "methodConfig[1].retryPolicy.maxAttempts".
// The empty path is the whole document.
type path string

// field returns the path of member key of the object at p. Keys that are not
// plain identifiers are written in brackets as JSON strings, so that every
// path reads back unambiguously.
func (p path) field(key string) path {
	if !isIdent(key) {
		return p + "[" + path(quoteJSON(key)) + "]"
	}
	if p == "" {
		return path(key)
	}
	return p + "." + path(key)
}

// index returns the path of element i of the array at p.
func (p path) index(i int) path {
	return p + "[" + path(strconv.Itoa(i)) + "]"
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
