package render

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"go.yaml.in/yaml/v3"

	"github.com/lanes-dev/lanes/planner"
)

// The NACK release whose CRDs the output must satisfy. Only its module is
// needed, never as a requirement of go.mod (its Kubernetes dependencies
// are large): go mod download puts it in the module cache, where the
// tests read deploy/crds.yml. .ci/run downloads it and sets
// LANES_REQUIRE_NACK=1, so there a missing file fails instead of skipping.
const nackModule = "github.com/nats-io/nack@" + NACKVersion

// TestNACKValidatesAgainstCRDs checks every object -o nack writes, for
// each kind of design it accepts, against the openAPIV3Schema of its
// kind and apiVersion in NACK's own CRDs: valid, no field the API server
// would prune (it drops undeclared fields silently), a valid object name,
// and, once the CRDs' defaults are applied, the very settings of the
// plan's stream and consumer configs (what --emit-dir writes for natscli).
func TestNACKValidatesAgainstCRDs(t *testing.T) {
	crds := loadNACKCRDs(t)
	for _, tc := range nackDesigns(t) {
		t.Run(tc.name, func(t *testing.T) {
			p, err := planner.New(tc.design)
			if err != nil {
				t.Fatal(err)
			}
			var out bytes.Buffer
			if err := NACK(&out, p); err != nil {
				t.Fatal(err)
			}
			docs := decodeYAMLStream(t, out.Bytes())
			if len(docs) != 1+len(p.Lanes) {
				t.Fatalf("%d objects, want the stream and %d lanes", len(docs), len(p.Lanes))
			}
			for i, doc := range docs {
				if problems := crds.check(doc); len(problems) > 0 {
					t.Errorf("object %d (%v %v):\n\t%s", i, doc["kind"], nameOf(doc), strings.Join(problems, "\n\t"))
				}
			}
			checkSameSettings(t, crds, docs, p)
			if tc.check != nil {
				tc.check(t, out.String(), docs)
			}
		})
	}
}

type nackCase struct {
	name   string
	design planner.Design
	check  func(t *testing.T, out string, docs []map[string]any)
}

