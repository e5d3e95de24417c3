//! The project explains itself and keeps its shape: every path ARCHITECTURE.md
//! names exists, every numbered invariant is cited at the code that keeps it,
//! no source file grows past 600 lines (two concerns, usually), no function
//! outside test code past 60, no module reaches back into a sibling that
//! reaches it (no cycles), no crate depends on one of its own layer or above
//! (the order ARCHITECTURE.md writes), the modules below the front ends know nothing
//! of the editor protocol or HTTP serving, and the tests leave time to the
//! paused clock: no measured time compared in an assertion outside the one
//! scaling helper, no fixed sleep in an editor test.

#[path = "tidy/functions.rs"]
mod functions;
#[path = "tidy/layers.rs"]
mod layers;
#[path = "tidy/module_graph.rs"]
mod module_graph;
#[path = "tidy/test_timing.rs"]
mod test_timing;

use std::path::{Path, PathBuf};

const MOST_LINES: usize = 600;
/// The most lines a function outside test code may take, from its signature
/// to its closing brace (read by a Rust parser, `tidy/functions.rs`).
const MOST_FUNCTION_LINES: usize = 60;

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

/// Every `.rs` file of the project's code: the front ends (`src/`) and the
/// layers (`crates/`).
fn code() -> Vec<(PathBuf, String)> {
    let mut out = sources(&repo().join("src"));
    out.extend(sources(&repo().join("crates")));
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
/// a module file also as its folder (`wire.rs` for `wire/mod.rs`), and a
/// crate's module by the crate's name (`router/plan.rs` for
/// `crates/router/src/plan.rs`).
fn exists(named: &str, all: &[String]) -> bool {
    let named = named.trim_end_matches('/');
    let in_crate = named
        .split_once('/')
        .map(|(name, module)| format!("crates/{name}/src/{module}"));
    let matches = |path: &String, want: &str| path == want || path.ends_with(&format!("/{want}"));
    [Some(named.to_owned()), in_crate]
        .into_iter()
        .flatten()
        .flat_map(|want| {
            let as_folder = want.strip_suffix(".rs").map(|m| format!("{m}/mod.rs"));
            [Some(want), as_folder]
        })
        .flatten()
        .any(|want| all.iter().any(|path| matches(path, &want)))
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
    let code: String = code()
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

/// Providers are built only inside the router, which asks the rules in force
/// and leaves an audit line at every send (ARCHITECTURE.md invariant 25);
/// its plans and direct senders are the crate's own (`pub(crate)`).
#[test]
fn only_the_router_builds_a_provider() {
    let own =
        |path: &Path| path.starts_with("crates/router") || path.starts_with("crates/providers");
    for (path, code) in code() {
        if own(&path) {
            continue;
        }
        for call in ["switchyard_providers::build(", "providers::build("] {
            assert!(
                !code.contains(call),
                "{} builds a provider ({call}): only the router may",
                path.display()
            );
        }
    }
}

#[test]
fn no_source_file_is_over_600_lines() {
    let long: Vec<String> = code()
        .into_iter()
        .filter(|(_, text)| text.lines().count() > MOST_LINES)
        .map(|(path, text)| format!("{} ({} lines)", path.display(), text.lines().count()))
        .collect();
    assert!(long.is_empty(), "split along the concern: {long:?}");
}

#[test]
fn modules_below_the_front_ends_know_no_editor_protocol_or_http_server() {
    let leaks: Vec<String> = sources(&repo().join("crates"))
        .into_iter()
        .filter(|(_, text)| text.contains("tower_lsp_server") || text.contains("axum"))
        .map(|(path, _)| path.display().to_string())
        .collect();
    assert!(leaks.is_empty(), "{leaks:?}");
}

#[test]
fn no_module_cycles() {
    let circle = [
        ("src/a/mod.rs", "mod x;\nmod y;"),
        ("src/a/x.rs", "use super::y::{Y, self};"),
        ("src/a/y.rs", "// crate::a::z\nfn f() -> crate::a::x::X {}"),
        ("src/a/z.rs", "use crate::a::y;"),
    ]
    .map(|(path, text)| (PathBuf::from(path), text.to_owned()));
    let cycle = module_graph::a_cycle(&module_graph::sibling_edges(&circle));
    assert_eq!(
        cycle.as_deref(),
        Some(&["a::x", "a::y", "a::x"].map(String::from)[..])
    );
    // One graph per crate: the front ends' and each layer's.
    let mut roots = vec![repo().join("src")];
    for entry in std::fs::read_dir(repo().join("crates")).unwrap() {
        roots.push(entry.unwrap().path().join("src"));
    }
    let graphs: Vec<(PathBuf, module_graph::Graph)> = roots
        .into_iter()
        .map(|root| {
            let graph = module_graph::sibling_edges(&sources(&root));
            (root, graph)
        })
        .collect();
    let router = &graphs
        .iter()
        .find(|(root, _)| root.ends_with("router/src"))
        .unwrap()
        .1;
    assert!(
        router.get("run").is_some_and(|to| to.contains("plan")),
        "the graph reads the crate's paths: {router:?}"
    );
    for (root, graph) in &graphs {
        if let Some(cycle) = module_graph::a_cycle(graph) {
            panic!(
                "modules of {} that reach each other: {}",
                root.display(),
                cycle.join(" -> ")
            );
        }
    }
}

#[test]
fn no_function_is_over_60_lines() {
    let sample = "fn short() {\n    let c = '{';\n}\n\
                  #[cfg(test)]\nmod tests {\n    fn long() {\n\n\n\n    }\n}\n\
                  impl X {\n    /// Docs.\n    fn method(&self) {\n\n    }\n}\n";
    let (found, _) = functions::functions(sample).unwrap();
    let lengths: Vec<(&str, usize)> = found.iter().map(|f| (f.name.as_str(), f.lines)).collect();
    assert_eq!(lengths, [("short", 3), ("method", 3)]);
    let long = functions::longer_than(&code(), MOST_FUNCTION_LINES);
    assert!(long.is_empty(), "split into steps: {long:?}");
}

/// Where a measured time may be compared with a bound: the helper that scales
/// it to the machine.
const TIMING_HELPER: &str = "tests/support/timing.rs";

#[test]
fn no_test_compares_a_measured_time_outside_the_scaling_helper() {
    let flagged = |text: &str| -> Vec<usize> {
        test_timing::assertion_conditions(&test_timing::blank_literals(text))
            .into_iter()
            .filter(|(_, condition)| test_timing::compares_a_time(condition))
            .map(|(line, _)| line)
            .collect()
    };
    let caught = "assert!(gap <= Duration::from_millis(600), \"{gap:?}\");\n\
                  assert!(reply.elapsed < ceiling);\n\
                  assert!(secondary.requests()[0].at >= last);\n\
                  assert_eq!(started.elapsed(), Duration::ZERO);\n\
                  assert!(Instant::now() < deadline, \"late\");";
    assert_eq!(flagged(caught), [1, 2, 3, 4, 5]);
    let let_through = "assert!(ok, \"took {:?}\", started.elapsed());\n\
                       assert_eq!(count, 3, \"at {at:?}\"); // elapsed\n\
                       assert!(matches!(c, '\"' | 'x'), \"{:?}\", Instant::now());\n\
                       assert!(text.contains(r#\"elapsed\"#));\n\
                       assert_eq!(error.retry_after, Some(Duration::from_secs(7)));\n\
                       assert!((got.at, got.last) == (want.at, want.last));";
    assert_eq!(flagged(let_through), [0usize; 0]);

    let comparisons: Vec<String> = sources(&repo().join("tests"))
        .into_iter()
        .filter(|(path, _)| path != Path::new(TIMING_HELPER) && !path.starts_with("tests/tidy"))
        .flat_map(|(path, text)| {
            flagged(&text)
                .into_iter()
                .map(move |line| format!("{}:{line}", path.display()))
        })
        .collect();
    assert!(
        comparisons.is_empty(),
        "a time compared in an assertion: check the promise on the paused clock \
         in src/, assert order, or go through {TIMING_HELPER}: {comparisons:?}"
    );
}

/// The editor tests: the Rust drivers, the browser they share and the
/// Neovim scripts they run.
fn editor_tests() -> Vec<(PathBuf, String, bool)> {
    let rust = sources(&repo().join("tests"))
        .into_iter()
        .filter(|(path, _)| {
            let name = path.file_name().unwrap().to_string_lossy();
            name.starts_with("editor_") || name == "dashboard.rs" || name == "browser.rs"
        })
        .map(|(path, text)| (path, text, false));
    let nvim = repo().join("editors/nvim/test");
    let lua = std::fs::read_dir(&nvim).unwrap().map(|entry| {
        let path = entry.unwrap().path();
        let text = std::fs::read_to_string(&path).unwrap();
        (path.strip_prefix(repo()).unwrap().to_owned(), text, true)
    });
    rust.chain(lua).collect()
}

#[test]
fn no_editor_test_sleeps_for_a_fixed_time() {
    let rust = "tokio::time::sleep(Duration::from_millis(300)).await;\n\
                let shown = screen();\n\
                poll::eventually(PATIENCE, async || check()).await;\n\
                // sleep(1) in a comment\n\
                std::thread::sleep(PACE);";
    assert_eq!(test_timing::fixed_sleeps(rust, false), [1, 5]);
    let lua = "vim.wait(500)\n\
               vim.wait(H.scaled(500), function() return done end, 50)\n\
               vim.wait(H.scaled(8000))\n\
               vim.uv.sleep(100) -- pace\n\
               vim.wait(1000, function()\n  return done\nend)";
    assert_eq!(test_timing::fixed_sleeps(lua, true), [1, 3, 4]);

    let found: Vec<String> = editor_tests()
        .into_iter()
        .flat_map(|(path, text, lua)| {
            test_timing::fixed_sleeps(&text, lua)
                .into_iter()
                .map(move |line| format!("{}:{line}", path.display()))
        })
        .collect();
    assert!(
        found.is_empty(),
        "poll until the effect shows (tests/support/poll.rs, vim.wait with a condition) \
         instead of sleeping: {found:?}"
    );
}

#[test]
fn every_crate_depends_only_on_the_layers_below_it() {
    let order = layers::order(&architecture());
    // The check refuses an arrow up, and one within a line.
    let up = [(
        "completion".to_owned(),
        vec!["router".to_owned(), "base".to_owned()],
    )];
    assert_eq!(layers::not_down(&order, &up), ["completion → router"]);
    let crates = layers::workspace(repo());
    assert!(crates.len() >= 14, "{crates:?}");
    let wrong = layers::not_down(&order, &crates);
    assert!(
        wrong.is_empty(),
        "against ARCHITECTURE.md's layer order: {wrong:?}"
    );
}

/// Code names another crate by its own path: no crate imported under a
/// module name (`use switchyard_config as config;`) and no layer re-exported
/// by the front ends, so every cross-crate edge reads as one.
fn crate_aliases(code: &str) -> Vec<usize> {
    code.lines()
        .enumerate()
        .filter(|(_, line)| {
            let line = line.trim_start();
            let imports =
                line.starts_with("use switchyard_") || line.starts_with("pub use switchyard_");
            let aliased = line
                .split_once(" as ")
                .is_some_and(|(path, _)| !path.contains("::"));
            imports && (aliased || line.starts_with("pub use switchyard_"))
        })
        .map(|(at, _)| at + 1)
        .collect()
}

#[test]
fn no_crate_is_named_under_an_alias() {
    let sample = "use switchyard_config as config;\n\
                  use switchyard_router::status as router_status;\n\
                  pub use switchyard_base::{clock, task};\n\
                  use switchyard_config::Config;";
    assert_eq!(crate_aliases(sample), [1, 3]);
    let found: Vec<String> = code()
        .into_iter()
        .flat_map(|(path, text)| {
            crate_aliases(&text)
                .into_iter()
                .map(move |line| format!("{}:{line}", path.display()))
        })
        .collect();
    assert!(
        found.is_empty(),
        "name the crate (switchyard_x::...): {found:?}"
    );
}
