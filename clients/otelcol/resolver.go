package plegdprocessor

import (
	"context"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	plegd "github.com/plegd/plegd/clients/go"
	"github.com/plegd/plegd/clients/go/plegdv1"
)

// reason says why a record could not be placed (the `reason` of the unplaced metric).
type reason uint8

const (
	placed reason = iota
	reasonNoKey
	reasonNotFound
	reasonInvalidKey
	reasonUnavailable
	// The record's own identity attributes (k8s.pod.uid, k8s.pod.name with
	// k8s.namespace.name, container.id, k8s.container.name) name another pod or
	// container than the one its key found.
	reasonConflict
	// Metrics only: the data point was found, but the points of its resource belong
	// to several containers (or some to none), and metrics are not split.
	reasonMixed
	numReasons
)

func (r reason) String() string {
	switch r {
	case placed:
		return "placed"
	case reasonNoKey:
		return "no_key"
	case reasonNotFound:
		return "not_found"
	case reasonInvalidKey:
		return "invalid_key"
	case reasonUnavailable:
		return "unavailable"
	case reasonConflict:
		return "conflict"
	case reasonMixed:
		return "mixed"
	default:
		return "unknown"
	}
}

// answer is a lookup's result: a placement, or why there is none.
type answer struct {
	p   *placement
	why reason
}

// How long GetContainer answers are kept. A container id names one container for
// good, so its answer is kept long. A log file's path names one container too — but a
// static pod deleted and created again from the same manifest keeps its uid and name,
// and its new container writes the same file: such an answer is asked again when the
// informer's copy has changed since. A PID is reused by the kernel, so its answer is
// kept briefly and only while the copy has not changed.
const (
	foundTTL       = 10 * time.Minute
	pidFoundTTL    = 2 * time.Second
	unavailableTTL = 500 * time.Millisecond
	invalidTTL     = time.Minute
	// maxInFlight bounds the GetContainer calls in flight at once, across batches and
	// pipelines; a lookup that would start one more is answered unavailable.
	maxInFlight = 64
	// maxLastPods bounds the pods remembered after they left the informer's copy.
	maxLastPods = 2048
)

// generation names a state of the informer's copy: plegd's journal (epoch) and the
// revision the copy is current up to. The copy advances it under its own lock, with
// every change it applies (and with bookmarks), so a lookup made after the copy saw a
// change sees a new generation, whether or not the handlers have run yet.
type generation struct{ epoch, rev uint64 }

type cached struct {
	a   answer
	gen generation // the generation the answer was asked at
}

// cachePolicy says how long a found answer of one kind of key is kept and whether it
// still holds once the informer's copy has changed.
type cachePolicy struct {
	ttl time.Duration
	// revalidate: after a change of the copy, plegd is asked again.
	revalidate bool
	// keepStale: if plegd does not answer that question in time, the old answer is
	// used (a log file's container rarely changes; a PID's often does).
	keepStale bool
}

var (
	idPolicy      = cachePolicy{ttl: foundTTL}
	pathPolicy    = cachePolicy{ttl: foundTTL, revalidate: true, keepStale: true}
	attemptPolicy = cachePolicy{ttl: foundTTL, revalidate: true, keepStale: true}
	pidPolicy     = cachePolicy{ttl: pidFoundTTL, revalidate: true}
)

// informerMemo is a placement computed from a pod object of the informer's copy (or
// one that left it), valid while the lookup finds the same pod object.
type informerMemo struct {
	pod *plegdv1.PodStatus
	p   *placement
}

// call is a GetContainer in flight, shared by every caller of the same key.
type call struct {
	done chan struct{}
	a    answer
}

// resolver finds the pod and container of a key: from the informer's copy when it
// can, by GetContainer (cached) otherwise. One per processor configuration, shared by
// its logs, metrics and traces pipelines.
type resolver struct {
	cfg         *Config
	log         *zap.Logger
	tel         *telemetry
	nodeName    string
	labels      selector
	annotations selector

	conn   *grpc.ClientConn
	client plegdv1.PodLifecycleClient
	inf    *plegd.Informer

	cache *lruCache[cached]
	memo  *lruCache[informerMemo]
	// lastPods remembers the pods the lookups found in the copy and those the copy
	// deleted (uid → last status), for records that arrive after their pod left it.
	lastPods *lruCache[*plegdv1.PodStatus]

	flightMu sync.Mutex
	flight   map[string]*call
	sem      chan struct{}

	cancel context.CancelFunc
	done   chan struct{}
	now    func() time.Time
}

