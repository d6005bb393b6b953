package render

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/lanes-dev/lanes/planner"
)

// PlanTable prints the layout summary, one row per lane with a key-count
// bar when keys were given, and the skew summary.
func PlanTable(w io.Writer, s Styles, p *planner.Plan, skew *planner.Skew) error {
	d := p.Design
	fmt.Fprintln(w, s.Heading.Render(fmt.Sprintf("Design %s: %d lanes on stream %s", d.Name, d.Partitions, d.Stream.Name)))
	mapping := "stream subject transform (applied by lanes apply)"
	if d.Mapping == planner.MappingAccount {
		mapping = "account mapping (installed by the operator: see -o conf or -o nsc)"
	}
	pinned := "no"
	if d.Lane.Pinned {
		pinned = fmt.Sprintf("yes (group %q, pin moves after %s without pulls)", planner.PinnedGroup, d.Lane.PinnedTTL)
	}
	s.kv(w, [][2]string{
		{"publish to", d.Subject},
		{"ordering key", keyTokensText(d)},
		{"stored as", p.Layout.Describe()},
		{"mapping", p.Mapping.Source + " -> " + p.Mapping.Destination},
		{"mapping lives in", mapping},
		{"stream subjects", strings.Join(p.Stream.Subjects, ", ")},
		{"max consumers", strconv.Itoa(p.Stream.MaxConsumers)},
		{"lane", laneSettingsText(d)},
		{"pinned worker", pinned},
	})
	fmt.Fprintln(w)

	headers := []string{"LANE", "PARTITION", "FILTER"}
	if skew != nil {
		headers = append(headers, "KEYS", "MESSAGES", "")
	}
	t := newTable(w, headers...)
	for _, l := range p.Lanes {
		row := []string{l.Name, strconv.Itoa(l.Partition), l.Filter}
		if skew != nil {
			m, mean := skew.LaneMessages[l.Partition], skew.MessagesPerLane.Mean
			row = append(row, approxCount(skew.LaneKeys[l.Partition], skew.KeysApprox), strconv.FormatInt(m, 10),
				s.Bar(float64(m), float64(skew.MessagesPerLane.Max), 30, mean > 0 && float64(m) > 1.5*mean))
		}
		if err := t.Append(row); err != nil {
			return err
		}
	}
	if err := t.Render(); err != nil {
		return err
	}
	if skew != nil {
		fmt.Fprintln(w)
		skewTable(w, s, skew)
	}
	return nil
}

func keyTokensText(d planner.Design) string {
	parts := make([]string, len(d.KeyTokens))
	for i, k := range d.KeyTokens {
		parts[i] = strconv.Itoa(k)
	}
	word := "token"
	if len(parts) > 1 {
		word = "tokens"
	}
	return fmt.Sprintf("'*' %s %s of %s", word, strings.Join(parts, ","), d.Subject)
}

func laneSettingsText(d planner.Design) string {
	l := d.Lane
	md := "unlimited"
	if l.MaxDeliver > 0 {
		md = strconv.Itoa(l.MaxDeliver)
	}
	out := fmt.Sprintf("pull, explicit ack, max ack pending %d, ack wait %s, max deliver %s", l.MaxAckPending, l.AckWait, md)
	if l.KeysInFlight > 1 {
		out = fmt.Sprintf("pull, explicit ack, key-parallel: %d keys in flight, one message per key (max ack pending %d), pinned, ack wait %s, max deliver %s", l.KeysInFlight, l.MaxAckPending, l.AckWait, md)
	}
	if len(l.BackOff) > 0 {
		steps := make([]string, len(l.BackOff))
		for i, b := range l.BackOff {
			steps[i] = b.String()
		}
		out += ", backoff " + strings.Join(steps, ",")
	}
	return out
}

