package dev.plegd.clients;

import io.grpc.Context;
import io.grpc.ManagedChannel;
import io.grpc.health.v1.HealthCheckRequest;
import io.grpc.health.v1.HealthCheckResponse;
import io.grpc.health.v1.HealthGrpc;
import io.grpc.netty.NettyChannelBuilder;
import io.grpc.reflection.v1.ServerReflectionGrpc;
import io.grpc.reflection.v1.ServerReflectionRequest;
import io.grpc.reflection.v1.ServerReflectionResponse;
import io.grpc.reflection.v1.ServiceResponse;
import io.grpc.stub.StreamObserver;
import io.netty.channel.epoll.Epoll;
import io.netty.channel.epoll.EpollDomainSocketChannel;
import io.netty.channel.epoll.EpollEventLoopGroup;
import io.netty.channel.unix.DomainSocketAddress;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import plegd.v1.Plegd.GetPodStatusRequest;
import plegd.v1.Plegd.GetPodStatusResponse;
import plegd.v1.Plegd.ListPodsRequest;
import plegd.v1.Plegd.ListPodsResponse;
import plegd.v1.Plegd.PodStatus;
import plegd.v1.Plegd.WatchEvent;
import plegd.v1.Plegd.WatchRequest;
import plegd.v1.PodLifecycleGrpc;

/**
 * A stock grpc-java client of plegd: grpc-netty over netty's epoll unix-domain-socket transport,
 * built the way grpc-java documents it, with no authority override (grpc-java then sends the
 * socket path as :authority). Usage: StockClient /path/to/plegd.sock (or unix:///path).
 * Exits 0 when every check passes.
 */
public final class StockClient {
  private static void check(boolean ok, String what) {
    if (!ok) {
      throw new AssertionError(what);
    }
  }

  private static void step(String what) {
    System.out.println("java: " + what);
    System.out.flush();
  }

  public static void main(String[] args) throws Exception {
    String path = args[0].replaceFirst("^unix://", "");
    if (!Epoll.isAvailable()) {
      throw new AssertionError("netty epoll unavailable", Epoll.unavailabilityCause());
    }
    EpollEventLoopGroup group = new EpollEventLoopGroup();
    ManagedChannel channel =
        NettyChannelBuilder.forAddress(new DomainSocketAddress(path))
            .eventLoopGroup(group)
            .channelType(EpollDomainSocketChannel.class)
            .usePlaintext()
            .build();
    try {
      run(channel);
    } finally {
      channel.shutdownNow().awaitTermination(5, TimeUnit.SECONDS);
      group.shutdownGracefully(0, 1, TimeUnit.SECONDS);
    }
    step("OK");
  }