func newResolver(cfg *Config, log *zap.Logger, tel *telemetry) *resolver {
	node := cfg.NodeName
	for _, env := range []string{"K8S_NODE_NAME", "NODE_NAME"} {
		if node == "" {
			node = os.Getenv(env)
		}
	}
	if node == "" {
		// Not the host name: it is the collector pod's name unless it runs on the
		// host's network. plegd names its node in each snapshot; that is used instead.
		log.Info("k8s.node.name comes from plegd: neither node_name nor $K8S_NODE_NAME or $NODE_NAME is set",
			zap.String("endpoint", cfg.Endpoint))
	}
	r := &resolver{
		cfg:         cfg,
		log:         log,
		tel:         tel,
		nodeName:    node,
		labels:      newSelector(cfg.Labels),
		annotations: newSelector(cfg.Annotations),
		flight:      map[string]*call{},
		sem:         make(chan struct{}, maxInFlight),
		now:         time.Now,
	}
	r.cache = newLRU[cached](cfg.CacheSize, func() time.Time { return r.now() })
	r.memo = newLRU[informerMemo](cfg.CacheSize, func() time.Time { return r.now() })
	r.lastPods = newLRU[*plegdv1.PodStatus](min(cfg.CacheSize, maxLastPods), func() time.Time { return r.now() })
	return r
}

// start dials plegd, runs the informer and waits for its first snapshot at most
// wait_for_sync. plegd being away is not an error: the informer connects when it can.
// A failed start leaves the resolver as it was, to be started again.
func (r *resolver) start(ctx context.Context) error {
	conn, err := plegd.Dial(ctx, r.cfg.Endpoint)
	if err != nil {
		return err
	}
	inf := plegd.NewInformer(conn, plegd.InformerOptions{Logger: zapSlog(r.log)})
	reg, err := inf.AddEventHandler(plegd.EventHandlerFuncs{
		DeleteFunc: func(pod *plegdv1.PodStatus, _ bool) {
			if uid := pod.GetUid(); uid != "" {
				r.lastPods.put(uid, pod, foundTTL)
			}
		},
	})
	if err != nil {
		_ = conn.Close()
		return err
	}
	r.conn, r.client, r.inf = conn, plegdv1.NewPodLifecycleClient(conn), inf
	runCtx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	r.done = make(chan struct{})
	go func() {
		defer close(r.done)
		if err := inf.Run(runCtx); err != nil {
			r.log.Error("plegd informer stopped", zap.Error(err))
		}
	}()
	if r.cfg.WaitForSync > 0 {
		wctx, wcancel := context.WithTimeout(ctx, r.cfg.WaitForSync)
		ok := plegd.WaitForCacheSync(wctx, reg.HasSynced)
		wcancel()
		if !ok {
			r.log.Warn("plegd's pods not synced within wait_for_sync; records pass unchanged until plegd answers",
				zap.String("endpoint", r.cfg.Endpoint), zap.Duration("wait_for_sync", r.cfg.WaitForSync))
		}
	}
	return nil
}

func (r *resolver) shutdown() {
	if r.cancel != nil {
		r.cancel()
		<-r.done
	}
	if r.conn != nil {
		_ = r.conn.Close()
	}
}

// away says whether plegd cannot be relied on now to say a pod does not exist: the
// informer has no copy yet, its stream is not live (broken, or taking a snapshot), or
// the connection is not ready.
func (r *resolver) away() bool {
	if r.inf == nil || !r.inf.Live() {
		return true
	}
	return r.conn.GetState() != connectivity.Ready
}

func (r *resolver) generation() generation {
	if r.inf == nil {
		return generation{}
	}
	e, rev := r.inf.Revision()
	return generation{e, rev}
}

// byContainerID: the informer's copy, then GetContainer (a container removed before
// the copy saw it, or no longer in it).
func (r *resolver) byContainerID(ctx context.Context, id string) answer {
	if a, ok := r.fromInformer(id); ok {
		return a
	}
	return r.rpc(ctx, "c:"+id, &plegdv1.GetContainerRequest{Key: &plegdv1.GetContainerRequest_ContainerId{ContainerId: id}}, idPolicy)
}

