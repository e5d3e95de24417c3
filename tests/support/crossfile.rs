//! A cross-file completion benchmark built from real code nobody here wrote:
//! pinned versions of well-known crates, their sources as published on
//! crates.io. A task masks one line that uses an identifier defined in another
//! file of the same crate, and named nowhere else in the line's own file; the
//! editor session has that other file open, the user having read the
//! definition there, before the cursor lands on the masked line.
//!
//! The crates are this project's own dependencies at the versions pinned here,
//! so after `cargo build` they are in cargo's download cache; otherwise they
//! are downloaded from crates.io. Either way the archive's SHA-256 is checked.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::json;

use super::infilling::{self, Attempt};
use super::lsp_client::LspClient;

pub struct Crate {
    pub name: &'static str,
    pub version: &'static str,
    pub sha256: &'static str,
}

pub const CRATES: [Crate; 5] = [
    Crate {
        name: "http",
        version: "1.5.0",
        sha256: "918d3568bebf352712bc2ef3d46a8bcf1a75b373be6539de198e9105cbbf9ce0",
    },
    Crate {
        name: "url",
        version: "2.5.8",
        sha256: "ff67a8a4397373c3ef660812acab3268222035010ab8680ec4215f38ba3d0eed",
    },
    Crate {
        name: "ropey",
        version: "1.6.1",
        sha256: "93411e420bcd1a75ddd1dc3caf18c23155eda2c090631a85af21ba19e97093b5",
    },
    Crate {
        name: "regex-syntax",
        version: "0.8.12",
        sha256: "d902046e6a28a1e4c3cab97258a0ce11e994903f01c2d97a9447a0b3df85f4f6",
    },
    Crate {
        name: "indexmap",
        version: "2.14.2",
        sha256: "cc4e190f5d26ca7051642629da2c52fc03bde85a03197c99408dcd291734c855",
    },
];

impl Crate {
    fn id(&self) -> String {
        format!("{}-{}", self.name, self.version)
    }

    /// The crate's unpacked sources under `work`, fetched and checked first
    /// when they are not there yet.
    pub fn sources(&self, work: &Path) -> PathBuf {
        let unpacked = work.join(self.id());
        if unpacked.join("Cargo.toml").exists() {
            return unpacked;
        }
        // Tests in one binary run at once: each unpacks into its own
        // directory and the first rename wins, so none sees a half-written tree.
        let staging = work.join(format!(
            ".{}-{}-{:?}",
            self.id(),
            std::process::id(),
            std::thread::current().id()
        ));
        std::fs::create_dir_all(&staging).expect("the crates directory can be created");
        let archive = cached_archive(&self.id()).unwrap_or_else(|| {
            let target = staging.join(format!("{}.crate", self.id()));
            let url = format!(
                "https://static.crates.io/crates/{}/{}.crate",
                self.name,
                self.id()
            );
            run(Command::new("curl")
                .args(["-sSfL", "-o"])
                .arg(&target)
                .arg(&url));
            target
        });
        let digest = run(Command::new("sha256sum").arg(&archive));
        assert!(
            digest.starts_with(self.sha256),
            "{} does not have the pinned SHA-256 {}",
            archive.display(),
            self.sha256
        );
        run(Command::new("tar")
            .arg("-xzf")
            .arg(&archive)
            .arg("-C")
            .arg(&staging));
        if std::fs::rename(staging.join(self.id()), &unpacked).is_err() {
            assert!(
                unpacked.join("Cargo.toml").exists(),
                "{} could not be put in place",
                unpacked.display()
            );
        }
        let _ = std::fs::remove_dir_all(&staging);
        unpacked
    }
}

/// The archive in cargo's download cache, if cargo fetched it already.
fn cached_archive(id: &str) -> Option<PathBuf> {
    let home = std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cargo")))?;
    std::fs::read_dir(home.join("registry/cache"))
        .ok()?
        .flatten()
        .map(|registry| registry.path().join(format!("{id}.crate")))
        .find(|archive| archive.exists())
}

