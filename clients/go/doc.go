// Package plegd is the Go client of plegd, the node-local sidecar that watches the
// container runtime through the CRI and serves pod lifecycle events on a unix socket
// (gRPC service plegd.v1.PodLifecycle).
//
// The generated stubs are in the plegdv1 subpackage. This package adds what most
// node agents want on top of them:
//
//   - [Dial] connects to plegd's socket with the options it needs.
//   - [Informer] keeps a local copy of plegd's pods, in the style of client-go's
//     SharedIndexInformer: it takes a snapshot, follows the Watch stream, resumes
//     after a broken connection or a restarted plegd from the last revision it
//     applied, and repairs its copy with a fresh snapshot when plegd resets the
//     stream or lost its journal. Registered [ResourceEventHandler]s are told about
//     every change, one at a time, in revision order, never twice for one revision.
//
// A minimal agent:
//
//	conn, err := plegd.Dial(ctx, "unix:///run/plegd/plegd.sock")
//	if err != nil {
//		return err
//	}
//	defer conn.Close()
//	inf := plegd.NewInformer(conn, plegd.InformerOptions{})
//	inf.AddEventHandler(plegd.EventHandlerFuncs{
//		UpdateFunc: func(old, new *plegdv1.PodStatus, ev *plegdv1.LifecycleEvent) { ... },
//	})
//	go inf.Run(ctx)
//	if !plegd.WaitForCacheSync(ctx, inf.HasSynced) {
//		return ctx.Err()
//	}
package plegd
