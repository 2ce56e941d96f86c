// Command cri drives a CRI runtime the way the kubelet does, for tests/otelcol/run.sh:
// pod sandboxes with a kubelet-style log directory, containers whose stdout the
// runtime writes to <log dir>/<container>/<attempt>.log, and pod deletion
// (StopPodSandbox + RemovePodSandbox). Each container it starts is appended to the
// expectations file (JSON lines) that the checker reads.
//
//	cri -endpoint unix:///… -expect FILE pod NS NAME UID LOGROOT LABELS ANNOTATIONS   → sandbox id
//	cri -endpoint … -expect FILE run SANDBOX NS NAME UID LOGROOT CONTAINER ATTEMPT LINES SCRIPT → container id
//	cri -endpoint … wait-exit CONTAINER_ID
//	cri -endpoint … rmpod SANDBOX
//	cri -endpoint … listed CONTAINER_ID   (exit 0 while ListContainers still has it)
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	cri "k8s.io/cri-api/pkg/apis/runtime/v1"
)

const image = "docker.io/library/busybox:latest"

func die(f string, a ...any) {
	fmt.Fprintf(os.Stderr, "cri: "+f+"\n", a...)
	os.Exit(1)
}

func kv(s string) map[string]string {
	m := map[string]string{}
	for _, p := range strings.Split(s, ",") {
		if k, v, ok := strings.Cut(p, "="); ok {
			m[k] = v
		}
	}
	return m
}

// sandboxConfig: host network (the test containerd has no CNI), as the e2e suites run pods.
func sandboxConfig(ns, name, uid, logRoot, labels, annotations string) *cri.PodSandboxConfig {
	l := kv(labels)
	l["io.kubernetes.pod.name"], l["io.kubernetes.pod.namespace"], l["io.kubernetes.pod.uid"] = name, ns, uid
	return &cri.PodSandboxConfig{
		Metadata:     &cri.PodSandboxMetadata{Name: name, Namespace: ns, Uid: uid},
		LogDirectory: filepath.Join(logRoot, ns+"_"+name+"_"+uid),
		Labels:       l,
		Annotations:  kv(annotations),
		Linux: &cri.LinuxPodSandboxConfig{SecurityContext: &cri.LinuxSandboxSecurityContext{
			NamespaceOptions: &cri.NamespaceOption{Network: cri.NamespaceMode_NODE, Pid: cri.NamespaceMode_CONTAINER, Ipc: cri.NamespaceMode_POD},
		}},
	}
}

func main() {
	args := os.Args[1:]
	endpoint, expect := "", ""
	for len(args) >= 2 && strings.HasPrefix(args[0], "-") {
		switch args[0] {
		case "-endpoint":
			endpoint = args[1]
		case "-expect":
			expect = args[1]
		default:
			die("unknown flag %s", args[0])
		}
		args = args[2:]
	}
	if endpoint == "" || len(args) == 0 {
		die("usage: cri -endpoint unix:///… [-expect FILE] pod|run|wait-exit|rmpod …")
	}
	conn, err := grpc.NewClient(endpoint, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		die("%v", err)
	}
	defer conn.Close()
	rt := cri.NewRuntimeServiceClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	switch cmd := args[0]; cmd {
	case "pod":
		if len(args) != 7 {
			die("pod NS NAME UID LOGROOT LABELS ANNOTATIONS")
		}
		cfg := sandboxConfig(args[1], args[2], args[3], args[4], args[5], args[6])
		if err := os.MkdirAll(cfg.LogDirectory, 0o755); err != nil {
			die("%v", err)
		}
		r, err := rt.RunPodSandbox(ctx, &cri.RunPodSandboxRequest{Config: cfg})
		if err != nil {
			die("RunPodSandbox %s: %v", args[2], err)
		}
		fmt.Println(r.PodSandboxId)
	case "run":
		if len(args) != 10 {
			die("run SANDBOX NS NAME UID LOGROOT CONTAINER ATTEMPT LINES SCRIPT")
		}
		sid, ns, name, uid, logRoot, cname := args[1], args[2], args[3], args[4], args[5], args[6]
		attempt, _ := strconv.Atoi(args[7])
		lines, _ := strconv.Atoi(args[8])
		script := args[9]
		sc := sandboxConfig(ns, name, uid, logRoot, "", "")
		if err := os.MkdirAll(filepath.Join(sc.LogDirectory, cname), 0o755); err != nil {
			die("%v", err)
		}
		cc, err := rt.CreateContainer(ctx, &cri.CreateContainerRequest{
			PodSandboxId: sid,
			Config: &cri.ContainerConfig{
				Metadata: &cri.ContainerMetadata{Name: cname, Attempt: uint32(attempt)},
				Image:    &cri.ImageSpec{Image: image},
				Command:  []string{"sh", "-c", script},
				Labels: map[string]string{
					"io.kubernetes.pod.name": name, "io.kubernetes.pod.namespace": ns,
					"io.kubernetes.pod.uid": uid, "io.kubernetes.container.name": cname,
				},
				LogPath: fmt.Sprintf("%s/%d.log", cname, attempt),
			},
			SandboxConfig: sc,
		})
		if err != nil {
			die("CreateContainer %s/%s#%d: %v", name, cname, attempt, err)
		}
		if _, err := rt.StartContainer(ctx, &cri.StartContainerRequest{ContainerId: cc.ContainerId}); err != nil {
			die("StartContainer %s: %v", cc.ContainerId, err)
		}
		if expect != "" {
			f, err := os.OpenFile(expect, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
			if err != nil {
				die("%v", err)
			}
			b, _ := json.Marshal(map[string]any{
				"namespace": ns, "pod": name, "uid": uid, "container": cname, "attempt": attempt,
				"id": cc.ContainerId, "lines": lines,
				"log_path": filepath.Join(sc.LogDirectory, cname, fmt.Sprintf("%d.log", attempt)),
			})
			fmt.Fprintln(f, string(b))
			f.Close()
		}
		fmt.Println(cc.ContainerId)
	case "wait-exit":
		for {
			s, err := rt.ContainerStatus(ctx, &cri.ContainerStatusRequest{ContainerId: args[1]})
			if err != nil {
				die("ContainerStatus %s: %v", args[1], err)
			}
			if s.Status.State == cri.ContainerState_CONTAINER_EXITED {
				fmt.Println(s.Status.ExitCode)
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
	case "listed":
		// exit 0 if the runtime's CRI still lists the container (any state), 1 if not
		r, err := rt.ListContainers(ctx, &cri.ListContainersRequest{})
		if err != nil {
			die("ListContainers: %v", err)
		}
		for _, c := range r.Containers {
			if strings.HasPrefix(c.Id, args[1]) {
				return
			}
		}
		os.Exit(1)
	case "rmpod":
		if _, err := rt.StopPodSandbox(ctx, &cri.StopPodSandboxRequest{PodSandboxId: args[1]}); err != nil {
			die("StopPodSandbox: %v", err)
		}
		if _, err := rt.RemovePodSandbox(ctx, &cri.RemovePodSandboxRequest{PodSandboxId: args[1]}); err != nil {
			die("RemovePodSandbox: %v", err)
		}
	default:
		die("unknown command %s", cmd)
	}
}
