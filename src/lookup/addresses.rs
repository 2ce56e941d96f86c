//! Who held a pod address when: each sandbox's addresses from its creation until plegd
//! saw it stop (or its pod go), learned from the same pod statuses as the rest of the
//! lookup, and kept as long as the tombstones. A host-network sandbox has no address
//! of its own (the runtime reports none), so the node's addresses never name a pod.
//!
//! The end of a holding is when plegd saw it, a little after the fact; the runtime gives
//! an address to one live sandbox at a time, so where two holdings cover a moment the
//! newer one holds it (the older one had ended by then).

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::SystemTime;

use crate::model::{PodStatus, SandboxState, nanos_to_system};

/// One sandbox's holding of one address.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Holding {
    /// The pod.
    pub(super) pod_uid: Arc<str>,
    /// The sandbox.
    pub(super) sandbox: Box<str>,
    /// When the sandbox was made.
    pub(super) from: SystemTime,
    /// When plegd saw it stop or its pod go; `None`: still held.
    pub(super) until: Option<SystemTime>,
}

impl Holding {
    fn covers(&self, at: SystemTime) -> bool {
        self.from <= at && self.until.is_none_or(|u| at < u)
    }
}

/// Holdings kept at most, whatever the retention (a node's pods over the retention are
/// far fewer).
pub(super) const MAX_HOLDINGS: usize = 20_000;

/// Every address's holdings, oldest first.
#[derive(Debug, Default)]
pub(super) struct Addresses {
    held: HashMap<IpAddr, Vec<Holding>>,
    count: usize,
    /// Pods whose containers' tombstones were read at start, and the latest removal of
    /// each: what such a pod still held when plegd stopped, it held at most until then,
    /// unless the journal's pods say it still runs ([`Self::settle`]).
    removed: HashMap<Arc<str>, SystemTime>,
    /// The earliest end among the holdings kept: [`Self::expire`], called with every
    /// batch of events the lookup learns, has nothing to do before it.
    earliest_end: Option<SystemTime>,
}

impl Addresses {
    /// Learns `status`'s sandboxes as of `at`: a new one holds its addresses from its
    /// creation, one that is no longer ready held them until `at`.
    pub(super) fn learn(&mut self, status: &PodStatus, at: SystemTime) {
        let uid = crate::labels::shared(&status.uid);
        for s in &status.sandboxes {
            let from = nanos_to_system(s.created_at).unwrap_or(at);
            let ended = (s.state != SandboxState::Ready).then_some(at);
            let ips = std::iter::once(&s.ip).chain(&s.additional_ips).filter_map(|ip| ip.parse::<IpAddr>().ok());
            for ip in ips.map(|ip| ip.to_canonical()) {
                self.hold(ip, &uid, &s.id, from, ended);
            }
        }
    }

    fn hold(&mut self, ip: IpAddr, uid: &Arc<str>, sandbox: &str, from: SystemTime, ended: Option<SystemTime>) {
        let list = self.held.entry(ip).or_default();
        match list.iter_mut().find(|h| *h.sandbox == *sandbox) {
            Some(h) if h.until.is_some() => return,
            Some(h) => h.until = ended,
            None => {
                let at = list.partition_point(|h| h.from <= from);
                let h = Holding { pod_uid: uid.clone(), sandbox: sandbox.into(), from, until: ended };
                // Most addresses are held once: room for one, not the four a first push makes.
                list.reserve_exact(1);
                list.insert(at, h);
                self.count += 1;
            }
        }
        if let Some(end) = ended {
            self.ended(end);
        }
    }

    fn ended(&mut self, at: SystemTime) {
        self.earliest_end = Some(self.earliest_end.map_or(at, |e| e.min(at)));
    }

    /// Pod `uid` is gone, as of `at`: what it still held, it held until then.
    pub(super) fn pod_gone(&mut self, uid: &str, at: SystemTime) {
        let mut closed = false;
        for h in self.held.values_mut().flatten() {
            if *h.pod_uid == *uid && h.until.is_none() {
                h.until = Some(at);
                closed = true;
            }
        }
        if closed {
            self.ended(at);
        }
    }