fn run(command: &mut Command) -> String {
    let output = command
        .output()
        .unwrap_or_else(|e| panic!("{command:?}: {e}"));
    assert!(
        output.status.success(),
        "{command:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

#[derive(Clone, Debug)]
pub struct Task {
    pub id: String,
    /// The file that defines the identifier, and the definition's line.
    pub definition_path: String,
    pub definition_text: String,
    pub definition_line: u32,
    /// The file with the masked line: its text with the line emptied to its
    /// indentation, where the cursor is.
    pub path: String,
    pub document: String,
    pub line: u32,
    pub indent: u32,
    /// The masked line without its indentation.
    pub expected: String,
    /// The name it uses that only the other file defines.
    pub identifier: String,
}

impl Task {
    /// The completion names the identifier only the other file defines: the
    /// model knew it from the repository context (or guessed it).
    pub fn names_identifier(&self, completion: &str) -> bool {
        words(completion).any(|w| w == self.identifier)
    }

    /// The first line of the completion is the masked line (surrounding
    /// whitespace aside).
    pub fn exact(&self, completion: &str) -> bool {
        let first = completion.lines().find(|l| !l.trim().is_empty());
        first.is_some_and(|l| l.trim() == self.expected.trim())
    }
}

/// Every `.rs` file under `src/`, as (path relative to the crate, text).
fn rust_files(root: &Path) -> Vec<(String, String)> {
    let mut files = Vec::new();
    let mut dirs = vec![root.join("src")];
    while let Some(dir) = dirs.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let text = std::fs::read_to_string(&path).unwrap_or_default();
                let relative = path.strip_prefix(root).expect("under the crate");
                files.push((relative.display().to_string(), text));
            }
        }
    }
    files.sort();
    files
}

fn words(text: &str) -> impl Iterator<Item = &str> {
    text.split(|c: char| !(c.is_alphanumeric() || c == '_'))
        .filter(|w| w.starts_with(|c: char| c.is_alphabetic() || c == '_'))
}

/// The item a line defines (`fn`, `struct`, `enum`, `trait`, `type`, `const`,
/// `static`, `macro_rules!`), after visibility and qualifiers.
fn defined(line: &str) -> Option<&str> {
    let mut rest = line.trim_start();
    for prefix in [
        "pub(crate) ",
        "pub(super) ",
        "pub ",
        "const ",
        "unsafe ",
        "async ",
    ] {
        rest = rest.strip_prefix(prefix).unwrap_or(rest);
    }
    let kinds = [
        "fn ",
        "struct ",
        "enum ",
        "trait ",
        "type ",
        "const ",
        "static ",
        "macro_rules! ",
    ];
    let after = kinds.iter().find_map(|k| rest.strip_prefix(k))?;
    words(after).next().filter(|name| after.starts_with(name))
}

