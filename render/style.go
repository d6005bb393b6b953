// Package render turns lanes' values (plan, diff, lane report, simulation
// result) into tables, JSON, YAML and other text. The caller chooses the
// format once; colour appears only when the writer is a terminal.
package render

import (
	"bytes"
	"io"
	"math"
	"strings"

	"github.com/charmbracelet/lipgloss"
	"github.com/olekukonko/tablewriter"
	"github.com/olekukonko/tablewriter/renderer"
	"github.com/olekukonko/tablewriter/tw"

	"github.com/lanes-dev/lanes/planner"
)

// Styles are the lipgloss styles for one writer. Colour turns off by
// itself for non-terminals, NO_COLOR and CI.
type Styles struct {
	r       *lipgloss.Renderer
	Heading lipgloss.Style
	Label   lipgloss.Style
	Good    lipgloss.Style
	Warn    lipgloss.Style
	Bad     lipgloss.Style
	Dim     lipgloss.Style
	BarFill lipgloss.Style
	HotBar  lipgloss.Style
}

// NewStyles makes styles for w.
func NewStyles(w io.Writer) Styles {
	r := lipgloss.NewRenderer(w)
	return Styles{
		r:       r,
		Heading: r.NewStyle().Bold(true),
		Label:   r.NewStyle().Faint(true),
		Good:    r.NewStyle().Foreground(lipgloss.Color("2")),
		Warn:    r.NewStyle().Foreground(lipgloss.Color("3")),
		Bad:     r.NewStyle().Foreground(lipgloss.Color("1")).Bold(true),
		Dim:     r.NewStyle().Faint(true),
		BarFill: r.NewStyle().Foreground(lipgloss.Color("6")),
		HotBar:  r.NewStyle().Foreground(lipgloss.Color("3")),
	}
}

// maxCell bounds untrusted text (keys, subjects, names, server messages) in
// one table cell or line; planner.Printable escapes and cuts it.
const (
	maxCell    = 200
	maxFinding = 2000 // a finding's message quotes several names
)

// clean makes text that came from a server or an input file safe for a
// terminal: escaped and cut (see planner.Printable).
func clean(s string) string { return planner.Printable(s, maxCell) }

// PlainStyles never colour, whatever the writer: for golden tests and files.
func PlainStyles() Styles { return NewStyles(io.Discard) }

// newTable is the one table shape lanes prints: no borders, headers as
// written, columns separated by spaces, like kubectl and natscli reports.
func newTable(w io.Writer, headers ...string) *tablewriter.Table {
	t := tablewriter.NewTable(&trimWriter{w: w},
		tablewriter.WithRenderer(renderer.NewBlueprint(tw.Rendition{
			Borders: tw.BorderNone,
			Symbols: tw.NewSymbols(tw.StyleNone),
			Settings: tw.Settings{
				Separators: tw.Separators{BetweenColumns: tw.Off, BetweenRows: tw.Off, ShowHeader: tw.Off},
				Lines:      tw.Lines{ShowTop: tw.Off, ShowBottom: tw.Off, ShowHeaderLine: tw.Off},
			},
		})),
		tablewriter.WithHeaderAutoFormat(tw.Off),
		tablewriter.WithHeaderAlignment(tw.AlignLeft),
		tablewriter.WithRowAlignment(tw.AlignLeft),
		tablewriter.WithPadding(tw.Padding{Left: "", Right: "  ", Overwrite: true}),
		tablewriter.WithTrimSpace(tw.Off),
	)
	t.Header(headers)
	return t
}

// Bar draws value/max as a horizontal bar of width cells, with eighths.
func (s Styles) Bar(value, maxValue float64, width int, hot bool) string {
	if maxValue <= 0 || value <= 0 || width <= 0 {
		return ""
	}
	eighths := int(math.Round(value / maxValue * float64(width*8)))
	if eighths == 0 {
		eighths = 1 // something is there: show it
	}
	bar := strings.Repeat("█", eighths/8)
	if r := eighths % 8; r > 0 {
		bar += string([]rune("▏▎▍▌▋▊▉")[r-1])
	}
	if hot {
		return s.HotBar.Render(bar)
	}
	return s.BarFill.Render(bar)
}

// kv writes "label  value" lines with aligned labels.
func (s Styles) kv(w io.Writer, pairs [][2]string) {
	width := 0
	for _, p := range pairs {
		width = max(width, len(p[0]))
	}
	for _, p := range pairs {
		io.WriteString(w, "  "+s.Label.Render(p[0]+strings.Repeat(" ", width-len(p[0])))+"  "+p[1]+"\n")
	}
}

// trimWriter drops the padding tablewriter leaves at the end of each line.
type trimWriter struct {
	w       io.Writer
	pending []byte
}

func (t *trimWriter) Write(b []byte) (int, error) {
	t.pending = append(t.pending, b...)
	for {
		i := bytes.IndexByte(t.pending, '\n')
		if i < 0 {
			return len(b), nil
		}
		line := bytes.TrimRight(t.pending[:i], " ")
		if _, err := t.w.Write(append(line, '\n')); err != nil {
			return 0, err
		}
		t.pending = t.pending[i+1:]
	}
}
