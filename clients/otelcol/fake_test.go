package plegdprocessor

// A fake plegd: the PodLifecycle service over a unix socket in a temp dir, with the
// pods, the answers to GetContainer and the Watch stream the tests set.

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/plegd/plegd/clients/go/plegdv1"
)

type fakePlegd struct {
	plegdv1.UnimplementedPodLifecycleServer
	sock string

	mu       sync.Mutex
	epoch    uint64
	rev      uint64
	pods     map[string]*plegdv1.PodStatus
	byKey    map[string]*plegdv1.GetContainerResponse // "c:<id>", "l:<path>", "p:<pid>", "a:<uid>/<name>/<attempt>"
	holders  []holding                                // who held which pod address when
	streams  map[chan *plegdv1.WatchEvent]struct{}
	delay    time.Duration
	rpcs     atomic.Int64
	srv      *grpc.Server
	serveErr chan error
}

func newFakePlegd(t *testing.T) *fakePlegd {
	t.Helper()
	dir, err := os.MkdirTemp("", "plegdproc")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return &fakePlegd{
		sock:    filepath.Join(dir, "plegd.sock"),
		epoch:   7,
		pods:    map[string]*plegdv1.PodStatus{},
		byKey:   map[string]*plegdv1.GetContainerResponse{},
		streams: map[chan *plegdv1.WatchEvent]struct{}{},
	}
}

func (f *fakePlegd) endpoint() string { return "unix://" + f.sock }

// serve starts (or starts again) the server on the socket.
func (f *fakePlegd) serve(t *testing.T) {
	t.Helper()
	_ = os.Remove(f.sock)
	l, err := net.Listen("unix", f.sock)
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer()
	plegdv1.RegisterPodLifecycleServer(s, f)
	f.mu.Lock()
	f.srv = s
	f.mu.Unlock()
	go func() { _ = s.Serve(l) }()
	t.Cleanup(s.Stop)
}

// down stops the server and removes its socket: plegd is away.
func (f *fakePlegd) down() {
	f.mu.Lock()
	s := f.srv
	f.srv = nil
	f.mu.Unlock()
	if s != nil {
		s.Stop()
	}
	_ = os.Remove(f.sock)
}

// addPod puts a pod in the node's state (and tells the watchers); its containers get
// GetContainer answers by id, log path and pid.
func (f *fakePlegd) addPod(p *plegdv1.PodStatus) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.pods[p.Uid] = p
	for _, c := range p.Containers {
		f.indexLocked(p, c, false)
	}
	f.rev++
	ev := &plegdv1.WatchEvent{Revision: f.rev, Kind: &plegdv1.WatchEvent_Event{Event: &plegdv1.LifecycleEvent{
		PodUid: p.Uid, PodNamespace: p.Namespace, PodName: p.Name, Type: plegdv1.LifecycleEventType_POD_SYNC, Pod: p,
	}}}
	for ch := range f.streams {
		ch <- ev
	}
}

// removePod removes a pod from the node: the watchers see it go, GetContainer still
// answers for its containers (removed, as plegd's tombstones).
func (f *fakePlegd) removePod(uid string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	p := f.pods[uid]
	delete(f.pods, uid)
	for _, c := range p.GetContainers() {
		f.indexLocked(p, c, true)
	}
	f.rev++
	ev := &plegdv1.WatchEvent{Revision: f.rev, Kind: &plegdv1.WatchEvent_Event{Event: &plegdv1.LifecycleEvent{
		PodUid: uid, Type: plegdv1.LifecycleEventType_CONTAINER_REMOVED,
	}}}
	for ch := range f.streams {
		ch <- ev
	}
}

// tombstone makes GetContainer answer for a container the watchers never saw.
func (f *fakePlegd) tombstone(p *plegdv1.PodStatus, c *plegdv1.ContainerInfo) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.indexLocked(p, c, true)
}

func (f *fakePlegd) indexLocked(p *plegdv1.PodStatus, c *plegdv1.ContainerInfo, removed bool) {
	r := &plegdv1.GetContainerResponse{Pod: p, Container: c, Removed: removed}
	f.byKey["c:"+c.Id] = r
	if c.LogPath != "" {
		f.byKey["l:"+c.LogPath] = r
	}
	if c.Pid != 0 {
		f.byKey["p:"+itoa(int64(c.Pid))] = r
	}
	f.byKey["a:"+p.Uid+"/"+c.Name+"/"+itoa(int64(c.Attempt))] = r
}

