//! The crate's layers: each top-level module imports only modules of its own layer or
//! the layers below, and no two modules import each other (directly or around a
//! cycle). Test code (`#[cfg(test)]` modules) may use anything, the simulator included.
//!
//! A new module must be given a layer here; a module that reaches up fails with the
//! line that does it.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Bottom to top. A module may import its own layer and the ones before it.
const LAYERS: &[(&str, &[&str])] = &[
    (
        "leaves",
        &[
            "proto", "backoff", "clock", "uds", "metrics", "process", "memory", "liveness", "labels", "selector",
            "host", "runlog",
        ],
    ),
    ("model", &["model"]),
    ("cri", &["cri"]),
    ("stores", &["cache", "journal", "workqueue", "lookup"]),
    ("pleg", &["pleg"]),
    ("pipeline", &["publish", "syncloop", "reconcile", "kubelet", "nri"]),
    ("serving", &["grpc", "pages", "admin", "export"]),
    ("config", &["config", "telemetry"]),
    ("wiring", &["app"]),
    ("cli", &["cli", "sim", "watchcheck"]),
];

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The top-level module a file belongs to (`src/pleg/generic.rs` → `pleg`).
fn owner(file: &Path) -> String {
    let rel = file.strip_prefix(src()).unwrap();
    let first = rel.components().next().unwrap().as_os_str().to_string_lossy().to_string();
    first.trim_end_matches(".rs").to_string()
}

/// How a test module starts (at the top level of a file).
const TEST_MODULE: &str = "\n#[cfg(test)]\nmod ";

/// Production code of a file: comments dropped, `#[cfg(test)]` items cut off (test
/// modules sit at the end of each file in this crate, which `tests_come_last` checks).
fn production_code(text: &str) -> String {
    let code = match text.find(TEST_MODULE) {
        Some(i) => &text[..i],
        None => text,
    };
    code.lines().map(|l| l.split("//").next().unwrap_or("")).collect::<Vec<_>>().join("\n")
}

/// The generated code a file includes from the build script's output
/// (`include!(concat!(env!("OUT_DIR"), "/x.rs"))`): it belongs to the including layer.
fn generated_code(text: &str) -> String {
    let mut out = String::new();
    let marker = "env!(\"OUT_DIR\"), \"";
    let mut rest = text;
    while let Some(i) = rest.find(marker) {
        rest = &rest[i + marker.len()..];
        let Some(end) = rest.find('"') else { break };
        let path = format!("{}{}", env!("OUT_DIR"), &rest[..end]);
        if path.ends_with(".rs") {
            let code = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
            out.push_str(&production_code(&code));
        }
        rest = &rest[end..];
    }
    out
}

/// The top-level modules `code` names as `crate::<module>` or in a group
/// (`crate::{a, b::c}`, over several lines too), with the line.
fn imports(code: &str) -> Vec<(String, usize)> {
    let ident =
        |s: &str| -> String { s.trim_start().chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect() };
    let mut out = Vec::new();
    let mut at = 0;
    while let Some(i) = code[at..].find("crate::") {
        let start = at + i;
        let line = code[..start].matches('\n').count() + 1;
        let rest = &code[start + "crate::".len()..];
        at = start + "crate::".len();
        if let Some(group) = rest.strip_prefix('{') {
            // The group's top-level items: split at commas outside nested braces.
            let (mut depth, mut item_start) = (0usize, 0usize);
            for (j, ch) in group.char_indices() {
                match ch {
                    '{' => depth += 1,
                    '}' if depth == 0 => {
                        let name = ident(&group[item_start..j]);
                        if !name.is_empty() {
                            out.push((name, line));
                        }
                        break;
                    }
                    '}' => depth -= 1,
                    ',' if depth == 0 => {
                        let name = ident(&group[item_start..j]);
                        if !name.is_empty() {
                            out.push((name, line));
                        }
                        item_start = j + 1;
                    }
                    _ => {}
                }
            }
        } else {
            let name = ident(rest);
            if !name.is_empty() {
                out.push((name, line));
            }
        }
    }
    out
}

