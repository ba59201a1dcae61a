package cluster

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// The engine's streams (its parts: one per shard) are made ready each on its own, all at once: a part
// is looked up first (its stream's leader answers), created only if it is missing and updated
// only if its settings are not the engine's, then probed through its quorum. A part that is ready
// stays ready, and a part's attempt is bounded by Config.Timeout alone, so a slow part (a stream
// whose leader is not elected yet) delays no other, and a creation that many nodes start at once
// costs the JetStream meta leader one round per part that was missing, never one per part and per
// try.

// part is one stream of the engine's.
type part struct {
	name  string                          // as it is reported: "stream durable_log_3"
	ready func(ctx context.Context) error // one attempt at making it ready
}

// progressEvery is how often a set-up that waits says what it waits for.
const progressEvery = 5 * time.Second

// setUp makes every part ready, trying each again (with a backoff of up to retryMax) until it is
// or ctx ends. It logs to cfg.Logger when a part's first attempt fails (JetStream is not ready:
// no quorum yet), then every progressEvery while it waits, and once all is ready.
func (e *Engine) setUp(ctx context.Context) error {
	parts := e.parts()
	type state struct {
		ready bool
		err   error // the last attempt's
	}
	var (
		mu     sync.Mutex // protects states
		states = make([]state, len(parts))
		failed = make(chan struct{}, 1) // a part's attempt failed
	)
	done := make(chan struct{})
	var wg sync.WaitGroup
	for i, p := range parts {
		wg.Go(func() {
			for wait := retryMin; ; wait = min(2*wait, retryMax) {
				actx, cancel := context.WithTimeout(ctx, e.cfg.Timeout)
				err := p.ready(actx)
				timedOut := actx.Err() != nil
				cancel()
				if err != nil && ctx.Err() != nil {
					return // cut short: the last error stands
				}
				if err != nil && timedOut {
					err = fmt.Errorf("no answer within %v (%w)", e.cfg.Timeout, err)
				}
				mu.Lock()
				states[i] = state{ready: err == nil, err: err}
				mu.Unlock()
				if err == nil {
					return
				}
				e.cfg.Logger.Debug("cluster: not ready yet: "+p.name, "error", err)
				select {
				case failed <- struct{}{}:
				default:
				}
				select {
				case <-ctx.Done():
					return
				case <-time.After(wait):
				}
			}
		})
	}
	go func() { wg.Wait(); close(done) }()

	// progress says how many parts are ready and names those that are not, with the last error of
	// the first of them.
	progress := func() (string, int) {
		mu.Lock()
		defer mu.Unlock()
		var waiting []string
		var first string // the first part not ready that failed, and how
		for i, s := range states {
			if s.ready {
				continue
			}
			waiting = append(waiting, parts[i].name)
			if first == "" && s.err != nil {
				first = parts[i].name + ": " + s.err.Error()
			}
		}
		msg := fmt.Sprintf("%d of %d streams ready", len(parts)-len(waiting), len(parts))
		if len(waiting) > 0 {
			msg += "; waiting for " + nameSome(waiting, 4)
			if first != "" {
				msg += "; " + first
			}
		}
		return msg, len(waiting)
	}
	log := e.cfg.Logger
	start := time.Now()
	tick := time.NewTicker(progressEvery)
	defer tick.Stop()
	said := false
	for {
		select {
		case <-done:
			if msg, waiting := progress(); waiting > 0 {
				return fmt.Errorf("%s (%w)", msg, ctx.Err())
			}
			if said {
				log.Info("cluster: JetStream is ready", "streams", len(parts), "after", time.Since(start).Round(time.Millisecond))
			}
			return nil
		case <-failed:
			if !said {
				said = true
				msg, _ := progress()
				log.Info("cluster: waiting for JetStream (a majority of the nodes must run): " + msg)
			}
		case <-tick.C:
			msg, _ := progress()
			log.Info("cluster: waiting for JetStream (a majority of the nodes must run): "+msg, "waited", time.Since(start).Round(time.Second))
		}
	}
}

