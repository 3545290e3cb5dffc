// Package distinct is the "rebound_distinct" load-balancing policy: it sends
// the attempts of one call to distinct backends where it can, as gRFC A6
// asks of hedged requests ("Hedged requests should be sent to distinct
// backends, if possible").
//
// The policy wraps a child policy, round_robin by default, and leaves every
// decision to it except one: when the child picks a backend that an earlier
// attempt of the same call already used, the policy picks instead a backend
// that the child has itself handed out and that the call has not used. When
// the call has used them all, the child's choice stands. grpcretry tracks
// the backends of every call it runs under a retry or hedging policy, so
// that its hedges spread out and its retries go to a backend that has not
// failed it yet (as Envoy's previous_hosts retry predicate does). Other
// calls go to the child's choice untouched. So do the unary calls that
// start before the process's first conn under the policy has built it
// (grpc-go builds a conn's policy at its first call): until then grpcretry
// leaves the record out of them, for its room is a quarter of what
// grpcretry adds to a call that succeeds at once.
//
// Select the policy in the service config, naming the child policy (the
// first one registered in the list is used):
//
//	{"loadBalancingConfig": [{"rebound_distinct": {"childPolicy": [{"round_robin": {}}]}}]}
//
// Importing grpcretry registers the policy, so a program that uses
// grpcretry need not import this package. A program that selects the
// policy without grpcretry imports it for that side effect; its calls are
// then untracked and go to the child's choice.
package distinct

import (
	// The policy's implementation, shared with grpcretry, which records
	// the backends of each call; importing it registers the policy.
	_ "github.com/rebound-go/rebound/internal/distinct"
)

// Name is the name of the policy in a service config.
const Name = "rebound_distinct"
