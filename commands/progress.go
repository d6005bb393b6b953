package commands

import (
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/schollz/progressbar/v3"

	"github.com/lanes-dev/lanes/converge"
)

// progressBars shows apply's phases as progress bars on stderr, only when
// stderr is a terminal: pipes and CI logs stay clean.
type progressBars struct {
	w     io.Writer
	on    bool
	mu    sync.Mutex
	phase converge.Phase
	bar   *progressbar.ProgressBar
}

func newProgressBars(streams *IO) *progressBars {
	return &progressBars{w: streams.Err, on: streams.ErrTTY}
}

var phaseText = map[converge.Phase]string{
	converge.PhaseLanes:  "lanes",
	converge.PhaseDrain:  "old lanes' backlog processed",
	converge.PhaseResume: "resuming new lanes",
	converge.PhaseDelete: "deleting lanes",
}

func (p *progressBars) update(pr converge.Progress) {
	if !p.on {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.bar == nil || pr.Phase != p.phase {
		p.finishLocked()
		p.phase = pr.Phase
		p.bar = progressbar.NewOptions64(pr.Total,
			progressbar.OptionSetWriter(p.w),
			progressbar.OptionSetDescription(phaseText[pr.Phase]),
			progressbar.OptionShowCount(),
			progressbar.OptionSetWidth(30),
			progressbar.OptionThrottle(100*time.Millisecond),
			progressbar.OptionSetPredictTime(pr.Phase != converge.PhaseDrain),
		)
	}
	if pr.Total != p.bar.GetMax64() {
		p.bar.ChangeMax64(pr.Total)
	}
	_ = p.bar.Set64(pr.Done)
}

func (p *progressBars) finishLocked() {
	if p.bar != nil {
		_ = p.bar.Finish()
		fmt.Fprintln(p.w)
		p.bar = nil
	}
}

func (p *progressBars) finish() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.finishLocked()
}
