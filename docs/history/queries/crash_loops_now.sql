-- Containers in a crash loop now, across every node: the last crash-loop word plegd said
-- of the container is k8s.container.crash_loop (not crash_loop_cleared), and its pod is
-- still there: some sandbox of it started and was not removed (the kubelet removes a
-- live pod's old sandboxes too, so one removal does not make a pod gone).
SELECT
    ResourceAttributes['k8s.node.name'] AS node,
    namespace, pod, container, since, restarts
FROM
(
    SELECT
        any(ResourceAttributes) AS ResourceAttributes,
        LogAttributes['k8s.pod.uid'] AS pod_uid,
        LogAttributes['k8s.container.name'] AS container,
        any(LogAttributes['k8s.namespace.name']) AS namespace,
        any(LogAttributes['k8s.pod.name']) AS pod,
        argMax(EventName, (Timestamp, toUInt64OrZero(LogAttributes['plegd.revision']))) AS last,
        maxIf(Timestamp, EventName = 'k8s.container.crash_loop') AS since,
        max(toUInt32OrZero(LogAttributes['k8s.container.restart_count'])) AS restarts
    FROM otel.otel_logs
    WHERE ServiceName = 'plegd'
      AND EventName IN ('k8s.container.crash_loop', 'k8s.container.crash_loop_cleared')
    GROUP BY pod_uid, container
)
WHERE last = 'k8s.container.crash_loop'
  AND pod_uid NOT IN
  (
      SELECT pod_uid FROM
      (
          SELECT LogAttributes['k8s.pod.uid'] AS pod_uid,
                 groupUniqArrayIf(LogAttributes['container.id'], EventName = 'k8s.pod.sandbox.started') AS started,
                 groupUniqArrayIf(LogAttributes['container.id'], EventName = 'k8s.pod.sandbox.removed') AS removed
          FROM otel.otel_logs
          WHERE ServiceName = 'plegd' AND EventName IN ('k8s.pod.sandbox.started', 'k8s.pod.sandbox.removed')
          GROUP BY pod_uid
      )
      WHERE length(removed) > 0 AND hasAll(removed, started)
  )
ORDER BY since DESC
