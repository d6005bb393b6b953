package kubernetes_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/lanes-dev/lanes/commands"
	"github.com/lanes-dev/lanes/internal/natstest"
	"github.com/lanes-dev/lanes/internal/testutil"
	"github.com/lanes-dev/lanes/planner"
)

// The parts of the Kubernetes objects the tests read (decoding ignores
// the rest; TestNoSecretInline walks the whole documents).
type object struct {
	APIVersion string            `yaml:"apiVersion"`
	Kind       string            `yaml:"kind"`
	Metadata   meta              `yaml:"metadata"`
	Data       map[string]string `yaml:"data"`
	Spec       struct {
		// Deployment
		Replicas *int `yaml:"replicas"`
		Selector struct {
			MatchLabels map[string]string `yaml:"matchLabels"`
		} `yaml:"selector"`
		Template struct {
			Metadata meta    `yaml:"metadata"`
			Spec     podSpec `yaml:"spec"`
		} `yaml:"template"`
		// Job
		BackoffLimit          *int `yaml:"backoffLimit"`
		ActiveDeadlineSeconds *int `yaml:"activeDeadlineSeconds"`
		PodFailurePolicy      struct {
			Rules []struct {
				Action      string `yaml:"action"`
				OnExitCodes struct {
					ContainerName string `yaml:"containerName"`
					Operator      string `yaml:"operator"`
					Values        []int  `yaml:"values"`
				} `yaml:"onExitCodes"`
			} `yaml:"rules"`
		} `yaml:"podFailurePolicy"`
		// ScaledObject
		ScaleTargetRef struct {
			Name string `yaml:"name"`
		} `yaml:"scaleTargetRef"`
		MinReplicaCount *int `yaml:"minReplicaCount"`
		MaxReplicaCount *int `yaml:"maxReplicaCount"`
		Triggers        []struct {
			Type     string            `yaml:"type"`
			Metadata map[string]string `yaml:"metadata"`
		} `yaml:"triggers"`
	} `yaml:"spec"`
}

type meta struct {
	Name        string            `yaml:"name"`
	Labels      map[string]string `yaml:"labels"`
	Annotations map[string]string `yaml:"annotations"`
}

type podSpec struct {
	TerminationGracePeriodSeconds *int        `yaml:"terminationGracePeriodSeconds"`
	RestartPolicy                 string      `yaml:"restartPolicy"`
	InitContainers                []container `yaml:"initContainers"`
	Containers                    []container `yaml:"containers"`
	Volumes                       []struct {
		Name      string `yaml:"name"`
		ConfigMap *struct {
			Name string `yaml:"name"`
		} `yaml:"configMap"`
		Secret *struct {
			SecretName string `yaml:"secretName"`
			Items      []struct {
				Key  string `yaml:"key"`
				Path string `yaml:"path"`
			} `yaml:"items"`
		} `yaml:"secret"`
	} `yaml:"volumes"`
}

type container struct {
	Name          string   `yaml:"name"`
	Image         string   `yaml:"image"`
	Command       []string `yaml:"command"`
	Args          []string `yaml:"args"`
	RestartPolicy string   `yaml:"restartPolicy"`
	Env           []envVar `yaml:"env"`
	Ports         []struct {
		Name          string `yaml:"name"`
		ContainerPort int    `yaml:"containerPort"`
	} `yaml:"ports"`
	LivenessProbe  *probe `yaml:"livenessProbe"`
	ReadinessProbe *probe `yaml:"readinessProbe"`
	Resources      struct {
		Requests map[string]string `yaml:"requests"`
		Limits   map[string]string `yaml:"limits"`
	} `yaml:"resources"`
	VolumeMounts []struct {
		Name      string `yaml:"name"`
		MountPath string `yaml:"mountPath"`
	} `yaml:"volumeMounts"`
}

type envVar struct {
	Name      string `yaml:"name"`
	Value     string `yaml:"value"`
	ValueFrom *struct {
		SecretKeyRef *struct {
			Name string `yaml:"name"`
			Key  string `yaml:"key"`
		} `yaml:"secretKeyRef"`
		FieldRef *struct {
			FieldPath string `yaml:"fieldPath"`
		} `yaml:"fieldRef"`
	} `yaml:"valueFrom"`
}

type probe struct {
	HTTPGet *struct {
		Path string `yaml:"path"`
		Port string `yaml:"port"` // a name or a number
	} `yaml:"httpGet"`
}

// manifests are the files and the objects each must hold, in order.
var manifests = map[string][]string{
	"deployment.yaml":        {"apps/v1 Deployment"},
	"apply-job.yaml":         {"v1 ConfigMap", "batch/v1 Job"},
	"keda-scaledobject.yaml": {"keda.sh/v1alpha1 ScaledObject"},
}

