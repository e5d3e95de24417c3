//! The project explains itself and keeps its shape: every path ARCHITECTURE.md
//! names exists, every numbered invariant is cited at the code that keeps it,
//! no source file grows past 600 lines (two concerns, usually), and the
//! modules below the front ends know nothing of the editor protocol or HTTP
//! serving.

use std::path::{Path, PathBuf};

const MOST_LINES: usize = 600;

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn architecture() -> String {
    std::fs::read_to_string(repo().join("ARCHITECTURE.md")).unwrap()
}

/// Every `.rs` file under `dir`, with its path from the repository root.
fn sources(dir: &Path) -> Vec<(PathBuf, String)> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            out.extend(sources(&path));
        } else if path.extension().is_some_and(|e| e == "rs") {
            let text = std::fs::read_to_string(&path).unwrap();
            out.push((path.strip_prefix(repo()).unwrap().to_owned(), text));
        }
    }
    out
}

/// What ARCHITECTURE.md writes in backticks that looks like a path.
fn named_paths(text: &str) -> Vec<String> {
    text.split('`')
        .skip(1)
        .step_by(2)
        .filter(|s| !s.contains(char::is_whitespace) && !s.contains("::") && !s.starts_with('-'))
        .filter(|s| {
            [".rs", ".md", ".toml", ".sh", ".ts", ".lua"]
                .iter()
                .any(|ext| s.ends_with(ext))
                || (s.ends_with('/') && s.len() > 1)
        })
        .map(str::to_owned)
        .collect()
}

/// Every file and folder of the repository (no build output, no installed
/// packages), from its root.
fn repository_paths(dir: &Path, out: &mut Vec<String>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if name.starts_with('.') || ["target", "node_modules", "out"].contains(&name.as_str()) {
            continue;
        }
        out.push(path.strip_prefix(repo()).unwrap().display().to_string());
        if path.is_dir() {
            repository_paths(&path, out);
        }
    }
}

/// Whether `named` is a file or folder of the repository, as written from
/// the root or from the folder its section is about (`engine/recent.rs`),
/// a module file also as its folder (`wire.rs` for `wire/mod.rs`).
fn exists(named: &str, all: &[String]) -> bool {
    let named = named.trim_end_matches('/');
    let as_folder = named.strip_suffix(".rs").map(|m| format!("{m}/mod.rs"));
    let matches = |path: &String, want: &str| path == want || path.ends_with(&format!("/{want}"));
    all.iter()
        .any(|path| matches(path, named) || as_folder.as_deref().is_some_and(|f| matches(path, f)))
}

#[test]
fn every_path_architecture_names_exists() {
    let mut all = Vec::new();
    repository_paths(repo(), &mut all);
    let missing: Vec<String> = named_paths(&architecture())
        .into_iter()
        .filter(|named| !exists(named, &all))
        .collect();
    assert!(
        missing.is_empty(),
        "ARCHITECTURE.md names what is not there: {missing:?}"
    );
}

/// The numbers of the invariants ARCHITECTURE.md lists.
fn invariants(text: &str) -> Vec<u32> {
    let section = text
        .split("## Invariants")
        .nth(1)
        .expect("an Invariants section")
        .split("\n## ")
        .next()
        .unwrap();
    section
        .lines()
        .filter_map(|line| line.split_once(". **"))
        .filter_map(|(number, _)| number.trim().parse().ok())
        .collect()
}

#[test]
fn every_invariant_is_cited_at_the_code_that_keeps_it() {
    let numbers = invariants(&architecture());
    assert!(numbers.len() >= 18, "{numbers:?}");
    let code: String = sources(&repo().join("src"))
        .into_iter()
        .map(|(_, text)| text.to_lowercase())
        .collect::<Vec<_>>()
        .join("\n");
    let cited = |n: u32| {
        let needle = format!("invariant {n}");
        code.match_indices(&needle).any(|(at, _)| {
            !code[at + needle.len()..]
                .chars()
                .next()
                .is_some_and(|c| c.is_ascii_digit())
        })
    };
    let uncited: Vec<u32> = numbers.into_iter().filter(|&n| !cited(n)).collect();
    assert!(
        uncited.is_empty(),
        "invariants no code cites (\"invariant N\"): {uncited:?}"
    );
}

#[test]
fn no_source_file_is_over_600_lines() {
    let long: Vec<String> = sources(&repo().join("src"))
        .into_iter()
        .filter(|(_, text)| text.lines().count() > MOST_LINES)
        .map(|(path, text)| format!("{} ({} lines)", path.display(), text.lines().count()))
        .collect();
    assert!(long.is_empty(), "split along the concern: {long:?}");
}

#[test]
fn modules_below_the_front_ends_know_no_editor_protocol_or_http_server() {
    let front_ends = ["src/lsp/", "src/gateway/", "src/cli/", "src/main.rs"];
    let leaks: Vec<String> = sources(&repo().join("src"))
        .into_iter()
        .filter(|(path, _)| !front_ends.iter().any(|f| path.starts_with(f)))
        .filter(|(_, text)| text.contains("tower_lsp_server") || text.contains("axum"))
        .map(|(path, _)| path.display().to_string())
        .collect();
    assert!(leaks.is_empty(), "{leaks:?}");
}