// nackDesigns are the examples (pinned off where they pin: -o nack
// refuses pinned lanes) and the settings that change what is written.
func nackDesigns(t *testing.T) []nackCase {
	unpinned := func(d planner.Design) planner.Design {
		d.Lane.Pinned, d.Lane.PinnedTTL = false, 0
		delete(d.Origin, "lane.pinned")
		delete(d.Origin, "lane.pinned_ttl")
		return d
	}
	return []nackCase{
		{"seed", designFile(t, "../examples/seed/lanes.yaml"), func(t *testing.T, out string, docs []map[string]any) {
			spec := docs[0]["spec"].(map[string]any)
			if nameOf(docs[0]) != "orders" || spec["name"] != "ORDERS" {
				t.Errorf("stream object %q, spec.name %v: want orders and ORDERS", nameOf(docs[0]), spec["name"])
			}
			tr := spec["subjectTransform"].(map[string]any)
			if tr["source"] != "msgs.received_from.*" || tr["dest"] != "msgs.received_from.n8.{{partition(8,1)}}.{{wildcard(1)}}" {
				t.Errorf("subjectTransform %v", tr)
			}
			lane := docs[8]["spec"].(map[string]any)
			if nameOf(docs[8]) != "orders-n8-07" || lane["durableName"] != "orders-n8-07" || lane["filterSubject"] != "msgs.received_from.n8.7.*" {
				t.Errorf("last lane %q: %v", nameOf(docs[8]), lane)
			}
			if !strings.HasPrefix(out, "# lanes design \"orders\" as NACK resources") || !strings.Contains(out, "not one declarative step") {
				t.Errorf("the comment block is missing:\n%s", out[:min(len(out), 400)])
			}
		}},
		{"device-events", unpinned(designFile(t, "../examples/device-events/lanes.yaml")), nil},
		{"device-events-cluster", unpinned(designFile(t, "../examples/device-events-cluster/lanes.yaml")), func(t *testing.T, out string, docs []map[string]any) {
			spec := docs[0]["spec"].(map[string]any)
			if _, ok := spec["subjectTransform"]; ok {
				t.Error("mapping: account: the stream has a subject transform")
			}
			if nameOf(docs[0]) != "device-events" || spec["replicas"] != 3 {
				t.Errorf("stream %q replicas %v", nameOf(docs[0]), spec["replicas"])
			}
			if !strings.Contains(out, "# - mapping: account:") || !strings.Contains(out, "lanes plan -o conf") {
				t.Error("mapping: account: the comment does not say who installs the mapping")
			}
		}},
		{"backoff", designText(t, "name: pay\nsubject: pay.*\nlane:\n  ack_wait: 10s\n  backoff: [10s, 1m, 5m]\n  max_deliver: 5\n"), func(t *testing.T, out string, docs []map[string]any) {
			lane := docs[1]["spec"].(map[string]any)
			if !reflect.DeepEqual(lane["backoff"], []any{"10s", "1m0s", "5m0s"}) || lane["maxDeliver"] != 5 || lane["ackWait"] != "10s" {
				t.Errorf("lane %v", lane)
			}
		}},
		{"replicated", designText(t, "name: orders\nsubject: msgs.*\npartitions: 3\nstream:\n  replicas: 3\nlane:\n  replicas: 3\n"), func(t *testing.T, out string, docs []map[string]any) {
			if docs[0]["spec"].(map[string]any)["replicas"] != 3 || docs[1]["spec"].(map[string]any)["replicas"] != 3 {
				t.Errorf("replicas: stream %v, lane %v", docs[0]["spec"], docs[1]["spec"])
			}
		}},
		{"account", designText(t, "name: orders\nsubject: msgs.*\nmapping: account\naccount: APP\n"), nil},
		{"memory-workqueue", designText(t, "name: jobs\nsubject: jobs.*\npartitions: 2\nstream:\n  storage: memory\n  retention: workqueue\n  max_consumers: 10\nlane:\n  max_waiting: 16\n"), nil},
		{"many", designText(t, "name: orders\nsubject: msgs.*\npartitions: 100\n"), func(t *testing.T, out string, docs []map[string]any) {
			if nameOf(docs[100]) != "orders-n100-99" || docs[0]["spec"].(map[string]any)["maxConsumers"] != 1000 {
				t.Errorf("last lane %q, stream %v", nameOf(docs[100]), docs[0]["spec"])
			}
		}},
		{"names", designText(t, "name: Billing_Events\nsubject: bills.*\npartitions: 2\nstream:\n  name: Billing__EVENTS_\n"), func(t *testing.T, out string, docs []map[string]any) {
			if nameOf(docs[0]) != "billing-events" || docs[0]["spec"].(map[string]any)["name"] != "Billing__EVENTS_" {
				t.Errorf("stream object %q, spec %v", nameOf(docs[0]), docs[0]["spec"])
			}
			if nameOf(docs[2]) != "billing-events-n2-01" || docs[2]["spec"].(map[string]any)["durableName"] != "Billing_Events-n2-01" {
				t.Errorf("lane object %q, spec %v", nameOf(docs[2]), docs[2]["spec"])
			}
		}},
	}
}

// TestNACKRefusesPriorityGroups: NACK's Consumer cannot declare the
// pinned-client group, so a pinned or key-parallel design is refused,
// naming the field, NACK's version and the way out, with nothing written
// (resources without the group would create unpinned lanes, silently).
func TestNACKRefusesPriorityGroups(t *testing.T) {
	cases := []struct {
		name, field string
		design      planner.Design
	}{
		{"pinned", "lane.pinned", designText(t, "name: orders\nsubject: msgs.*\nlane:\n  pinned: true\n")},
		{"key-parallel", "lane.keys_in_flight", designText(t, "name: orders\nsubject: msgs.*\nlane:\n  keys_in_flight: 8\n")},
		{"device-events", "lane.pinned", designFile(t, "../examples/device-events/lanes.yaml")},
		{"device-events-cluster", "lane.pinned", designFile(t, "../examples/device-events-cluster/lanes.yaml")},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p, err := planner.New(tc.design)
			if err != nil {
				t.Fatal(err)
			}
			var out bytes.Buffer
			err = NACK(&out, p)
			var fe *planner.FieldError
			if !errors.As(err, &fe) || fe.Field != tc.field {
				t.Fatalf("got %v, want a field error on %s", err, tc.field)
			}
			if out.Len() > 0 {
				t.Errorf("wrote %d bytes before refusing", out.Len())
			}
			for _, want := range []string{"NACK " + NACKVersion, "priority groups", "lanes apply", fe.Origin} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("%q does not say %q", err, want)
				}
			}
		})
	}
}

