// Command nri-reference is NRI's own Go plugin stub (github.com/containerd/nri/pkg/stub)
// as a pure observer: subscribed to the events plegd subscribes to, answering each call
// at once and doing nothing else. tests/e2e_nri.rs registers it as one of its ways, so
// what any NRI plugin costs the runtime stands beside what plegd costs it.
//
// It prints "synchronized" once the runtime has synchronized it (from then on the
// runtime calls it), and exits when the runtime closes the connection.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"

	"github.com/containerd/nri/pkg/api"
	"github.com/containerd/nri/pkg/stub"
)

type observer struct{}

func (observer) Synchronize(context.Context, []*api.PodSandbox, []*api.Container) ([]*api.ContainerUpdate, error) {
	fmt.Println("synchronized")
	return nil, nil
}

func (observer) RunPodSandbox(context.Context, *api.PodSandbox) error    { return nil }
func (observer) StopPodSandbox(context.Context, *api.PodSandbox) error   { return nil }
func (observer) RemovePodSandbox(context.Context, *api.PodSandbox) error { return nil }

func (observer) PostCreateContainer(context.Context, *api.PodSandbox, *api.Container) error {
	return nil
}

func (observer) PostStartContainer(context.Context, *api.PodSandbox, *api.Container) error {
	return nil
}

func (observer) StopContainer(context.Context, *api.PodSandbox, *api.Container) ([]*api.ContainerUpdate, error) {
	return nil, nil
}

func (observer) RemoveContainer(context.Context, *api.PodSandbox, *api.Container) error {
	return nil
}

func main() {
	socket := flag.String("socket", "/var/run/nri/nri.sock", "the runtime's NRI socket")
	flag.Parse()
	s, err := stub.New(observer{}, stub.WithSocketPath(*socket), stub.WithPluginName("reference"), stub.WithPluginIdx("90"))
	if err != nil {
		fmt.Fprintln(os.Stderr, "nri-reference:", err)
		os.Exit(1)
	}
	if err := s.Run(context.Background()); err != nil {
		fmt.Fprintln(os.Stderr, "nri-reference:", err)
		os.Exit(1)
	}
}
