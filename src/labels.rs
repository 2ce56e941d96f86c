//! Compact string maps for labels and annotations, with their strings shared across pods
//! and with the events that name them.
//!
//! The cache holds a label map for every pod and every container, and on a node the
//! same keys (`io.kubernetes.pod.uid`, …) and many of the values (a pod's uid, name and
//! namespace on each of its containers) repeat thousands of times. A `Labels` is one
//! sorted slice of interned string pairs behind an `Arc`: cloning it is a reference
//! count, and a string that appears in many maps is stored once.

use std::collections::HashSet;
use std::fmt;
use std::hash::Hash;
use std::sync::{Arc, Mutex};

use serde::Serialize;
use serde::ser::SerializeMap;

/// The labels the kubelet puts on every sandbox and container it creates: how the
/// relister groups a runtime's listing into pods without reading each object.
pub mod kubelet {
    /// The pod's UID.
    pub const POD_UID: &str = "io.kubernetes.pod.uid";
    /// The pod's name.
    pub const POD_NAME: &str = "io.kubernetes.pod.name";
    /// The pod's namespace.
    pub const POD_NAMESPACE: &str = "io.kubernetes.pod.namespace";
    /// The container's name (on containers).
    pub const CONTAINER_NAME: &str = "io.kubernetes.container.name";
}

/// A read-only string map, sorted by key; the last value given for a key wins.
#[derive(Clone, Default, PartialEq, Eq, Hash)]
pub struct Labels(Option<Arc<[Pair]>>);

/// One key and its value, both shared.
type Pair = (Arc<str>, Arc<str>);

/// The strings in use by some `Labels`, so that equal strings share one allocation.
struct Interner {
    set: HashSet<Arc<str>>,
    /// Prune strings no map uses any more once the set reaches this size.
    prune_at: usize,
}

/// The smallest interner size at which unused strings are pruned.
const PRUNE_FLOOR: usize = 4096;

static INTERNER: Mutex<Option<Interner>> = Mutex::new(None);

/// The shared copy of `s`.
fn intern(inner: &mut Interner, s: &str) -> Arc<str> {
    if let Some(a) = inner.set.get(s) {
        return a.clone();
    }
    if inner.set.len() >= inner.prune_at {
        // Only the interner holds these: no map uses them.
        inner.set.retain(|a| Arc::strong_count(a) > 1);
        inner.prune_at = (inner.set.len() * 2).max(PRUNE_FLOOR);
    }
    let a: Arc<str> = Arc::from(s);
    inner.set.insert(a.clone());
    a
}

/// The shared copy of `s`: equal strings passed here or held by any `Labels` are one
/// allocation. Events use it for a pod's uid, name and namespace, which its sandbox's
/// labels already hold.
pub fn shared(s: &str) -> Arc<str> {
    let mut guard = INTERNER.lock().expect("interner lock");
    intern(guard.get_or_insert_with(Interner::new), s)
}

impl Interner {
    fn new() -> Self {
        Self { set: HashSet::new(), prune_at: PRUNE_FLOOR }
    }
}

impl Labels {
    /// The value for `key`.
    pub fn get(&self, key: &str) -> Option<&str> {
        let pairs = self.0.as_deref()?;
        pairs.binary_search_by(|(k, _)| k.as_ref().cmp(key)).ok().map(|i| pairs[i].1.as_ref())
    }

    /// Whether `key` is present.
    pub fn contains_key(&self, key: &str) -> bool {
        self.get(key).is_some()
    }

