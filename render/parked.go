package render

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/lanes-dev/lanes/actions"
	"github.com/lanes-dev/lanes/planner"
)

// ParkedList shows a design's parked messages, one a line, then the
// counts by lane, reason and key.
func ParkedList(w io.Writer, s Styles, p *actions.Parked) error {
	if len(p.Messages) == 0 {
		_, err := fmt.Fprintf(w, "No parked messages of %s on %s.\n", planner.Printable(p.Design, 256), deadLetterText(p.DeadLetters))
		return err
	}
	t := newTable(w, "SEQ", "LANE", "KEY", "ORIGIN", "REASON", "ATTEMPTS", "AGE")
	for _, m := range p.Messages {
		origin := strconv.FormatUint(m.OriginSeq, 10)
		if m.ReplayedFrom != 0 {
			origin += fmt.Sprintf(" (first %d)", m.ReplayedFrom)
		}
		row := []string{strconv.FormatUint(m.Seq, 10), planner.Printable(m.Lane, 128), planner.Printable(m.Key, 128), origin,
			planner.Printable(m.Reason, 80), strconv.Itoa(m.Attempts), age(p.Time.Sub(m.ParkedAt))}
		if err := t.Append(row); err != nil {
			return err
		}
	}
	if err := t.Render(); err != nil {
		return err
	}
	c := p.Count()
	fmt.Fprintf(w, "\n%d parked message(s) of %s on %s, the oldest parked %s ago\n", c.Total, planner.Printable(p.Design, 256), deadLetterText(p.DeadLetters), age(p.Time.Sub(c.Oldest)))
	fmt.Fprintf(w, "  by lane:   %s\n", countText(c.ByLane))
	fmt.Fprintf(w, "  by reason: %s\n", countText(c.ByReason))
	_, err := fmt.Fprintf(w, "  by key:    %s\n", countText(c.ByKey))
	return err
}

// ParkedListJSON writes the parked messages and their counts.
func ParkedListJSON(w io.Writer, p *actions.Parked) error {
	return writeJSON(w, struct {
		*actions.Parked
		Counts actions.Counts `json:"counts"`
	}{p, p.Count()})
}

// ParkedMsg shows one parked message: where it came from and why, its
// headers and its payload, escaped and cut.
func ParkedMsg(w io.Writer, s Styles, m *actions.ParkedMsg) error {
	fmt.Fprintf(w, "%s %d on %s (stream %s)\n", s.Heading.Render("parked message"), m.Seq, planner.Printable(m.DeadLetter, 256), m.DLStream)
	line := func(label, value string) { fmt.Fprintf(w, "  %-11s %s\n", label, value) }
	line("origin", fmt.Sprintf("stream %s, sequence %d, subject %s", m.Stream, m.OriginSeq, planner.Printable(m.Subject, 256)))
	if m.ReplayedFrom != 0 {
		line("first", fmt.Sprintf("sequence %d (a replayed copy, parked again)", m.ReplayedFrom))
	}
	line("lane", planner.Printable(m.Lane, 256))
	line("key", planner.Printable(m.Key, 256))
	line("reason", planner.Printable(m.Reason, 256)+fmt.Sprintf(" (%d attempt(s))", m.Attempts))
	if m.Error != "" {
		line("error", planner.Printable(m.Error, 1024))
	}
	line("parked", fmt.Sprintf("%s by %s", m.ParkedAt.UTC().Format(time.RFC3339), planner.Printable(m.Instance, 128)))
	fmt.Fprintf(w, "\n%s\n", s.Heading.Render("headers"))
	for _, k := range slices.Sorted(maps.Keys(m.Header)) {
		for _, v := range m.Header[k] {
			fmt.Fprintf(w, "  %s: %s\n", planner.Printable(k, 128), planner.Printable(v, 1024))
		}
	}
	fmt.Fprintf(w, "\n%s (%d bytes)\n", s.Heading.Render("payload"), len(m.Data))
	_, err := fmt.Fprintf(w, "  %s\n", planner.Printable(string(m.Data), payloadShown))
	return err
}

// payloadShown is how much of a payload show prints (and puts in JSON).
const payloadShown = 4096