/// Up to `per_crate` tasks from the crate at `root`, the same for the same seed.
pub fn tasks(name: &str, root: &Path, per_crate: usize, seed: u64) -> Vec<Task> {
    let files = rust_files(root);
    // Names defined exactly once in the crate, long enough to be specific.
    let mut definitions: HashMap<&str, Vec<(usize, usize)>> = HashMap::new();
    for (f, (_, text)) in files.iter().enumerate() {
        for (l, line) in text.lines().enumerate() {
            if let Some(name) = defined(line).filter(|n| n.len() >= 5) {
                definitions.entry(name).or_default().push((f, l));
            }
        }
    }
    definitions.retain(|_, places| places.len() == 1);
    let mut candidates: Vec<Candidate> = Vec::new();
    for (f, (_, text)) in files.iter().enumerate() {
        let lines: Vec<&str> = text.lines().collect();
        let counts = word_counts(text);
        for (l, line) in lines.iter().enumerate() {
            let code = line.trim();
            let skipped = ["//", "use ", "pub use ", "#", "mod ", "pub mod ", "*", "}"];
            if !(15..=90).contains(&code.len()) || skipped.iter().any(|s| code.starts_with(s)) {
                continue;
            }
            // An identifier from another file, named nowhere else in this one
            // (in a fixed order: the same tasks for the same seed).
            let mut in_line: Vec<&str> = words(line).collect();
            in_line.sort();
            in_line.dedup();
            let used = in_line.iter().find_map(|w| {
                let &(df, dl) = definitions.get(w)?.first()?;
                let only_here = counts.get(w) == Some(&words(line).filter(|x| x == w).count());
                (df != f && only_here).then_some((df, dl, w.to_string()))
            });
            if let Some((df, dl, name)) = used {
                candidates.push((f, l, df, dl, name));
            }
        }
    }
    let mut rng = fastrand::Rng::with_seed(seed);
    rng.shuffle(&mut candidates);
    let mut files_used = HashSet::new();
    let mut chosen = Vec::new();
    // One task per file first, so a crate's largest file does not dominate.
    for round in 0..2 {
        for candidate in &candidates {
            let (f, l) = (candidate.0, candidate.1);
            if chosen.len() == per_crate {
                break;
            }
            if chosen.iter().any(|c: &Candidate| (c.0, c.1) == (f, l))
                || (round == 0 && !files_used.insert(f))
            {
                continue;
            }
            chosen.push(candidate.clone());
        }
    }
    chosen
        .into_iter()
        .map(|(f, l, df, dl, identifier)| {
            let (path, text) = &files[f];
            let line = text.lines().nth(l).expect("the line");
            let indent = line.len() - line.trim_start().len();
            let mut document: Vec<&str> = text.lines().collect();
            document[l] = &line[..indent];
            Task {
                id: format!("{name}/{path}:{}", l + 1),
                definition_path: files[df].0.clone(),
                definition_text: files[df].1.clone(),
                definition_line: dl as u32,
                path: path.clone(),
                document: document.join("\n") + "\n",
                line: l as u32,
                indent: indent as u32,
                expected: line.trim().to_owned(),
                identifier,
            }
        })
        .collect()
}

/// (file, line, defining file, definition line, identifier)
type Candidate = (usize, usize, usize, usize, String);

fn word_counts(text: &str) -> HashMap<&str, usize> {
    let mut counts = HashMap::new();
    for w in words(text) {
        *counts.entry(w).or_default() += 1;
    }
    counts
}

/// Runs one task the way an editor session goes: the defining file is open
/// and the user reads the definition for `reading`; then the file with the
/// masked line opens, the cursor lands there, `idle` passes, and the request
/// comes. Both files are closed afterwards.
pub async fn attempt(
    client: &mut LspClient,
    task: &Task,
    crate_name: &str,
    reading: Duration,
    idle: Duration,
) -> Attempt {
    let uri = |path: &str| format!("file:///crates/{crate_name}/{path}");
    let (definition, masked) = (uri(&task.definition_path), uri(&task.path));
    client.open(&definition, &task.definition_text).await;
    client
        .reveal_cursor(&definition, task.definition_line, 0)
        .await;
    tokio::time::sleep(reading).await;
    client.open(&masked, &task.document).await;
    client.reveal_cursor(&masked, task.line, task.indent).await;
    tokio::time::sleep(idle).await;
    let log_before = client.log().len();
    let started = Instant::now();
    let response = client
        .inline_completion(&masked, task.line, task.indent)
        .await;
    let latency = started.elapsed();
    for uri in [&definition, &masked] {
        client
            .notify(
                "textDocument/didClose",
                json!({"textDocument": {"uri": uri}}),
            )
            .await;
    }
    let completion = infilling::first_item(&response);
    let empty_reason = completion
        .is_empty()
        .then(|| infilling::empty_reason(&client.log(), log_before));
    Attempt {
        task_id: task.id.clone(),
        exact: task.exact(&completion),
        similarity: infilling::similarity(&completion, &task.expected),
        passed: false,
        completion,
        latency,
        empty_reason,
        work: infilling::Work::from_log(&client.log(), log_before),
    }
}
