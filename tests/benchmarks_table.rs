//! BENCHMARKS.md stays a table a reader can scan: each figure one row of three cells —
//! what, the latest figure, the command that gives it — with no story in the cells
//! (those go to docs/benchmark-history.md).

const MAX_FIGURE: usize = 160;

fn rows(section: &str) -> Vec<Vec<String>> {
    section
        .lines()
        .filter(|l| l.starts_with("| ") && !l.starts_with("|---"))
        .skip(1) // the header
        .map(|l| {
            // A `\|` inside a command is part of the cell.
            let l = l.replace("\\|", "\u{1}");
            l.trim().trim_matches('|').split(" | ").map(|c| c.trim().replace('\u{1}', "|")).collect()
        })
        .collect()
}

/// The text of the section under `heading`, to the next heading.
fn section(text: &str, heading: &str) -> String {
    let start = text.find(heading).unwrap_or_else(|| panic!("BENCHMARKS.md has no {heading:?}"));
    let rest = &text[start + heading.len()..];
    rest[..rest.find("\n## ").unwrap_or(rest.len())].to_owned()
}

fn sections() -> (String, String) {
    let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/BENCHMARKS.md")).unwrap();
    (section(&text, "## Figures"), section(&text, "## Targets"))
}

#[test]
fn every_figure_is_one_row_of_what_figure_and_command() {
    let (figures, _) = sections();
    let rows = rows(&figures);
    assert!(rows.len() >= 10, "the table holds the figures: {} rows", rows.len());
    for row in &rows {
        assert_eq!(row.len(), 3, "three cells, no more: {row:?}");
        let (what, figure, command) = (&row[0], &row[1], &row[2]);
        assert!(!what.is_empty() && !figure.is_empty(), "{row:?}");
        assert!(
            figure.chars().count() <= MAX_FIGURE,
            "a figure, not a story ({} chars): {figure}",
            figure.chars().count()
        );
        assert!(command.starts_with('`') || command == "the same", "the command that gives it: {row:?}");
    }
}

#[test]
fn every_target_says_where_it_stands_in_one_cell() {
    let (_, targets) = sections();
    let rows = rows(&targets);
    assert!(!rows.is_empty());
    for row in &rows {
        assert_eq!(row.len(), 2, "{row:?}");
        assert!(
            row[1].starts_with("met")
                || row[1].starts_with("not met")
                || row[1].starts_with("median")
                || row[1].starts_with("no loss"),
            "{row:?}"
        );
        assert!(row[1].chars().count() <= MAX_FIGURE, "{row:?}");
    }
}

#[test]
fn the_row_parser_keeps_an_escaped_bar_inside_a_command() {
    let t = "| what | latest figure | command |\n|---|---|---|\n| a | 1 ms | `x -- 'a\\|b'` |\n";
    assert_eq!(rows(t), [vec!["a".to_owned(), "1 ms".into(), "`x -- 'a|b'`".into()]]);
}
