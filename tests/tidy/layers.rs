//! The layer order ARCHITECTURE.md writes (its `layers` block, top down: a
//! crate may depend only on crates of the lines below its own) against every
//! workspace member's `Cargo.toml`. Cargo refuses only a cycle; this refuses
//! an arrow up, and one between two crates of the same line.

use std::collections::BTreeMap;
use std::path::Path;

/// Each crate's line in the order, top down (`lsp` for the root package).
pub fn order(architecture: &str) -> BTreeMap<String, usize> {
    let block = architecture
        .split("```layers\n")
        .nth(1)
        .expect("ARCHITECTURE.md has a ```layers block")
        .split("```")
        .next()
        .unwrap();
    block
        .lines()
        .enumerate()
        .flat_map(|(line, names)| names.split_whitespace().map(move |n| (n.to_owned(), line)))
        .collect()
}

/// Every workspace member by its layer name, with the switchyard crates its
/// manifest depends on (normal, dev and build dependencies alike).
pub fn workspace(root: &Path) -> Vec<(String, Vec<String>)> {
    let manifest = |dir: &Path| -> toml::Table {
        let text = std::fs::read_to_string(dir.join("Cargo.toml")).unwrap();
        text.parse().unwrap()
    };
    let root_manifest = manifest(root);
    let members = root_manifest["workspace"]["members"].as_array().unwrap();
    members
        .iter()
        .map(|member| {
            let table = manifest(&root.join(member.as_str().unwrap()));
            let name = table["package"]["name"].as_str().unwrap();
            let dependencies = ["dependencies", "dev-dependencies", "build-dependencies"]
                .iter()
                .filter_map(|section| table.get(*section)?.as_table())
                .flat_map(|deps| deps.keys())
                .filter_map(|dep| layer(dep))
                .collect();
            (layer(name).unwrap(), dependencies)
        })
        .collect()
}

/// `switchyard-router` -> `router`; `None` for another crate.
fn layer(name: &str) -> Option<String> {
    name.strip_prefix("switchyard-").map(str::to_owned)
}

/// The dependencies that do not point down the order, as `from → to`.
pub fn not_down(order: &BTreeMap<String, usize>, crates: &[(String, Vec<String>)]) -> Vec<String> {
    let mut wrong = Vec::new();
    for (name, dependencies) in crates {
        let Some(from) = order.get(name) else {
            wrong.push(format!("{name} is not in the layer order"));
            continue;
        };
        for dependency in dependencies {
            if order.get(dependency).is_none_or(|to| to <= from) {
                wrong.push(format!("{name} → {dependency}"));
            }
        }
    }
    wrong
}