    /// A container of pod `status` removed at `removed_at` (a tombstone read at start):
    /// a sandbox not ready then had stopped by then. Whether the pod is gone is known
    /// only once the journal's pods are read ([`Self::settle`]).
    pub(super) fn learn_removed(&mut self, status: &PodStatus, removed_at: SystemTime) {
        self.learn(status, removed_at);
        let latest = self.removed.entry(crate::labels::shared(&status.uid)).or_insert(removed_at);
        *latest = (*latest).max(removed_at);
    }

    /// The journal's pods at start are `live`: a pod only tombstones named, not among
    /// them, held its addresses at most until its last container's removal.
    pub(super) fn settle(&mut self, live: &std::collections::HashSet<&str>) {
        for (uid, at) in std::mem::take(&mut self.removed) {
            if !live.contains(&*uid) {
                self.pod_gone(&uid, at);
            }
        }
    }

    /// Who held `ip` at `at`: the newest holding that covers it. An IPv4 address
    /// written as IPv6 (`::ffff:10.0.0.1`) is the IPv4 one.
    pub(super) fn holder(&self, ip: IpAddr, at: SystemTime) -> Option<&Holding> {
        self.held.get(&ip.to_canonical())?.iter().rev().find(|h| h.covers(at))
    }

    /// Forgets holdings that ended before `cutoff`, and the oldest ended ones past
    /// [`MAX_HOLDINGS`].
    pub(super) fn expire(&mut self, cutoff: SystemTime) {
        if self.earliest_end.is_none_or(|e| e >= cutoff) && self.count <= MAX_HOLDINGS {
            return;
        }
        let (mut dropped, mut earliest) = (0, None::<SystemTime>);
        self.held.retain(|_, list| {
            let before = list.len();
            list.retain(|h| h.until.is_none_or(|u| u >= cutoff));
            dropped += before - list.len();
            for u in list.iter().filter_map(|h| h.until) {
                earliest = Some(earliest.map_or(u, |e| e.min(u)));
            }
            !list.is_empty()
        });
        self.count -= dropped;
        self.earliest_end = earliest;
        if self.count > MAX_HOLDINGS {
            let mut ended: Vec<SystemTime> = self.held.values().flatten().filter_map(|h| h.until).collect();
            let over = self.count - MAX_HOLDINGS;
            if over <= ended.len() {
                ended.select_nth_unstable(over - 1);
                let newest_dropped = ended[over - 1];
                self.expire(newest_dropped + std::time::Duration::from_nanos(1));
            }
        }
    }

    /// Holdings kept.
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.count
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use proptest::prelude::*;

    use super::*;
    use crate::model::SandboxStatus;

