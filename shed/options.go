package shed

import (
	"errors"

	"go.opentelemetry.io/otel/metric"

	"github.com/rebound-go/rebound"
)

// Option configures a [Shedder].
type Option interface{ apply(*settings) }

type optionFunc func(*settings)

func (f optionFunc) apply(s *settings) { f(s) }

type settings struct {
	clock  rebound.Clock
	random rebound.Random
	mp     metric.MeterProvider
	err    error
}

// WithClock sets the clock that latencies and the shed window are measured
// on; the default is the real one.
func WithClock(c rebound.Clock) Option {
	return optionFunc(func(s *settings) {
		if c == nil {
			s.err = errors.New("shed: WithClock: nil clock")
		}
		s.clock = c
	})
}

// WithRandom sets the source that spreads pushback delays; the default
// draws from math/rand/v2.
func WithRandom(r rebound.Random) Option {
	return optionFunc(func(s *settings) {
		if r == nil {
			s.err = errors.New("shed: WithRandom: nil source")
		}
		s.random = r
	})
}

// WithMeterProvider records the Shedder's OpenTelemetry instruments:
// rebound.shed.limit (gauge, the concurrency limit),
// rebound.shed.in_flight (up-down counter, requests being served),
// rebound.shed.admitted (counter) and rebound.shed.rejected (counter, with
// rebound.shed.pushback "delay" or "stop").
func WithMeterProvider(mp metric.MeterProvider) Option {
	return optionFunc(func(s *settings) {
		if mp == nil {
			s.err = errors.New("shed: WithMeterProvider: nil MeterProvider")
		}
		s.mp = mp
	})
}
