//! The pages' shell and small helpers: HTML escaping, percent-encoding for links, the
//! page frame (inline CSS, the live-update script), times and durations for people.

use std::fmt::Write as _;
use std::time::{Duration, SystemTime};

/// Escapes text for HTML element content and double-quoted attribute values.
pub fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            // Control characters other than tab and newline have no business in a page.
            c if c.is_control() && c != '\t' && c != '\n' => out.push('\u{fffd}'),
            c => out.push(c),
        }
    }
    out
}

/// Percent-encodes a path segment or query value: everything but unreserved characters.
pub fn enc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b as char);
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
    out
}

/// A time for people: `2026-11-21 15:04:05.123Z`.
pub fn time(t: SystemTime) -> String {
    humantime::format_rfc3339_millis(t).to_string().replacen('T', " ", 1)
}

/// The clock part of a time: `15:04:05`.
pub fn clock(t: SystemTime) -> String {
    let s = humantime::format_rfc3339_seconds(t).to_string();
    s.get(11..19).unwrap_or(&s).to_string()
}

/// A duration in its two largest units: `3d4h`, `2m5s`, `1.25s`, `340ms`.
pub fn dur(d: Duration) -> String {
    let s = d.as_secs();
    match s {
        0 if d.as_millis() == 0 => format!("{}µs", d.as_micros()),
        0 => format!("{}ms", d.as_millis()),
        1..=9 => format!("{:.2}s", d.as_secs_f64()),
        10..=59 => format!("{s}s"),
        60..=3599 => format!("{}m{}s", s / 60, s % 60),
        3600..=86_399 => format!("{}h{}m", s / 3600, s % 3600 / 60),
        _ => format!("{}d{}h", s / 86_400, s % 86_400 / 3600),
    }
}

/// How long ago `t` was, as of `now`.
pub fn ago(now: SystemTime, t: SystemTime) -> String {
    match now.duration_since(t) {
        Ok(d) => format!("{} ago", dur(d)),
        Err(_) => "just now".into(),
    }
}

/// What a page frame needs besides its body.
pub struct Frame<'a> {
    /// The title (plain text; escaped here).
    pub title: &'a str,
    /// The nonce that lets the page's own style and script run (and nothing else).
    pub nonce: &'a str,
    /// Whether the page follows the node (polls itself for changes).
    pub live: bool,
}

