package plegdprocessor

import (
	"sort"
	"strings"

	"go.opentelemetry.io/collector/pdata/pcommon"

	"github.com/plegd/plegd/clients/go/plegdv1"
)

// Resource attribute names (OpenTelemetry semantic conventions).
const (
	attrPodUID        = "k8s.pod.uid"
	attrPodName       = "k8s.pod.name"
	attrNamespace     = "k8s.namespace.name"
	attrContainerName = "k8s.container.name"
	attrRestartCount  = "k8s.container.restart_count"
	attrContainerID   = "container.id"
	attrImageName     = "container.image.name"
	attrImageTags     = "container.image.tags"
	attrRepoDigests   = "container.image.repo_digests"
	attrNodeName      = "k8s.node.name"
	attrPodIP         = "k8s.pod.ip"
	labelPrefix       = "k8s.pod.label."
	annotationPrefix  = "k8s.pod.annotation."
	// The labels the kubelet adds to every sandbox; they are not the pod's labels.
	kubeletLabelPrefix = "io.kubernetes."
)

type attrKind uint8

const (
	kindStr attrKind = iota
	kindInt
	kindStrs
)

type kv struct {
	key  string
	kind attrKind
	str  string
	i    int64
	strs []string
}

// placement is what the records of one container (or, without one, one pod) get:
// the resource attributes, computed once.
type placement struct {
	podUID      string
	containerID string // empty: the pod only
	// The identity the record's own attributes are checked against.
	podName, namespace, containerName string
	attrs                             []kv
}

// sameTarget says whether p and q put records on one resource: the same pod and
// container (nil: unplaced), however each was found.
func sameTarget(p, q *placement) bool {
	if p == nil || q == nil {
		return p == q
	}
	return p.podUID == q.podUID && p.containerID == q.containerID
}

// conflicts says whether the identity attributes the resource already has name
// another pod or container than p: k8s.pod.uid, k8s.pod.name (with
// k8s.namespace.name when both are there), container.id, k8s.container.name. Since
// apply keeps the values already there, the resource would name two pods or two
// containers. (A record's own attributes are not the resource's: they are not
// compared.)
func (p *placement) conflicts(res pcommon.Map) bool {
	differs := func(name, want string) bool {
		v, ok := res.Get(name)
		return ok && want != "" && v.AsString() != want
	}
	if differs(attrPodUID, p.podUID) || differs(attrPodName, p.podName) {
		return true
	}
	if _, ok := res.Get(attrPodName); ok && differs(attrNamespace, p.namespace) {
		return true
	}
	if p.containerID == "" {
		return false
	}
	return differs(attrContainerID, p.containerID) || differs(attrContainerName, p.containerName)
}

// apply sets the attributes the resource does not already have (a value the
// pipeline set before wins).
func (p *placement) apply(m pcommon.Map) {
	m.EnsureCapacity(m.Len() + len(p.attrs))
	for i := range p.attrs {
		a := &p.attrs[i]
		if _, ok := m.Get(a.key); ok {
			continue
		}
		switch a.kind {
		case kindStr:
			m.PutStr(a.key, a.str)
		case kindInt:
			m.PutInt(a.key, a.i)
		case kindStrs:
			s := m.PutEmptySlice(a.key)
			s.EnsureCapacity(len(a.strs))
			for _, v := range a.strs {
				s.AppendEmpty().SetStr(v)
			}
		}
	}
}

// selector says which labels or annotations are copied.
type selector struct {
	all  bool
	keys []string
}

func newSelector(keys []string) selector {
	if len(keys) == 1 && keys[0] == "*" {
		return selector{all: true}
	}
	return selector{keys: keys}
}

