package engine

import (
	"errors"
	"reflect"

	"google.golang.org/protobuf/proto"
)

// NewMessage returns a new, empty message of m's type, for an attempt that
// races others (a hedge) to receive into one of its own: a proto message,
// or a pointer to any other type. Any other m is returned as it is.
func NewMessage(m any) any {
	if pm, ok := m.(proto.Message); ok {
		return pm.ProtoReflect().New().Interface()
	}
	if v := reflect.ValueOf(m); v.Kind() == reflect.Pointer && !v.IsNil() {
		return reflect.New(v.Type().Elem()).Interface()
	}
	return m
}

// CopyMessage makes dst, the application's message, the winning attempt's
// src, which NewMessage made of dst's type.
func CopyMessage(dst, src any) error {
	if dst == src {
		return nil
	}
	if d, ok := dst.(proto.Message); ok {
		proto.Reset(d)
		proto.Merge(d, src.(proto.Message))
		return nil
	}
	dv, sv := reflect.ValueOf(dst), reflect.ValueOf(src)
	if dv.Type() != sv.Type() || dv.Kind() != reflect.Pointer {
		return errCopy
	}
	dv.Elem().Set(sv.Elem())
	return nil
}

var errCopy = errors.New("connectretry: the response message of a hedged call cannot be copied")