// ParkedMsgJSON writes one parked message with its headers and payload:
// as text when it is UTF-8, else in base64; cut after 4 KiB either way.
func ParkedMsgJSON(w io.Writer, m *actions.ParkedMsg) error {
	data, cut := m.Data, false
	if len(data) > payloadShown {
		data, cut = data[:payloadShown], true
	}
	doc := struct {
		*actions.ParkedMsg
		Headers       map[string][]string `json:"headers"`
		Payload       *string             `json:"payload,omitempty"`
		PayloadBase64 []byte              `json:"payload_base64,omitempty"`
		PayloadCut    bool                `json:"payload_cut,omitempty"`
	}{ParkedMsg: m, Headers: m.Header, PayloadCut: cut}
	if utf8.Valid(data) {
		s := string(data)
		doc.Payload = &s
	} else {
		doc.PayloadBase64 = data
	}
	return writeJSON(w, doc)
}

// ParkedOutcome shows what discard or replay did (or would do) to each
// parked message, and the keys a replay refused.
func ParkedOutcome(w io.Writer, s Styles, o *actions.ParkedOutcome) error {
	if len(o.Messages) > 0 {
		t := newTable(w, "SEQ", "LANE", "KEY", "ORIGIN", "")
		for _, m := range o.Messages {
			done := m.Done
			if !m.Changed {
				done = s.Dim.Render(done)
			}
			if err := t.Append([]string{strconv.FormatUint(m.Seq, 10), planner.Printable(m.Lane, 128), planner.Printable(m.Key, 128),
				strconv.FormatUint(m.First(), 10), planner.Printable(done, 256)}); err != nil {
				return err
			}
		}
		if err := t.Render(); err != nil {
			return err
		}
		fmt.Fprintln(w)
	}
	for _, k := range o.OutOfOrder {
		fmt.Fprintf(w, "%s key %s (parked %s): %s\n", s.Warn.Render("out of order:"), planner.Printable(k.Key, 128), seqList(k.Parked), planner.Printable(k.Why, 512))
	}
	for _, q := range o.Quarantines {
		line := fmt.Sprintf("quarantined key %s (lane %s, since seq %d): %d message(s) replayed in %d round(s): %s", planner.Printable(q.Key, 128), planner.Printable(q.Lane, 128), q.Since, q.Replayed, q.Rounds, planner.Printable(q.Result, 64))
		if q.Detail != "" {
			line += "; " + planner.Printable(q.Detail, 512)
		}
		if len(q.OutOfOrder) > 0 {
			line += "; parked as it was lifted: " + seqList(q.OutOfOrder)
		}
		fmt.Fprintln(w, line)
	}
	verb := "done"
	if o.DryRun {
		verb = "would be done (dry run: nothing was changed)"
	}
	_, err := fmt.Fprintf(w, "%s: %d of %d parked message(s) of %s on %s %s\n", o.Action, o.Changed, len(o.Messages), planner.Printable(o.Design, 256), o.Stream, verb)
	return err
}

// ParkedOutcomeJSON writes what discard or replay did.
func ParkedOutcomeJSON(w io.Writer, o *actions.ParkedOutcome) error { return writeJSON(w, o) }

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func deadLetterText(dls []actions.DeadLetter) string {
	var parts []string
	for _, dl := range dls {
		parts = append(parts, fmt.Sprintf("%s (stream %s)", planner.Printable(dl.Subject, 256), dl.Stream))
	}
	return strings.Join(parts, ", ")
}

// countText is "a 3, b 1", the largest first.
func countText(counts map[string]int) string {
	names := slices.Sorted(maps.Keys(counts))
	slices.SortStableFunc(names, func(a, b string) int { return counts[b] - counts[a] })
	var parts []string
	for i, n := range names {
		if i == 8 {
			parts = append(parts, fmt.Sprintf("... %d more", len(names)-8))
			break
		}
		parts = append(parts, fmt.Sprintf("%s %d", planner.Printable(n, 64), counts[n]))
	}
	return strings.Join(parts, ", ")
}

func seqList(seqs []uint64) string {
	var parts []string
	for _, s := range seqs {
		parts = append(parts, strconv.FormatUint(s, 10))
	}
	return strings.Join(parts, ", ")
}

// age is a duration rounded for a reader: 45s, 12m, 3h, 2d.
func age(d time.Duration) string {
	switch {
	case d < time.Minute:
		return d.Round(time.Second).String()
	case d < time.Hour:
		return strconv.Itoa(int(d/time.Minute)) + "m"
	case d < 48*time.Hour:
		return strconv.Itoa(int(d/time.Hour)) + "h"
	}
	return strconv.Itoa(int(d/(24*time.Hour))) + "d"
}
