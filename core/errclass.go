package core

import (
	"errors"
	"fmt"
	"slices"
)

// A namespace's own errors across nodes. The sentinels its methods' Define calls name are the
// namespace's error classes: a method's error that matches one (errors.Is) on the node that ran it
// carries the sentinel's message as its class, and the calling node, which registered the same
// sentinels, makes errors.Is match it there too.

// addErrors adds errs to ns's error classes; a sentinel is told apart by its message, so two
// different errors with one message cannot both be classes.
func (ns *namespace) addErrors(errs []error) error {
	if len(errs) == 0 {
		return nil
	}
	ns.ownMu.Lock()
	defer ns.ownMu.Unlock()
	own := slices.Clone(ns.ownErrs())
	for _, e := range errs {
		if e == nil {
			return errors.New("a nil error class")
		}
		i := slices.IndexFunc(own, func(o error) bool { return o.Error() == e.Error() })
		switch {
		case i < 0:
			own = append(own, e)
		case own[i] != e:
			return fmt.Errorf("two error classes with the message %q", e.Error())
		}
	}
	ns.own.Store(&own)
	return nil
}

func (ns *namespace) ownErrs() []error {
	if p := ns.own.Load(); p != nil {
		return *p
	}
	return nil
}

// ownClasses names the error classes of ns that err matches.
func (ns *namespace) ownClasses(err error) []string {
	var names []string
	for _, e := range ns.ownErrs() {
		if errors.Is(err, e) {
			names = append(names, e.Error())
		}
	}
	return names
}

// ownSentinels returns the error classes of ns named names (those this node knows).
func (ns *namespace) ownSentinels(names []string) []error {
	var errs []error
	for _, e := range ns.ownErrs() {
		if slices.Contains(names, e.Error()) {
			errs = append(errs, e)
		}
	}
	return errs
}