func (s selector) add(attrs []kv, prefix string, m map[string]string, skipKubelet bool) []kv {
	if s.all {
		keys := make([]string, 0, len(m))
		for k := range m {
			if skipKubelet && strings.HasPrefix(k, kubeletLabelPrefix) {
				continue
			}
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			attrs = append(attrs, kv{key: prefix + k, str: m[k]})
		}
		return attrs
	}
	for _, k := range s.keys {
		if v, ok := m[k]; ok {
			attrs = append(attrs, kv{key: prefix + k, str: v})
		}
	}
	return attrs
}

// workloadAttrs names the attribute of each controller kind plegd reports.
var workloadAttrs = map[string]string{
	"Deployment":  "k8s.deployment.name",
	"ReplicaSet":  "k8s.replicaset.name",
	"StatefulSet": "k8s.statefulset.name",
	"DaemonSet":   "k8s.daemonset.name",
	"Job":         "k8s.job.name",
	"CronJob":     "k8s.cronjob.name",
}

// newPlacement computes the attributes of a pod's container (c nil: the pod only).
func (r *resolver) newPlacement(pod *plegdv1.PodStatus, c *plegdv1.ContainerInfo) *placement {
	p := &placement{podUID: pod.GetUid(), podName: pod.GetName(), namespace: pod.GetNamespace()}
	attrs := make([]kv, 0, 12)
	str := func(k, v string) {
		if v != "" {
			attrs = append(attrs, kv{key: k, str: v})
		}
	}
	str(attrPodUID, pod.GetUid())
	str(attrPodName, pod.GetName())
	str(attrNamespace, pod.GetNamespace())
	if c != nil {
		p.containerID, p.containerName = c.GetId(), c.GetName()
		str(attrContainerName, c.GetName())
		attrs = append(attrs, kv{key: attrRestartCount, kind: kindInt, i: int64(c.GetAttempt())})
		str(attrContainerID, c.GetId())
		name, tag := splitImage(c.GetImage())
		str(attrImageName, name)
		if tag != "" {
			attrs = append(attrs, kv{key: attrImageTags, kind: kindStrs, strs: []string{tag}})
		}
		if ref := c.GetImageRef(); strings.Contains(ref, "@") {
			attrs = append(attrs, kv{key: attrRepoDigests, kind: kindStrs, strs: []string{ref}})
		}
	}
	id := pod.GetIdentity()
	node := r.node()
	if node == "" {
		node = id.GetNodeName()
	}
	str(attrNodeName, node)
	// The controller and the workload above it (a Deployment's pod: its ReplicaSet
	// and the Deployment), each under its kind's attribute, once.
	for _, w := range []*plegdv1.WorkloadRef{id.GetController(), id.GetWorkload()} {
		if key, ok := workloadAttrs[w.GetKind()]; ok && w.GetName() != "" && !hasKey(attrs, key) {
			str(key, w.GetName())
		}
	}
	if ips := pod.GetIps(); len(ips) > 0 {
		str(attrPodIP, ips[0])
	}
	attrs = r.labels.add(attrs, labelPrefix, pod.GetLabels(), true)
	attrs = r.annotations.add(attrs, annotationPrefix, pod.GetAnnotations(), false)
	p.attrs = attrs
	return p
}

func hasKey(attrs []kv, key string) bool {
	for i := range attrs {
		if attrs[i].key == key {
			return true
		}
	}
	return false
}

// splitImage reads an image reference as the runtime reports it: name and tag
// ("docker.io/library/busybox:latest" → "docker.io/library/busybox", "latest"). A
// reference by digest has no tag; an image id (sha256:…) names no image.
func splitImage(ref string) (name, tag string) {
	if ref == "" || strings.HasPrefix(ref, "sha256:") {
		return "", ""
	}
	if i := strings.Index(ref, "@"); i >= 0 {
		ref = ref[:i]
		if j := strings.LastIndex(ref, ":"); j > strings.LastIndex(ref, "/") {
			return ref[:j], ""
		}
		return ref, ""
	}
	if j := strings.LastIndex(ref, ":"); j > strings.LastIndex(ref, "/") {
		return ref[:j], ref[j+1:]
	}
	return ref, ""
}
