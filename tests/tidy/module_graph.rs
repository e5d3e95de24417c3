//! A crate's module graph as its `use` paths draw it: which module of a
//! folder reaches which of its siblings (a parent declaring its children and
//! a child using its parent's items are the tree itself, not edges).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// Sibling edges, by module path (`router::plan` -> `router::request`).
pub type Graph = BTreeMap<String, BTreeSet<String>>;

/// `crates/router/src/plan.rs` -> `["plan"]` (its path in its crate, the
/// part after `src/`); `None` for tests and the binary.
fn module_of(path: &Path) -> Option<Vec<String>> {
    let mut parts: Vec<String> = path
        .with_extension("")
        .iter()
        .map(|p| p.to_string_lossy().into_owned())
        .skip_while(|p| p != "src")
        .skip(1)
        .collect();
    let last = parts.last()?.clone();
    if last == "main" || parts.iter().any(|p| p == "tests" || p.ends_with("_tests")) {
        return None;
    }
    if ["mod", "lib"].contains(&last.as_str()) {
        parts.pop();
    }
    Some(parts)
}

/// The code without comments and without its inline test module.
fn code_of(text: &str) -> String {
    let text = text.split("#[cfg(test)]\nmod tests").next().unwrap_or(text);
    text.lines()
        .map(|line| line.split("//").next().unwrap_or(""))
        .collect::<Vec<_>>()
        .join("\n")
}

fn is_ident(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// Every path the code names from `crate`, `super` or `self`, with groups
/// (`a::{b, c::d}`) spread out.
fn paths_in(code: &str) -> Vec<String> {
    let mut out = Vec::new();
    let chars: Vec<char> = code.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        let starts = ["crate::", "super::", "self::"]
            .iter()
            .any(|p| code_at(&chars, i, p));
        if starts && (i == 0 || !is_ident(chars[i - 1]) && chars[i - 1] != ':') {
            i = read_path(&chars, i, String::new(), &mut out);
        } else {
            i += 1;
        }
    }
    out
}

fn code_at(chars: &[char], i: usize, text: &str) -> bool {
    text.chars()
        .enumerate()
        .all(|(k, c)| chars.get(i + k) == Some(&c))
}

/// Reads `seg::seg::…` (or a `{…}` group) from `i` onto `prefix`; returns
/// where it ended.
fn read_path(chars: &[char], mut i: usize, prefix: String, out: &mut Vec<String>) -> usize {
    let mut path = prefix;
    loop {
        while chars.get(i).is_some_and(|c| c.is_whitespace()) {
            i += 1;
        }
        if chars.get(i) == Some(&'{') {
            i += 1;
            loop {
                i = read_path(chars, i, path.clone(), out);
                while chars.get(i).is_some_and(|c| c.is_whitespace() || *c == ',') {
                    i += 1;
                }
                match chars.get(i) {
                    Some('}') => return i + 1,
                    None => return i,
                    _ if chars.get(i).is_some_and(|c| !is_ident(*c)) => i += 1,
                    _ => {}
                }
            }
        }
        let start = i;
        while chars.get(i).is_some_and(|c| is_ident(*c)) {
            i += 1;
        }
        if i == start {
            out.push(path);
            return i;
        }
        let segment: String = chars[start..i].iter().collect();
        path = if path.is_empty() {
            segment
        } else {
            format!("{path}::{segment}")
        };
        if code_at(chars, i, "::") {
            i += 2;
        } else {
            out.push(path);
            return i;
        }
    }
}

/// The module a path from `module` lands in: its longest prefix that is one.
fn resolve(module: &[String], path: &str, modules: &BTreeSet<Vec<String>>) -> Option<Vec<String>> {
    let mut segments = path.split("::").peekable();
    let mut at: Vec<String> = match *segments.peek()? {
        "crate" => {
            segments.next();
            Vec::new()
        }
        _ => module.to_vec(),
    };
    while let Some(&first) = segments.peek() {
        match first {
            "super" => {
                at.pop()?;
            }
            "self" => {}
            _ => break,
        }
        segments.next();
    }
    let mut full = at;
    full.extend(segments.map(str::to_owned));
    (0..=full.len())
        .rev()
        .map(|n| full[..n].to_vec())
        .find(|m| modules.contains(m))
}

/// Sibling edges between the modules of `sources` (path, text).
pub fn sibling_edges(sources: &[(std::path::PathBuf, String)]) -> Graph {
    let modules: BTreeMap<Vec<String>, String> = sources
        .iter()
        .filter_map(|(path, text)| Some((module_of(path)?, code_of(text))))
        .collect();
    let names: BTreeSet<Vec<String>> = modules.keys().cloned().collect();
    let mut graph = Graph::new();
    for (module, code) in &modules {
        for path in paths_in(code) {
            let Some(target) = resolve(module, &path, &names) else {
                continue;
            };
            let common = module
                .iter()
                .zip(&target)
                .take_while(|(a, b)| a == b)
                .count();
            if common == module.len() || common == target.len() {
                continue; // parent and child
            }
            graph
                .entry(module[..=common].join("::"))
                .or_default()
                .insert(target[..=common].join("::"));
        }
    }
    graph
}

/// One cycle of the graph, if it has any, as the modules around it.
pub fn a_cycle(graph: &Graph) -> Option<Vec<String>> {
    fn visit(
        node: &str,
        graph: &Graph,
        done: &mut BTreeSet<String>,
        stack: &mut Vec<String>,
    ) -> Option<Vec<String>> {
        if let Some(at) = stack.iter().position(|n| n == node) {
            let mut cycle = stack[at..].to_vec();
            cycle.push(node.to_owned());
            return Some(cycle);
        }
        if !done.insert(node.to_owned()) {
            return None;
        }
        stack.push(node.to_owned());
        for next in graph.get(node).into_iter().flatten() {
            if let Some(cycle) = visit(next, graph, done, stack) {
                return Some(cycle);
            }
        }
        stack.pop();
        None
    }
    let mut done = BTreeSet::new();
    graph
        .keys()
        .find_map(|node| visit(node, graph, &mut done, &mut Vec::new()))
}
