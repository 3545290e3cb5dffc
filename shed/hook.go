package shed

import (
	"context"

	"github.com/rebound-go/rebound/internal/shedhook"
)

func init() { shedhook.Admit = hookAdmit }

// hooked is a request admitted through shedhook, with its handler's
// context, in one allocation.
type hooked struct {
	request
	ctx requestContext
}

func hookAdmit(s any, procedure, addr string, parent context.Context) (shedhook.Request, string) {
	sh := s.(*Shedder)
	h := new(hooked)
	if pb, ok := sh.admit(procedure, nil, sh.peerOfHost(addr), &h.request); !ok {
		return nil, pb.Millis()
	}
	h.ctx = requestContext{parent, &h.request}
	return h, ""
}

func (h *hooked) Context() context.Context { return &h.ctx }
func (h *hooked) Wait()                    { h.wait() }
func (h *hooked) Unwait()                  { h.unwait() }
func (h *hooked) Refuse() string           { return h.refuse().Millis() }
func (h *hooked) End(outcome int)          { h.end(Outcome(outcome)) }