// read decodes every document of a manifest, into objects and as plain
// trees.
func read(t *testing.T, file string) ([]object, []any) {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var objs []object
	var trees []any
	for _, into := range []func(*yaml.Decoder) error{
		func(d *yaml.Decoder) error { var o object; err := d.Decode(&o); objs = append(objs, o); return err },
		func(d *yaml.Decoder) error { var v any; err := d.Decode(&v); trees = append(trees, v); return err },
	} {
		d := yaml.NewDecoder(bytes.NewReader(data))
		for {
			if err := into(d); errors.Is(err, io.EOF) {
				break
			} else if err != nil {
				t.Fatalf("%s: %v", file, err)
			}
		}
	}
	return objs[:len(objs)-1], trees[:len(trees)-1] // the last decode is the EOF's
}

// all reads every manifest: objects by kind.
func all(t *testing.T) map[string]object {
	t.Helper()
	out := map[string]object{}
	for file := range manifests {
		objs, _ := read(t, file)
		for _, o := range objs {
			out[o.Kind] = o
		}
	}
	return out
}

// TestManifests: each file holds the objects it should, named, and they
// refer to each other by the right names: the ScaledObject scales the
// Deployment, the Deployment selects its pods, every ConfigMap mounted is
// in the manifests, every Secret referred to is the one README.md creates,
// with the keys it creates.
func TestManifests(t *testing.T) {
	for file, want := range manifests {
		objs, _ := read(t, file)
		var got []string
		for _, o := range objs {
			got = append(got, o.APIVersion+" "+o.Kind)
			if o.Metadata.Name == "" {
				t.Errorf("%s: a %s without a name", file, o.Kind)
			}
		}
		if !slices.Equal(got, want) {
			t.Errorf("%s holds %q, want %q", file, got, want)
		}
	}
	objs := all(t)
	dep, job, so := objs["Deployment"], objs["Job"], objs["ScaledObject"]
	if so.Spec.ScaleTargetRef.Name != dep.Metadata.Name {
		t.Errorf("the ScaledObject scales %q, the Deployment is %q", so.Spec.ScaleTargetRef.Name, dep.Metadata.Name)
	}
	if len(dep.Spec.Selector.MatchLabels) == 0 {
		t.Error("the Deployment selects no labels")
	}
	for k, v := range dep.Spec.Selector.MatchLabels {
		if dep.Spec.Template.Metadata.Labels[k] != v {
			t.Errorf("the Deployment selects %s=%s, its pods do not have it", k, v)
		}
	}
	if dep.Spec.Replicas != nil {
		t.Error("the Deployment sets replicas: KEDA's HPA owns them, a sync would reset them")
	}
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	create := regexp.MustCompile(`kubectl create secret generic (\S+)((?: \\\n)?[^\n]*)`).FindSubmatch(readme)
	if create == nil {
		t.Fatal("README.md does not say how to create the Secret (kubectl create secret generic ...)")
	}
	secret := string(create[1])
	for _, o := range []object{dep, job} {
		pod := o.Spec.Template.Spec
		for _, v := range pod.Volumes {
			if v.ConfigMap != nil && objs["ConfigMap"].Metadata.Name != v.ConfigMap.Name {
				t.Errorf("%s mounts ConfigMap %s, which no manifest holds", o.Kind, v.ConfigMap.Name)
			}
			if v.Secret != nil {
				if v.Secret.SecretName != secret {
					t.Errorf("%s mounts Secret %s; README.md creates %s", o.Kind, v.Secret.SecretName, secret)
				}
				for _, it := range v.Secret.Items {
					if !bytes.Contains(readme, []byte("--from-file="+it.Key+"=")) {
						t.Errorf("%s mounts key %s of the Secret, which README.md does not create", o.Kind, it.Key)
					}
				}
			}
		}
		for _, c := range append(pod.InitContainers, pod.Containers...) {
			for _, e := range c.Env {
				if r := e.ValueFrom; r != nil && r.SecretKeyRef != nil {
					if r.SecretKeyRef.Name != secret || !bytes.Contains(readme, []byte("--from-literal="+r.SecretKeyRef.Key+"=")) {
						t.Errorf("%s %s: env %s reads key %s of Secret %s, which README.md does not create", o.Kind, c.Name, e.Name, r.SecretKeyRef.Key, r.SecretKeyRef.Name)
					}
				}
			}
		}
	}
}

// TestREADMELinks: the README's relative links name files that exist.
func TestREADMELinks(t *testing.T) {
	data, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	links := regexp.MustCompile(`\]\(([^()\s#]+)(#[^()\s]*)?\)`).FindAllStringSubmatch(string(data), -1)
	if len(links) == 0 {
		t.Fatal("no link found: the extraction is broken")
	}
	for _, l := range links {
		if !strings.Contains(l[1], "://") {
			if _, err := os.Stat(l[1]); err != nil {
				t.Errorf("README.md links to %s: %v", l[1], err)
			}
		}
	}
}

