package main

// The routes of the original's hands-on session, over the lab objects, and the
// dead letters.

import (
	"context"
	"math"
	"net/http"
	"time"

	"github.com/durable-go/durable/core"
)

// The lab (the original).

// defaultObject is the lab object used when ?o= is absent.
const defaultObject = "default"

func (a *app) labStub(r *http.Request) (*core.Stub[*Lab], error) {
	o, err := nameParam(r, "o", defaultObject)
	if err != nil {
		return nil, err
	}
	return a.labs.Get(o)
}

// labCall runs fn as a turn of the lab object ?o=.
func labCall[R any](a *app, r *http.Request, fn func(ctx context.Context, l *Lab) (R, error)) (any, error) {
	stub, err := a.labStub(r)
	if err != nil {
		return nil, err
	}
	return core.Call(r.Context(), stub, fn)
}

func (a *app) reset(r *http.Request) (any, error) {
	return labCall(a, r, func(ctx context.Context, l *Lab) (any, error) {
		return map[string]bool{"reset": true}, l.Reset(ctx)
	})
}

func (a *app) armTwice(r *http.Request) (any, error) {
	return labCall(a, r, func(ctx context.Context, l *Lab) (ArmTwice, error) { return l.ArmTwice(ctx) })
}

func (a *app) deleteAll(r *http.Request) (any, error) {
	return labCall(a, r, func(ctx context.Context, l *Lab) (DeleteAllResult, error) { return l.DeleteAll(ctx) })
}

// hitResults is the original's /hit answer.
type hitResults struct {
	Results []HitResult `json:"results"`
}

// hit makes n calls, one hit each, as the original's loop of hit() does.
func (a *app) hit(r *http.Request) (any, error) {
	n, err := intParam(r, "n", 5, 1, 1000)
	if err != nil {
		return nil, err
	}
	stub, err := a.labStub(r)
	if err != nil {
		return nil, err
	}
	out := hitResults{Results: make([]HitResult, 0, n)}
	for range n {
		h, err := core.Call(r.Context(), stub, func(ctx context.Context, l *Lab) (HitResult, error) { return l.Hit(ctx) })
		if err != nil {
			return nil, err
		}
		out.Results = append(out.Results, h)
	}
	return out, nil
}

func (a *app) state(r *http.Request) (any, error) {
	timeline, err := boolParam(r, "timeline", false)
	if err != nil {
		return nil, err
	}
	return labCall(a, r, func(ctx context.Context, l *Lab) (LabState, error) { return l.State(ctx, timeline) })
}

func (a *app) mode(r *http.Request) (any, error) {
	m := r.Form.Get("m")
	switch m {
	case modeOK, modeThrow, modeFlaky:
	default:
		return nil, badParam("m", "ok, throw or flaky", m)
	}
	return labCall(a, r, func(ctx context.Context, l *Lab) (map[string]string, error) {
		return map[string]string{"mode": m}, l.SetMode(ctx, m)
	})
}

func (a *app) arm(r *http.Request) (any, error) {
	ms, err := intParam(r, "ms", 500, 0, 7*24*3600*1000)
	if err != nil {
		return nil, err
	}
	return labCall(a, r, func(ctx context.Context, l *Lab) (map[string]int64, error) {
		at, err := l.Arm(ctx, time.Duration(ms)*time.Millisecond)
		return map[string]int64{"alarm": at}, err
	})
}

// deadLetter is a core.DeadLetter as JSON, times in ms since the epoch.
type deadLetter struct {
	Seq       int64  `json:"seq"`
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	Key       string `json:"key,omitempty"`
	Attempts  int    `json:"attempts"`
	LastError string `json:"lastError"`
	Scheduled int64  `json:"scheduled"`
	Dropped   int64  `json:"dropped"`
}

func (a *app) deadLetters(r *http.Request) (any, error) {
	filter := r.Form.Get("o")
	dls, err := a.rt.Admin().DeadLetters()
	if err != nil {
		return nil, err
	}
	out := []deadLetter{}
	for _, dl := range dls {
		if filter != "" && (dl.Namespace != a.labs.Name() || dl.Name != filter) {
			continue
		}
		out = append(out, deadLetter{Seq: dl.Seq, Namespace: dl.Namespace, Name: dl.Name, Key: dl.Key, Attempts: dl.Attempts,
			LastError: dl.LastError, Scheduled: dl.Scheduled.UnixMilli(), Dropped: dl.Dropped.UnixMilli()})
	}
	return map[string]any{"deadLetters": out}, nil
}

func (a *app) rearm(r *http.Request) (any, error) {
	s := r.Form.Get("seq")
	seq, err := intParam(r, "seq", -1, 1, math.MaxInt)
	if err != nil {
		return nil, err
	}
	if seq < 0 {
		return nil, badParam("seq", "the seq of a dead letter (GET /deadletters)", s)
	}
	ms, err := intParam(r, "ms", 0, 0, 7*24*3600*1000)
	if err != nil {
		return nil, err
	}
	dls, err := a.rt.Admin().DeadLetters()
	if err != nil {
		return nil, err
	}
	found := false
	for _, dl := range dls {
		found = found || dl.Seq == int64(seq)
	}
	if !found {
		return nil, notFound("no dead letter %d (GET /deadletters lists them)", seq)
	}
	at := time.UnixMilli(time.Now().Add(time.Duration(ms) * time.Millisecond).UnixMilli())
	if err := a.rt.Admin().Rearm(r.Context(), int64(seq), at); err != nil {
		return nil, err
	}
	return map[string]int64{"rearmed": int64(seq), "alarm": at.UnixMilli()}, nil
}