func skewTable(w io.Writer, s Styles, k *planner.Skew) {
	fmt.Fprintln(w, s.Heading.Render("Skew"))
	ratio := fmt.Sprintf("%.2f", k.MaxToMean)
	if k.MaxToMean >= 1.5 {
		ratio = s.Warn.Render(ratio)
	}
	ratio += " (1.00 is perfectly even)"
	keys := approxCount(k.Keys, k.KeysApprox)
	if k.KeysApprox {
		keys += " (estimated per lane, within a few percent)"
	}
	kp, mp := k.KeysPerLane, k.MessagesPerLane
	pairs := [][2]string{
		{"lines", strconv.FormatInt(k.Lines, 10)},
		{"keys", keys},
		{"messages", strconv.FormatInt(k.Messages, 10)},
		{"keys per lane", fmt.Sprintf("min %s, max %s, mean %.1f", approxCount(kp.Min, k.KeysApprox), approxCount(kp.Max, k.KeysApprox), kp.Mean)},
		{"messages per lane", fmt.Sprintf("min %d, max %d, mean %.1f", mp.Min, mp.Max, mp.Mean)},
		{"max/mean", ratio},
		{"empty lanes", strconv.Itoa(k.Empty)},
	}
	var lanes []string
	for _, l := range k.HotLanes[:min(3, len(k.HotLanes))] {
		if l.Messages > 0 {
			lanes = append(lanes, fmt.Sprintf("%s (%s, %s)", l.Lane, plural(l.Messages, "message"), plural(l.Keys, "key")))
		}
	}
	if len(lanes) > 0 {
		pairs = append(pairs, [2]string{"hottest lanes", strings.Join(lanes, ", ")})
	}
	var hot []string
	for _, h := range k.HotKeys[:min(5, len(k.HotKeys))] {
		hot = append(hot, fmt.Sprintf("%s x%d -> %s", planner.Printable(h.Key, maxCell), h.Count, h.Lane))
	}
	if len(hot) > 0 {
		note := ""
		if k.HotKeysApprox {
			note = fmt.Sprintf(" (approximate: counts may be up to %d high)", k.MaxError)
		}
		pairs = append(pairs, [2]string{"hottest keys", strings.Join(hot, ", ") + note})
	}
	s.kv(w, pairs)
}

func plural(n int64, word string) string {
	if n != 1 {
		word += "s"
	}
	return strconv.FormatInt(n, 10) + " " + word
}

// approxCount writes a count, with ~ when it is an estimate.
func approxCount(n int64, approx bool) string {
	if approx {
		return "~" + strconv.FormatInt(n, 10)
	}
	return strconv.FormatInt(n, 10)
}

// KeyAnswer is the answer to "which lane is this subject in".
type KeyAnswer struct {
	Subject       string `json:"subject"`
	Key           string `json:"key"`
	Partition     int    `json:"partition"`
	Lane          string `json:"lane"`
	StoredSubject string `json:"stored_subject"`
	Filter        string `json:"filter"`
}

// NewKeyAnswer places one subject.
func NewKeyAnswer(p *planner.Plan, a planner.Assignment) KeyAnswer {
	stored, _ := p.Layout.Transform(a.Subject)
	return KeyAnswer{Subject: a.Subject, Key: a.Key, Partition: a.Partition, Lane: a.Lane,
		StoredSubject: stored, Filter: p.Lanes[a.Partition].Filter}
}

// KeyAnswerText prints a KeyAnswer for people.
func KeyAnswerText(w io.Writer, s Styles, a KeyAnswer) {
	fmt.Fprintf(w, "%s is in lane %s (partition %d)\n", planner.Printable(a.Subject, maxCell), s.Heading.Render(a.Lane), a.Partition)
	s.kv(w, [][2]string{{"key", planner.Printable(a.Key, maxCell)}, {"stored as", planner.Printable(a.StoredSubject, maxCell)}, {"lane filter", a.Filter}})
}

// JSON writes v as indented JSON, '<', '>' and '&' as they are.
func JSON(w io.Writer, v any) error {
	b, err := marshalJSON(v, "", "  ")
	if err != nil {
		return err
	}
	_, err = w.Write(append(b, '\n'))
	return err
}

// marshalJSON is json.MarshalIndent (compact without indent) that leaves
// '<', '>' and '&' as they are: subjects and layouts hold them
// (a.n8.<partition>.<token1>), and no output of lanes is read as HTML.
// Every JSON lanes writes goes through it.
func marshalJSON(v any, prefix, indent string) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent(prefix, indent)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