#[test]
fn the_check_sees_modules_named_in_a_use_group_over_several_lines() {
    let code = "use crate::cache::PodCache;\nuse crate::{\n    journal::{Entry, Filter},\n    model,\n};\nlet x = crate::sim::SimRuntime::new();";
    let names: Vec<_> = imports(code).into_iter().map(|(n, l)| format!("{n}@{l}")).collect();
    assert_eq!(names, ["cache@1", "journal@2", "model@2", "sim@6"]);
}

fn layer_of() -> BTreeMap<&'static str, usize> {
    LAYERS.iter().enumerate().flat_map(|(i, (_, mods))| mods.iter().map(move |m| (*m, i))).collect()
}

#[test]
fn every_module_imports_only_its_own_layer_or_the_layers_below() {
    let layers = layer_of();
    let mut files = Vec::new();
    rust_files(&src(), &mut files);
    let mut violations = Vec::new();
    for f in &files {
        let m = owner(f);
        // A `tests` module in its own file is test code: it may use anything.
        if m == "lib" || m == "main" || test_only(f.strip_prefix(src()).unwrap()) {
            continue;
        }
        let Some(&mine) = layers.get(m.as_str()) else {
            violations.push(format!("{}: module {m} has no layer in tests/layering.rs", f.display()));
            continue;
        };
        let text = std::fs::read_to_string(f).unwrap();
        let code = production_code(&text) + &generated_code(&text);
        for (dep, line) in imports(&code) {
            let Some(&theirs) = layers.get(dep.as_str()) else { continue };
            if theirs > mine {
                violations.push(format!(
                    "{}:{line}: {m} ({}) imports {dep} ({}), a layer above it",
                    f.display(),
                    LAYERS[mine].0,
                    LAYERS[theirs].0
                ));
            }
        }
    }
    assert!(violations.is_empty(), "layering violations:\n{}", violations.join("\n"));
}

#[test]
fn no_two_top_level_modules_import_each_other_even_around_a_cycle() {
    let mut files = Vec::new();
    rust_files(&src(), &mut files);
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let known: BTreeSet<String> = layer_of().keys().map(|s| s.to_string()).collect();
    for f in &files {
        let m = owner(f);
        let text = std::fs::read_to_string(f).unwrap();
        for (dep, _) in imports(&(production_code(&text) + &generated_code(&text))) {
            if dep != m && known.contains(&dep) {
                graph.entry(m.clone()).or_default().insert(dep);
            }
        }
    }
    // Depth-first search for a back edge; report the cycle's path.
    fn visit(
        n: &str,
        g: &BTreeMap<String, BTreeSet<String>>,
        state: &mut BTreeMap<String, u8>,
        path: &mut Vec<String>,
    ) -> Option<Vec<String>> {
        state.insert(n.to_string(), 1);
        path.push(n.to_string());
        for d in g.get(n).into_iter().flatten() {
            match state.get(d.as_str()) {
                Some(1) => {
                    let start = path.iter().position(|p| p == d).unwrap();
                    let mut cycle = path[start..].to_vec();
                    cycle.push(d.clone());
                    return Some(cycle);
                }
                Some(_) => {}
                None => {
                    if let Some(c) = visit(d, g, state, path) {
                        return Some(c);
                    }
                }
            }
        }
        path.pop();
        state.insert(n.to_string(), 2);
        None
    }
    let mut state = BTreeMap::new();
    for m in graph.keys() {
        if !state.contains_key(m.as_str())
            && let Some(cycle) = visit(m, &graph, &mut state, &mut Vec::new())
        {
            panic!("import cycle: {}", cycle.join(" → "));
        }
    }
}

/// The modules a piece of documentation names, in order, by first path segment.
fn named_modules(text: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for part in text.split('`').skip(1).step_by(2) {
        let first = part.split("::").next().unwrap_or("");
        if !first.is_empty()
            && first.chars().all(|c| c.is_ascii_lowercase() || c == '_')
            && !out.iter().any(|m| m == first)
        {
            out.push(first.to_owned());
        }
    }
    out
}

/// Each layer's modules as a sorted list, to compare with what a document says.
fn layers_as_lists() -> Vec<Vec<String>> {
    LAYERS
        .iter()
        .map(|(_, mods)| {
            let mut v: Vec<String> = mods.iter().map(|m| m.to_string()).collect();
            v.sort();
            v
        })
        .collect()
}