const CSS: &str = r#"
:root{--fg:#1b1f24;--muted:#59636e;--line:#d1d9e0;--bg:#fff;--soft:#f6f8fa;--bad:#b42318;--oom:#6d28d9;--ok:#1a7f37;--warn:#9a6700}
*{box-sizing:border-box}
body{margin:0;font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;color:var(--fg);background:var(--bg)}
header{display:flex;flex-wrap:wrap;gap:.25rem 1rem;align-items:baseline;padding:.6rem 1rem;border-bottom:1px solid var(--line);background:var(--soft)}
header a{color:inherit;font-weight:600;text-decoration:none}
#live{color:var(--muted);font-size:12px}
main{padding:.75rem 1rem;max-width:1400px}
h1{font-size:1.2rem;margin:.2rem 0 .5rem;word-break:break-all}
h2{font-size:1rem;margin:1.2rem 0 .4rem}
.muted{color:var(--muted)}
.scroll{overflow-x:auto;-webkit-overflow-scrolling:touch}
table{border-collapse:collapse;width:100%}
th,td{text-align:left;padding:.3rem .5rem;border-bottom:1px solid var(--line);vertical-align:top}
th{font-weight:600;background:var(--soft);white-space:nowrap}
th a{color:inherit}
td.num{text-align:right;font-variant-numeric:tabular-nums}
tbody.pod{border-top:2px solid var(--line)}
code,.id{font:12px ui-monospace,SFMono-Regular,Menlo,Consolas,monospace}
form.filters{display:flex;flex-wrap:wrap;gap:.5rem;align-items:end;margin:.25rem 0 .75rem}
form.filters label{display:flex;flex-direction:column;font-size:12px;color:var(--muted)}
form.filters input,form.filters select{font:inherit;padding:.25rem .4rem;min-width:10rem}
button{font:inherit;padding:.3rem .8rem}
.error{border:1px solid var(--bad);background:#fef3f2;color:var(--bad);padding:.5rem .75rem;border-radius:4px}
.state{font-size:12px;padding:0 .35rem;border-radius:3px;border:1px solid var(--line);white-space:nowrap}
.state.running{color:var(--ok);border-color:var(--ok)}
.state.exited{color:var(--muted)}
.mark{font-size:12px;font-weight:700;padding:0 .35rem;border-radius:3px;white-space:nowrap;color:#fff}
.mark.crashloop{background:var(--bad)}
.mark.oom{background:var(--oom)}
tr.crashloop td.cname::before{content:"⟳ ";color:var(--bad)}
tr.oom td.cname::after{content:" ⚠";color:var(--oom)}
.labels{font-size:12px;color:var(--muted);word-break:break-all}
svg.timeline{width:100%;min-width:640px;height:auto;display:block}
svg text{font:11px system-ui,sans-serif;fill:var(--fg)}
svg .lane-label{font-weight:600}
svg .axis line{stroke:var(--line)}
svg .axis text{fill:var(--muted)}
svg .attempt rect{fill:#4a90d9;stroke:#1f5f9e}
svg .attempt.exited rect{fill:#9fc3e9}
svg .attempt.failed rect{fill:#f3b1aa;stroke:var(--bad)}
svg .attempt.oom rect{fill:#d8c7f7;stroke:var(--oom)}
svg .attempt.running rect{fill:#7cc48e;stroke:var(--ok)}
svg .sandbox rect{fill:#e8ecf0;stroke:#8c959f}
svg .death path{stroke:var(--bad);stroke-width:2.5;fill:none}
svg .death text{fill:var(--bad);font-size:10px}
svg .death.oom path{stroke:var(--oom);fill:var(--oom)}
svg .death.oom text{fill:var(--oom);font-weight:700}
svg .note path{fill:var(--warn)}
svg .window rect{fill-opacity:.18}
svg .window.plegd-down rect{fill:#59636e}
svg .window.stream-down rect{fill:var(--warn)}
svg .window.relist-only rect{fill:#bf8700}
svg .window.runtime-down rect{fill:var(--bad)}
svg .window text{fill:var(--muted);font-size:10px}
svg .plegd-start path{stroke:#24292f;stroke-width:1.5;stroke-dasharray:3 2}
svg .plegd-start text{font-size:10px}
svg .now line{stroke:var(--ok);stroke-dasharray:2 3}
@media (max-width:600px){main{padding:.5rem}th,td{padding:.25rem .3rem}form.filters input{min-width:8rem}}
"#;

/// Polls the page's own address with `since=<the page's token>`: 204 while nothing
/// changed, the new page otherwise, whose `<main>` replaces this one's. A full
/// re-render comes every 8th poll regardless, so running bars and ages move on.
const SCRIPT: &str = r#"
(function(){
  var main=document.querySelector('main'), live=document.getElementById('live'), n=0;
  if(!main||!window.fetch||!window.DOMParser)return;
  function tick(){
    n++;
    var u=new URL(location.href);
    if(n%8!==0&&main.dataset.since)u.searchParams.set('since',main.dataset.since);
    fetch(u,{cache:'no-store',headers:{'Accept':'text/html'}}).then(function(r){
      if(r.status===204)return null;
      if(!r.ok&&r.status!==404)throw new Error('HTTP '+r.status);
      return r.text();
    }).then(function(t){
      if(t!==null){
        var d=new DOMParser().parseFromString(t,'text/html'), m=d.querySelector('main');
        if(m){main.replaceWith(m);main=m;document.title=d.title;}
      }
      live.textContent='live · checked '+new Date().toLocaleTimeString();
      live.dataset.updates=String(n);
    }).catch(function(e){
      live.textContent='live · plegd did not answer ('+e.message+'); retrying';
    }).finally(function(){setTimeout(tick,2000);});
  }
  live.textContent='live · following the node';
  setTimeout(tick,2000);
})();
"#;

/// A whole page around `body` (which must hold one `<main>`).
pub fn page(f: &Frame<'_>, body: &str) -> String {
    let mut out = String::with_capacity(body.len() + CSS.len() + SCRIPT.len() + 512);
    out.push_str("<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">");
    out.push_str("<meta name=\"viewport\" content=\"width=device-width,initial-scale=1\">");
    let _ = write!(out, "<title>{}</title>", esc(f.title));
    if f.live {
        // Without JavaScript the page still follows the node, by reloading.
        out.push_str("<noscript><meta http-equiv=\"refresh\" content=\"30\"></noscript>");
    }
    let _ = write!(out, "<style nonce=\"{}\">{CSS}</style></head><body>", esc(f.nonce));
    out.push_str("<header><a href=\"/\">plegd · pods on this node</a>");
    let live = if f.live { "live updates need JavaScript; without it the page reloads every 30 s" } else { "" };
    let _ = write!(out, "<span id=\"live\">{live}</span></header>");
    out.push_str(body);
    if f.live {
        let _ = write!(out, "<script nonce=\"{}\">{SCRIPT}</script>", esc(f.nonce));
    }
    out.push_str("</body></html>\n");
    out
}

/// The Content-Security-Policy of a page whose own style and script carry `nonce`.
pub fn csp(nonce: &str) -> String {
    format!(
        "default-src 'none'; style-src 'nonce-{nonce}'; script-src 'nonce-{nonce}'; connect-src 'self'; \
         img-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'"
    )
}

/// A fresh nonce.
pub fn nonce() -> String {
    format!("{:016x}{:016x}", fastrand::u64(..), fastrand::u64(..))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markup_from_the_runtime_is_escaped_in_text_and_attributes() {
        assert_eq!(
            esc(r#"<script>alert("x")</script>&'"#),
            "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;&amp;&#39;"
        );
        assert_eq!(esc("a\u{7}b"), "a\u{fffd}b", "a control character is replaced");
        assert_eq!(esc("plain-name_1"), "plain-name_1");
    }

    #[test]
    fn a_link_segment_keeps_only_unreserved_characters() {
        assert_eq!(enc("a b/c?d&e\"<"), "a%20b%2Fc%3Fd%26e%22%3C");
        assert_eq!(enc("6f1c-9a_~."), "6f1c-9a_~.");
        assert_eq!(enc("é"), "%C3%A9");
    }

    #[test]
    fn durations_read_in_their_two_largest_units() {
        assert_eq!(dur(Duration::from_millis(340)), "340ms");
        assert_eq!(dur(Duration::from_millis(1250)), "1.25s");
        assert_eq!(dur(Duration::from_secs(125)), "2m5s");
        assert_eq!(dur(Duration::from_secs(3 * 86_400 + 4 * 3600)), "3d4h");
    }

    #[test]
    fn the_title_is_escaped_and_the_script_carries_the_nonce() {
        let p = page(&Frame { title: "<x>", nonce: "abc", live: true }, "<main></main>");
        assert!(p.contains("<title>&lt;x&gt;</title>"));
        assert!(p.contains("<script nonce=\"abc\">"));
        assert!(p.contains("http-equiv=\"refresh\""), "the no-JS fallback reloads");
        let still = page(&Frame { title: "x", nonce: "abc", live: false }, "<main></main>");
        assert!(!still.contains("<script"), "a page that does not follow the node has no script");
    }
}
