package plegd

import (
	"context"
	"fmt"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials/insecure"
)

// DefaultSocket is where plegd listens unless told otherwise (plegd run --listen).
const DefaultSocket = "unix:///run/plegd/plegd.sock"

// MaxMessageSize is the largest message a connection made by [Dial] accepts by
// default: large enough for ListPods on a busy node (gRPC's own default is 4 MiB).
const MaxMessageSize = 64 << 20

// Dial returns a client connection to plegd's gRPC socket.
//
// target is a unix socket: "unix:///run/plegd/plegd.sock" (an absolute path),
// "unix:relative/path", or a plain absolute path. Other schemes are refused: plegd
// serves its API on a unix socket only, whose file permissions (and plegd's
// --allow-uid/--allow-gid) are its access control.
//
// The connection uses insecure transport credentials (there is no TLS on a local
// socket), accepts messages up to [MaxMessageSize], and reconnects to a restarted
// plegd within a few seconds (gRPC's default waits up to two minutes between
// attempts, meant for remote servers); opts are applied after these defaults and may
// override them.
//
// Dial does not wait for plegd: the connection is made in the background and made
// again whenever it breaks, so an [Informer] may be started before plegd is up. ctx
// is only checked before the connection is set up; use the returned connection's
// Close to release it.
func Dial(ctx context.Context, target string, opts ...grpc.DialOption) (*grpc.ClientConn, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	t, err := unixTarget(target)
	if err != nil {
		return nil, err
	}
	all := append([]grpc.DialOption{
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(MaxMessageSize)),
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 3 * time.Second},
			MinConnectTimeout: 5 * time.Second,
		}),
	}, opts...)
	conn, err := grpc.NewClient(t, all...)
	if err != nil {
		return nil, fmt.Errorf("plegd: dial %s: %w", target, err)
	}
	conn.Connect()
	return conn, nil
}

// unixTarget checks that target names a unix socket and returns it as a gRPC target.
func unixTarget(target string) (string, error) {
	switch {
	case strings.HasPrefix(target, "unix://"):
		if len(target) == len("unix://") || target[len("unix://")] != '/' {
			return "", fmt.Errorf("plegd: target %q: unix:// needs an absolute path (unix:///run/plegd/plegd.sock)", target)
		}
		return target, nil
	case strings.HasPrefix(target, "unix:"):
		if len(target) == len("unix:") {
			return "", fmt.Errorf("plegd: target %q names no socket", target)
		}
		return target, nil
	case strings.HasPrefix(target, "/"):
		return "unix://" + target, nil
	default:
		return "", fmt.Errorf("plegd: target %q is not a unix socket (plegd listens on unix:///path only)", target)
	}
}