func (r *resolver) fromInformer(id string) (answer, bool) {
	if r.inf == nil {
		return answer{}, false
	}
	pod, ok := r.inf.GetByContainerID(id)
	if !ok || pod.GetUid() == "" {
		return answer{}, false
	}
	if m, ok := r.memo.get("c:" + id); ok && m.pod == pod {
		return answer{p: m.p}, true
	}
	var c *plegdv1.ContainerInfo
	for _, ci := range pod.GetContainers() {
		if ci.GetId() == id {
			c = ci
			break
		}
	}
	// A sandbox's id places the record in its pod.
	p := r.newPlacement(pod, c)
	r.memo.put("c:"+id, informerMemo{pod: pod, p: p}, foundTTL)
	return answer{p: p}, true
}

// placementOf is the memoised placement of a pod object's container (c nil: the pod).
func (r *resolver) placementOf(pod *plegdv1.PodStatus, c *plegdv1.ContainerInfo) *placement {
	key := "u:" + pod.GetUid()
	if c != nil {
		key = "c:" + c.GetId()
	}
	if m, ok := r.memo.get(key); ok && m.pod == pod {
		return m.p
	}
	p := r.newPlacement(pod, c)
	r.memo.put(key, informerMemo{pod: pod, p: p}, foundTTL)
	return p
}

// byPodUID: the pod from the informer's copy — or, once it has left the copy, as the
// copy last held it — and its container when the record names it
// (k8s.container.name, and k8s.container.restart_count for the attempt: the newest
// attempt otherwise); by GetContainer for an attempt the pod no longer lists.
func (r *resolver) byPodUID(ctx context.Context, uid, container string, attempt int64) answer {
	var pod *plegdv1.PodStatus
	if r.inf != nil {
		if p, ok := r.inf.Get(uid); ok {
			pod = p
			if last, ok := r.lastPods.get(uid); !ok || last != p {
				r.lastPods.put(uid, p, foundTTL)
			}
		} else if p, ok := r.lastPods.get(uid); ok {
			pod = p
		}
	}
	if pod != nil {
		if container != "" {
			for _, ci := range pod.GetContainers() { // newest first
				if ci.GetName() == container && ci.GetId() != "" && (attempt < 0 || int64(ci.GetAttempt()) == attempt) {
					return answer{p: r.placementOf(pod, ci)}
				}
			}
			if attempt >= 0 {
				// An attempt the pod no longer lists.
				if a := r.byAttempt(ctx, uid, container, attempt); a.p != nil {
					return a
				}
			}
		}
		return answer{p: r.placementOf(pod, nil)}
	}
	if container != "" && attempt >= 0 {
		return r.byAttempt(ctx, uid, container, attempt)
	}
	if r.away() {
		return answer{why: reasonUnavailable}
	}
	// Not in the copy: plegd says whether it knows the pod (a pod the copy has not
	// caught up with yet is placed; a plegd that went away since says nothing).
	return r.rpc(ctx, "u:"+uid, &plegdv1.GetPodStatusRequest{PodUid: uid}, attemptPolicy)
}

func (r *resolver) byAttempt(ctx context.Context, uid, container string, attempt int64) answer {
	if attempt > 1<<32-1 {
		return answer{why: reasonInvalidKey}
	}
	return r.rpc(ctx, "a:"+uid+"/"+container+"/"+strconv.FormatInt(attempt, 10), &plegdv1.GetContainerRequest{
		Key: &plegdv1.GetContainerRequest_Container{Container: &plegdv1.ContainerRef{PodUid: uid, ContainerName: container, Attempt: uint32(attempt)}},
	}, attemptPolicy)
}

// byLogPath: the informer's copy (the container whose log_path is that file, or the
// container a /var/log/containers link names), then GetContainer.
func (r *resolver) byLogPath(ctx context.Context, path string) answer {
	if lf, ok := parseLogFile(path); ok {
		if a, ok := r.logFromInformer(lf); ok {
			return a
		}
	}
	return r.rpc(ctx, "l:"+path, &plegdv1.GetContainerRequest{Key: &plegdv1.GetContainerRequest_LogPath{LogPath: path}}, pathPolicy)
}

func (r *resolver) logFromInformer(lf logFile) (answer, bool) {
	if r.inf == nil {
		return answer{}, false
	}
	if lf.linkID != "" {
		pod, ok := r.inf.GetByContainerID(lf.linkID)
		if !ok || pod.GetName() != lf.linkPod || pod.GetNamespace() != lf.linkNamespace {
			return answer{}, false
		}
		for _, c := range pod.GetContainers() {
			if c.GetId() == lf.linkID && c.GetName() == lf.linkContainer {
				return r.fromInformer(lf.linkID)
			}
		}
		return answer{}, false
	}
	pod, ok := r.inf.Get(lf.uid)
	if !ok {
		return answer{}, false
	}
	for _, c := range pod.GetContainers() { // newest first
		if c.GetId() != "" && sameLogFile(c.GetLogPath(), lf.key) {
			return r.fromInformer(c.GetId())
		}
	}
	return answer{}, false
}