// TestNoSecretInline: no Secret object, no connection secret in an env
// value or an argument, nothing that looks like credentials anywhere: the
// URL (it may carry a user and password) and the credentials come from a
// Secret.
func TestNoSecretInline(t *testing.T) {
	looksSecret := regexp.MustCompile(`-----BEGIN|\bS[UAO][A-Z2-7]{50,}\b|://[^/\s@]+@`)
	for file := range manifests {
		objs, trees := read(t, file)
		for _, o := range objs {
			if o.Kind == "Secret" {
				t.Errorf("%s holds a Secret: create it apart (README.md), never in a manifest", file)
			}
			for _, c := range append(o.Spec.Template.Spec.InitContainers, o.Spec.Template.Spec.Containers...) {
				for _, e := range c.Env {
					switch e.Name {
					case "NATS_URL", "NATS_USER", "NATS_PASSWORD", "NATS_TOKEN":
						if e.Value != "" || e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil {
							t.Errorf("%s %s: env %s is not read from a Secret", file, c.Name, e.Name)
						}
					case "NATS_CREDS", "NATS_NKEY", "NATS_KEY":
						if !underSecret(o.Spec.Template.Spec, c, e.Value) {
							t.Errorf("%s %s: env %s=%s is not a file of a Secret's volume", file, c.Name, e.Name, e.Value)
						}
					}
				}
				for _, a := range c.Args {
					name, _, _ := strings.Cut(a, "=")
					if slices.Contains([]string{"--password", "--token", "--user", "--creds", "--nkey", "--server", "-s"}, name) {
						t.Errorf("%s %s: argument %s: connection settings come from the environment (a Secret)", file, c.Name, name)
					}
				}
			}
		}
		walk(trees, func(s string) {
			if looksSecret.MatchString(s) {
				t.Errorf("%s: %q looks like a secret", file, s)
			}
		})
	}
}

// underSecret says whether path is a file in one of c's mounts of a
// Secret volume.
func underSecret(pod podSpec, c container, path string) bool {
	for _, m := range c.VolumeMounts {
		for _, v := range pod.Volumes {
			if v.Name == m.Name && v.Secret != nil && strings.HasPrefix(path, strings.TrimSuffix(m.MountPath, "/")+"/") {
				return true
			}
		}
	}
	return false
}

func walk(v any, f func(string)) {
	switch v := v.(type) {
	case string:
		f(v)
	case []any:
		for _, x := range v {
			walk(x, f)
		}
	case map[string]any:
		for k, x := range v {
			f(k)
			walk(x, f)
		}
	}
}

// lanesContainer is the container of o's pods that runs lanes.
func lanesContainer(t *testing.T, o object) container {
	t.Helper()
	for _, c := range o.Spec.Template.Spec.Containers {
		if strings.HasPrefix(c.Image, "ghcr.io/lanes-dev/lanes:") {
			if len(c.Command) > 0 {
				t.Errorf("%s: container %s replaces the image's entrypoint (lanes): give only args", o.Kind, c.Name)
			}
			return c
		}
	}
	t.Fatalf("%s: no container runs the image ghcr.io/lanes-dev/lanes", o.Kind)
	return container{}
}

// run is lanes with args, in this process.
func run(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := commands.Main(append([]string{"lanes"}, args...), strings.NewReader(""), &out, &errb)
	return code, out.String(), errb.String()
}

// flagsOf is what the command accepts, as lanes says: its long flags (the
// completion's candidates) and their one-letter aliases (its help).
func flagsOf(t *testing.T, cmd string) (flags map[string]bool, help string) {
	t.Helper()
	code, out, errs := run(t, "__complete", cmd, "-")
	if code != 0 {
		t.Fatalf("lanes __complete %s -: exit %d\n%s", cmd, code, errs)
	}
	flags = map[string]bool{}
	for _, f := range strings.Fields(out) {
		flags[f] = true
	}
	if len(flags) < 10 {
		t.Fatalf("lanes __complete %s - lists %d flags: the completion changed", cmd, len(flags))
	}
	_, help, _ = run(t, cmd, "--help")
	for _, m := range regexp.MustCompile(`(--[a-z-]+)(?: [A-Z]+)?, (-[a-zA-Z])\b`).FindAllStringSubmatch(help, -1) {
		if flags[m[1]] {
			flags[m[2]] = true
		}
	}
	return flags, help
}

// checkArgs: args are lanes cmd and flags it has; it returns the flags'
// values (flag -> value; "" for a boolean, which the next word never is
// here: every value in these manifests follows its flag).
func checkArgs(t *testing.T, where string, args []string, cmd string) (map[string]string, string) {
	t.Helper()
	if len(args) == 0 || args[0] != cmd {
		t.Fatalf("%s: args %q do not run lanes %s", where, args, cmd)
	}
	flags, help := flagsOf(t, cmd)
	values := map[string]string{}
	for i := 1; i < len(args); i++ {
		a := args[i]
		if !strings.HasPrefix(a, "-") {
			t.Errorf("%s: %q follows no flag", where, a)
			continue
		}
		name, value, eq := strings.Cut(a, "=")
		if !flags[name] {
			t.Errorf("%s: lanes %s has no flag %s", where, cmd, name)
		}
		if !eq && i+1 < len(args) && !strings.HasPrefix(args[i+1], "-") {
			value = args[i+1]
			i++
		}
		values[name] = value
	}
	return values, help
}