// YAML writes v with the same field names as its JSON form.
func YAML(w io.Writer, v any) error {
	b, err := marshalJSON(v, "", "")
	if err != nil {
		return err
	}
	var n yaml.Node
	if err := yaml.Unmarshal(b, &n); err != nil {
		return err
	}
	blockStyle(&n)
	enc := yaml.NewEncoder(w)
	enc.SetIndent(2)
	if err := enc.Encode(&n); err != nil {
		return err
	}
	return enc.Close()
}

// blockStyle drops the flow style and quoting that came from JSON, so the
// encoder writes ordinary block YAML and quotes only where needed.
func blockStyle(n *yaml.Node) {
	n.Style = 0
	for _, c := range n.Content {
		blockStyle(c)
	}
}

// PlanStream writes the whole plan as one JSON or YAML document, with the
// assignments streamed as they come, so a million keys are never held.
type PlanStream struct {
	w      *bufio.Writer
	yaml   bool
	plan   *planner.Plan
	n      int
	buf    []byte
	opened bool
}

// NewPlanStream writes the head of the document (format "json" or "yaml").
func NewPlanStream(w io.Writer, format string, p *planner.Plan) (*PlanStream, error) {
	s := &PlanStream{w: bufio.NewWriterSize(w, 256<<10), yaml: format == "yaml", plan: p}
	if !s.yaml {
		s.w.WriteString("{\n")
	}
	head := []struct {
		key string
		val any
	}{
		{"design", p.Design},
		{"mapping", p.Mapping},
		{"layout", layoutDoc(p)},
		{"stream", p.Stream},
		{"consumers", p.Consumers},
	}
	for _, f := range head {
		if err := s.field(f.key, f.val); err != nil {
			return nil, err
		}
	}
	return s, nil
}

type layoutView struct {
	Partitioned string `json:"partitioned_subject"`
	Pattern     string `json:"pattern"`
	Generation  string `json:"generation"`
	KeyTokens   []int  `json:"key_tokens"`
}

func layoutDoc(p *planner.Plan) layoutView {
	return layoutView{Partitioned: p.Layout.Describe(), Pattern: p.Layout.Pattern(),
		Generation: planner.Generation(p.Design.Partitions), KeyTokens: p.Layout.KeyTokens}
}

// field writes one top-level field (not the last: JSON gets a comma).
func (s *PlanStream) field(key string, v any) error {
	if s.yaml {
		return YAML(s.w, map[string]any{key: v})
	}
	b, err := marshalJSON(v, "  ", "  ")
	if err != nil {
		return err
	}
	fmt.Fprintf(s.w, "  %q: %s,\n", key, b)
	return nil
}

// Assignment appends one assignment.
func (s *PlanStream) Assignment(subject, key []byte, partition int, count int64) error {
	lane := s.plan.Lanes[partition].Name
	if !s.opened {
		s.opened = true
		if s.yaml {
			s.w.WriteString("assignments:\n")
		} else {
			s.w.WriteString("  \"assignments\": [\n")
		}
	}
	b := s.buf[:0]
	if s.yaml {
		b = append(b, "  - {subject: "...)
	} else {
		if s.n > 0 {
			b = append(b, ",\n"...)
		}
		b = append(b, "    {\"subject\": "...)
	}
	b = appendJSONString(b, subject)
	if s.yaml {
		b = append(b, ", key: "...)
	} else {
		b = append(b, ", \"key\": "...)
	}
	b = appendJSONString(b, key)
	if s.yaml {
		b = append(b, ", partition: "...)
	} else {
		b = append(b, ", \"partition\": "...)
	}
	b = strconv.AppendInt(b, int64(partition), 10)
	if s.yaml {
		b = append(b, ", lane: "...)
	} else {
		b = append(b, ", \"lane\": "...)
	}
	b = appendJSONString(b, []byte(lane))
	if count != 1 {
		if s.yaml {
			b = append(b, ", count: "...)
		} else {
			b = append(b, ", \"count\": "...)
		}
		b = strconv.AppendInt(b, count, 10)
	}
	b = append(b, '}')
	if s.yaml {
		b = append(b, '\n')
	}
	s.buf = b
	s.n++
	_, err := s.w.Write(b)
	return err
}

// laneDoc is a lane, with its distinct keys and messages when keys were given.
type laneDoc struct {
	planner.Lane
	Keys     *int64 `json:"keys,omitempty"`
	Messages *int64 `json:"messages,omitempty"`
}

