-- Which pod held address {ip} at {at}, on any node, live or long gone. A sandbox holds its
-- address from its start (k8s.pod.sandbox.started, the runtime's time, with the address)
-- until the first of: its death or removal (found by the sandbox's id, when plegd saw it,
-- which may be a moment late) and the next sandbox on that node given the same address
-- (addresses are reused within seconds). So one moment names one pod per node.
-- (2200-01-01 stands for "not yet".) A host-network pod has no address of its own in plegd's records, so a node's address
-- answers nothing here.
SELECT node, namespace, pod, pod_uid, sandbox_id, held_from,
       if(until = toDateTime64('2200-01-01 00:00:00', 9, 'UTC'), NULL, until) AS held_until
FROM
(
    SELECT *,
        least(if(ended = 0, toDateTime64('2200-01-01 00:00:00', 9, 'UTC'), ended),
              leadInFrame(held_from, 1, toDateTime64('2200-01-01 00:00:00', 9, 'UTC'))
                  OVER (PARTITION BY node ORDER BY held_from ROWS BETWEEN CURRENT ROW AND 1 FOLLOWING)) AS until
    FROM
    (
        SELECT
            ResourceAttributes['k8s.node.name'] AS node,
            LogAttributes['container.id'] AS sandbox_id,
            anyIf(LogAttributes['k8s.namespace.name'], EventName = 'k8s.pod.sandbox.started') AS namespace,
            anyIf(LogAttributes['k8s.pod.name'], EventName = 'k8s.pod.sandbox.started') AS pod,
            anyIf(LogAttributes['k8s.pod.uid'], EventName = 'k8s.pod.sandbox.started') AS pod_uid,
            minIf(Timestamp, EventName = 'k8s.pod.sandbox.started') AS held_from,
            minIf(Timestamp, EventName IN ('k8s.pod.sandbox.died', 'k8s.pod.sandbox.removed')) AS ended
        FROM otel.otel_logs
        WHERE ServiceName = 'plegd'
          AND EventName IN ('k8s.pod.sandbox.started', 'k8s.pod.sandbox.died', 'k8s.pod.sandbox.removed')
          AND LogAttributes['container.id'] IN
          (
              SELECT LogAttributes['container.id'] FROM otel.otel_logs
              WHERE ServiceName = 'plegd' AND EventName = 'k8s.pod.sandbox.started'
                AND LogAttributes['k8s.pod.ip'] = {ip:String}
          )
        GROUP BY node, sandbox_id
    )
)
WHERE held_from <= {at:DateTime64(9)} AND {at:DateTime64(9)} < until
ORDER BY node