#[test]
fn the_crate_docs_and_the_architecture_page_list_the_layers_this_check_holds() {
    // src/lib.rs: "//! N. …" items, continued on indented lines.
    let lib = std::fs::read_to_string(src().join("lib.rs")).unwrap();
    let mut items: Vec<String> = Vec::new();
    for line in lib.lines().filter_map(|l| l.strip_prefix("//!")) {
        let t = line.trim_start();
        let numbered = t.split_once(". ").is_some_and(|(n, _)| !n.is_empty() && n.chars().all(|c| c.is_ascii_digit()));
        if numbered {
            items.push(t.to_owned());
        } else if line.starts_with("    ") && !items.is_empty() {
            items.last_mut().unwrap().push_str(t);
        }
    }
    let from_lib: Vec<Vec<String>> = items
        .iter()
        .map(|i| {
            let mut v = named_modules(i);
            v.retain(|m| LAYERS.iter().any(|(_, mods)| mods.contains(&m.as_str())));
            v.sort();
            v
        })
        .collect();
    assert_eq!(from_lib, layers_as_lists(), "src/lib.rs's layer list");
    // docs/architecture.md: the table's rows, the modules column.
    let page = std::fs::read_to_string(src().join("../docs/architecture.md")).unwrap();
    let rows: Vec<Vec<String>> = page
        .lines()
        .filter(|l| l.starts_with("| ") && !l.starts_with("| layer") && !l.starts_with("| #"))
        .filter_map(|l| l.split('|').nth(2).map(named_modules))
        .filter(|v| !v.is_empty() && v.iter().all(|m| LAYERS.iter().any(|(_, mods)| mods.contains(&m.as_str()))))
        .map(|mut v| {
            v.sort();
            v
        })
        .collect();
    assert_eq!(rows, layers_as_lists(), "docs/architecture.md's layer table");
}

#[test]
fn tests_come_last_in_every_file_so_the_cut_above_sees_all_production_code() {
    let mut files = Vec::new();
    rust_files(&src(), &mut files);
    for f in &files {
        let text = std::fs::read_to_string(f).unwrap();
        let Some(i) = text.find(TEST_MODULE) else { continue };
        // After the first test item only test items and their contents follow: no
        // further top-level `pub` item.
        let after = &text[i..];
        let stray: Vec<&str> = after.lines().filter(|l| l.starts_with("pub ") || l.starts_with("impl ")).collect();
        assert!(stray.is_empty(), "{}: production items after #[cfg(test)]: {stray:?}", f.display());
    }
}

#[test]
fn no_source_file_is_longer_than_about_900_lines() {
    let mut files = Vec::new();
    rust_files(&src(), &mut files);
    let long: Vec<String> = files
        .iter()
        .filter_map(|f| {
            let n = std::fs::read_to_string(f).unwrap().lines().count();
            (n > 900).then(|| format!("{}: {n} lines", f.display()))
        })
        .collect();
    assert!(long.is_empty(), "split these: {long:?}");
}

#[test]
fn the_checker_sees_an_upward_import_and_ignores_comments_and_tests() {
    let code = "use crate::model::PodStatus;\n// crate::app is only named here\nfn f() { crate::cli::run() }\n#[cfg(test)]\nfn g() { crate::grpc::x() }\n#[cfg(test)]\nmod tests { use crate::sim::SimRuntime; }\n";
    let found: Vec<String> = imports(&production_code(code)).into_iter().map(|(m, _)| m).collect();
    assert_eq!(found, ["model", "cli", "grpc"], "a test-only item inside production code still counts");
}