// Close writes the lanes (with key counts), the skew, the warnings, and ends
// the document.
func (s *PlanStream) Close(skew *planner.Skew) error {
	if s.opened && !s.yaml {
		s.w.WriteString("\n  ],\n")
	}
	lanes := make([]laneDoc, len(s.plan.Lanes))
	for i, l := range s.plan.Lanes {
		lanes[i] = laneDoc{Lane: l}
		if skew != nil {
			lanes[i].Keys, lanes[i].Messages = &skew.LaneKeys[i], &skew.LaneMessages[i]
		}
	}
	tail := []struct {
		key string
		val any
	}{{"lanes", lanes}}
	if skew != nil {
		tail = append(tail, struct {
			key string
			val any
		}{"skew", skew})
	}
	warnings := s.plan.Warnings
	if warnings == nil {
		warnings = []string{}
	}
	for _, f := range tail {
		if err := s.field(f.key, f.val); err != nil {
			return err
		}
	}
	if s.yaml {
		if err := YAML(s.w, map[string]any{"warnings": warnings}); err != nil {
			return err
		}
	} else {
		b, _ := marshalJSON(warnings, "", "")
		fmt.Fprintf(s.w, "  \"warnings\": %s\n}\n", b)
	}
	return s.w.Flush()
}

// appendJSONString quotes b as a JSON string; subjects are nearly always
// plain ASCII, so the fast path copies bytes.
func appendJSONString(dst, b []byte) []byte {
	for _, c := range b {
		if c < 0x20 || c == '"' || c == '\\' || c >= 0x7f {
			q, _ := marshalJSON(string(b), "", "")
			return append(dst, q...)
		}
	}
	dst = append(dst, '"')
	dst = append(dst, b...)
	return append(dst, '"')
}

// Conf prints the nats-server config mappings block for the design.
func Conf(w io.Writer, p *planner.Plan) error {
	d := p.Design
	fmt.Fprintf(w, "# lanes design %q: partition %s into %d lanes.\n", d.Name, d.Subject, d.Partitions)
	fmt.Fprintln(w, "# Install where the publishers' account is defined, then reload the server (nats-server --signal reload).")
	if d.Mapping != planner.MappingAccount {
		fmt.Fprintln(w, "# Note: this design uses mapping: stream; lanes apply sets the same mapping as a stream subject transform,")
		fmt.Fprintln(w, "# so install this block only if you switch the design to mapping: account.")
	}
	indent := ""
	if d.Account != "" {
		fmt.Fprintf(w, "accounts {\n  %s {\n", d.Account)
		indent = "    "
	}
	fmt.Fprintf(w, "%smappings {\n%s  %q: %q\n%s}\n", indent, indent, p.Mapping.Source, p.Mapping.Destination, indent)
	if d.Account != "" {
		fmt.Fprintln(w, "  }\n}")
	}
	return nil
}

// NSC prints the nsc commands that install the mapping in operator mode.
func NSC(w io.Writer, p *planner.Plan) error {
	d := p.Design
	account := d.Account
	if account == "" {
		account = "ACCOUNT"
		fmt.Fprintln(w, "# Replace ACCOUNT with the publishers' account (or set account: in the design).")
	}
	fmt.Fprintf(w, "# lanes design %q: partition %s into %d lanes.\n", d.Name, d.Subject, d.Partitions)
	fmt.Fprintf(w, "nsc add mapping --account %s --from %s --to %s\n", shellQuote(account), shellQuote(p.Mapping.Source), shellQuote(p.Mapping.Destination))
	fmt.Fprintf(w, "nsc push --account %s\n", shellQuote(account))
	return nil
}

func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'"'"'`) + "'"
}

// Definitions returns the natscli-ready files: stream.json and one
// <lane>.json per lane (nats stream add --config, nats consumer add --config).
func Definitions(p *planner.Plan) (map[string][]byte, error) {
	out := map[string][]byte{}
	b, err := marshalJSON(p.Stream, "", "  ")
	if err != nil {
		return nil, err
	}
	out["stream.json"] = append(b, '\n')
	for _, c := range p.Consumers {
		b, err := marshalJSON(c, "", "  ")
		if err != nil {
			return nil, err
		}
		out[c.Durable+".json"] = append(b, '\n')
	}
	return out, nil
}