// retryMin and retryMax bound the wait between two attempts at a part.
const (
	retryMin = 100 * time.Millisecond
	retryMax = 2 * time.Second
)

// nameSome joins the first n names, and says how many more there are.
func nameSome(names []string, n int) string {
	if len(names) <= n {
		return strings.Join(names, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(names[:n], ", "), len(names)-n)
}

// parts lists the engine's streams, one per shard. (A bucket of leases and an object store of
// blobs that an earlier version made are left as they are.)
func (e *Engine) parts() []part {
	var ps []part
	for shard := range e.cfg.Shards {
		ps = append(ps, part{"stream " + e.streamName(shard), func(ctx context.Context) error { return e.readyShard(ctx, shard) }})
	}
	return ps
}

// lookUp asks for a stream's configuration. A server that cannot answer yet (no leader for
// JetStream or for the stream) answers nothing, so each request gets at most AttemptTimeout.
func (e *Engine) lookUp(ctx context.Context, stream string) (jetstream.Stream, error) {
	ctx, cancel := context.WithTimeout(ctx, e.cfg.AttemptTimeout)
	defer cancel()
	s, err := e.js.Stream(ctx, stream)
	if err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil, fmt.Errorf("look up: %w", err)
	}
	return s, err
}

// shardConfig is the configuration of a shard's stream.
func (e *Engine) shardConfig(shard int) jetstream.StreamConfig {
	return jetstream.StreamConfig{
		Name:              e.streamName(shard),
		Subjects:          []string{e.subjectBase(shard) + ">"},
		Storage:           jetstream.FileStorage,
		Replicas:          e.cfg.Replicas,
		Retention:         jetstream.LimitsPolicy,
		Discard:           jetstream.DiscardOld,
		MaxMsgs:           -1,
		MaxBytes:          -1,
		MaxAge:            0,
		MaxMsgsPerSubject: -1,
		AllowDirect:       true, // reads from any replica, batched
		AllowMsgTTL:       true, // read barriers go away by themselves
		AllowRollup:       true, // one message per lease and per blob manifest
		DenyDelete:        true,
	}
}

// sameSettings reports whether a stream configured as have keeps every setting that want sets (the
// server fills in the others).
func sameSettings(have, want jetstream.StreamConfig) bool {
	return slices.Equal(have.Subjects, want.Subjects) && have.Storage == want.Storage &&
		have.Replicas == want.Replicas && have.Retention == want.Retention && have.Discard == want.Discard &&
		have.MaxMsgs == want.MaxMsgs && have.MaxBytes == want.MaxBytes && have.MaxAge == want.MaxAge &&
		have.MaxMsgsPerSubject == want.MaxMsgsPerSubject && have.AllowDirect == want.AllowDirect &&
		have.AllowMsgTTL == want.AllowMsgTTL && have.AllowRollup == want.AllowRollup && have.DenyDelete == want.DenyDelete
}

// readyShard makes a shard's stream ready: created if missing, updated if its settings are not the
// engine's, and with a leader that answers once a barrier goes through it.
func (e *Engine) readyShard(ctx context.Context, shard int) error {
	want := e.shardConfig(shard)
	s, err := e.lookUp(ctx, want.Name)
	switch {
	case errors.Is(err, jetstream.ErrStreamNotFound):
		// Another node may be creating it too: the same configuration is no conflict, and a
		// refusal is looked at again by the next attempt.
		if _, err = e.js.CreateStream(ctx, want); err != nil {
			return fmt.Errorf("create: %w", err)
		}
	case err != nil:
		return err
	case !sameSettings(s.CachedInfo().Config, want):
		if _, err = e.js.UpdateStream(ctx, want); err != nil {
			return fmt.Errorf("update: %w", err)
		}
	}
	base := e.subjectBase(shard)
	if _, _, _, err = e.confirmedLast(ctx, want.Name, base+"=probe", base+"=sync"); err != nil {
		return fmt.Errorf("probe: %w", err)
	}
	return nil
}