    fn t(s: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000 + s)
    }

    fn pod(uid: &str, sandbox: &str, ip: &str, made: u64, ready: bool) -> PodStatus {
        let mut p = PodStatus::empty(uid, "ns", uid);
        let created_at = t(made).duration_since(SystemTime::UNIX_EPOCH).unwrap().as_nanos() as i64;
        let state = if ready { SandboxState::Ready } else { SandboxState::NotReady };
        p.sandboxes =
            vec![SandboxStatus { id: sandbox.into(), ip: ip.into(), created_at, state, ..Default::default() }];
        p
    }

    #[test]
    fn an_address_reused_names_each_holder_in_its_time_and_a_host_network_pod_none() {
        let mut a = Addresses::default();
        a.learn(&pod("a", "s1", "10.244.0.1", 0, true), t(1));
        a.learn(&pod("a", "s1", "10.244.0.1", 0, false), t(10));
        // The next pod got the address before plegd saw the first stop: the newer holds it.
        a.learn(&pod("b", "s2", "10.244.0.1", 9, true), t(11));
        a.learn(&pod("h", "s3", "", 0, true), t(1));
        let ip: IpAddr = "10.244.0.1".parse().unwrap();
        let who = |a: &Addresses, at| a.holder(ip, t(at)).map(|h| h.pod_uid.to_string());
        let (b, a_) = (Some("b".to_string()), Some("a".to_string()));
        assert_eq!((who(&a, 5), who(&a, 9), who(&a, 10), who(&a, 1000)), (a_, b.clone(), b.clone(), b));
        assert_eq!(a.holder(ip, t(0) - Duration::from_secs(1)), None, "before anyone");
        assert_eq!(a.len(), 2, "no holding for a sandbox without an address");
        // v6, written another way; v4 written as v6.
        a.learn(&pod("c", "s4", "fd00::0:9", 20, true), t(21));
        assert_eq!(a.holder("fd00::9".parse().unwrap(), t(30)).map(|h| &*h.pod_uid), Some("c"));
        assert_eq!(a.holder("::ffff:10.244.0.1".parse().unwrap(), t(5)).map(|h| &*h.pod_uid), Some("a"));
        // Gone pods' holdings end; the retention forgets them.
        a.pod_gone("b", t(40));
        assert_eq!(who(&a, 41), None);
        a.expire(t(41));
        assert_eq!((who(&a, 20), a.len()), (None, 1));
    }

    #[test]
    fn after_a_restart_a_pod_that_still_runs_keeps_its_address_and_a_removed_one_held_it_until_its_removal() {
        let mut a = Addresses::default();
        // Tombstones read at start, oldest first: an old attempt of a live pod (its
        // sandbox ready then), and the last container of a pod since removed.
        a.learn_removed(&pod("live", "s1", "10.244.0.1", 0, true), t(100));
        a.learn_removed(&pod("gone", "s2", "10.244.0.2", 0, true), t(200));
        a.learn_removed(&pod("gone", "s2", "10.244.0.2", 0, true), t(300));
        a.settle(&["live"].into());
        let who = |ip: &str, at| a.holder(ip.parse().unwrap(), t(at)).map(|h| h.pod_uid.to_string());
        assert_eq!(who("10.244.0.1", 5000), Some("live".into()), "still running: still held");
        assert_eq!(
            (who("10.244.0.2", 299), who("10.244.0.2", 300)),
            (Some("gone".into()), None),
            "until its last removal"
        );
    }

    proptest! {
        /// Sandboxes come and go on a small range, each given the lowest free address
        /// as a runtime does, and plegd sees each stop up to 3 s late: at any moment an
        /// address was held, the answer is its holder.
        #[test]
        fn whoever_held_an_address_at_a_moment_is_the_answer(
            life in proptest::collection::vec((1u64..30, 0u64..20, 0u64..4), 1..40),
        ) {
            let mut a = Addresses::default();
            let mut truth: Vec<(IpAddr, String, u64, u64)> = Vec::new();
            let mut busy: Vec<(u8, u64)> = Vec::new(); // (host part, free from)
            let mut now = 0u64;
            for (i, (lives, gap, late)) in life.into_iter().enumerate() {
                now += gap;
                busy.retain(|&(_, free)| free > now);
                let host = (1..).find(|h| busy.iter().all(|b| b.0 != *h)).unwrap();
                let ip = format!("10.244.0.{host}");
                let (uid, sid) = (format!("p{i}"), format!("s{i}"));
                a.learn(&pod(&uid, &sid, &ip, now, true), t(now));
                a.learn(&pod(&uid, &sid, &ip, now, false), t(now + lives + late));
                busy.push((host, now + lives));
                truth.push((ip.parse().unwrap(), uid, now, now + lives));
            }
            for &(ip, _, _, _) in &truth {
                for at in 0..=now + 40 {
                    let held = truth.iter().find(|(i, _, from, until)| *i == ip && *from <= at && at < *until);
                    let answer = a.holder(ip, t(at)).map(|h| h.pod_uid.to_string());
                    match held {
                        Some((_, uid, _, _)) => prop_assert_eq!(answer, Some(uid.clone()), "{} at {}", ip, at),
                        // Free then: nobody, or the last holder while plegd had not yet
                        // seen it stop (at most 3 s) — never a later one.
                        None => if let Some(uid) = answer {
                            let (_, _, from, until) = truth.iter().find(|x| x.0 == ip && x.1 == uid).unwrap();
                            prop_assert!(*from <= at && at < until + 4, "{} at {}: {} held it {}..{}", ip, at, uid, from, until);
                        },
                    }
                }
            }
        }
    }
}
