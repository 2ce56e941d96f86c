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
//     stream or lost its journal. Each [ResourceEventHandler] added is a
//     [Registration] with its own buffer and goroutine, told about every change one
//     call at a time, in revision order, never twice for one revision; a slow one
//     holds up neither the stream nor the others.
//
// A minimal agent:
//
//	conn, err := plegd.Dial(ctx, "unix:///run/plegd/plegd.sock")
//	if err != nil {
//		return err
//	}
//	defer conn.Close()
//	inf := plegd.NewInformer(conn, plegd.InformerOptions{})
//	reg, err := inf.AddEventHandler(plegd.EventHandlerFuncs{
//		UpdateFunc: func(old, new *plegdv1.PodStatus, ev *plegdv1.LifecycleEvent) { ... },
//	})
//	if err != nil {
//		return err
//	}
//	errc := make(chan error, 1)
//	go func() { errc <- inf.Run(ctx) }()
//	if !plegd.WaitForCacheSync(ctx, reg.HasSynced) {
//		return ctx.Err()
//	}
//	// ... the handler has been told every pod; the copy is ready (inf.List, inf.Get)
//	return <-errc // nil once ctx ends
//
// [Informer.Start] is Run under controller-runtime's Runnable name, so that
// mgr.Add(inf) runs it.
package plegd