// duration is a flag's value in args, else its default in the help.
func duration(t *testing.T, values map[string]string, help, flag string) time.Duration {
	t.Helper()
	v, ok := values[flag]
	if !ok {
		m := regexp.MustCompile(regexp.QuoteMeta(flag) + ` DURATION .*\(default: (\S+)\)`).FindStringSubmatch(help)
		if m == nil {
			t.Fatalf("no default for %s in the help", flag)
		}
		v = m[1]
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		t.Fatalf("%s %s: %v", flag, v, err)
	}
	return d
}

// TestWorkDeployment: the Deployment runs lanes work with flags it has;
// the probes ask the paths lanes work serves, on the port --metrics
// listens on; the pods outlive --grace; the handler is a native sidecar
// on the port --http calls; the instance is the pod's name; every
// container has resources.
func TestWorkDeployment(t *testing.T) {
	cleanEnv(t)
	dep := all(t)["Deployment"]
	pod := dep.Spec.Template.Spec
	c := lanesContainer(t, dep)
	values, help := checkArgs(t, "deployment.yaml", c.Args, "work")

	_, port, err := net.SplitHostPort(values["--metrics"])
	if err != nil {
		t.Fatalf("--metrics %q: %v", values["--metrics"], err)
	}
	for _, p := range []struct {
		what, path string
		probe      *probe
	}{{"livenessProbe", "/healthz", c.LivenessProbe}, {"readinessProbe", "/readyz", c.ReadinessProbe}} {
		if p.probe == nil || p.probe.HTTPGet == nil {
			t.Errorf("the lanes container has no %s httpGet", p.what)
			continue
		}
		if p.probe.HTTPGet.Path != p.path {
			t.Errorf("%s asks %s; lanes work answers it at %s", p.what, p.probe.HTTPGet.Path, p.path)
		}
		if got := portOf(c, p.probe.HTTPGet.Port); got != port {
			t.Errorf("%s asks port %s (%s); lanes work serves it on --metrics's port %s", p.what, p.probe.HTTPGet.Port, got, port)
		}
	}
	if dep.Spec.Template.Metadata.Annotations["prometheus.io/port"] != port {
		t.Errorf("Prometheus is told port %q; --metrics listens on %s", dep.Spec.Template.Metadata.Annotations["prometheus.io/port"], port)
	}

	grace := duration(t, values, help, "--grace")
	if tg := pod.TerminationGracePeriodSeconds; tg == nil || time.Duration(*tg)*time.Second <= grace {
		t.Errorf("terminationGracePeriodSeconds %v is not above --grace %s: the kubelet would kill lanes work while its messages finish", deref(tg), grace)
	}

	u, err := url.Parse(values["--http"])
	if err != nil || u.Hostname() != "127.0.0.1" {
		t.Fatalf("--http %q: the handler is the pod's sidecar, on 127.0.0.1", values["--http"])
	}
	sidecar := false
	for _, ic := range pod.InitContainers {
		if ic.RestartPolicy == "Always" && servesPort(ic, u.Port()) {
			sidecar = true
		}
	}
	if !sidecar {
		t.Errorf("no native sidecar (an init container with restartPolicy: Always) serves port %s that --http calls: a plain container could stop before lanes work finishes its messages", u.Port())
	}
	if inst, ok := values["--instance"]; ok {
		name := strings.TrimSuffix(strings.TrimPrefix(inst, "$("), ")")
		if !slices.ContainsFunc(c.Env, func(e envVar) bool {
			return e.Name == name && e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "metadata.name"
		}) {
			t.Errorf("--instance %s is not the pod's name (an env from fieldRef metadata.name)", inst)
		}
	}

	for _, x := range append(pod.InitContainers, pod.Containers...) {
		if x.Resources.Requests["cpu"] == "" || x.Resources.Requests["memory"] == "" || x.Resources.Limits["memory"] == "" {
			t.Errorf("container %s: set requests (cpu, memory) and a memory limit", x.Name)
		}
	}
}

// servesPort says whether c declares port (a number).
func servesPort(c container, port string) bool {
	for _, p := range c.Ports {
		if strconv.Itoa(p.ContainerPort) == port {
			return true
		}
	}
	return false
}

// portOf resolves a probe's port (a name or a number) to the number.
func portOf(c container, port string) string {
	for _, p := range c.Ports {
		if p.Name == port {
			return strconv.Itoa(p.ContainerPort)
		}
	}
	return port
}

func deref(p *int) any {
	if p == nil {
		return "(none)"
	}
	return *p
}

