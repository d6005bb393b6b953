package top_test

import (
	"fmt"
	"testing"
	"time"

	tea "github.com/charmbracelet/bubbletea"

	"github.com/lanes-dev/lanes/health"
	"github.com/lanes-dev/lanes/top"
)

// BenchmarkTopRefresh is one refresh of the view: a new report through
// Update (findings by lane, rate history, filter, sort) and the frame
// drawn (View), at 1,024 and 16,384 lanes.
func BenchmarkTopRefresh(b *testing.B) {
	for _, n := range []int{1024, 16384} {
		b.Run(itoa(n), func(b *testing.B) {
			reports := [2]any{synthetic(n, t0), synthetic(n, t0.Add(2*time.Second))}
			m := newModel(nil)
			m.Update(tea.WindowSizeMsg{Width: 160, Height: 50})
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				r := reports[i%2]
				m.Update(turnOf(r))
				_ = m.View()
			}
		})
	}
}

func itoa(n int) string { return fmt.Sprint(n) }

func turnOf(r any) tea.Msg {
	rep := r.(*health.Report)
	return top.TurnMsg{At: rep.Time, Report: rep, Last: rep}
}
