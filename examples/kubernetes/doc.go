// Package kubernetes holds no code: its directory has the Kubernetes
// manifests of lanes (deployment.yaml, apply-job.yaml,
// keda-scaledobject.yaml) and a Grafana dashboard, and its tests check
// them against the lanes binary's flags, probes and metrics. See README.md.
package kubernetes