// TestApplyJob: the Job runs lanes apply on the ConfigMap's design with
// flags it has and --yes; its deadline leaves every attempt its
// --lock-timeout and --drain-timeout; what cannot succeed on a retry fails
// the Job, what can (a drain not finished) is retried.
func TestApplyJob(t *testing.T) {
	cleanEnv(t)
	objs := all(t)
	job := objs["Job"]
	c := lanesContainer(t, job)
	values, help := checkArgs(t, "apply-job.yaml", c.Args, "apply")
	if _, ok := values["--yes"]; !ok {
		t.Error("apply without --yes asks before changing an existing stream: a Job has no one to answer")
	}
	design := values["-f"] + values["--file"]
	dir, file := filepath.Split(design)
	mounted := false
	for _, m := range c.VolumeMounts {
		for _, v := range job.Spec.Template.Spec.Volumes {
			if v.Name == m.Name && v.ConfigMap != nil && filepath.Clean(m.MountPath) == filepath.Clean(dir) && objs["ConfigMap"].Data[file] != "" {
				mounted = true
			}
		}
	}
	if !mounted {
		t.Errorf("-f %s is not the ConfigMap's design, mounted", design)
	}
	if job.Spec.Template.Spec.RestartPolicy != "Never" {
		t.Error("restartPolicy: Never, so that each attempt is a pod the Job counts (and podFailurePolicy needs it)")
	}
	if job.Spec.BackoffLimit == nil || job.Spec.ActiveDeadlineSeconds == nil {
		t.Fatal("set backoffLimit and activeDeadlineSeconds")
	}
	attempt := duration(t, values, help, "--drain-timeout") + duration(t, values, help, "--lock-timeout")
	if need := time.Duration(*job.Spec.BackoffLimit+1) * attempt; time.Duration(*job.Spec.ActiveDeadlineSeconds)*time.Second < need {
		t.Errorf("activeDeadlineSeconds %d cuts the attempts short: %d attempts of --lock-timeout + --drain-timeout need %s", *job.Spec.ActiveDeadlineSeconds, *job.Spec.BackoffLimit+1, need)
	}
	if *job.Spec.BackoffLimit < 1 {
		t.Error("backoffLimit 0: a drain timeout (exit 5) would not be continued")
	}
	var fail []int
	for _, r := range job.Spec.PodFailurePolicy.Rules {
		if r.Action == "FailJob" && r.OnExitCodes.Operator == "In" && r.OnExitCodes.ContainerName == c.Name {
			fail = append(fail, r.OnExitCodes.Values...)
		}
	}
	for _, code := range []int{commands.ExitUsage, commands.ExitRefused} {
		if !slices.Contains(fail, code) {
			t.Errorf("exit %d fails again on a retry: the podFailurePolicy should fail the Job on it", code)
		}
	}
	for _, code := range []int{commands.ExitIncomplete, commands.ExitConnect, commands.ExitTimeout} {
		if slices.Contains(fail, code) {
			t.Errorf("exit %d may pass on a retry: the podFailurePolicy must not fail the Job on it", code)
		}
	}
}