// byPodIP: the pod that held address ip at millisecond ms since the epoch (0: now), by
// GetContainer — an address is reused within seconds, so the informer's current copy
// cannot say. The placement is the pod's: an address is no one container's. Who held
// it at a past moment does not change, and is kept; who holds it now is asked again
// as a PID is (the next holder may take it any moment).
func (r *resolver) byPodIP(ctx context.Context, ip string, ms int64) answer {
	addr := net.ParseIP(strings.TrimSpace(ip))
	if addr == nil {
		return answer{why: reasonInvalidKey}
	}
	req := &plegdv1.GetContainerRequest{Key: &plegdv1.GetContainerRequest_PodIp{PodIp: addr.String()}}
	pol := pidPolicy
	if ms > 0 {
		req.At = timestamppb.New(time.UnixMilli(ms))
		pol = idPolicy
	}
	return r.rpc(ctx, "i:"+addr.String()+"@"+strconv.FormatInt(ms, 10), req, pol)
}

func (r *resolver) byPID(ctx context.Context, pid int64) answer {
	q, ok := pidReq(pid)
	if !ok {
		return answer{why: reasonInvalidKey}
	}
	return r.rpc(ctx, q.key, q.req, q.pol)
}

// rpc answers a key by GetContainer: from the cache, by joining a call in flight for
// the same key, or by a new call. It waits for the answer until ctx ends (the
// batch's lookup_timeout); the call goes on and its answer is cached for the next
// batch. No call is started once ctx has ended, nor beyond maxInFlight: a lookup waits
// for a place until ctx ends.
func (r *resolver) rpc(ctx context.Context, key string, req proto.Message, pol cachePolicy) answer {
	var stale *answer
	if c, ok := r.cache.get(key); ok {
		switch {
		case r.answers(c, pol):
			r.tel.lookup(ctx, sourceCache, c.a.why)
			return c.a
		case c.a.p != nil && pol.keepStale:
			stale = &c.a
		}
	}
	unavailable := func() answer {
		if stale != nil {
			return *stale
		}
		return answer{why: reasonUnavailable}
	}
	if r.client == nil || ctx.Err() != nil {
		return unavailable()
	}
	r.flightMu.Lock()
	cl, ok := r.flight[key]
	r.flightMu.Unlock()
	if !ok {
		// A place among the calls in flight, within the batch's time: the batch's
		// other keys' calls (started ahead by prefetch) free places as they end.
		select {
		case r.sem <- struct{}{}:
		case <-ctx.Done():
			r.tel.lookup(ctx, sourceLimit, reasonUnavailable)
			return unavailable()
		}
		r.flightMu.Lock()
		if cl, ok = r.flight[key]; ok {
			<-r.sem // another caller started it meanwhile
		} else {
			cl = &call{done: make(chan struct{})}
			r.flight[key] = cl
			go r.call(key, req, pol, cl)
		}
		r.flightMu.Unlock()
	}
	select {
	case <-cl.done:
		if cl.a.why == reasonUnavailable {
			return unavailable()
		}
		return cl.a
	case <-ctx.Done():
		return unavailable()
	}
}

// answers says whether a cached answer stands for a key of policy pol.
func (r *resolver) answers(c cached, pol cachePolicy) bool {
	fresh := c.gen == r.generation()
	// A negative answer lasts until the informer's copy changes: a container plegd had
	// not seen may be there now.
	return c.a.p != nil && (fresh || !pol.revalidate) || c.a.p == nil && (fresh || c.a.why == reasonInvalidKey)
}

// lookupReq is one key a batch will ask plegd about.
type lookupReq struct {
	key string
	req proto.Message
	pol cachePolicy
}

