//! Kubernetes label selectors (`app=web,tier!=db,env in (a,b),!legacy`) parsed once and
//! matched against a pod's sandbox labels.

use std::collections::BTreeSet;

use crate::labels::Labels;

/// A parse error, naming what is wrong and where.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid label selector {input:?}: {reason}")]
pub struct SelectorError {
    /// The selector as given.
    pub input: String,
    /// What is wrong.
    pub reason: String,
}

/// One requirement of a selector.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Requirement {
    Equals(String, String),
    NotEquals(String, String),
    In(String, BTreeSet<String>),
    NotIn(String, BTreeSet<String>),
    Exists(String),
    DoesNotExist(String),
}

/// A parsed selector: all requirements must hold. The empty selector matches all.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Selector {
    reqs: Vec<Requirement>,
}

impl Selector {
    /// Parses Kubernetes selector syntax.
    pub fn parse(input: &str) -> Result<Self, SelectorError> {
        let err = |reason: String| SelectorError { input: input.to_owned(), reason };
        let mut reqs = Vec::new();
        for part in split_top_level(input).map_err(err)? {
            let part = part.trim();
            if part.is_empty() {
                if input.trim().is_empty() {
                    continue;
                }
                return Err(err("empty requirement (stray comma)".into()));
            }
            reqs.push(parse_requirement(part).map_err(err)?);
        }
        Ok(Self { reqs })
    }

    /// Whether `labels` satisfy every requirement.
    pub fn matches(&self, labels: &Labels) -> bool {
        self.reqs.iter().all(|r| match r {
            Requirement::Equals(k, v) => labels.get(k) == Some(v.as_str()),
            Requirement::NotEquals(k, v) => labels.get(k) != Some(v.as_str()),
            Requirement::In(k, vs) => labels.get(k).is_some_and(|v| vs.contains(v)),
            Requirement::NotIn(k, vs) => labels.get(k).is_none_or(|v| !vs.contains(v)),
            Requirement::Exists(k) => labels.contains_key(k),
            Requirement::DoesNotExist(k) => !labels.contains_key(k),
        })
    }

    /// Whether the selector matches everything.
    pub fn is_empty(&self) -> bool {
        self.reqs.is_empty()
    }
}

/// Splits on commas outside parentheses.
fn split_top_level(s: &str) -> Result<Vec<&str>, String> {
    let mut parts = Vec::new();
    let (mut depth, mut start) = (0i32, 0);
    for (i, c) in s.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => {
                depth -= 1;
                if depth < 0 {
                    return Err(format!("unbalanced ')' at byte {i}"));
                }
            }
            ',' if depth == 0 => {
                parts.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    if depth != 0 {
        return Err("unbalanced '('".into());
    }
    parts.push(&s[start..]);
    Ok(parts)
}

fn parse_requirement(p: &str) -> Result<Requirement, String> {
    if let Some(key) = p.strip_prefix('!') {
        return Ok(Requirement::DoesNotExist(key_ok(key.trim())?));
    }
    for (op, ctor) in [("!=", 0), ("==", 1), ("=", 1)] {
        if let Some((k, v)) = p.split_once(op) {
            let (k, v) = (key_ok(k.trim())?, value_ok(v.trim())?);
            return Ok(if ctor == 0 { Requirement::NotEquals(k, v) } else { Requirement::Equals(k, v) });
        }
    }
    let words: Vec<&str> = p.splitn(2, char::is_whitespace).collect();
    if words.len() == 2 {
        let key = key_ok(words[0])?;
        let rest = words[1].trim_start();
        let (op, list) = if let Some(r) = rest.strip_prefix("notin") {
            ("notin", r)
        } else if let Some(r) = rest.strip_prefix("in") {
            ("in", r)
        } else {
            return Err(format!("unknown operator in {p:?} (expected =, ==, !=, in, notin)"));
        };
        let list = list.trim();
        let inner = list
            .strip_prefix('(')
            .and_then(|l| l.strip_suffix(')'))
            .ok_or_else(|| format!("{op} needs a parenthesised list of values in {p:?}"))?;
        let values: BTreeSet<String> = inner.split(',').map(|v| value_ok(v.trim())).collect::<Result<_, _>>()?;
        if values.is_empty() || inner.trim().is_empty() {
            return Err(format!("{op} needs at least one value in {p:?}"));
        }
        return Ok(if op == "in" { Requirement::In(key, values) } else { Requirement::NotIn(key, values) });
    }
    Ok(Requirement::Exists(key_ok(p)?))
}

/// A label key: an optional DNS-subdomain prefix and `/`, then a name of at most 63
/// characters of alphanumerics, `-`, `_`, `.`, starting and ending alphanumeric.
fn key_ok(k: &str) -> Result<String, String> {
    let (prefix, name) = match k.rsplit_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, k),
    };
    if let Some(p) = prefix {
        let ok = !p.is_empty()
            && p.len() <= 253
            && p.split('.').all(|l| {
                !l.is_empty()
                    && l.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
                    && !l.starts_with('-')
                    && !l.ends_with('-')
            });
        if !ok {
            return Err(format!("label key {k:?} has an invalid prefix"));
        }
    }
    if !name_ok(name) {
        return Err(format!("label key {k:?} is not a valid label name"));
    }
    Ok(k.to_owned())
}

fn value_ok(v: &str) -> Result<String, String> {
    if v.is_empty() || name_ok(v) { Ok(v.to_owned()) } else { Err(format!("label value {v:?} is not valid")) }
}

fn name_ok(n: &str) -> bool {
    let alnum = |c: char| c.is_ascii_alphanumeric();
    !n.is_empty()
        && n.len() <= 63
        && n.chars().all(|c| alnum(c) || matches!(c, '-' | '_' | '.'))
        && n.starts_with(alnum)
        && n.ends_with(alnum)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> Labels {
        pairs.iter().copied().collect()
    }

    #[test]
    fn matches_every_operator() {
        let l = labels(&[("app", "web"), ("tier", "front"), ("k8s.io/team", "a")]);
        let yes = [
            "",
            "app=web",
            "app==web",
            "tier!=db",
            "missing!=x",
            "app in (web, api)",
            "app notin (db)",
            "missing notin (db)",
            "app",
            "!missing",
            "k8s.io/team=a",
            "app=web,tier in (front),!legacy",
        ];
        for s in yes {
            assert!(Selector::parse(s).unwrap().matches(&l), "{s}");
        }
        let no = ["app=api", "tier!=front", "app in (api)", "app notin (web)", "missing", "!app", "missing in (x)"];
        for s in no {
            assert!(!Selector::parse(s).unwrap().matches(&l), "{s}");
        }
    }

    #[test]
    fn malformed_selectors_say_what_is_wrong() {
        for (s, says) in [
            ("app=", ""),
            ("app in web", "parenthesised"),
            ("app in (web", "unbalanced"),
            ("app=web,", "stray comma"),
            ("-bad=x", "not a valid label name"),
            ("app=w b", "not valid"),
            ("app ~ web", "unknown operator"),
            ("UPPER.case/x=1", "invalid prefix"),
        ] {
            match Selector::parse(s) {
                Ok(sel) if s == "app=" => assert!(sel.matches(&labels(&[("app", "")]))),
                Ok(_) => panic!("{s} parsed"),
                Err(e) => assert!(e.to_string().contains(says), "{s}: {e}"),
            }
        }
    }
}