// design is the ConfigMap's design, planned.
func design(t *testing.T) (*planner.Plan, string) {
	t.Helper()
	text := all(t)["ConfigMap"].Data["lanes.yaml"]
	d, err := planner.ParseDesign([]byte(text), "lanes.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return testutil.PlanDesign(t, d), text
}

// TestScaledObject: KEDA scales the Deployment on
// lanes_work_instances_wanted of the design's stream and name, from 1 to
// the design's lane count.
func TestScaledObject(t *testing.T) {
	so := all(t)["ScaledObject"]
	p, _ := design(t)
	if so.Spec.MinReplicaCount == nil || *so.Spec.MinReplicaCount < 1 {
		t.Error("minReplicaCount below 1: the workers' metric is gone at zero workers, so nothing would scale them up again")
	}
	if so.Spec.MaxReplicaCount == nil || *so.Spec.MaxReplicaCount != p.Design.Partitions {
		t.Errorf("maxReplicaCount %v, the design has %d lanes: an instance serves a lane alone, so more get none", deref(so.Spec.MaxReplicaCount), p.Design.Partitions)
	}
	if len(so.Spec.Triggers) != 1 || so.Spec.Triggers[0].Type != "prometheus" {
		t.Fatalf("want one prometheus trigger, got %+v", so.Spec.Triggers)
	}
	md := so.Spec.Triggers[0].Metadata
	q := md["query"]
	for _, want := range []string{"lanes_work_instances_wanted{", `stream="` + p.Stream.Name + `"`, `design="` + p.Design.Name + `"`} {
		if !strings.Contains(q, want) {
			t.Errorf("the trigger's query %s lacks %s", q, want)
		}
	}
	if th, err := strconv.ParseFloat(md["threshold"], 64); err != nil || th <= 0 {
		t.Errorf("threshold %q: a number above 0 (busy lanes per replica)", md["threshold"])
	}
}

// TestQueriesAreExported runs the manifests' commands against a real
// nats-server, as the pods would (the environment they get, the Job's and
// the Deployment's args; a design file, a handler URL and a port of the
// test's own), and checks: the Job applies the design; lanes work answers
// the probes' paths; every metric the dashboard and the ScaledObject
// query is in lanes work's /metrics or lanes inspect -o prometheus, with
// every label the queries match, group or print by.
func TestQueriesAreExported(t *testing.T) {
	cleanEnv(t)
	objs := all(t)
	p, text := design(t)
	dir := t.TempDir()
	designFile := filepath.Join(dir, "lanes.yaml")
	if err := os.WriteFile(designFile, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	srv := natstest.Start(t)
	t.Setenv("NATS_URL", srv.URL()) // what the Secret's url gives the pods

	job := lanesContainer(t, objs["Job"])
	args := podArgs(job, designFile, nil)
	if code, out, errs := run(t, args...); code != 0 {
		t.Fatalf("the Job's lanes %s: exit %d\n%s%s", strings.Join(args, " "), code, out, errs)
	}

	release := make(chan struct{})
	handler := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		select { // hold each message: the lanes keep a backlog and a message in flight
		case <-release:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(handler.Close)
	metrics := freeAddr(t)
	work := lanesContainer(t, objs["Deployment"])
	args = podArgs(work, designFile, map[string]string{"--http": handler.URL + "/", "--metrics": metrics})
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan int, 1)
	var werr bytes.Buffer
	go func() {
		stopped <- commands.MainContext(ctx, append([]string{"lanes"}, args...), strings.NewReader(""), io.Discard, &werr)
	}()
	stop := func() {
		close(release)
		cancel()
		select {
		case <-stopped:
		case <-time.After(60 * time.Second):
			t.Error("lanes work did not stop")
		}
	}
	defer stop()

	// The probes' paths, as the Deployment asks them, on --metrics's port.
	for _, pr := range []*probe{work.LivenessProbe, work.ReadinessProbe} {
		path := pr.HTTPGet.Path
		testutil.WaitFor(t, "lanes work's "+path+" to answer 200", 30*time.Second, func() bool {
			code, _ := httpGet("http://" + metrics + path)
			return code == http.StatusOK
		})
	}
	var subjects []string
	for part := range p.Design.Partitions {
		subjects = append(subjects, natstest.SubjectsFor(t, p, part, 2)...)
	}
	_, js := natstest.Connect(t, srv.URL())
	natstest.Publish(t, js, subjects...)

	var workText string
	// Every lane has a backlog: the figure is the lane count once the
	// worker's listing (every 10s) has seen it.
	wanted := regexp.MustCompile(fmt.Sprintf(`(?m)^lanes_work_instances_wanted\{[^}]*\} %d$`, p.Design.Partitions))
	testutil.WaitFor(t, "lanes work's metrics with every lane served and busy", 60*time.Second, func() bool {
		_, workText = httpGet("http://" + metrics + "/metrics")
		return allServing(workText, p.Design.Partitions) && wanted.MatchString(workText)
	})
	var inspectText string
	testutil.WaitFor(t, "lanes inspect with the lanes' instance and lag", 30*time.Second, func() bool {
		code, out, _ := run(t, "inspect", "-f", designFile, "-o", "prometheus")
		inspectText = out
		return code == 0 && strings.Contains(out, "\nlanes_lane_served_by{") && strings.Contains(out, "\nlanes_lane_lag_seconds{")
	})
	exported := series(workText)
	for name, labels := range series(inspectText) {
		if exported[name] == nil {
			exported[name] = map[string]bool{}
		}
		for l := range labels {
			exported[name][l] = true
		}
	}

	queries := dashboardQueries(t)
	so := objs["ScaledObject"]
	queries = append(queries, query{"keda-scaledobject.yaml", so.Spec.Triggers[0].Metadata["query"], ""})
	used := map[string]bool{}
	for _, q := range queries {
		uses, grouping, err := parseQuery(q.expr)
		if err != nil {
			t.Errorf("%s: %s: %v", q.where, q.expr, err)
			continue
		}
		if len(uses) == 0 {
			t.Errorf("%s: %s queries no metric", q.where, q.expr)
		}
		have := map[string]bool{}
		for _, u := range uses {
			used[u.metric] = true
			labels, ok := exported[u.metric]
			if !ok {
				t.Errorf("%s: %s: lanes exports no %s", q.where, q.expr, u.metric)
				continue
			}
			for l := range labels {
				have[l] = true
			}
			for _, l := range u.labels {
				if !labels[l] {
					t.Errorf("%s: %s: %s has no label %s (it has %s)", q.where, q.expr, u.metric, l, keys(labels))
				}
			}
		}
		for _, l := range grouping {
			if !have[l] {
				t.Errorf("%s: %s: groups by %s, which none of its metrics has", q.where, q.expr, l)
			}
		}
		for _, m := range regexp.MustCompile(`\{\{\s*(\w+)\s*\}\}`).FindAllStringSubmatch(q.legend, -1) {
			if len(grouping) > 0 && !slices.Contains(grouping, m[1]) || len(grouping) == 0 && !have[m[1]] {
				t.Errorf("%s: legend %q names %s, which the result of %s does not have", q.where, q.legend, m[1], q.expr)
			}
		}
	}
	// What the dashboard is for: each of these is on it.
	for _, m := range []string{"lanes_work_instances_wanted", "lanes_lane_backlog", "lanes_lane_lag_seconds", "lanes_work_processing_seconds_bucket",
		"lanes_work_in_flight_age_seconds", "lanes_lane_ack_pending", "lanes_work_parked_total", "lanes_lane_served_by", "lanes_work_serving"} {
		if !used[m] {
			t.Errorf("the dashboard does not show %s", m)
		}
	}
	if t.Failed() {
		t.Logf("lanes work's metrics:\n%s\nlanes inspect -o prometheus:\n%s\nlanes work's stderr:\n%s", workText, inspectText, werr.String())
	}
}

// allServing: text (lanes work's metrics) says this one instance serves
// n lanes.
func allServing(text string, n int) bool {
	return len(regexp.MustCompile(`(?m)^lanes_work_serving\{[^}]*\} 1$`).FindAllString(text, -1)) == n
}

// podArgs are a container's args as the test runs them: $(VAR) expanded
// from the container's env as the kubelet does (the pod's name for a
// fieldRef to metadata.name), the values of the flags in values replaced,
// the design file the test's own.
func podArgs(c container, designFile string, values map[string]string) []string {
	env := map[string]string{}
	for _, e := range c.Env {
		switch {
		case e.ValueFrom == nil:
			env[e.Name] = e.Value
		case e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "metadata.name":
			env[e.Name] = "lanes-work-7d9c5b6f4-x2x7q"
		}
	}
	ref := regexp.MustCompile(`\$\(([A-Za-z_][A-Za-z0-9_]*)\)`)
	out := make([]string, len(c.Args))
	for i, a := range c.Args {
		out[i] = ref.ReplaceAllStringFunc(a, func(r string) string {
			if v, ok := env[r[2:len(r)-1]]; ok {
				return v
			}
			return r
		})
		if i == 0 {
			continue
		}
		if v, ok := values[c.Args[i-1]]; ok {
			out[i] = v
		}
		if c.Args[i-1] == "-f" || c.Args[i-1] == "--file" {
			out[i] = designFile
		}
	}
	return out
}

func httpGet(u string) (int, string) {
	resp, err := http.Get(u)
	if err != nil {
		return 0, ""
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// freeAddr is a loopback address nothing listens on.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// cleanEnv: no connection settings from the machine running the tests.
func cleanEnv(t *testing.T) {
	t.Helper()
	for _, v := range []string{"LANES_FILE", "NATS_URL", "NATS_CONTEXT", "NATS_CREDS", "NATS_NKEY", "NATS_USER", "NATS_PASSWORD", "NATS_TOKEN", "NATS_CERT", "NATS_KEY", "NATS_CA"} {
		t.Setenv(v, "")
		os.Unsetenv(v)
	}
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
}

var sample = regexp.MustCompile(`^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? \S+$`)

// series reads a text exposition: each metric's name and its labels.
func series(text string) map[string]map[string]bool {
	out := map[string]map[string]bool{}
	for _, line := range strings.Split(text, "\n") {
		m := sample.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		if out[m[1]] == nil {
			out[m[1]] = map[string]bool{}
		}
		for _, l := range regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)="(?:[^"\\]|\\.)*"`).FindAllStringSubmatch(m[2], -1) {
			out[m[1]][l[1]] = true
		}
	}
	return out
}

