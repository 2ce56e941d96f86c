#!/usr/bin/env python3
"""Each rule of the kubelet oracle (oracle.py), on lines shaped as the kubelet 1.37 and
`plegd watch -o json` write them. Run: python3 tests/kubelet/oracle_test.py"""

import datetime as dt
import json
import pathlib
import sys
import unittest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import oracle  # noqa: E402

UID = "f34e7b867c088f2ea24cb2b55317b867"
C1 = "f19c42cae3432b421f90aa03cea3df52bee8f4d803c338f28b3195749d930a33"
SB = "958a14aba41f80560ecdebc7772080cefd871756e08f034e33ddee4825f0f34a"


def kline(t: str, cid: str, old: str, new: str, uid: str = UID) -> str:
    return (f'I1128 {t}   29436 generic.go:254] "GenericPLEG" podUID="{uid}" containerID="{cid}" '
            f'oldState="{old}" newState="{new}"')


def event(t: str, cid: str, ty: str, rev: int, uid: str = UID, source: str = "CRI_EVENT") -> str:
    return json.dumps({"revision": rev, "event": {
        "pod_uid": uid, "pod_name": "p", "pod_namespace": "n", "type": ty, "container_id": cid, "is_sandbox": cid == SB,
        "source": source, "observed_at": f"2026-11-28T{t}Z", "runtime_timestamp": None, "pod": None, "message": ""}})


def at(t: str) -> dt.datetime:
    return oracle.parse_time(f"2026-11-28T{t}Z")


FAR = at("23:00:00.000")


class KubeletLog(unittest.TestCase):
    def test_a_generic_pleg_line_is_a_transition_with_the_kubelets_time_and_other_lines_are_not(self):
        lines = [kline("04:30:12.695299", C1, "non-existent", "running"),
                 'I1128 04:30:12.697070   29436 kubelet.go:2788] "SyncLoop (PLEG): event for pod" pod="kt/x"']
        [t] = oracle.kubelet_transitions(lines, 2026)
        self.assertEqual((t.uid, t.id, t.old, t.new), (UID, C1, "non-existent", "running"))
        self.assertEqual(t.at, dt.datetime(2026, 11, 28, 4, 30, 12, 695299, dt.timezone.utc))

    def test_a_transition_logged_again_after_a_failed_cache_update_counts_once(self):
        lines = [kline("04:30:12.000000", C1, "running", "exited"), kline("04:30:13.000000", C1, "running", "exited")]
        self.assertEqual(len(oracle.kubelet_transitions(lines, 2026)), 1)

    def test_each_transition_gives_the_events_of_the_kubelets_generate_events(self):
        T = lambda old, new: oracle.Transition(FAR, UID, C1, old, new).types()  # noqa: E731
        self.assertEqual(T("non-existent", "running"), ["CONTAINER_STARTED"])
        self.assertEqual(T("running", "exited"), ["CONTAINER_DIED"])
        self.assertEqual(T("non-existent", "unknown"), ["CONTAINER_CHANGED"])
        self.assertEqual(T("exited", "non-existent"), ["CONTAINER_REMOVED"])
        self.assertEqual(T("running", "non-existent"), ["CONTAINER_DIED", "CONTAINER_REMOVED"])
        self.assertEqual(T("unknown", "non-existent"), ["CONTAINER_DIED", "CONTAINER_REMOVED"])


