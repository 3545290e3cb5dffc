package shed

import (
	"context"
	"errors"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// Instrument names.
const (
	LimitName    = "rebound.shed.limit"
	InFlightName = "rebound.shed.in_flight"
	AdmittedName = "rebound.shed.admitted"
	RejectedName = "rebound.shed.rejected"
	// RefusedName counts the handlers' failures with a sign of overload
	// and no pushback of their own, which the Shedder gave one.
	RefusedName = "rebound.shed.refused"
	// PushbackKey says what a rejected request was told: "delay" or "stop".
	PushbackKey = attribute.Key("rebound.shed.pushback")
)

type instruments struct {
	limit                       metric.Int64Gauge
	inFlight                    metric.Int64UpDownCounter
	admittedN, rejectN, refuseN metric.Int64Counter
	delay, stop                 metric.MeasurementOption
}

func newInstruments(mp metric.MeterProvider) (*instruments, error) {
	m := mp.Meter("github.com/rebound-go/rebound/shed")
	var in instruments
	var errs [5]error
	in.limit, errs[0] = m.Int64Gauge(LimitName, metric.WithDescription("The concurrency limit of the Shedder."), metric.WithUnit("{request}"))
	in.inFlight, errs[1] = m.Int64UpDownCounter(InFlightName, metric.WithDescription("Requests the Shedder admitted that are being served."), metric.WithUnit("{request}"))
	in.admittedN, errs[2] = m.Int64Counter(AdmittedName, metric.WithDescription("Requests the Shedder admitted."), metric.WithUnit("{request}"))
	in.rejectN, errs[3] = m.Int64Counter(RejectedName, metric.WithDescription("Requests the Shedder rejected, by the pushback they were given."), metric.WithUnit("{request}"))
	in.refuseN, errs[4] = m.Int64Counter(RefusedName, metric.WithDescription("Handler failures with a sign of overload and no pushback of their own, by the pushback the Shedder gave them."), metric.WithUnit("{request}"))
	if err := errors.Join(errs[:]...); err != nil {
		return nil, err
	}
	in.delay = metric.WithAttributeSet(attribute.NewSet(PushbackKey.String("delay")))
	in.stop = metric.WithAttributeSet(attribute.NewSet(PushbackKey.String("stop")))
	return &in, nil
}

func (in *instruments) setLimit(n int) {
	if in != nil {
		in.limit.Record(context.Background(), int64(n))
	}
}

func (in *instruments) admitted() {
	if in != nil {
		in.admittedN.Add(context.Background(), 1)
		in.inFlight.Add(context.Background(), 1)
	}
}

func (in *instruments) finished() {
	if in != nil {
		in.inFlight.Add(context.Background(), -1)
	}
}

func (in *instruments) shed(stop bool) {
	if in == nil {
		return
	}
	if stop {
		in.rejectN.Add(context.Background(), 1, in.stop)
	} else {
		in.rejectN.Add(context.Background(), 1, in.delay)
	}
}

func (in *instruments) refused(stop bool) {
	if in == nil {
		return
	}
	if stop {
		in.refuseN.Add(context.Background(), 1, in.stop)
	} else {
		in.refuseN.Add(context.Background(), 1, in.delay)
	}
}