func keys(m map[string]bool) string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return strings.Join(ks, ",")
}

type query struct{ where, expr, legend string }

// dashboardQueries are the dashboard's panel targets and the queries of
// its variables.
func dashboardQueries(t *testing.T) []query {
	t.Helper()
	data, err := os.ReadFile("grafana-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Title  string `json:"title"`
		UID    string `json:"uid"`
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr         string `json:"expr"`
				LegendFormat string `json:"legendFormat"`
			} `json:"targets"`
		} `json:"panels"`
		Templating struct {
			List []struct {
				Name  string `json:"name"`
				Type  string `json:"type"`
				Query any    `json:"query"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(data, &d); err != nil {
		t.Fatalf("grafana-dashboard.json: %v", err)
	}
	if d.Title == "" || d.UID == "" || len(d.Panels) == 0 {
		t.Fatal("grafana-dashboard.json: a dashboard needs a title, a uid and panels")
	}
	var out []query
	for _, p := range d.Panels {
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			out = append(out, query{"panel " + strconv.Quote(p.Title), tg.Expr, tg.LegendFormat})
		}
	}
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		q, _ := v.Query.(string)
		if m, ok := v.Query.(map[string]any); ok {
			q, _ = m["query"].(string)
		}
		out = append(out, query{"variable " + v.Name, q, ""})
	}
	return out
}

type metricUse struct {
	metric string
	labels []string // matched on
}

var (
	promString   = regexp.MustCompile(`"(?:[^"\\]|\\.)*"`)
	promSelector = regexp.MustCompile(`([a-zA-Z_:][a-zA-Z0-9_:]*)?\s*\{([^{}]*)\}`)
	promMatcher  = regexp.MustCompile(`^\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*(?:=~|!~|!=|=)\s*""\s*$`)
	promRange    = regexp.MustCompile(`\[[^\]]*\]`)
	promGrouping = regexp.MustCompile(`\b(?:by|without|on|ignoring)\s*\(([^)]*)\)`)
	promNumber   = regexp.MustCompile(`\b[0-9]+(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?\b`)
	promIdent    = regexp.MustCompile(`[a-zA-Z_:][a-zA-Z0-9_:]*(\s*\()?`)
	labelValues  = regexp.MustCompile(`^\s*label_values\((.*),\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*\)\s*$`)
	promKeywords = map[string]bool{"and": true, "or": true, "unless": true, "bool": true, "offset": true,
		"group_left": true, "group_right": true, "by": true, "without": true, "on": true, "ignoring": true}
)