class Check(unittest.TestCase):
    def verdict(self, klines, events, blind=(), kubelet_blind=(), snapshot=()):
        stream = oracle.plegd_stream(list(snapshot) + events)
        return oracle.check(oracle.kubelet_transitions(klines, 2026), stream, list(blind), FAR, list(kubelet_blind))

    def test_a_transition_plegd_saw_first_is_matched_with_its_lead(self):
        v = self.verdict([kline("04:30:12.500000", C1, "non-existent", "running")],
                         [event("04:30:12.100", C1, "CONTAINER_STARTED", 1)])
        self.assertTrue(v.ok)
        self.assertAlmostEqual(v.leads()[0], 0.4)

    def test_a_transition_plegd_does_not_have_is_missing(self):
        v = self.verdict([kline("04:30:12.500000", C1, "running", "exited")],
                         [event("04:30:12.100", C1, "CONTAINER_STARTED", 1)])
        self.assertFalse(v.ok)
        self.assertEqual([ty for _, ty in v.missing], ["CONTAINER_DIED"])

    def test_a_vanished_running_container_needs_both_its_death_and_its_removal(self):
        v = self.verdict([kline("04:30:12.500000", C1, "running", "non-existent")],
                         [event("04:30:12.100", C1, "CONTAINER_REMOVED", 1)])
        self.assertEqual([ty for _, ty in v.missing], ["CONTAINER_DIED"])

    def test_the_same_type_for_another_pod_or_container_does_not_match(self):
        v = self.verdict([kline("04:30:12.500000", C1, "non-existent", "running")],
                         [event("04:30:12.100", SB, "CONTAINER_STARTED", 1),
                          event("04:30:12.100", C1, "CONTAINER_STARTED", 2, uid="0" * 32)])
        self.assertEqual(len(v.missing), 1)

    def test_plegd_later_than_the_kubelet_fails_by_more_than_its_precision(self):
        v = self.verdict([kline("04:30:12.500000", C1, "non-existent", "running")],
                         [event("04:30:12.502", C1, "CONTAINER_STARTED", 1, source="RELIST")])
        self.assertEqual(len(v.late), 1)
        self.assertFalse(v.ok)
        v = self.verdict([kline("04:30:12.500400", C1, "non-existent", "running")],
                         [event("04:30:12.501", C1, "CONTAINER_STARTED", 1)])
        self.assertTrue(v.ok, "within plegd's millisecond")

    def test_a_kubelet_relist_inside_plegds_stream_time_of_the_change_is_a_tie_and_a_slow_plegd_is_late(self):
        def ev(observed, runtime):
            d = json.loads(event(observed, C1, "CONTAINER_STARTED", 1))
            d["event"]["runtime_timestamp"] = f"2026-11-28T{runtime}Z"
            return json.dumps(d)
        k = [kline("04:30:12.436000", C1, "non-existent", "running")]
        v = self.verdict(k, [ev("04:30:12.457", "04:30:12.429")])
        self.assertTrue(v.ok)
        self.assertEqual(len(v.tied), 1)
        v = self.verdict(k, [ev("04:30:12.700", "04:30:12.429")])
        self.assertEqual(len(v.late), 1, "271 ms after the change is beyond the stream's budget")
        v = self.verdict(k, [ev("04:30:12.500", "04:30:12.440")])
        self.assertEqual(len(v.late), 1, "the kubelet saw it before the runtime's own time: no tie")

    def test_a_removal_from_the_stream_a_few_ms_after_the_kubelet_is_a_tie_and_one_from_a_relist_is_late(self):
        k = [kline("04:30:12.699000", C1, "exited", "non-existent")]
        v = self.verdict(k, [event("04:30:12.708", C1, "CONTAINER_REMOVED", 1)])
        self.assertTrue(v.ok)
        self.assertEqual(len(v.tied), 1)
        self.assertIn("after the kubelet's relist", oracle.report("x", v))
        v = self.verdict(k, [event("04:30:12.708", C1, "CONTAINER_REMOVED", 1, source="RELIST")])
        self.assertEqual(len(v.late), 1)
        v = self.verdict(k, [event("04:30:12.800", C1, "CONTAINER_REMOVED", 1)])
        self.assertEqual(len(v.late), 1, "101 ms is beyond a tie")

    def test_a_start_the_runtime_told_late_is_a_tie_when_plegd_published_it_with_the_kubelets_relist(self):
        # started_at 385 ms before anyone could see it (StartContainer returned late).
        d = json.loads(event("04:30:12.561", C1, "CONTAINER_STARTED", 1))
        d["event"]["runtime_timestamp"] = "2026-11-28T04:30:12.160Z"
        k = [kline("04:30:12.545000", C1, "non-existent", "running")]
        v = self.verdict(k, [json.dumps(d)])
        self.assertTrue(v.ok, oracle.report("x", v))
        d["event"]["observed_at"] = "2026-11-28T04:30:12.700Z"
        self.assertEqual(len(self.verdict(k, [json.dumps(d)]).late), 1)

    def test_late_inside_a_declared_blind_window_is_excused_and_reported_but_absent_is_not(self):
        w = oracle.Window(at("04:30:10.000"), at("04:30:15.000"), "plegd killed")
        v = self.verdict([kline("04:30:12.500000", C1, "non-existent", "running"),
                          kline("04:30:13.500000", SB, "non-existent", "running")],
                         [event("04:30:16.000", C1, "CONTAINER_STARTED", 1)], blind=[w])
        self.assertEqual(len(v.late_excused), 1)
        self.assertEqual(len(v.missing), 1)
        self.assertIn("plegd killed", oracle.report("x", v))

    def test_a_plegd_that_only_relists_may_trail_the_kubelet_by_its_period_and_no_more(self):
        k = [kline("04:30:12.500000", C1, "non-existent", "running")]
        stream = oracle.plegd_stream([event("04:30:13.400", C1, "CONTAINER_STARTED", 1)])
        tr = oracle.kubelet_transitions(k, 2026)
        v = oracle.check(tr, stream, [], FAR, relisting=dt.timedelta(seconds=1.5))
        self.assertTrue(v.ok)
        self.assertEqual(len(v.late_excused), 1)
        v = oracle.check(tr, oracle.plegd_stream([event("04:30:14.100", C1, "CONTAINER_STARTED", 1)]), [], FAR,
                         relisting=dt.timedelta(seconds=1.5))
        self.assertEqual(len(v.late), 1)

    def test_a_plegd_that_only_relists_may_miss_a_state_shorter_than_its_period_but_not_a_death(self):
        k = [kline("04:30:12.500000", C1, "non-existent", "unknown"), kline("04:30:13.500000", C1, "unknown", "exited")]
        stream = oracle.plegd_stream([event("04:30:13.900", C1, "CONTAINER_DIED", 1)])
        tr = oracle.kubelet_transitions(k, 2026)
        v = oracle.check(tr, stream, [], FAR, relisting=dt.timedelta(seconds=1.5))
        self.assertTrue(v.ok, oracle.report("x", v))
        v = oracle.check(tr, stream, [], FAR)
        self.assertEqual(len(v.missing), 1, "a plegd on the stream has no such excuse")
        v = oracle.check(tr, oracle.plegd_stream([event("04:30:12.600", C1, "CONTAINER_CHANGED", 1)]), [], FAR,
                         relisting=dt.timedelta(seconds=1.5))
        self.assertEqual([ty for _, ty in v.missing], ["CONTAINER_DIED"])

    def test_a_state_that_began_and_ended_while_plegd_was_blind_is_excused_only_if_plegd_has_what_came_after(self):
        w = oracle.Window(at("04:30:10.000"), at("04:30:15.000"), "plegd killed")
        k = [kline("04:30:12.500000", C1, "non-existent", "running"), kline("04:30:13.500000", C1, "running", "exited")]
        tr = oracle.kubelet_transitions(k, 2026)
        v = oracle.check(tr, oracle.plegd_stream([event("04:30:15.500", C1, "CONTAINER_DIED", 1)]), [w], FAR)
        self.assertTrue(v.ok, oracle.report("x", v))
        v = oracle.check(tr, oracle.plegd_stream([]), [w], FAR)
        self.assertEqual(len(v.missing), 2)
        v = oracle.check(tr, oracle.plegd_stream([event("04:30:15.500", C1, "CONTAINER_DIED", 1)]), [], FAR)
        self.assertEqual([ty for _, ty in v.missing], ["CONTAINER_STARTED"], "no blind window: no excuse")

    def test_an_object_already_there_when_plegd_began_is_found_in_its_snapshot(self):
        snap = json.dumps({"revision": 3, "snapshot": {"uid": UID, "sandboxes": [{"id": SB, "state": "SANDBOX_READY"}],
                                                       "containers": [{"id": C1, "state": "CONTAINER_EXITED"}]}})
        v = self.verdict([kline("04:30:12.500000", C1, "non-existent", "running"),
                          kline("04:30:12.500000", SB, "non-existent", "running")], [], snapshot=[snap])
        self.assertTrue(v.ok)
        self.assertEqual(len(v.in_snapshot), 2)
        # The snapshot does not stand in for a later state than it holds.
        v = self.verdict([kline("04:30:12.500000", SB, "running", "exited")], [], snapshot=[snap])
        self.assertEqual(len(v.missing), 1)

    def test_plegd_only_types_and_short_states_are_named_differences_and_anything_else_fails(self):
        v = self.verdict(
            [kline("04:30:12.500000", C1, "non-existent", "exited")],
            [event("04:30:12.100", C1, "CONTAINER_STARTED", 1), event("04:30:12.200", C1, "CONTAINER_DIED", 2),
             event("04:30:12.300", C1, "CRASH_LOOP", 3), event("04:30:12.400", C1, "POD_SYNC", 4)])
        self.assertTrue(v.ok, oracle.report("x", v))
        self.assertEqual(sum(len(es) for es in v.extra.values()), 3)
        v = self.verdict([], [event("04:30:12.100", C1, "CONTAINER_DIED", 1)])
        self.assertEqual(len(v.unexplained), 1)
        self.assertFalse(v.ok)

    def test_an_object_the_kubelet_never_saw_is_a_difference_only_if_it_was_gone_before_the_kubelet_could_see_it(self):
        brief = [event("04:30:12.100", C1, "CONTAINER_STARTED", 1), event("04:30:12.300", C1, "CONTAINER_DIED", 2),
                 event("04:30:12.900", C1, "CONTAINER_REMOVED", 3)]
        self.assertTrue(self.verdict([], brief).ok)
        lingering = brief[:2] + [event("04:30:20.000", C1, "CONTAINER_REMOVED", 3)]
        self.assertFalse(self.verdict([], lingering).ok)
        w = oracle.Window(at("04:30:10.000"), at("04:30:25.000"), "the kubelet restarted")
        self.assertTrue(self.verdict([], lingering, kubelet_blind=[w]).ok)

    def test_events_after_the_kubelet_stopped_are_not_judged(self):
        stream = oracle.plegd_stream([event("04:30:12.100", C1, "CONTAINER_DIED", 1)])
        self.assertTrue(oracle.check([], stream, [], at("04:30:12.000")).ok)

    def test_a_reset_in_the_recording_is_counted(self):
        self.assertEqual(oracle.plegd_stream([json.dumps({"revision": 9, "reset": {"reason": "SLOW_CONSUMER"}})]).resets, 1)


