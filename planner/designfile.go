package planner

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"regexp"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// ParseDesign reads a design file (YAML, or JSON which is YAML too).
// Errors name the file and line; unknown fields are errors, so a typo never
// silently falls back to a default. Origin records every field's line.
func ParseDesign(data []byte, filename string) (Design, error) {
	var d Design
	if len(bytes.TrimSpace(data)) == 0 {
		return d, fmt.Errorf("%s: the design file is empty", filename)
	}
	var root yaml.Node
	if err := yaml.Unmarshal(data, &root); err != nil {
		return d, yamlError(filename, err)
	}
	// The YAML library truncates 8.5 into an int field: refuse it first.
	if err := wholeNumbers(&root, "", filename); err != nil {
		return d, err
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&d); err != nil {
		return d, yamlError(filename, err)
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return d, fmt.Errorf("%s: holds more than one document; a design file has one", filename)
	}
	d.Origin = map[string]string{}
	recordLines(&root, "", filename, d.Origin)
	return d, nil
}

// recordLines maps each field path to "file:line".
func recordLines(n *yaml.Node, path, filename string, out map[string]string) {
	switch n.Kind {
	case yaml.DocumentNode:
		for _, c := range n.Content {
			recordLines(c, path, filename, out)
		}
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			key := n.Content[i].Value
			if path != "" {
				key = path + "." + key
			}
			out[key] = filename + ":" + strconv.Itoa(n.Content[i].Line)
			recordLines(n.Content[i+1], key, filename, out)
		}
	}
}

// wholeFields are the design's whole-number settings.
var wholeFields = map[string]bool{
	"partitions": true, "key_tokens": true, "stream.replicas": true, "stream.max_consumers": true,
	"lane.max_deliver": true, "lane.max_ack_pending": true, "lane.keys_in_flight": true, "lane.max_waiting": true, "lane.replicas": true,
}

// wholeNumbers refuses a number with a fraction (or too large for the
// field) where the design wants a whole number, naming the line and field.
func wholeNumbers(n *yaml.Node, path, filename string) error {
	switch n.Kind {
	case yaml.DocumentNode:
		for _, c := range n.Content {
			if err := wholeNumbers(c, path, filename); err != nil {
				return err
			}
		}
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			key := n.Content[i].Value
			if path != "" {
				key = path + "." + key
			}
			if err := wholeNumbers(n.Content[i+1], key, filename); err != nil {
				return err
			}
		}
	case yaml.SequenceNode:
		for _, c := range n.Content {
			if err := wholeNumbers(c, path, filename); err != nil {
				return err
			}
		}
	case yaml.ScalarNode:
		if !wholeFields[path] || n.ShortTag() != "!!float" {
			return nil
		}
		v, err := strconv.ParseFloat(strings.ReplaceAll(n.Value, "_", ""), 64)
		if err != nil || v != math.Trunc(v) || math.Abs(v) > 1<<53 {
			return &FieldError{Field: path, Value: n.Value, Reason: "not a whole number", Origin: fmt.Sprintf("%s:%d", filename, n.Line)}
		}
	}
	return nil
}

var (
	yamlLine    = regexp.MustCompile(`^(?:yaml: )?line (\d+): (.*)$`)
	yamlUnknown = regexp.MustCompile(`^field (\S+) not found in type \S+$`)
	yamlType    = regexp.MustCompile("^cannot unmarshal !!(\\w+) `(.*)` into (\\S+)$")
)

// yamlError turns the YAML library's messages into "file:line: what".
func yamlError(filename string, err error) error {
	var te *yaml.TypeError
	msgs := []string{err.Error()}
	if errors.As(err, &te) {
		msgs = te.Errors
	}
	var out []string
	for _, m := range msgs {
		m = strings.TrimPrefix(m, "yaml: ")
		where := filename
		if g := yamlLine.FindStringSubmatch(m); g != nil {
			where, m = filename+":"+g[1], g[2]
		}
		if g := yamlUnknown.FindStringSubmatch(m); g != nil {
			m = fmt.Sprintf("unknown field %q (known fields: %s)", g[1], strings.Join(Fields(), ", "))
		} else if g := yamlType.FindStringSubmatch(m); g != nil {
			m = fmt.Sprintf("%q is not %s", g[2], typeWord(g[3]))
		}
		out = append(out, where+": "+m)
	}
	return errors.New(strings.Join(out, "\n"))
}

func typeWord(goType string) string {
	switch {
	case strings.HasPrefix(goType, "[]"):
		return "a list"
	case goType == "int" || strings.HasPrefix(goType, "int"):
		return "a whole number"
	case goType == "bool":
		return "true or false"
	case goType == "string":
		return "text"
	default:
		return "a " + strings.TrimPrefix(goType, "planner.") + " block"
	}
}

// UnmarshalYAML reads "30s"; the line goes into the error.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		return fmt.Errorf("line %d: expected a duration such as 30s", n.Line)
	}
	if err := d.UnmarshalText([]byte(n.Value)); err != nil {
		return fmt.Errorf("line %d: %w", n.Line, err)
	}
	return nil
}

// UnmarshalYAML rejects weighted and cluster-scoped mappings, which are lists
// or maps in a server config and never deterministic enough for lanes.
func (d *Destination) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		return fmt.Errorf("line %d: destination must be one subject; a weighted or cluster-scoped mapping sends one key to several places and breaks order", n.Line)
	}
	*d = Destination(n.Value)
	return nil
}