// parseQuery finds the metrics a PromQL expression (or a Grafana
// label_values(...) query) reads, with the labels it matches them on, and
// the labels it groups by. It knows the PromQL these files use, not all
// of PromQL: it fails on what it cannot read.
func parseQuery(expr string) (uses []metricUse, grouping []string, err error) {
	if m := labelValues.FindStringSubmatch(expr); m != nil {
		uses, _, err := parseQuery(m[1])
		return uses, []string{m[2]}, err
	}
	s := promString.ReplaceAllString(expr, `""`)
	for _, m := range promSelector.FindAllStringSubmatch(s, -1) {
		if m[1] == "" {
			return nil, nil, fmt.Errorf("a selector without a metric name: %s", m[0])
		}
		u := metricUse{metric: m[1]}
		for _, part := range strings.Split(m[2], ",") {
			if strings.TrimSpace(part) == "" {
				continue
			}
			lm := promMatcher.FindStringSubmatch(part)
			if lm == nil {
				return nil, nil, fmt.Errorf("cannot read the matcher %q", part)
			}
			u.labels = append(u.labels, lm[1])
		}
		uses = append(uses, u)
	}
	s = promSelector.ReplaceAllString(s, " ")
	s = promRange.ReplaceAllString(s, " ")
	for _, m := range promGrouping.FindAllStringSubmatch(s, -1) {
		for _, l := range strings.Split(m[1], ",") {
			if l = strings.TrimSpace(l); l != "" {
				grouping = append(grouping, l)
			}
		}
	}
	s = promGrouping.ReplaceAllString(s, " ")
	s = promNumber.ReplaceAllString(s, " ")
	for _, m := range promIdent.FindAllStringSubmatch(s, -1) {
		name := strings.TrimRight(m[0], " (")
		if m[1] != "" || promKeywords[name] {
			continue // a function, or a keyword
		}
		uses = append(uses, metricUse{metric: name}) // a bare metric name
	}
	if strings.ContainsAny(promNumber.ReplaceAllString(promIdent.ReplaceAllString(s, " "), " "), "{}[]\"") {
		return nil, nil, fmt.Errorf("left over after reading it: %q", s)
	}
	return uses, grouping, nil
}

// TestParseQuery: the extractor reads what the dashboard writes.
func TestParseQuery(t *testing.T) {
	uses, grouping, err := parseQuery(`histogram_quantile(0.99, sum by (lane, le) (rate(lanes_work_processing_seconds_bucket{stream="$stream",lane=~"$design-n[0-9]+-[0-9]+"}[$__rate_interval])))`)
	if err != nil {
		t.Fatal(err)
	}
	if len(uses) != 1 || uses[0].metric != "lanes_work_processing_seconds_bucket" || !slices.Equal(uses[0].labels, []string{"stream", "lane"}) ||
		!slices.Equal(grouping, []string{"lane", "le"}) {
		t.Fatalf("got %+v by %q", uses, grouping)
	}
	uses, grouping, err = parseQuery(`max(lanes_work_members) / lanes_work_lanes and on (design) up`)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, u := range uses {
		names = append(names, u.metric)
	}
	if !slices.Equal(names, []string{"lanes_work_members", "lanes_work_lanes", "up"}) || !slices.Equal(grouping, []string{"design"}) {
		t.Fatalf("got %q by %q", names, grouping)
	}
	uses, grouping, err = parseQuery(`label_values(lanes_work_lanes{stream="$stream"}, design)`)
	if err != nil || len(uses) != 1 || uses[0].metric != "lanes_work_lanes" || !slices.Equal(grouping, []string{"design"}) {
		t.Fatalf("label_values: %+v %q %v", uses, grouping, err)
	}
	if _, _, err := parseQuery(`{__name__=~"lanes_.*"}`); err == nil {
		t.Fatal("a selector without a name was read")
	}
}