def kpod(uid, statuses, init=()):
    return {"metadata": {"uid": uid, "name": "p", "namespace": "n"},
            "status": {"containerStatuses": list(statuses), "initContainerStatuses": list(init)}}


def pcont(name, attempt, state, exit_code=0, reason=""):
    return {"name": name, "attempt": attempt, "state": state, "exit_code": exit_code, "reason": reason}


class EndStates(unittest.TestCase):
    def test_a_crash_loop_in_back_off_agrees_by_its_last_exit(self):
        k = {"items": [kpod(UID, [{"name": "c", "restartCount": 2, "containerID": "x",
                                   "state": {"waiting": {"reason": "CrashLoopBackOff"}},
                                   "lastState": {"terminated": {"exitCode": 13, "reason": "Error"}}}])]}
        p = {"pods": [{"uid": UID, "containers": [pcont("c", 1, "CONTAINER_EXITED", 12, "Error"),
                                                  pcont("c", 2, "CONTAINER_EXITED", 13, "Error")]}]}
        self.assertEqual(oracle.end_states(k, p), [])
        p["pods"][0]["containers"][1]["exit_code"] = 14
        self.assertEqual(len(oracle.end_states(k, p)), 1)

    def test_an_oom_kill_agrees_only_with_its_reason(self):
        k = {"items": [kpod(UID, [{"name": "hog", "restartCount": 0, "containerID": "x",
                                   "state": {"terminated": {"exitCode": 137, "reason": "OOMKilled"}}}])]}
        p = {"pods": [{"uid": UID, "containers": [pcont("hog", 0, "CONTAINER_EXITED", 137, "OOMKilled")]}]}
        self.assertEqual(oracle.end_states(k, p), [])
        p["pods"][0]["containers"][0]["reason"] = "Error"
        self.assertIn("OOMKilled", oracle.end_states(k, p)[0])

    def test_a_restarted_container_agrees_by_its_attempt_and_the_previous_attempts_exit(self):
        k = {"items": [kpod(UID, [{"name": "p", "restartCount": 1, "containerID": "x", "state": {"running": {}},
                                   "lastState": {"terminated": {"exitCode": 137, "reason": "Error"}}}],
                            init=[{"name": "setup", "restartCount": 0, "containerID": "y",
                                   "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}}])]}
        p = {"pods": [{"uid": UID, "containers": [pcont("p", 0, "CONTAINER_EXITED", 137, "Error"),
                                                  pcont("p", 1, "CONTAINER_RUNNING"),
                                                  pcont("setup", 0, "CONTAINER_EXITED", 0, "Completed")]}]}
        self.assertEqual(oracle.end_states(k, p), [])
        p["pods"][0]["containers"][1]["attempt"] = 2
        self.assertTrue(any("restart count" in d for d in oracle.end_states(k, p)))

    def test_a_last_termination_the_kubelets_gc_removed_is_read_from_plegds_tombstone(self):
        k = {"items": [kpod(UID, [{"name": "c", "restartCount": 3, "containerID": "x", "state": {"running": {}},
                                   "lastState": {"terminated": {"exitCode": 12, "reason": "Error"}}}])]}
        p = {"pods": [{"uid": UID, "containers": [pcont("c", 3, "CONTAINER_STATE_RUNNING")]}]}
        self.assertEqual(len(oracle.end_states(k, p)), 1, "no tombstone: a difference")
        asked = []

        def removed(uid, name, attempt):
            asked.append((uid, name, attempt))
            return pcont("c", 2, "CONTAINER_STATE_EXITED", 12, "Error")
        self.assertEqual(oracle.end_states(k, p, removed), [])
        self.assertEqual(asked, [(UID, "c", 2)])

    def test_a_container_the_runtime_no_longer_has_is_compared_through_plegds_tombstone(self):
        k = {"items": [kpod(UID, [], init=[{"name": "setup", "restartCount": 0, "containerID": "y",
                                            "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}}])]}
        p = {"pods": [{"uid": UID, "containers": []}]}
        self.assertEqual(len(oracle.end_states(k, p)), 1)
        tomb = lambda uid, name, attempt: pcont("setup", attempt, "CONTAINER_STATE_EXITED", 0, "Completed")  # noqa: E731
        self.assertEqual(oracle.end_states(k, p, tomb), [])

    def test_a_pod_plegd_does_not_have_is_a_difference(self):
        self.assertEqual(len(oracle.end_states({"items": [kpod(UID, [])]}, {"pods": []})), 1)


def probe(t: str, ty: str, output: str, pod: str = "plegd/plegd-kt-node") -> str:
    return (f'I1128 {t}    2621 prober.go:123] "Probe failed" probeType="{ty}" pod="{pod}" podUID="{UID}" '
            f'containerName="plegd" probeResult="failure" output="{output}"')


REFUSED = 'Get \\"http://10.244.78.2:9477/readyz\\": dial tcp 10.244.78.2:9477: connect: connection refused'


class Probes(unittest.TestCase):
    def test_a_readiness_probe_refused_before_the_pod_was_first_ready_is_its_start_and_not_counted(self):
        got = oracle.probe_failures([probe("22:57:24.717921", "Readiness", REFUSED)], 2026, "plegd/",
                                    at("22:57:26.000"))
        self.assertEqual((len(got.counted), len(got.before_listening)), (0, 1))

    def test_a_readiness_probe_refused_after_the_pod_was_ready_counts(self):
        got = oracle.probe_failures([probe("22:58:24.717921", "Readiness", REFUSED)], 2026, "plegd/",
                                    at("22:57:26.000"))
        self.assertEqual((len(got.counted), len(got.before_listening)), (1, 0))

    def test_a_liveness_failure_counts_even_before_the_pod_was_ready(self):
        got = oracle.probe_failures([probe("22:57:24.717921", "Liveness", REFUSED)], 2026, "plegd/",
                                    at("22:57:26.000"))
        self.assertEqual(len(got.counted), 1)

    def test_a_readiness_probe_answered_wrongly_counts_even_before_the_pod_was_ready(self):
        got = oracle.probe_failures([probe("22:57:24.717921", "Readiness", "HTTP probe failed with statuscode: 503")],
                                    2026, "plegd/", at("22:57:26.000"))
        self.assertEqual(len(got.counted), 1)

    def test_other_pods_and_other_lines_are_not_plegds(self):
        got = oracle.probe_failures([probe("22:57:24.717921", "Liveness", REFUSED, pod="kt/x"),
                                     kline("04:30:12.695299", C1, "non-existent", "running")],
                                    2026, "plegd/", None)
        self.assertEqual((got.counted, got.before_listening), ([], []))


def kubelet_pod(uid="u1", **over) -> dict:
    pod = {"metadata": {"name": "multi-node", "namespace": "cases", "uid": uid,
                        "ownerReferences": [{"kind": "ReplicaSet", "name": "multi-5f7b9c6d48", "uid": "rs1", "controller": True},
                                            {"kind": "Other", "name": "x", "uid": "o1"}]},
           "spec": {"nodeName": "plegd-kt", "priority": 1000, "priorityClassName": "", "serviceAccountName": ""},
           "status": {"phase": "Running", "qosClass": "Burstable", "podIPs": [{"ip": "10.244.78.5"}],
                      "hostIPs": [{"ip": "10.0.0.1"}]}}
    for k, v in over.items():
        section, field = k.split("__")
        pod[section][field] = v
    return pod


def plegd_pod(uid="u1", **over) -> dict:
    ident = {"node_name": "plegd-kt", "controller": {"kind": "ReplicaSet", "name": "multi-5f7b9c6d48", "uid": "rs1"},
             "workload": {"kind": "Deployment", "name": "multi", "uid": ""}, "qos_class": "Burstable",
             "priority": 1000, "priority_class_name": "", "service_account": "", "runtime_class": "",
             "pod_ips": ["10.244.78.5"], "host_ips": ["10.0.0.1"], "source": "PODS_API"}
    ident.update(over)
    return {"uid": uid, "identity": ident}


class IdentityTest(unittest.TestCase):
    def test_the_same_identity_has_no_difference(self):
        self.assertEqual(oracle.identity_diffs({"items": [kubelet_pod()]}, {"pods": [plegd_pod()]}), [])

    def test_each_field_that_differs_is_named(self):
        for field, value in (("node_name", "flag-node"), ("qos_class", "BestEffort"), ("priority", 0),
                             ("pod_ips", ["10.244.78.6"]), ("host_ips", []),
                             ("controller", {"kind": "ReplicaSet", "name": "multi-5f7b9c6d48", "uid": ""})):
            got = oracle.identity_diffs({"items": [kubelet_pod()]}, {"pods": [plegd_pod(**{field: value})]})
            self.assertEqual(len(got), 1, (field, got))
            self.assertIn(field, got[0])

    def test_an_inferred_identity_where_the_kubelets_is_due_is_a_difference(self):
        got = oracle.identity_diffs({"items": [kubelet_pod()]}, {"pods": [plegd_pod(source="INFERRED")]})
        self.assertEqual(got, ["cases/multi-node: identity from INFERRED, not PODS_API"])

    def test_a_host_network_pod_has_no_address_of_its_own_though_the_kubelet_names_the_nodes(self):
        host = kubelet_pod(spec__hostNetwork=True, status__podIPs=[{"ip": "10.0.0.1"}])
        self.assertEqual(oracle.identity_diffs({"items": [host]}, {"pods": [plegd_pod(pod_ips=[])]}), [])
        got = oracle.identity_diffs({"items": [host]}, {"pods": [plegd_pod(pod_ips=["10.0.0.1"])]})
        self.assertEqual(len(got), 1, got)
        self.assertIn("pod_ips", got[0])

    def test_a_pod_plegd_lacks_is_a_difference_unless_it_finished(self):
        self.assertEqual(len(oracle.identity_diffs({"items": [kubelet_pod()]}, {"pods": []})), 1)
        done = kubelet_pod(status__phase="Succeeded")
        self.assertEqual(oracle.identity_diffs({"items": [done]}, {"pods": []}), [])


class WorkloadAttributesTest(unittest.TestCase):
    MADE = dt.datetime(2026, 11, 30, 12, 0, tzinfo=dt.timezone.utc)

    def meta(self, kind, name, **labels):
        return {"ownerReferences": [{"kind": "Other", "name": "x"}, {"kind": kind, "name": name, "controller": True}],
                "labels": labels}

    def test_a_replicasets_deployment_is_named_by_its_pod_template_hash(self):
        got = oracle.workload_attributes(self.meta("ReplicaSet", "web-5f7b9c6d48", **{"pod-template-hash": "5f7b9c6d48"}), self.MADE)
        self.assertEqual(got, {"k8s.replicaset.name": "web-5f7b9c6d48", "k8s.deployment.name": "web"})
        self.assertEqual(oracle.workload_attributes(self.meta("ReplicaSet", "web-5f7b9c6d48"), self.MADE),
                         {"k8s.replicaset.name": "web-5f7b9c6d48"})

    def test_a_jobs_cronjob_is_named_only_by_a_scheduled_minute_near_the_pod(self):
        minute = int(self.MADE.timestamp() // 60)
        self.assertEqual(oracle.workload_attributes(self.meta("Job", f"nightly-{minute - 5}"), self.MADE),
                         {"k8s.job.name": f"nightly-{minute - 5}", "k8s.cronjob.name": "nightly"})
        self.assertEqual(oracle.workload_attributes(self.meta("Job", f"weekly-{minute - 7 * 1440}"), self.MADE),
                         {"k8s.job.name": f"weekly-{minute - 7 * 1440}", "k8s.cronjob.name": "weekly"})
        seconds = int(self.MADE.timestamp())
        self.assertEqual(oracle.workload_attributes(self.meta("Job", f"migrate-{seconds}"), self.MADE),
                         {"k8s.job.name": f"migrate-{seconds}"})

    def test_a_pod_without_a_controller_or_of_an_unknown_kind_has_none(self):
        self.assertEqual(oracle.workload_attributes({"ownerReferences": [{"kind": "Node", "name": "n"}]}, self.MADE), {})
        self.assertEqual(oracle.workload_attributes(self.meta("Rollout", "r"), self.MADE), {})


if __name__ == "__main__":
    unittest.main(verbosity=1)
