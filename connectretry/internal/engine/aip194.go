package engine

import (
	"fmt"
	"slices"
	"strings"

	"google.golang.org/protobuf/types/descriptorpb"

	"github.com/rebound-go/rebound/internal/aip194"
	"github.com/rebound-go/rebound/serviceconfig"
)

// The idempotency levels of protobuf's MethodOptions.idempotency_level,
// which both connect majors mirror with the same numbers.
const (
	noSideEffects = int32(descriptorpb.MethodOptions_NO_SIDE_EFFECTS)
	idempotent    = int32(descriptorpb.MethodOptions_IDEMPOTENT)
)

// Idempotent is AIP-194's rule, which both majors' Idempotent apply to
// their Spec: a unary procedure declared free of side effects or
// idempotent may be retried automatically; streams, and procedures of
// unknown idempotency, may not. internal/aip194.Services applies it to
// descriptors.
func Idempotent(unary bool, level int32) bool {
	return unary && (level == noSideEffects || level == idempotent)
}

// Procedure is what AIP194 reads of a connect Spec.
type Procedure struct {
	Name  string // "/pkg.Service/Method"
	Unary bool
	Level int32 // the idempotency level
}

// AIP194 returns the service config that retries the procedures that
// Idempotent accepts with serviceconfig.AIP194's policy, and leaves the
// others without one. It reports the first procedure whose name is not
// of the form "/pkg.Service/Method", as specs[i].Procedure.
func AIP194(procs []Procedure) (*serviceconfig.Config, error) {
	var names []serviceconfig.Name
	for i, p := range procs {
		name, ok := procedureName(p.Name)
		if !ok {
			return nil, fmt.Errorf("connectretry: AIP194: specs[%d].Procedure %q is not of the form /pkg.Service/Method", i, p.Name)
		}
		if Idempotent(p.Unary, p.Level) && !slices.Contains(names, name) {
			names = append(names, name)
		}
	}
	return aip194.Config(names), nil
}

// procedureName splits "/pkg.Service/Method".
func procedureName(procedure string) (serviceconfig.Name, bool) {
	s, ok := strings.CutPrefix(procedure, "/")
	if !ok {
		return serviceconfig.Name{}, false
	}
	service, method, ok := strings.Cut(s, "/")
	if !ok || service == "" || method == "" || strings.Contains(method, "/") {
		return serviceconfig.Name{}, false
	}
	return serviceconfig.Name{Service: service, Method: method}, true
}