// prefetch starts the GetContainer call of every key in reqs that the cache does not
// answer and no call is in flight for, as many at once as three quarters of
// maxInFlight allow (waiting for a place, not skipping; the last quarter stays for
// other batches), until ctx ends. It does not wait for the answers: the
// batch's rpc calls join them. A batch of 1,200 process resources waited for one call
// after another within its lookup_timeout, and the same tail went unplaced every time.
func (r *resolver) prefetch(ctx context.Context, reqs []lookupReq) {
	if r.client == nil || len(reqs) == 0 {
		return
	}
	go func() {
		for _, q := range reqs {
			if c, ok := r.cache.get(q.key); ok && r.answers(c, q.pol) {
				continue
			}
			// A quarter of the places stay for other batches and pipelines.
			for len(r.sem) >= maxInFlight*3/4 {
				select {
				case <-ctx.Done():
					return
				case <-time.After(2 * time.Millisecond):
				}
			}
			select {
			case r.sem <- struct{}{}:
			case <-ctx.Done():
				return
			}
			r.flightMu.Lock()
			if _, ok := r.flight[q.key]; ok {
				r.flightMu.Unlock()
				<-r.sem
				continue
			}
			cl := &call{done: make(chan struct{})}
			r.flight[q.key] = cl
			r.flightMu.Unlock()
			go r.call(q.key, q.req, q.pol, cl)
		}
	}()
}

// pidReq is the GetContainer request of a host PID, or false for one that is no PID.
func pidReq(pid int64) (lookupReq, bool) {
	if pid <= 0 || pid > 1<<32-1 {
		return lookupReq{}, false
	}
	return lookupReq{
		key: "p:" + strconv.FormatInt(pid, 10),
		req: &plegdv1.GetContainerRequest{Key: &plegdv1.GetContainerRequest_Pid{Pid: uint32(pid)}},
		pol: pidPolicy,
	}, true
}

func (r *resolver) call(key string, req proto.Message, pol cachePolicy, cl *call) {
	defer func() { <-r.sem }()
	gen := r.generation()
	ctx, cancel := context.WithTimeout(context.Background(), r.cfg.LookupTimeout)
	start := time.Now()
	var (
		pod *plegdv1.PodStatus
		c   *plegdv1.ContainerInfo
		err error
	)
	switch req := req.(type) {
	case *plegdv1.GetContainerRequest:
		var resp *plegdv1.GetContainerResponse
		if resp, err = r.client.GetContainer(ctx, req); err == nil {
			pod, c = resp.GetPod(), resp.GetContainer()
			if c.GetId() == "" {
				pod = nil // plegd answers with a container and its pod, or not at all
			}
			if _, byIP := req.GetKey().(*plegdv1.GetContainerRequest_PodIp); byIP {
				c = nil // an address is the pod's
			}
		}
	case *plegdv1.GetPodStatusRequest:
		var resp *plegdv1.GetPodStatusResponse
		if resp, err = r.client.GetPodStatus(ctx, req); err == nil && !resp.GetNotFound() && resp.GetPod().GetUid() == req.GetPodUid() {
			pod = resp.GetPod()
		}
	}
	cancel()
	var a answer
	switch status.Code(err) {
	case codes.OK:
		// An answer without an identity places nothing.
		if pod.GetUid() == "" {
			a.why = reasonNotFound
		} else {
			a.p = r.newPlacement(pod, c)
		}
	case codes.NotFound:
		a.why = reasonNotFound
	case codes.InvalidArgument:
		a.why = reasonInvalidKey
		r.log.Debug("plegd refused a key", zap.String("key", key), zap.Error(err))
	default:
		a.why = reasonUnavailable
		r.log.Debug("GetContainer failed", zap.String("key", key), zap.Error(err))
	}
	r.tel.rpcDone(time.Since(start), a.why)
	switch {
	case a.p != nil:
		r.cache.put(key, cached{a: a, gen: gen}, pol.ttl)
	case a.why == reasonInvalidKey:
		r.cache.put(key, cached{a: a, gen: gen}, invalidTTL)
	case a.why == reasonNotFound:
		r.cache.put(key, cached{a: a, gen: gen}, r.cfg.NegativeCacheTTL)
	default:
		if c, ok := r.cache.get(key); ok && c.a.p != nil && pol.keepStale {
			// plegd did not answer whether a found answer still holds: it stands until
			// the copy changes again (plegd back, or another change).
			r.cache.put(key, cached{a: c.a, gen: gen}, pol.ttl)
		} else {
			r.cache.put(key, cached{a: a, gen: gen}, unavailableTTL)
		}
	}
	cl.a = a
	r.flightMu.Lock()
	delete(r.flight, key)
	r.flightMu.Unlock()
	close(cl.done)
}

// node is k8s.node.name: the configured name, else the one plegd's last snapshot said.
func (r *resolver) node() string {
	if r.nodeName != "" || r.inf == nil {
		return r.nodeName
	}
	return r.inf.NodeName()
}