// TestNACKChecksCatchProblems: the checks above fail on what they look
// for (a field NACK does not declare, a value its schema refuses, a bad
// object name), so their passing means something.
func TestNACKChecksCatchProblems(t *testing.T) {
	crds := loadNACKCRDs(t)
	p, err := planner.New(designText(t, "name: orders\nsubject: msgs.*\npartitions: 1\n"))
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := NACK(&out, p); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name, want string
		doc        int
		mutate     func(doc map[string]any)
	}{
		{"undeclared field", "spec.priorityGroups: not in the schema", 1, func(d map[string]any) { d["spec"].(map[string]any)["priorityGroups"] = []any{"lane"} }},
		{"undeclared nested field", "spec.subjectTransform.src: not in the schema", 0, func(d map[string]any) {
			d["spec"].(map[string]any)["subjectTransform"].(map[string]any)["src"] = "x"
		}},
		{"undeclared top-level field", "status2: not in the schema", 0, func(d map[string]any) { d["status2"] = map[string]any{} }},
		{"schema", "storage", 0, func(d map[string]any) { d["spec"].(map[string]any)["storage"] = "disk" }},
		{"metadata type", "metadata", 1, func(d map[string]any) { d["spec"].(map[string]any)["metadata"].(map[string]any)["lanes.partition"] = 0 }},
		{"object name", "metadata.name", 0, func(d map[string]any) { d["metadata"].(map[string]any)["name"] = "ORDERS" }},
		{"unknown kind", "no served CRD", 0, func(d map[string]any) { d["apiVersion"] = "jetstream.nats.io/v1beta1" }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			docs := decodeYAMLStream(t, out.Bytes())
			if problems := crds.check(docs[tc.doc]); len(problems) > 0 {
				t.Fatalf("unchanged object: %v", problems)
			}
			tc.mutate(docs[tc.doc])
			problems := strings.Join(crds.check(docs[tc.doc]), "\n")
			if !strings.Contains(problems, tc.want) {
				t.Errorf("problems %q do not mention %q", problems, tc.want)
			}
		})
	}
}

