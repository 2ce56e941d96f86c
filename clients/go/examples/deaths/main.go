// Command deaths prints every container death on the node as plegd reports it: the
// pod's namespace and name, the container's name, its exit code and the runtime's
// reason (OOMKilled, Error, Completed, ...).
//
//	go run ./examples/deaths --socket unix:///run/plegd/plegd.sock
//
// Deaths come from plegd's CONTAINER_DIED events. When the informer had to resync
// (plegd reset its stream, or came back with another journal) the deaths in between
// have no event of their own; the resync's update shows them as containers that ran
// before and have exited now, and they are printed marked "(resync)".
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	plegd "github.com/plegd/plegd/clients/go"
	"github.com/plegd/plegd/clients/go/plegdv1"
)

func main() {
	socket := flag.String("socket", plegd.DefaultSocket, "plegd's gRPC socket")
	namespace := flag.String("namespace", "", "only pods in this namespace")
	selector := flag.String("selector", "", "only pods whose labels match this Kubernetes label selector")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))

	conn, err := plegd.Dial(ctx, *socket)
	if err != nil {
		fmt.Fprintln(os.Stderr, "deaths:", err)
		os.Exit(64)
	}
	defer conn.Close()

	inf := plegd.NewInformer(conn, plegd.InformerOptions{
		Filter: &plegdv1.PodFilter{Namespace: *namespace, LabelSelector: *selector},
		Logger: log,
	})
	_, err = inf.AddEventHandler(plegd.EventHandlerFuncs{
		UpdateFunc: func(old, pod *plegdv1.PodStatus, ev *plegdv1.LifecycleEvent) {
			if ev == nil {
				// A resync: the events in between are unknown; compare the states.
				for _, c := range pod.GetContainers() {
					if c.GetState() == plegdv1.ContainerState_CONTAINER_STATE_EXITED && ranBefore(old, c.GetId()) {
						printDeath(pod, c, "(resync)")
					}
				}
				return
			}
			if ev.GetType() != plegdv1.LifecycleEventType_CONTAINER_DIED || ev.GetIsSandbox() {
				return
			}
			for _, c := range pod.GetContainers() {
				if c.GetId() == ev.GetContainerId() {
					printDeath(pod, c, "")
					return
				}
			}
			// The pod no longer lists the container (removed right away): the event
			// still names it.
			fmt.Printf("%s  %s/%s  %s  exit=?  (container %s already gone)\n",
				stamp(ev.GetRuntimeTimestamp().AsTime()), ev.GetPodNamespace(), ev.GetPodName(),
				ev.GetContainerName(), short(ev.GetContainerId()))
		},
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "deaths:", err)
		os.Exit(1)
	}
	if err := inf.Run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "deaths:", err)
		os.Exit(1)
	}
}

// ranBefore reports whether the container was running in old.
func ranBefore(old *plegdv1.PodStatus, id string) bool {
	for _, c := range old.GetContainers() {
		if c.GetId() == id {
			return c.GetState() == plegdv1.ContainerState_CONTAINER_STATE_RUNNING
		}
	}
	return false
}

func printDeath(pod *plegdv1.PodStatus, c *plegdv1.ContainerInfo, note string) {
	reason := c.GetReason()
	if reason == "" {
		reason = "-"
	}
	line := fmt.Sprintf("%s  %s/%s  %s  exit=%d  reason=%s  attempt=%d  %s",
		stamp(c.GetFinishedAt().AsTime()), pod.GetNamespace(), pod.GetName(), c.GetName(),
		c.GetExitCode(), reason, c.GetAttempt(), short(c.GetId()))
	if note != "" {
		line += "  " + note
	}
	fmt.Println(line)
}

func stamp(t time.Time) string {
	if t.Unix() <= 0 {
		t = time.Now()
	}
	return t.Local().Format("15:04:05.000")
}

func short(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}
