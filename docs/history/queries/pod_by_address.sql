-- Which pod held address {ip} at {at}, on any node, live or long gone: each sandbox holds
-- its address from its start to its death (the record k8s.pod.sandbox.started, then
-- k8s.pod.sandbox.died); an address is reused within seconds, so the time decides.
-- plegd never gives a host-network pod an address of its own (its records carry none),
-- so a node's address answers nothing here.
SELECT
    ResourceAttributes['k8s.node.name'] AS node,
    namespace, pod, pod_uid, sandbox_id, held_from,
    if(died_at = 0, NULL, died_at) AS held_until
FROM
(
    SELECT
        any(ResourceAttributes) AS ResourceAttributes,
        LogAttributes['container.id'] AS sandbox_id,
        any(LogAttributes['k8s.namespace.name']) AS namespace,
        any(LogAttributes['k8s.pod.name']) AS pod,
        any(LogAttributes['k8s.pod.uid']) AS pod_uid,
        minIf(Timestamp, EventName = 'k8s.pod.sandbox.started') AS held_from,
        minIf(Timestamp, EventName = 'k8s.pod.sandbox.died') AS died_at,
        countIf(EventName = 'k8s.pod.sandbox.started') AS starts
    FROM otel.otel_logs
    WHERE ServiceName = 'plegd'
      AND EventName IN ('k8s.pod.sandbox.started', 'k8s.pod.sandbox.died')
      AND LogAttributes['k8s.pod.ip'] = {ip:String}
      AND Timestamp <= {at:DateTime64(9)} + INTERVAL 1 DAY
    GROUP BY sandbox_id
)
WHERE starts > 0 AND held_from <= {at:DateTime64(9)}
  AND (died_at = 0 OR died_at > {at:DateTime64(9)})
ORDER BY held_from DESC
