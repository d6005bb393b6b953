// Package actions is what an operator does to a design's lanes once
// inspect has said what is wrong: pause and resume them, skip a stuck
// head, rewind them. Every action reads the lanes with inspect's snapshot
// (health.Read, then Judge), so the two never disagree on which lanes
// there are; it is planned first (what would change, lane by lane, for
// --dry-run) and then carried out. commands/ only wires flags to these
// functions; a full-screen view calls the same ones.
package actions

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/lanes-dev/lanes/connect"
	"github.com/lanes-dev/lanes/health"
)

// Target names the lanes an action applies to: every lane of the design's
// current generation, or the chosen lanes, or the lanes of chosen keys.
type Target struct {
	Stream string
	Design string
	// Lanes are lane names, or partition numbers of the current
	// generation ("3" is the lane of partition 3).
	Lanes []string
	// Keys are keys (alice) or subjects as published
	// (orders.alice.created): the lanes that hold them.
	Keys []string
}

// InputError is a target or an argument that names nothing there is (an
// unknown lane, a design without lanes, a key no layout holds): nothing
// was changed.
type InputError struct{ msg string }

func (e *InputError) Error() string { return e.msg }

func inputErrorf(format string, a ...any) error { return &InputError{fmt.Sprintf(format, a...)} }

// RefusedError is an action that cannot be done safely as asked (the lane
// moved past the message to skip, a rewind to messages the stream no
// longer has): nothing was changed.
type RefusedError struct{ msg string }

func (e *RefusedError) Error() string { return e.msg }

func refusedf(format string, a ...any) error { return &RefusedError{fmt.Sprintf(format, a...)} }

// Selection is a target's lanes, with the report they were read from.
type Selection struct {
	Report *health.Report
	Lanes  []*health.Lane // in the report's order
}

// Names are the selected lanes' names.
func (s *Selection) Names() []string {
	out := make([]string, len(s.Lanes))
	for i, l := range s.Lanes {
		out[i] = l.Name
	}
	return out
}

// Select reads the stream's lanes, as inspect does, and picks the
// target's. It refuses a design with no lanes on the stream, a lane name
// or partition it does not have, and a key that no lane holds.
func Select(ctx context.Context, c *connect.Conn, t Target) (*Selection, error) {
	if t.Stream == "" || t.Design == "" {
		return nil, inputErrorf("name the stream and the design (--stream, --design, or a design file)")
	}
	r, err := health.Inspect(ctx, c, health.Options{Stream: t.Stream, Design: t.Design, MaxSubjects: -1})
	if err != nil {
		return nil, err
	}
	return pick(r, t)
}

// pick chooses the target's lanes from a report.
func pick(r *health.Report, t Target) (*Selection, error) {
	var own []*health.Lane
	for i := range r.Lanes {
		if r.Lanes[i].Design == t.Design {
			own = append(own, &r.Lanes[i])
		}
	}
	if len(own) == 0 {
		return nil, inputErrorf("design %q has no lanes on stream %s (lanes inspect --stream %s lists the designs there are)", t.Design, t.Stream, t.Stream)
	}
	current := func(l *health.Lane) bool {
		for _, lay := range r.Layouts {
			if lay.Current && lay.Partitions == l.Partitions {
				return true
			}
		}
		return false
	}
	sel := &Selection{Report: r}
	add := func(l *health.Lane) {
		if !slices.Contains(sel.Lanes, l) {
			sel.Lanes = append(sel.Lanes, l)
		}
	}
	if len(t.Lanes) == 0 && len(t.Keys) == 0 {
		for _, l := range own {
			if current(l) {
				add(l)
			}
		}
		if len(sel.Lanes) == 0 {
			return nil, inputErrorf("design %q has no lanes of the stream's current partitioning (%s); name the lanes with --lanes", t.Design, t.Stream)
		}
	}
	for _, name := range t.Lanes {
		l := laneNamed(own, name, current)
		if l == nil {
			return nil, inputErrorf("design %q has no lane %q on stream %s (lanes: %s)", t.Design, name, t.Stream, laneList(own))
		}
		add(l)
	}
	for _, key := range t.Keys {
		places, err := r.Locate(key)
		if err != nil {
			return nil, &InputError{err.Error()}
		}
		found := false
		for _, p := range places {
			for _, name := range p.Lanes {
				for _, l := range own {
					if l.Name == name {
						add(l)
						found = true
					}
				}
			}
		}
		if !found {
			return nil, inputErrorf("no lane of design %q holds key %q", t.Design, key)
		}
	}
	order := map[*health.Lane]int{}
	for i, l := range own {
		order[l] = i
	}
	slices.SortFunc(sel.Lanes, func(a, b *health.Lane) int { return order[a] - order[b] })
	return sel, nil
}

// laneNamed finds a lane by name, or a current lane by partition number.
func laneNamed(own []*health.Lane, name string, current func(*health.Lane) bool) *health.Lane {
	for _, l := range own {
		if l.Name == name {
			return l
		}
	}
	if p, err := strconv.Atoi(name); err == nil {
		for _, l := range own {
			if l.Partition == p && current(l) {
				return l
			}
		}
	}
	return nil
}

// laneList names a few lanes for an error message.
func laneList(own []*health.Lane) string {
	var names []string
	for i, l := range own {
		if i == 4 {
			names = append(names, fmt.Sprintf("... %d in all", len(own)))
			break
		}
		names = append(names, l.Name)
	}
	return strings.Join(names, ", ")
}