/// `text` with comments and the contents of string and char literals blanked (newlines
/// kept), so that braces are only the code's.
fn code_only(text: &str) -> String {
    let b = text.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let blank = |c: u8| if c == b'\n' { b'\n' } else { b' ' };
    let mut i = 0;
    while i < b.len() {
        let rest = &b[i..];
        if rest.starts_with(b"//") {
            while i < b.len() && b[i] != b'\n' {
                out.push(b' ');
                i += 1;
            }
        } else if rest.starts_with(b"/*") {
            let end = text[i + 2..].find("*/").map_or(b.len(), |e| i + 2 + e + 2);
            out.extend(b[i..end].iter().map(|&c| blank(c)));
            i = end;
        } else if b[i] == b'r' && (rest.starts_with(b"r\"") || rest.starts_with(b"r#")) && !ident_byte(b, i) {
            // A raw string: r"…", r#"…"#, …
            let hashes = rest[1..].iter().take_while(|&&c| c == b'#').count();
            if rest.get(1 + hashes) != Some(&b'"') {
                out.push(b[i]);
                i += 1;
                continue;
            }
            let close = format!("\"{}", "#".repeat(hashes));
            let start = i + 2 + hashes;
            let end = text[start..].find(&close).map_or(b.len(), |e| start + e + close.len());
            out.extend(b[i..end].iter().map(|&c| blank(c)));
            i = end;
        } else if b[i] == b'"' {
            out.push(b' ');
            i += 1;
            while i < b.len() && b[i] != b'"' {
                let n = if b[i] == b'\\' { 2 } else { 1 };
                out.extend(b[i..(i + n).min(b.len())].iter().map(|&c| blank(c)));
                i += n;
            }
            out.push(b' ');
            i += 1;
        } else if b[i] == b'\'' {
            // A char literal ('x', '\n', '\u{7f}'), not a lifetime ('a).
            let len = if rest.get(1) == Some(&b'\\') {
                rest[2..].iter().position(|&c| c == b'\'').map(|p| p + 3)
            } else {
                let ch = text[i + 1..].chars().next().map_or(1, char::len_utf8);
                (rest.get(1 + ch) == Some(&b'\'')).then_some(ch + 2)
            };
            let len = len.unwrap_or(1);
            out.extend(std::iter::repeat_n(b' ', len));
            i += len;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).expect("ASCII blanks keep the text UTF-8")
}

fn ident_byte(b: &[u8], i: usize) -> bool {
    i > 0 && (b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'_')
}

/// The functions in `text` with a body, as (name, first line, lines from `fn` to the
/// closing brace).
fn function_lengths(text: &str) -> Vec<(String, usize, usize)> {
    let code = code_only(text);
    let b = code.as_bytes();
    let line_of = |at: usize| code[..at].matches('\n').count() + 1;
    let mut out = Vec::new();
    let mut from = 0;
    while let Some(i) = code[from..].find("fn ") {
        let at = from + i;
        from = at + 3;
        if ident_byte(b, at) {
            continue;
        }
        let name: String =
            code[at + 3..].trim_start().chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect();
        // The body opens at the first `{` before any `;` (a declaration has none).
        let Some(open) = code[at..].find(['{', ';']).map(|j| at + j).filter(|&j| b[j] == b'{') else { continue };
        let mut depth = 0usize;
        let mut close = None;
        for (j, &c) in b.iter().enumerate().skip(open) {
            match c {
                b'{' => depth += 1,
                b'}' => {
                    depth -= 1;
                    if depth == 0 {
                        close = Some(j);
                        break;
                    }
                }
                _ => {}
            }
        }
        let Some(close) = close else { continue };
        if !name.is_empty() {
            out.push((name, line_of(at), line_of(close) - line_of(at) + 1));
        }
    }
    out
}

/// Whether a source file holds only test code (a `tests` module kept in its own file).
fn test_only(file: &Path) -> bool {
    file.file_name().is_some_and(|n| n == "tests.rs") || file.components().any(|c| c.as_os_str() == "tests")
}

#[test]
fn no_function_outside_tests_is_longer_than_100_lines() {
    let mut files = Vec::new();
    rust_files(&src(), &mut files);
    let mut long = Vec::new();
    for f in files.iter().filter(|f| !test_only(f.strip_prefix(src()).unwrap())) {
        let text = std::fs::read_to_string(f).unwrap();
        let code = match text.find(TEST_MODULE) {
            Some(i) => &text[..i],
            None => &text,
        };
        for (name, line, n) in function_lengths(code) {
            if n > 100 {
                long.push(format!("{}:{line} {name}: {n} lines", f.strip_prefix(src()).unwrap().display()));
            }
        }
    }
    assert!(long.is_empty(), "split these by what they do: {long:#?}");
}

#[test]
fn the_length_check_counts_a_body_braces_in_strings_comments_and_chars_aside() {
    let code = "pub async fn a<T: Fn() -> u8>(x: T) -> u8 {\n    let s = \"}\"; // }\n    let r = r#\"{\"#;\n    let c = '{';\n    x()\n}\nfn decl(&self);\nfn b<'a>(s: &'a str) -> &'a str { s }\n";
    let found: Vec<(String, usize, usize)> = function_lengths(code);
    assert_eq!(found, [("a".into(), 1, 6), ("b".into(), 8, 1)]);
}

/// The rows `| n | call | file | … |` of a path table; the call without its link.
fn path_rows(text: &str) -> Vec<(String, String, String)> {
    text.lines()
        .map(|l| l.trim_start_matches("//!").trim())
        .filter(|l| l.starts_with("| ") && l.ends_with(" |"))
        .filter_map(|l| {
            let cells: Vec<&str> = l.trim_matches('|').split(" | ").map(str::trim).collect();
            let n: usize = cells.first()?.parse().ok()?;
            let call = cells.get(1)?.split('`').nth(1)?.to_owned();
            let file = cells.get(2)?.trim_matches('`').to_owned();
            Some((n.to_string(), call, file))
        })
        .collect()
}

#[test]
fn the_path_in_the_crate_docs_is_the_architecture_pages_and_each_file_defines_its_call() {
    let root = src();
    let lib = std::fs::read_to_string(root.join("lib.rs")).unwrap();
    let page = std::fs::read_to_string(root.join("../docs/architecture.md")).unwrap();
    let page = &page[page.find("## One event's path").expect("the page has the path")..];
    let page = &page[..page[3..].find("\n## ").map_or(page.len(), |i| i + 3)];
    let (in_lib, in_page) = (path_rows(&lib), path_rows(page));
    assert!(in_lib.len() >= 10, "the crate docs hold the path: {in_lib:?}");
    assert_eq!(in_lib, in_page, "src/lib.rs and docs/architecture.md tell the same path");
    for (i, (n, call, file)) in in_lib.iter().enumerate() {
        assert_eq!(*n, (i + 1).to_string(), "steps are numbered in order");
        let code = std::fs::read_to_string(root.join(file)).unwrap_or_else(|e| panic!("step {n}: {file}: {e}"));
        let name = call.rsplit("::").next().unwrap();
        let defines = code.contains(&format!("fn {name}(")) || code.contains(&format!("fn {name}<"));
        assert!(defines, "step {n}: {file} defines no `fn {name}` ({call})");
    }
}

#[test]
fn the_path_check_reads_calls_and_files_out_of_both_tables() {
    let lib = "//! | 1 | [`A::b`](crate::a::A::b) | `a.rs` | x |\n//! |---|---|---|---|";
    let md = "| 1 | `A::b` | `a.rs` | y |";
    assert_eq!(path_rows(lib), [("1".to_owned(), "A::b".to_owned(), "a.rs".to_owned())]);
    assert_eq!(path_rows(lib), path_rows(md));
}

/// Calls of `fn name` in the production code of the files under `dir`, each with the
/// function it is called from.
fn callers_of(dir: &Path, name: &str) -> Vec<(String, String)> {
    let mut files = Vec::new();
    rust_files(dir, &mut files);
    let mut found = Vec::new();
    for file in files.iter().filter(|f| !test_only(f)) {
        let text = production_code(&std::fs::read_to_string(file).unwrap());
        let code = code_only(&text);
        let mut current = String::from("(top)");
        for line in code.lines() {
            if let Some(i) = line.find("fn ") {
                let rest = &line[i + 3..];
                let end = rest.find(|c: char| !(c.is_alphanumeric() || c == '_')).unwrap_or(rest.len());
                if end > 0 {
                    current = rest[..end].to_owned();
                }
            }
            if line.contains(&format!(".{name}(")) {
                found.push((file.strip_prefix(dir).unwrap().display().to_string(), current.clone()));
            }
        }
    }
    found
}

#[test]
fn the_relister_drains_its_inbox_in_one_place_its_turn_so_no_step_calls_back() {
    // `apply` (row 12) draining the inbox (row 5) again was the path's one back call.
    let calls = callers_of(&src().join("pleg"), "drain_inbox");
    assert_eq!(calls, [("generic/run_loop.rs".to_owned(), "run".to_owned())], "{calls:?}");
}
