package model

import (
	"context"

	"github.com/lanes-dev/lanes/sim/judge"
	"github.com/lanes-dev/lanes/sim/workload"
)

// RunRecorder is Run, returning the judge itself: tests read when each
// message completed.
func RunRecorder(ctx context.Context, w *workload.Workload, cfg Config) (*judge.Recorder, error) {
	if err := cfg.validate(w); err != nil {
		return nil, err
	}
	s := newSim(w, cfg)
	if err := s.run(ctx); err != nil {
		return nil, err
	}
	return s.rec, nil
}