  private static void run(ManagedChannel channel) throws Exception {
    step("authority " + channel.authority());

    HealthGrpc.HealthBlockingStub health = HealthGrpc.newBlockingStub(channel);
    for (String service : new String[] {"", "plegd.v1.PodLifecycle"}) {
      HealthCheckResponse h =
          health
              .withDeadlineAfter(10, TimeUnit.SECONDS)
              .check(HealthCheckRequest.newBuilder().setService(service).build());
      check(
          h.getStatus() == HealthCheckResponse.ServingStatus.SERVING,
          "health(" + service + ") = " + h.getStatus());
    }
    step("health Check SERVING ('' and plegd.v1.PodLifecycle)");

    PodLifecycleGrpc.PodLifecycleBlockingStub stub = PodLifecycleGrpc.newBlockingStub(channel);
    ListPodsResponse pods =
        stub.withDeadlineAfter(10, TimeUnit.SECONDS).listPods(ListPodsRequest.getDefaultInstance());
    check(pods.getPodsCount() > 0, "ListPods returned no pods");
    check(pods.getRevision() > 0 && pods.getEpoch() != 0, "ListPods revision/epoch unset: " + pods);
    for (PodStatus p : pods.getPodsList()) {
      check(!p.getUid().isEmpty() && !p.getName().isEmpty(), "pod without identity: " + p);
    }
    step(
        "ListPods: "
            + pods.getPodsCount()
            + " pods at revision "
            + pods.getRevision()
            + ", epoch "
            + Long.toUnsignedString(pods.getEpoch()));

    // The runtime churns: a pod removed since the listing answers not_found, and the next
    // listed one is asked.
    PodStatus first = null;
    GetPodStatusResponse got = null;
    for (PodStatus p : pods.getPodsList()) {
      first = p;
      got =
          stub.withDeadlineAfter(10, TimeUnit.SECONDS)
              .getPodStatus(GetPodStatusRequest.newBuilder().setPodUid(p.getUid()).build());
      if (!got.getNotFound()) {
        break;
      }
    }
    check(!got.getNotFound(), "every listed pod answered not_found");
    check(got.hasPod() && got.getPod().getUid().equals(first.getUid()), "GetPodStatus: " + got);
    step(
        "GetPodStatus("
            + first.getUid()
            + "): "
            + got.getPod().getNamespace()
            + "/"
            + got.getPod().getName()
            + ", "
            + got.getPod().getContainersCount()
            + " containers");

    // Watch from a snapshot until synced, then 3 live events; cancelled afterwards.
    List<String> kinds = new ArrayList<>();
    List<Long> revisions = new ArrayList<>();
    List<String> types = new ArrayList<>();
    int snapshots = 0;
    WatchEvent synced = null;
    long last = 0;
    Context.CancellableContext ctx = Context.current().withCancellation();
    Context prev = ctx.attach();
    try {
      var it =
          stub.withDeadlineAfter(60, TimeUnit.SECONDS)
              .watch(WatchRequest.newBuilder().setSinceRevision(0).build());
      while (it.hasNext()) {
        WatchEvent m = it.next();
        kinds.add(m.getKindCase().name());
        switch (m.getKindCase()) {
          case SNAPSHOT -> {
            check(synced == null, "snapshot after synced");
            snapshots++;
          }
          case SYNCED -> {
            synced = m;
            check(m.getSynced().getPods() == snapshots, "synced.pods != snapshots seen");
            check(m.getSynced().getEpoch() == pods.getEpoch(), "synced epoch != ListPods epoch");
          }
          case EVENT -> {
            check(synced != null, "event before synced");
            check(m.getRevision() > last, "revision " + m.getRevision() + " after " + last);
            last = m.getRevision();
            revisions.add(m.getRevision());
            types.add(m.getEvent().getType().name());
          }
          case RESET -> throw new AssertionError("unexpected reset: " + m.getReset());
          default -> {}
        }
        if (revisions.size() >= 3) {
          break;
        }
      }
    } finally {
      ctx.detach(prev);
      ctx.cancel(null);
    }
    check(!kinds.isEmpty() && kinds.get(0).equals("START"), "first message: " + kinds);
    check(synced != null && revisions.size() >= 3, "watch ended early: " + kinds);
    check(revisions.get(0) > synced.getRevision(), "first event not after synced revision");
    step(
        "Watch: start, "
            + snapshots
            + " snapshots, synced@"
            + synced.getRevision()
            + ", events "
            + revisions
            + " "
            + types);

    // Reflection v1 (bidi stream): list_services contains plegd.v1.PodLifecycle.
    CompletableFuture<List<String>> services = new CompletableFuture<>();
    StreamObserver<ServerReflectionRequest> req =
        ServerReflectionGrpc.newStub(channel)
            .withDeadlineAfter(10, TimeUnit.SECONDS)
            .serverReflectionInfo(
                new StreamObserver<ServerReflectionResponse>() {
                  final List<String> names = new ArrayList<>();

                  @Override
                  public void onNext(ServerReflectionResponse r) {
                    for (ServiceResponse s : r.getListServicesResponse().getServiceList()) {
                      names.add(s.getName());
                    }
                  }

                  @Override
                  public void onError(Throwable t) {
                    services.completeExceptionally(t);
                  }

                  @Override
                  public void onCompleted() {
                    services.complete(names);
                  }
                });
    req.onNext(ServerReflectionRequest.newBuilder().setListServices("").build());
    req.onCompleted();
    List<String> names = services.get(15, TimeUnit.SECONDS);
    check(names.contains("plegd.v1.PodLifecycle"), "reflection services: " + names);
    step("reflection v1 list_services: " + names);
  }
}
