package rebound

// classCount is how many attempts of a call have failed with a Class.
type classCount struct {
	class string
	n     int
}

// classLimited counts a failure with info's Class against the counts so
// far (nil for none), and reports whether the class's attempt limit is
// reached, with the counts to carry on. counts is not modified: tokens
// share it.
func classLimited(counts *[]classCount, info RetryInfo) (*[]classCount, bool) {
	if info.Class == "" || info.ClassAttempts <= 0 {
		return counts, false
	}
	var old []classCount
	if counts != nil {
		old = *counts
	}
	out := make([]classCount, len(old), len(old)+1)
	copy(out, old)
	done := false
	found := false
	for i := range out {
		if out[i].class == info.Class {
			out[i].n++
			done, found = out[i].n >= info.ClassAttempts, true
		}
	}
	if !found {
		out = append(out, classCount{info.Class, 1})
		done = info.ClassAttempts <= 1
	}
	return &out, done
}

// backoffFor returns the backoff of a retry after info's failure: its own
// when it has a valid one, else b. A classifier's invalid Backoff would
// otherwise turn into no wait at all (a Max of 0) or a nonsense one.
func backoffFor(b Backoff, info RetryInfo) Backoff {
	if info.Backoff.Initial > 0 && info.Backoff.Validate() == nil {
		return info.Backoff
	}
	return b
}
