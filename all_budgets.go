package rebound

// AllBudgets returns a budget that allows a retry or hedge only when every
// one of budgets allows it: an A6 [Throttle] with a [RatioBudget], say, or
// a [TokenBucket] with a [ConcurrencyBudget]. Failures, successes and calls
// are told to each of them.
//
// A refusal spends nothing: when one budget refuses, what the others took
// for that retry is given back. The budgets of this package can give back;
// they are asked first, in the order given, and any other budget after
// them. With more than one other budget, what an earlier one took stays
// spent when a later one refuses. nil budgets are left out; with none
// left, AllBudgets returns nil, which means no budget. The result is a
// [CallBudget], safe for concurrent use when its budgets are.
func AllBudgets(budgets ...Budget) Budget {
	a := &allBudgets{}
	for _, b := range budgets {
		if b == nil {
			continue
		}
		if _, ok := b.(unallower); ok {
			a.undoable = append(a.undoable, b)
		} else {
			a.other = append(a.other, b)
		}
	}
	if len(a.undoable)+len(a.other) == 0 {
		return nil
	}
	a.all = append(append(a.all, a.undoable...), a.other...)
	return a
}

// unallower is implemented by budgets that can give back what Allow took.
type unallower interface{ unallow(timeout bool) }

type allBudgets struct {
	all, undoable, other []Budget
}

func (a *allBudgets) Allow(timeout bool) bool {
	for i, b := range a.all {
		if !b.Allow(timeout) {
			// Budgets before i allowed: give back what those can.
			for _, p := range a.all[:i] {
				if u, ok := p.(unallower); ok {
					u.unallow(timeout)
				} else if c, ok := p.(CallBudget); ok {
					c.EndRetry()
				}
			}
			return false
		}
	}
	return true
}

func (a *allBudgets) unallow(timeout bool) {
	for _, b := range a.all {
		if u, ok := b.(unallower); ok {
			u.unallow(timeout)
		} else if c, ok := b.(CallBudget); ok {
			c.EndRetry()
		}
	}
}

func (a *allBudgets) RecordFailure() {
	for _, b := range a.all {
		b.RecordFailure()
	}
}

func (a *allBudgets) RecordSuccess() {
	for _, b := range a.all {
		b.RecordSuccess()
	}
}

// RecordRetrySuccess tells each budget of a retry's success, as
// RecordRetrySuccess when it has the method, else as RecordSuccess.
func (a *allBudgets) RecordRetrySuccess(timeout bool) {
	for _, b := range a.all {
		if r, ok := b.(retrySuccessRecorder); ok {
			r.RecordRetrySuccess(timeout)
		} else {
			b.RecordSuccess()
		}
	}
}

func (a *allBudgets) StartCall() {
	for _, b := range a.all {
		if c, ok := b.(CallBudget); ok {
			c.StartCall()
		}
	}
}

func (a *allBudgets) EndRetry() {
	for _, b := range a.all {
		if c, ok := b.(CallBudget); ok {
			c.EndRetry()
		}
	}
}

func (a *allBudgets) EndCall() {
	for _, b := range a.all {
		if c, ok := b.(CallBudget); ok {
			c.EndCall()
		}
	}
}

// unallow does nothing: a Throttle's Allow takes nothing.
func (t *Throttle) unallow(bool) {}
