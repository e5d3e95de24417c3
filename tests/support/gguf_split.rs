//! Splits a GGUF model file into parts the way llama.cpp's `gguf-split` does,
//! so tests can pull and load a split model without that tool: the first part
//! keeps every metadata key, each part carries `split.no`, `split.count` and
//! `split.tensors.count`, and each holds a run of the tensors with their data,
//! named `<prefix>-0000N-of-0000M.gguf`.

use std::path::{Path, PathBuf};

const DEFAULT_ALIGNMENT: u64 = 32;
const TYPE_U16: u32 = 2;
const TYPE_I32: u32 = 5;
const TYPE_STRING: u32 = 8;
const TYPE_ARRAY: u32 = 9;

/// One metadata entry, its value kept as the bytes it was read as.
struct Entry<'a> {
    key: &'a [u8],
    value_type: u32,
    value: &'a [u8],
}

/// One tensor: its description (name, dimensions, type) and its data.
struct Tensor<'a> {
    description: &'a [u8],
    data: &'a [u8],
}

/// Writes `source` as `parts` split files in `dir` and returns their paths
/// in order; the first is the one to load.
pub fn split(source: &Path, dir: &Path, prefix: &str, parts: usize) -> Vec<PathBuf> {
    let bytes = std::fs::read(source).expect("the model reads");
    let (entries, tensors, alignment) = parse(&bytes);
    let per_part = tensors.len().div_ceil(parts);
    tensors
        .chunks(per_part)
        .enumerate()
        .map(|(index, run)| {
            let kept = entries
                .iter()
                .filter(|entry| index == 0 || entry.key == b"general.alignment");
            let file = write_part(kept, run, alignment, index, parts, tensors.len());
            let path = dir.join(format!("{prefix}-{:05}-of-{parts:05}.gguf", index + 1));
            std::fs::write(&path, file).expect("the part writes");
            path
        })
        .collect()
}

fn parse(bytes: &[u8]) -> (Vec<Entry<'_>>, Vec<Tensor<'_>>, u64) {
    assert_eq!(&bytes[..4], b"GGUF", "a GGUF file");
    let mut at = Reader { bytes, at: 8 };
    let tensor_count = at.u64();
    let entry_count = at.u64();
    let mut alignment = DEFAULT_ALIGNMENT;
    let entries: Vec<Entry> = (0..entry_count)
        .map(|_| {
            let key = at.string();
            let value_type = at.u32();
            let start = at.at;
            at.skip_value(value_type);
            let value = &bytes[start..at.at];
            if key == b"general.alignment" {
                alignment = u64::from(u32::from_le_bytes(value.try_into().unwrap()));
            }
            Entry {
                key,
                value_type,
                value,
            }
        })
        .collect();
    let descriptions: Vec<(&[u8], u64)> = (0..tensor_count)
        .map(|_| {
            let start = at.at;
            at.string();
            let dims = at.u32();
            at.at += 8 * dims as usize + 4;
            let description = &bytes[start..at.at];
            (description, at.u64())
        })
        .collect();
    let data_start = at.at.next_multiple_of(alignment as usize);
    let mut ends: Vec<u64> = descriptions.iter().map(|(_, offset)| *offset).collect();
    ends.sort_unstable();
    ends.push((bytes.len() - data_start) as u64);
    let tensors = descriptions
        .into_iter()
        .map(|(description, offset)| {
            let end = ends[ends.partition_point(|&o| o <= offset)];
            let data = &bytes[data_start + offset as usize..data_start + end as usize];
            Tensor { description, data }
        })
        .collect();
    (entries, tensors, alignment)
}

fn write_part<'a>(
    entries: impl Iterator<Item = &'a Entry<'a>>,
    tensors: &[Tensor],
    alignment: u64,
    index: usize,
    parts: usize,
    tensor_total: usize,
) -> Vec<u8> {
    let entries: Vec<&Entry> = entries.collect();
    let mut out = b"GGUF".to_vec();
    out.extend(3u32.to_le_bytes());
    out.extend((tensors.len() as u64).to_le_bytes());
    out.extend((entries.len() as u64 + 3).to_le_bytes());
    for entry in entries {
        put_entry(&mut out, entry.key, entry.value_type, entry.value);
    }
    put_entry(
        &mut out,
        b"split.no",
        TYPE_U16,
        &(index as u16).to_le_bytes(),
    );
    put_entry(
        &mut out,
        b"split.count",
        TYPE_U16,
        &(parts as u16).to_le_bytes(),
    );
    let total = tensor_total as i32;
    put_entry(
        &mut out,
        b"split.tensors.count",
        TYPE_I32,
        &total.to_le_bytes(),
    );
    let mut offset = 0u64;
    for tensor in tensors {
        out.extend(tensor.description);
        out.extend(offset.to_le_bytes());
        offset += tensor.data.len() as u64;
    }
    out.resize(out.len().next_multiple_of(alignment as usize), 0);
    for tensor in tensors {
        out.extend(tensor.data);
    }
    out
}

fn put_entry(out: &mut Vec<u8>, key: &[u8], value_type: u32, value: &[u8]) {
    out.extend((key.len() as u64).to_le_bytes());
    out.extend(key);
    out.extend(value_type.to_le_bytes());
    out.extend(value);
}

struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn u32(&mut self) -> u32 {
        let value = u32::from_le_bytes(self.bytes[self.at..self.at + 4].try_into().unwrap());
        self.at += 4;
        value
    }

    fn u64(&mut self) -> u64 {
        let value = u64::from_le_bytes(self.bytes[self.at..self.at + 8].try_into().unwrap());
        self.at += 8;
        value
    }

    fn string(&mut self) -> &'a [u8] {
        let len = self.u64() as usize;
        self.at += len;
        &self.bytes[self.at - len..self.at]
    }

    fn skip_value(&mut self, value_type: u32) {
        match value_type {
            TYPE_STRING => {
                self.string();
            }
            TYPE_ARRAY => {
                let element_type = self.u32();
                for _ in 0..self.u64() {
                    self.skip_value(element_type);
                }
            }
            scalar => self.at += scalar_size(scalar),
        }
    }
}

/// Bytes of a GGUF scalar type: u8, i8, u16, i16, u32, i32, f32, bool, -,
/// -, u64, i64, f64.
fn scalar_size(value_type: u32) -> usize {
    match value_type {
        0 | 1 | 7 => 1,
        2 | 3 => 2,
        4..=6 => 4,
        10..=12 => 8,
        other => panic!("GGUF value type {other} is not a scalar"),
    }
}