func TestObjectName(t *testing.T) {
	for in, want := range map[string]string{
		"ORDERS": "orders", "orders-n8-03": "orders-n8-03", "DEVICE_EVENTS": "device-events",
		"_a__b_": "a-b", "Zoë-1": "zo-1", "x:y": "x-y",
	} {
		got, err := objectName(in)
		if err != nil || got != want {
			t.Errorf("objectName(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{"___", "ü", strings.Repeat("a", 254)} {
		if got, err := objectName(in); err == nil {
			t.Errorf("objectName(%q) = %q, want an error", in, got)
		}
	}
}

func designFile(t *testing.T, path string) planner.Design {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	d, err := planner.ParseDesign(data, filepath.Base(path))
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func designText(t *testing.T, text string) planner.Design {
	t.Helper()
	d, err := planner.ParseDesign([]byte(text), "lanes.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// decodeYAMLStream reads every document of a multi-document YAML stream,
// as kubectl does, each as JSON would decode it.
func decodeYAMLStream(t *testing.T, data []byte) []map[string]any {
	t.Helper()
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var docs []map[string]any
	for {
		var doc any
		err := dec.Decode(&doc)
		if err == io.EOF {
			return docs
		}
		if err != nil {
			t.Fatalf("not valid YAML: %v", err)
		}
		docs = append(docs, jsonValue(t, doc).(map[string]any))
	}
}

// jsonValue is v as encoding/json decodes its JSON (whole numbers stay
// whole: json.Number, read back as int).
func jsonValue(t *testing.T, v any) any {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	out, err := jsonschema.UnmarshalJSON(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	return intNumbers(out)
}

// intNumbers turns json.Number into int or float64, so tests compare with
// plain Go values (the schema validator takes either).
func intNumbers(v any) any {
	switch v := v.(type) {
	case map[string]any:
		for k, e := range v {
			v[k] = intNumbers(e)
		}
	case []any:
		for i, e := range v {
			v[i] = intNumbers(e)
		}
	case json.Number:
		if i, err := v.Int64(); err == nil {
			return int(i)
		}
		f, _ := v.Float64()
		return f
	}
	return v
}

func nameOf(doc map[string]any) string {
	m, _ := doc["metadata"].(map[string]any)
	s, _ := m["name"].(string)
	return s
}

// nackCRDs are the served versions of NACK's CRDs, by "apiVersion kind".
type nackCRDs map[string]*crdVersion

type crdVersion struct {
	raw    map[string]any // the openAPIV3Schema
	schema *jsonschema.Schema
}

// loadNACKCRDs reads deploy/crds.yml of NACK's module from the module
// cache; without it the test is skipped (failed with LANES_REQUIRE_NACK=1).
func loadNACKCRDs(t *testing.T) nackCRDs {
	t.Helper()
	path, err := nackCRDFile()
	if err != nil {
		if os.Getenv("LANES_REQUIRE_NACK") == "1" {
			t.Fatalf("NACK's CRDs: %v (LANES_REQUIRE_NACK=1)", err)
		}
		t.Skipf("NACK's CRDs: %v; go mod download %s puts them there", err, nackModule)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	crds := nackCRDs{}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	for {
		var doc any
		err := dec.Decode(&doc)
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if doc == nil {
			continue
		}
		var crd struct {
			Kind string
			Spec struct {
				Group string
				Names struct{ Kind string }
				// Versions: each with its schema.
				Versions []struct {
					Name   string
					Served bool
					Schema struct {
						OpenAPIV3Schema map[string]any `json:"openAPIV3Schema"`
					}
				}
			}
		}
		if err := json.Unmarshal(mustJSON(t, doc), &crd); err != nil {
			t.Fatal(err)
		}
		if crd.Kind != "CustomResourceDefinition" {
			continue
		}
		for _, v := range crd.Spec.Versions {
			if !v.Served {
				continue
			}
			key := crd.Spec.Group + "/" + v.Name + " " + crd.Spec.Names.Kind
			raw := jsonValue(t, stripKubernetesKeys(v.Schema.OpenAPIV3Schema)).(map[string]any)
			c := jsonschema.NewCompiler()
			c.DefaultDraft(jsonschema.Draft4) // OpenAPI 3.0's schema is draft 4's, near enough
			url := "mem:///" + strings.NewReplacer("/", "_", " ", "_").Replace(key) + ".json"
			if err := c.AddResource(url, jsonValue(t, raw)); err != nil {
				t.Fatal(err)
			}
			sch, err := c.Compile(url)
			if err != nil {
				t.Fatalf("%s: %v", key, err)
			}
			crds[key] = &crdVersion{raw: raw, schema: sch}
		}
	}
	for _, k := range []string{NACKAPIVersion + " Stream", NACKAPIVersion + " Consumer"} {
		if crds[k] == nil {
			t.Fatalf("%s has no served CRD for %s", path, k)
		}
	}
	return crds
}

func nackCRDFile() (string, error) {
	out, err := exec.Command("go", "env", "GOMODCACHE").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMODCACHE: %v", err)
	}
	path := filepath.Join(strings.TrimSpace(string(out)), filepath.FromSlash(nackModule), "deploy", "crds.yml")
	if _, err := os.Stat(path); err != nil {
		return "", err
	}
	return path, nil
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// stripKubernetesKeys drops the x-kubernetes-* extensions, which are not
// JSON Schema. The pruning walk below honours the one that matters here.
func stripKubernetesKeys(v any) any {
	switch v := v.(type) {
	case map[string]any:
		out := map[string]any{}
		for k, e := range v {
			if !strings.HasPrefix(k, "x-kubernetes-") || k == "x-kubernetes-preserve-unknown-fields" {
				out[k] = stripKubernetesKeys(e)
			}
		}
		return out
	case []any:
		out := make([]any, len(v))
		for i, e := range v {
			out[i] = stripKubernetesKeys(e)
		}
		return out
	}
	return v
}

// dns1123Subdomain is Kubernetes' rule for object names.
var dns1123Subdomain = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`)

// check lists what the API server would refuse or prune in one object.
func (crds nackCRDs) check(doc map[string]any) []string {
	var problems []string
	kind, _ := doc["kind"].(string)
	api, _ := doc["apiVersion"].(string)
	v := crds[api+" "+kind]
	if v == nil {
		return []string{fmt.Sprintf("apiVersion %q kind %q: no served CRD in NACK %s", api, kind, NACKVersion)}
	}
	meta, _ := doc["metadata"].(map[string]any)
	name := nameOf(doc)
	if !dns1123Subdomain.MatchString(name) || len(name) > maxObjectName {
		problems = append(problems, fmt.Sprintf("metadata.name %q is not a DNS-1123 subdomain", name))
	}
	for k := range meta {
		if k != "name" {
			problems = append(problems, "metadata."+k+": not written by lanes")
		}
	}
	if err := v.schema.Validate(doc); err != nil {
		problems = append(problems, "schema: "+strings.ReplaceAll(err.Error(), "\n", "\n\t"))
	}
	// apiVersion, kind and metadata are every object's, not the schema's.
	rest := map[string]any{}
	for k, e := range doc {
		if k != "apiVersion" && k != "kind" && k != "metadata" {
			rest[k] = e
		}
	}
	return append(problems, prunedFields("", rest, v.raw)...)
}

// prunedFields are the fields of v its structural schema does not declare:
// the API server drops them without a word, so NACK would never see them.
func prunedFields(path string, v any, schema map[string]any) []string {
	if keep, _ := schema["x-kubernetes-preserve-unknown-fields"].(bool); keep {
		return nil
	}
	var out []string
	switch v := v.(type) {
	case map[string]any:
		props, _ := schema["properties"].(map[string]any)
		keys := make([]string, 0, len(v))
		for k := range v {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			p := strings.TrimPrefix(path+"."+k, ".")
			if s, ok := props[k].(map[string]any); ok {
				out = append(out, prunedFields(p, v[k], s)...)
				continue
			}
			switch ap := schema["additionalProperties"].(type) {
			case map[string]any:
				out = append(out, prunedFields(p, v[k], ap)...)
			case bool:
				if !ap {
					out = append(out, p+": not in the schema")
				}
			default:
				out = append(out, p+": not in the schema (the API server would prune it)")
			}
		}
	case []any:
		items, _ := schema["items"].(map[string]any)
		for i, e := range v {
			out = append(out, prunedFields(fmt.Sprintf("%s[%d]", path, i), e, items)...)
		}
	}
	return out
}

// Every JetStream API field of the plan's configs, by its NACK name.
var (
	nackStreamFields = map[string]string{
		"name": "name", "description": "description", "subjects": "subjects", "retention": "retention",
		"storage": "storage", "replicas": "num_replicas", "maxConsumers": "max_consumers", "maxMsgs": "max_msgs",
		"maxBytes": "max_bytes", "maxAge": "max_age", "maxMsgSize": "max_msg_size", "discard": "discard",
		"allowDirect": "allow_direct", "subjectTransform": "subject_transform",
	}
	nackConsumerFields = map[string]string{
		"durableName": "durable_name", "description": "description", "deliverPolicy": "deliver_policy",
		"optStartSeq": "opt_start_seq", "ackPolicy": "ack_policy", "ackWait": "ack_wait", "maxDeliver": "max_deliver",
		"backoff": "backoff", "filterSubject": "filter_subject", "replayPolicy": "replay_policy",
		"maxWaiting": "max_waiting", "maxAckPending": "max_ack_pending", "replicas": "num_replicas", "metadata": "metadata",
	}
	// nackOnly are NACK's own fields: where the object lives and what the
	// controller does, not JetStream settings.
	nackOnly = map[string]bool{"streamName": true, "preventDelete": true}
)

// checkSameSettings reads each object back as NACK's controller does (the
// CRD's defaults for absent fields, then Go zero values; durations
// parsed) and compares it with the plan's config in the JetStream API's
// JSON: every setting there, none added.
func checkSameSettings(t *testing.T, crds nackCRDs, docs []map[string]any, p *planner.Plan) {
	t.Helper()
	want := []any{p.Stream}
	for _, c := range p.Consumers {
		want = append(want, c)
	}
	for i, doc := range docs {
		names := nackConsumerFields
		if doc["kind"] == "Stream" {
			names = nackStreamFields
		}
		schema := crds[doc["apiVersion"].(string)+" "+doc["kind"].(string)].raw
		specSchema := schema["properties"].(map[string]any)["spec"].(map[string]any)["properties"].(map[string]any)
		spec := doc["spec"].(map[string]any)
		api := jsonValue(t, want[i]).(map[string]any)
		got := map[string]any{}
		for nack, s := range specSchema {
			v, ok := spec[nack]
			if !ok {
				v, ok = s.(map[string]any)["default"]
			}
			if ok && names[nack] != "" {
				got[names[nack]] = fromNACK(t, nack, v)
			}
		}
		for nack, s := range specSchema {
			if names[nack] != "" || nackOnly[nack] {
				continue
			}
			if _, ok := spec[nack]; ok {
				t.Errorf("%s: spec.%s is not a setting of the plan's config", nameOf(doc), nack)
			}
			// A NACK setting lanes leaves out must default to what the
			// plan's JSON leaves out: nothing (NACK's storage: memory would not).
			if d, ok := s.(map[string]any)["default"]; ok && !isZero(d) {
				t.Errorf("%s: spec.%s is left out, and NACK's default is %v", nameOf(doc), nack, d)
			}
		}
		for field, w := range api {
			g, ok := got[field]
			if !ok {
				g = zeroOf(w)
			}
			if !reflect.DeepEqual(g, w) && !(isZero(g) && isZero(w)) {
				t.Errorf("%s: %s is %v in NACK's terms, %v in the plan", nameOf(doc), field, g, w)
			}
		}
		for field, g := range got {
			if _, ok := api[field]; !ok && !isZero(g) {
				t.Errorf("%s: %s %v is not in the plan", nameOf(doc), field, g)
			}
		}
		if doc["kind"] == "Consumer" && spec["streamName"] != p.Stream.Name {
			t.Errorf("%s: streamName %v", nameOf(doc), spec["streamName"])
		}
	}
}

// fromNACK turns a NACK value into the JetStream API's: durations to
// nanoseconds, deliver policies to snake case, the transform's keys.
func fromNACK(t *testing.T, field string, v any) any {
	t.Helper()
	dur := func(s string) any {
		if s == "" {
			return 0
		}
		d, err := time.ParseDuration(s)
		if err != nil {
			t.Errorf("%s %q: %v", field, s, err)
		}
		return int(d)
	}
	switch field {
	case "ackWait", "maxAge":
		return dur(v.(string))
	case "backoff":
		var out []any
		for _, s := range v.([]any) {
			out = append(out, dur(s.(string)))
		}
		return out
	case "deliverPolicy":
		api := map[string]string{"all": "all", "last": "last", "new": "new", "byStartSequence": "by_start_sequence", "byStartTime": "by_start_time"}[v.(string)]
		if api == "" {
			t.Errorf("deliverPolicy %q", v)
		}
		return api
	case "subjectTransform":
		m := v.(map[string]any)
		return map[string]any{"src": m["source"], "dest": m["dest"]}
	}
	return v
}

func zeroOf(v any) any {
	switch v.(type) {
	case string:
		return ""
	case int:
		return 0
	case bool:
		return false
	}
	return nil
}

func isZero(v any) bool {
	if v == nil {
		return true
	}
	rv := reflect.ValueOf(v)
	return rv.IsZero() || (rv.Kind() == reflect.Slice || rv.Kind() == reflect.Map) && rv.Len() == 0
}