func (f *fakePlegd) GetContainer(ctx context.Context, req *plegdv1.GetContainerRequest) (*plegdv1.GetContainerResponse, error) {
	f.rpcs.Add(1)
	f.mu.Lock()
	d := f.delay
	f.mu.Unlock()
	if d > 0 {
		select {
		case <-time.After(d):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	var key string
	switch k := req.Key.(type) {
	case *plegdv1.GetContainerRequest_ContainerId:
		key = "c:" + k.ContainerId
	case *plegdv1.GetContainerRequest_LogPath:
		if len(k.LogPath) == 0 || k.LogPath[0] != '/' {
			return nil, status.Error(codes.InvalidArgument, "log_path: not an absolute path")
		}
		key = "l:" + k.LogPath
	case *plegdv1.GetContainerRequest_Pid:
		key = "p:" + itoa(int64(k.Pid))
	case *plegdv1.GetContainerRequest_Container:
		key = "a:" + k.Container.PodUid + "/" + k.Container.ContainerName + "/" + itoa(int64(k.Container.Attempt))
	case *plegdv1.GetContainerRequest_PodIp:
		at := time.Now()
		if req.At != nil {
			at = req.At.AsTime()
		}
		f.mu.Lock()
		defer f.mu.Unlock()
		for _, h := range f.holders {
			if h.ip == k.PodIp && !at.Before(h.from) && (h.until.IsZero() || at.Before(h.until)) {
				return &plegdv1.GetContainerResponse{Pod: h.pod, Container: h.pod.GetContainers()[0]}, nil
			}
		}
		return nil, status.Errorf(codes.NotFound, "no pod held %s at %s", k.PodIp, at)
	default:
		return nil, status.Error(codes.InvalidArgument, "key: unsupported by the fake")
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if r, ok := f.byKey[key]; ok {
		return proto.Clone(r).(*plegdv1.GetContainerResponse), nil
	}
	return nil, status.Errorf(codes.NotFound, "no container for %s", key)
}

// holding: pod held address ip from from until until (zero: still).
type holding struct {
	ip          string
	pod         *plegdv1.PodStatus
	from, until time.Time
}

func (f *fakePlegd) hold(ip string, pod *plegdv1.PodStatus, from, until time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.holders = append(f.holders, holding{ip: ip, pod: pod, from: from, until: until})
}

// GetPodStatus answers as plegd does without min_timestamp: the pod, or not_found.
func (f *fakePlegd) GetPodStatus(ctx context.Context, req *plegdv1.GetPodStatusRequest) (*plegdv1.GetPodStatusResponse, error) {
	f.rpcs.Add(1)
	f.mu.Lock()
	defer f.mu.Unlock()
	if p, ok := f.pods[req.PodUid]; ok {
		return &plegdv1.GetPodStatusResponse{Pod: proto.Clone(p).(*plegdv1.PodStatus)}, nil
	}
	return &plegdv1.GetPodStatusResponse{NotFound: true}, nil
}

func (f *fakePlegd) Watch(req *plegdv1.WatchRequest, stream grpc.ServerStreamingServer[plegdv1.WatchEvent]) error {
	ch := make(chan *plegdv1.WatchEvent, 1024)
	f.mu.Lock()
	var first []*plegdv1.WatchEvent
	if req.SinceRevision != 0 && req.Epoch == f.epoch && req.SinceRevision == f.rev {
		first = append(first, &plegdv1.WatchEvent{Revision: f.rev, Kind: &plegdv1.WatchEvent_Start{Start: &plegdv1.StreamStart{Epoch: f.epoch, Resumed: true}}})
	} else {
		first = append(first, &plegdv1.WatchEvent{Revision: 0, Kind: &plegdv1.WatchEvent_Start{Start: &plegdv1.StreamStart{Epoch: f.epoch}}})
		for _, p := range f.pods {
			first = append(first, &plegdv1.WatchEvent{Revision: f.rev, Kind: &plegdv1.WatchEvent_Snapshot{Snapshot: p}})
		}
		first = append(first, &plegdv1.WatchEvent{Revision: f.rev, Kind: &plegdv1.WatchEvent_Synced{Synced: &plegdv1.Synced{Epoch: f.epoch, Pods: uint32(len(f.pods)), NodeName: "plegds-node"}}})
	}
	f.streams[ch] = struct{}{}
	f.mu.Unlock()
	defer func() {
		f.mu.Lock()
		delete(f.streams, ch)
		f.mu.Unlock()
	}()
	for _, m := range first {
		if err := stream.Send(m); err != nil {
			return err
		}
	}
	for {
		select {
		case m := <-ch:
			if err := stream.Send(m); err != nil {
				return err
			}
		case <-stream.Context().Done():
			return nil
		}
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
