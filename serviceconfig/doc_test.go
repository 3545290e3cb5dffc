package serviceconfig

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

// walk rebuilds the value v of d as encoding/json would decode it into any
// (with UseNumber), using only doc's own reading: iter, text and raw. For
// a repeated key the last value wins, as in encoding/json.
func walk(d *doc, v value) any {
	switch v.kind {
	case jsonNull:
		return nil
	case jsonBool:
		return d.data[v.start] == 't'
	case jsonNumber:
		return json.Number(d.raw(v))
	case jsonString:
		return d.str(v)
	case jsonArray:
		out := []any{}
		it := d.iter(v)
		for {
			e, ok := it.next()
			if !ok {
				return out
			}
			out = append(out, walk(d, e))
		}
	default:
		out := map[string]any{}
		it := d.iter(v)
		for {
			k, e, ok := it.member()
			if !ok {
				return out
			}
			out[d.str(k)] = walk(d, e)
		}
	}
}

// FuzzDoc checks doc's in-place reading of a valid document against
// encoding/json's decoding of it, twice over so that the second reading
// goes through the spans the first one recorded.
func FuzzDoc(f *testing.F) {
	for _, s := range []string{
		`{}`, `[]`, `null`, `"a\"b\\\\"`, `{"a":[1,-2.5e3,true,false,null,"\u00e9\ud83d\ude00\ud800x\"\\/\b\f\n\r\t"]}`,
		`{"k":1,"k":2}`, "\"\xff\xfe\"", ` [ { "x" : [ [ ] , { } ] } ] `,
		`{"long":"` + strings.Repeat("x", 300) + `","nested":[` + strings.Repeat(`{"a":[1,2,3]},`, 30) + `{}]}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if !json.Valid(data) {
			return
		}
		dec := json.NewDecoder(bytes.NewReader(data))
		dec.UseNumber()
		var want any
		if err := dec.Decode(&want); err != nil {
			t.Fatal(err)
		}
		d := &doc{data: data}
		for pass := range 2 {
			v := d.valueAt(0)
			if end := d.ws(v.end); end != len(data) {
				t.Fatalf("pass %d: value ends at %d, then %d of %d bytes", pass, v.end, end, len(data))
			}
			if got := walk(d, v); !reflect.DeepEqual(got, want) {
				t.Fatalf("pass %d: doc reads %#v, encoding/json %#v", pass, got, want)
			}
		}
	})
}

// FuzzDurationGRPCGo checks that every duration A6 allows reads the same in
// grpc-go's grammar, and that grpc-go's reading never panics.
func FuzzDurationGRPCGo(f *testing.F) {
	for _, s := range []string{"1s", ".5s", "1.s", "01s", "+1s", "--1s", "1.-5s", "-s", "s", "", "315576000000s", "-9223372036.854775808s", "1.2.3s"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		g, gok := parseDurationGRPCGo(s)
		if d, err := parseDuration(s); err == nil && (!gok || g != d) {
			t.Fatalf("%q: A6 reads %v, grpc-go's grammar %v, %v", s, d, g, gok)
		}
	})
}

// Every object Parse interprets has room for its fields in a fields value.
func TestFieldListsFit(t *testing.T) {
	var f fields
	for _, names := range [][]string{rootFields, methodFields, nameFields, retryFields, hedgingFields, throttlingFields} {
		if len(names) > len(f.v) {
			t.Errorf("%d fields %v, room for %d", len(names), names, len(f.v))
		}
	}
}
