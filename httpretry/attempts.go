package httpretry

import "context"

type attemptsKey struct{}

// CountAttempts returns a copy of ctx that makes a request sent with it
// through a [Transport] store in *n how many attempts it made, hedges
// included, once RoundTrip returns: 1 when it was sent once. Do not share
// the context between requests that run at the same time.
//
//	req = req.WithContext(httpretry.CountAttempts(req.Context(), &n))
func CountAttempts(ctx context.Context, n *int) context.Context {
	return context.WithValue(ctx, attemptsKey{}, n)
}

// countAttempts stores n where ctx's CountAttempts asked, if it did.
func countAttempts(ctx context.Context, n int) {
	if p, _ := ctx.Value(attemptsKey{}).(*int); p != nil {
		*p = n
	}
}
