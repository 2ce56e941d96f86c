// Package plegdprocessor is an OpenTelemetry Collector processor that gives logs,
// metrics and traces the Kubernetes pod and container attributes of the semantic
// conventions (k8s.pod.*, k8s.container.*, container.*), from plegd: the node-local
// sidecar that watches the container runtime through the CRI. It needs no API
// server: pods come from plegd's Watch stream (the Go client's informer), and keys
// the stream cannot answer (a host PID, a log file or container removed before the
// processor saw it) from plegd's GetContainer, cached.
//
// See docs/collector-processor.md in the plegd repository.
package plegdprocessor