    /// The pairs in key order.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = (&str, &str)> + '_ {
        self.0.as_deref().unwrap_or_default().iter().map(|(k, v)| (k.as_ref(), v.as_ref()))
    }

    /// How many pairs.
    pub fn len(&self) -> usize {
        self.0.as_deref().map_or(0, <[_]>::len)
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The pairs as owned strings (for the API's map fields).
    pub fn to_map<M: FromIterator<(String, String)>>(&self) -> M {
        self.iter().map(|(k, v)| (k.to_owned(), v.to_owned())).collect()
    }
}

impl<K: AsRef<str>, V: AsRef<str>> FromIterator<(K, V)> for Labels {
    fn from_iter<I: IntoIterator<Item = (K, V)>>(iter: I) -> Self {
        let mut pairs: Vec<(K, V)> = iter.into_iter().collect();
        if pairs.is_empty() {
            return Self(None);
        }
        // Stable, so that of equal keys the last given stays last; keep that one.
        pairs.sort_by(|a, b| a.0.as_ref().cmp(b.0.as_ref()));
        let mut guard = INTERNER.lock().expect("interner lock");
        let inner = guard.get_or_insert_with(Interner::new);
        let mut out: Vec<Pair> = Vec::with_capacity(pairs.len());
        for (k, v) in &pairs {
            let (k, v) = (k.as_ref(), v.as_ref());
            match out.last_mut() {
                Some(last) if last.0.as_ref() == k => last.1 = intern(inner, v),
                _ => out.push((intern(inner, k), intern(inner, v))),
            }
        }
        Self(Some(out.into()))
    }
}

impl<K: AsRef<str>, V: AsRef<str>, const N: usize> From<[(K, V); N]> for Labels {
    fn from(pairs: [(K, V); N]) -> Self {
        pairs.into_iter().collect()
    }
}

impl fmt::Debug for Labels {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map().entries(self.iter()).finish()
    }
}

impl Serialize for Labels {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(Some(self.len()))?;
        for (k, v) in self.iter() {
            m.serialize_entry(k, v)?;
        }
        m.end()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    #[test]
    fn equal_strings_in_different_maps_share_one_allocation() {
        let a: Labels = [("io.kubernetes.pod.uid", "u-shared-1"), ("app", "web")].into();
        let b: Labels = [("io.kubernetes.pod.uid".to_string(), "u-shared-1".to_string())].into();
        let pa = a.0.as_deref().unwrap().iter().find(|(k, _)| k.as_ref() == "io.kubernetes.pod.uid").unwrap();
        let pb = &b.0.as_deref().unwrap()[0];
        assert!(Arc::ptr_eq(&pa.0, &pb.0) && Arc::ptr_eq(&pa.1, &pb.1));
    }

    #[test]
    fn a_shared_string_is_the_copy_a_labels_map_holds() {
        let l: Labels = [("io.kubernetes.pod.name", "web-shared-7")].into();
        let held = &l.0.as_deref().unwrap()[0].1;
        assert!(Arc::ptr_eq(held, &shared("web-shared-7")));
        assert!(Arc::ptr_eq(&shared("alone-9"), &shared("alone-9")), "while one copy is in use");
    }

    #[test]
    fn strings_no_map_uses_are_pruned_once_the_interner_grows() {
        // Other tests share the interner and hold strings of their own, which moves the
        // point where it prunes; what matters is that strings no map uses any more go
        // once it has grown, whatever the others hold. (A fixed bound on the total was
        // flaky under parallel tests.)
        let first_round_left = || {
            let guard = INTERNER.lock().expect("interner lock");
            guard.as_ref().map_or(0, |i| i.set.iter().filter(|s| s.starts_with("prune-0-")).count())
        };
        let mut round = 0;
        loop {
            for i in 0..PRUNE_FLOOR {
                let l: Labels = [(format!("prune-{round}-{i}"), "v")].into();
                assert_eq!(l.len(), 1);
            }
            round += 1;
            if round > 1 && first_round_left() == 0 {
                break;
            }
            assert!(round < 64, "the first round's {} strings were never pruned", first_round_left());
        }
    }

    proptest! {
        #[test]
        fn a_labels_map_answers_like_a_btree_map_built_from_the_same_pairs(
            pairs in proptest::collection::vec(("[a-d]{0,2}", "[x-z]{0,2}"), 0..12),
            probe in "[a-d]{0,2}",
        ) {
            let l: Labels = pairs.iter().cloned().collect();
            let b: BTreeMap<String, String> = pairs.iter().cloned().collect();
            prop_assert_eq!(l.len(), b.len());
            prop_assert_eq!(l.is_empty(), b.is_empty());
            prop_assert_eq!(l.get(&probe), b.get(&probe).map(String::as_str));
            prop_assert_eq!(l.contains_key(&probe), b.contains_key(&probe));
            let li: Vec<(String, String)> = l.iter().map(|(k, v)| (k.into(), v.into())).collect();
            let bi: Vec<(String, String)> = b.clone().into_iter().collect();
            prop_assert_eq!(li, bi);
            prop_assert_eq!(l.to_map::<BTreeMap<String, String>>(), b.clone());
            let again: Labels = b.iter().collect();
            prop_assert_eq!(&again, &l);
            prop_assert_eq!(serde_json::to_string(&l).unwrap(), serde_json::to_string(&b).unwrap());
        }
    }
}
