//! Function lengths read with a Rust parser (`syn`): every function, method
//! and trait default in the crate's own code, from its first line (attributes
//! and doc comments left out) to its closing brace. Test code is left out:
//! `#[cfg(test)]` items, `#[test]` functions, and the files of test modules
//! (`#[cfg(test)] mod name;`), whose length is mostly their fixtures.

use std::path::{Path, PathBuf};

use syn::spanned::Spanned;
use syn::visit::Visit;

/// One function: where it starts, its name and its lines.
#[derive(Debug, PartialEq, Eq)]
pub struct Function {
    pub line: usize,
    pub name: String,
    pub lines: usize,
}

/// Whether `attrs` mark an item that exists only in tests.
fn test_only(attrs: &[syn::Attribute]) -> bool {
    attrs.iter().any(|attr| {
        let path = attr.path();
        path.is_ident("test")
            || path.segments.last().is_some_and(|s| s.ident == "test")
            || (path.is_ident("cfg")
                && attr
                    .parse_args::<syn::Meta>()
                    .is_ok_and(|meta| meta.path().is_ident("test")))
    })
}

/// Lines from the signature to the closing brace.
fn length(sig: &syn::Signature, block: &syn::Block) -> (usize, usize) {
    let first = sig.span().start().line;
    (first, block.span().end().line - first + 1)
}

#[derive(Default)]
struct Lengths {
    functions: Vec<Function>,
    /// Modules declared `#[cfg(test)] mod name;` (their files are tests).
    test_modules: Vec<String>,
}

impl Lengths {
    fn push(&mut self, sig: &syn::Signature, block: &syn::Block) {
        let (line, lines) = length(sig, block);
        self.functions.push(Function {
            line,
            name: sig.ident.to_string(),
            lines,
        });
    }
}

impl<'ast> Visit<'ast> for Lengths {
    fn visit_item_mod(&mut self, item: &'ast syn::ItemMod) {
        if !test_only(&item.attrs) {
            syn::visit::visit_item_mod(self, item);
        } else if item.content.is_none() {
            self.test_modules.push(item.ident.to_string());
        }
    }

    fn visit_item_fn(&mut self, item: &'ast syn::ItemFn) {
        if !test_only(&item.attrs) {
            self.push(&item.sig, &item.block);
            syn::visit::visit_item_fn(self, item);
        }
    }

    fn visit_impl_item_fn(&mut self, item: &'ast syn::ImplItemFn) {
        if !test_only(&item.attrs) {
            self.push(&item.sig, &item.block);
            syn::visit::visit_impl_item_fn(self, item);
        }
    }

    fn visit_trait_item_fn(&mut self, item: &'ast syn::TraitItemFn) {
        if let Some(block) = &item.default {
            self.push(&item.sig, block);
        }
        syn::visit::visit_trait_item_fn(self, item);
    }

    fn visit_item_impl(&mut self, item: &'ast syn::ItemImpl) {
        if !test_only(&item.attrs) {
            syn::visit::visit_item_impl(self, item);
        }
    }
}

/// The functions of one file's text, and the test modules it declares.
pub fn functions(text: &str) -> Result<(Vec<Function>, Vec<String>), syn::Error> {
    let file = syn::parse_file(text)?;
    let mut lengths = Lengths::default();
    lengths.visit_file(&file);
    Ok((lengths.functions, lengths.test_modules))
}

/// Where a module declared in `file` as `name` lives: its file, or its folder.
fn module_place(file: &Path, name: &str) -> (PathBuf, PathBuf) {
    let stem = file.file_stem().and_then(|s| s.to_str()).unwrap_or("");
    let dir = file.parent().unwrap_or(Path::new(""));
    let dir = match stem {
        "mod" | "lib" | "main" => dir.to_owned(),
        _ => dir.join(stem),
    };
    (dir.join(format!("{name}.rs")), dir.join(name))
}

/// Each non-test function of `sources` over `most` lines, as
/// `path:line name (lines)`.
pub fn longer_than(sources: &[(PathBuf, String)], most: usize) -> Vec<String> {
    let mut parsed = Vec::new();
    let mut test_places = Vec::new();
    for (path, text) in sources {
        let (found, test_modules) =
            functions(text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        for name in test_modules {
            test_places.push(module_place(path, &name));
        }
        parsed.push((path, found));
    }
    let is_test = |path: &Path| {
        test_places
            .iter()
            .any(|(file, dir)| path == file || path.starts_with(dir))
    };
    parsed
        .into_iter()
        .filter(|(path, _)| !is_test(path))
        .flat_map(|(path, found)| {
            found.into_iter().filter(|f| f.lines > most).map(move |f| {
                format!(
                    "{}:{} {} ({} lines)",
                    path.display(),
                    f.line,
                    f.name,
                    f.lines
                )
            })
        })
        .collect()
}
