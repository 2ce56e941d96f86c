package plegdprocessor

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// The keys a record can be placed by (pod_association), as the OpenTelemetry
// semantic conventions name them.
const (
	KeyContainerID = "container.id"
	KeyPodUID      = "k8s.pod.uid"
	KeyLogFilePath = "log.file.path"
	KeyProcessPID  = "process.pid"
	// KeyPodIP is a pod's address, looked up at the record's own time (a log record's
	// timestamp, a span's start, a data point's time): plegd says which pod held it
	// then, across address reuse.
	KeyPodIP = "k8s.pod.ip"
	// KeyConnection is the address the records came from (the receiver's peer), as a
	// pod address at the record's time: what k8sattributes calls "connection".
	KeyConnection = "connection"
)

var knownKeys = []string{KeyContainerID, KeyPodUID, KeyLogFilePath, KeyProcessPID, KeyPodIP, KeyConnection}

// Config is the processor's configuration (processors: plegd: …).
type Config struct {
	// Endpoint is plegd's gRPC socket: unix:///run/plegd/plegd.sock (or an absolute path).
	Endpoint string `mapstructure:"endpoint"`
	// PodAssociation lists the keys a record is placed by, tried in order; each is read
	// from the resource's attributes, then from the record's (log record, span, data point).
	// process.pid must be a host PID (the hostmetrics process scraper's, with the
	// host's PID namespace); it is not used on an SDK's resource (telemetry.sdk.*).
	PodAssociation []string `mapstructure:"pod_association"`
	// Labels are the pod labels copied as k8s.pod.label.<key>; ["*"]: all of them.
	Labels []string `mapstructure:"labels"`
	// Annotations are the pod annotations copied as k8s.pod.annotation.<key>; ["*"]: all.
	Annotations []string `mapstructure:"annotations"`
	// WaitForSync is how long Start waits, at most, for the first snapshot of plegd's
	// pods. 0: not at all. Records are never held longer than LookupTimeout.
	WaitForSync time.Duration `mapstructure:"wait_for_sync"`
	// LookupTimeout bounds the GetContainer calls one batch of records may wait for
	// (keys the local copy cannot answer: process.pid, a log file or container the
	// copy does not hold). Records whose lookup did not answer in time pass unchanged
	// and are counted.
	LookupTimeout time.Duration `mapstructure:"lookup_timeout"`
	// CacheSize bounds the GetContainer answers kept (found and not found alike).
	CacheSize int `mapstructure:"cache_size"`
	// NegativeCacheTTL is how long a "not found" answer is kept (it is also dropped as
	// soon as the local copy learns of any change on the node).
	NegativeCacheTTL time.Duration `mapstructure:"negative_cache_ttl"`
	// NodeName is set as k8s.node.name; empty: $K8S_NODE_NAME, then $NODE_NAME. With
	// none of them, k8s.node.name is not set (a warning is logged): the host name is
	// the collector pod's name unless it runs on the host's network.
	NodeName string `mapstructure:"node_name"`
}

func createDefaultConfig() *Config {
	return &Config{
		Endpoint:         "unix:///run/plegd/plegd.sock",
		PodAssociation:   []string{KeyContainerID, KeyPodUID, KeyLogFilePath, KeyProcessPID},
		Labels:           []string{},
		Annotations:      []string{},
		WaitForSync:      5 * time.Second,
		LookupTimeout:    100 * time.Millisecond,
		CacheSize:        10000,
		NegativeCacheTTL: 2 * time.Second,
	}
}

// Validate says what is wrong with the configuration, naming the field.
func (c *Config) Validate() error {
	var errs []error
	if err := checkEndpoint(c.Endpoint); err != nil {
		errs = append(errs, fmt.Errorf("endpoint: %w", err))
	}
	if len(c.PodAssociation) == 0 {
		errs = append(errs, fmt.Errorf("pod_association: empty; name at least one of %s", strings.Join(knownKeys, ", ")))
	}
	seen := map[string]bool{}
	for _, k := range c.PodAssociation {
		known := false
		for _, kk := range knownKeys {
			known = known || k == kk
		}
		switch {
		case !known:
			errs = append(errs, fmt.Errorf("pod_association: unknown key %q (known: %s)", k, strings.Join(knownKeys, ", ")))
		case seen[k]:
			errs = append(errs, fmt.Errorf("pod_association: %q is listed twice", k))
		}
		seen[k] = true
	}
	errs = append(errs, checkKeys("labels", c.Labels), checkKeys("annotations", c.Annotations))
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"wait_for_sync", c.WaitForSync}, {"lookup_timeout", c.LookupTimeout}, {"negative_cache_ttl", c.NegativeCacheTTL}} {
		if d.v < 0 {
			errs = append(errs, fmt.Errorf("%s: must not be negative (got %s)", d.name, d.v))
		}
	}
	if c.LookupTimeout == 0 {
		errs = append(errs, errors.New("lookup_timeout: must be above 0 (it bounds how long a batch waits for plegd)"))
	}
	if c.CacheSize <= 0 {
		errs = append(errs, fmt.Errorf("cache_size: must be above 0 (got %d)", c.CacheSize))
	}
	return errors.Join(errs...)
}

func checkEndpoint(e string) error {
	switch {
	case e == "":
		return errors.New("empty; plegd's socket, e.g. unix:///run/plegd/plegd.sock")
	case strings.HasPrefix(e, "unix://"):
		if !strings.HasPrefix(e[len("unix://"):], "/") || len(e) == len("unix:///") {
			return fmt.Errorf("%q: unix:// needs an absolute path (unix:///run/plegd/plegd.sock)", e)
		}
	case strings.HasPrefix(e, "/"):
	default:
		return fmt.Errorf("%q is not a unix socket (plegd serves its API on unix:///path only)", e)
	}
	return nil
}

func checkKeys(field string, keys []string) error {
	var errs []error
	for _, k := range keys {
		switch {
		case k == "":
			errs = append(errs, fmt.Errorf("%s: an empty key", field))
		case k == "*" && len(keys) > 1:
			errs = append(errs, fmt.Errorf("%s: \"*\" (all) must be the only entry", field))
		case strings.ContainsAny(k, "*") && k != "*":
			errs = append(errs, fmt.Errorf("%s: %q: only \"*\" alone is a pattern; name keys exactly", field, k))
		}
	}
	return errors.Join(errs...)
}
