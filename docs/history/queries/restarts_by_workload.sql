-- Restarts and OOM kills by workload over a window (a day: {from} = now() - INTERVAL 1 DAY),
-- across every node. A restart is a container started as a later attempt
-- (restart_count > 0); an OOM kill a container that died with reason OOMKilled. Each is
-- counted once per container id: a record sent twice, or a container announced again by
-- a plegd that started on an empty state dir (a new epoch), counts once. The workload is
-- the top of the controller chain as plegd names it (a Deployment, StatefulSet,
-- DaemonSet, CronJob, Job), else the pod itself.
SELECT
    LogAttributes['k8s.namespace.name'] AS namespace,
    multiIf(LogAttributes['k8s.deployment.name'] != '', 'Deployment',
            LogAttributes['k8s.statefulset.name'] != '', 'StatefulSet',
            LogAttributes['k8s.daemonset.name'] != '', 'DaemonSet',
            LogAttributes['k8s.cronjob.name'] != '', 'CronJob',
            LogAttributes['k8s.job.name'] != '', 'Job',
            'Pod') AS kind,
    multiIf(kind = 'Deployment', LogAttributes['k8s.deployment.name'],
            kind = 'StatefulSet', LogAttributes['k8s.statefulset.name'],
            kind = 'DaemonSet', LogAttributes['k8s.daemonset.name'],
            kind = 'CronJob', LogAttributes['k8s.cronjob.name'],
            kind = 'Job', LogAttributes['k8s.job.name'],
            LogAttributes['k8s.pod.name']) AS workload,
    uniqExactIf(LogAttributes['container.id'], EventName = 'k8s.container.started'
            AND toUInt32OrZero(LogAttributes['k8s.container.restart_count']) > 0) AS restarts,
    uniqExactIf(LogAttributes['container.id'], EventName = 'k8s.container.died'
            AND LogAttributes['k8s.container.status.last_terminated_reason'] = 'OOMKilled') AS oom_kills
FROM otel.otel_logs
WHERE ServiceName = 'plegd'
  AND Timestamp >= {from:DateTime64(9)} AND Timestamp < {to:DateTime64(9)}
  AND EventName IN ('k8s.container.started', 'k8s.container.died')
GROUP BY namespace, kind, workload
HAVING restarts > 0 OR oom_kills > 0
ORDER BY oom_kills DESC, restarts DESC, namespace, workload
