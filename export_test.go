package rebound

// ErrInvalidToken is the error of a refresh or record with a foreign or
// spent token, for the tests of package rebound_test.
var ErrInvalidToken = errInvalidToken
