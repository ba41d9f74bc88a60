//! Reading the written tables back with Parquet's own Arrow reader, into plain values.

#![allow(dead_code)]

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use arrow_array::cast::AsArray;
use arrow_array::types::{Int32Type, Int64Type};
use arrow_array::{Array, ArrayRef};
use arrow_schema::DataType;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use parquet::file::reader::{FileReader, SerializedFileReader};

/// A value of a cell.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum V {
    Null,
    I(i64),
    S(String),
    B(bool),
}

impl V {
    pub fn i(&self) -> i64 {
        match self {
            V::I(v) => *v,
            other => panic!("not an integer: {other:?}"),
        }
    }
    pub fn opt(&self) -> Option<i64> {
        match self {
            V::I(v) => Some(*v),
            V::Null => None,
            other => panic!("not an integer: {other:?}"),
        }
    }
    pub fn s(&self) -> &str {
        match self {
            V::S(v) => v,
            other => panic!("not a string: {other:?}"),
        }
    }
    pub fn b(&self) -> bool {
        match self {
            V::B(v) => *v,
            other => panic!("not a boolean: {other:?}"),
        }
    }
}

/// A table's rows, as maps from column name to value.
pub struct Table {
    pub columns: Vec<String>,
    pub rows: Vec<HashMap<String, V>>,
}

fn cell(a: &ArrayRef, i: usize) -> V {
    if a.is_null(i) {
        return V::Null;
    }
    match a.data_type() {
        DataType::Int64 => V::I(a.as_primitive::<Int64Type>().value(i)),
        DataType::Int32 => V::I(a.as_primitive::<Int32Type>().value(i) as i64),
        DataType::Boolean => V::B(a.as_boolean().value(i)),
        DataType::Utf8 => V::S(a.as_string::<i32>().value(i).to_string()),
        DataType::Dictionary(_, _) => {
            let d = a.as_dictionary::<Int32Type>();
            let k = d.keys().value(i) as usize;
            V::S(d.values().as_string::<i32>().value(k).to_string())
        }
        t => panic!("unexpected type {t}"),
    }
}

/// The rows of one Parquet file.
pub fn read_file(path: &Path) -> Table {
    let f = std::fs::File::open(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let reader = ParquetRecordBatchReaderBuilder::try_new(f)
        .unwrap()
        .build()
        .unwrap();
    let mut t = Table {
        columns: vec![],
        rows: vec![],
    };
    for batch in reader {
        let batch = batch.unwrap();
        t.columns = (batch.schema().fields().iter())
            .map(|f| f.name().clone())
            .collect();
        for i in 0..batch.num_rows() {
            let row = (t.columns.iter().zip(batch.columns()))
                .map(|(n, a)| (n.clone(), cell(a, i)))
                .collect();
            t.rows.push(row);
        }
    }
    t
}

/// Every `.parquet` file under `dir`, sorted.
pub fn parquet_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = vec![];
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                todo.push(p);
            } else if p.extension().is_some_and(|x| x == "parquet") {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

/// A table of an output: its file, or all its partitions' files with the partition
/// values (`host=`, `date=`) added as columns, as engines read them.
pub fn read_table(out: &Path, name: &str) -> Table {
    let single = out.join(format!("{name}.parquet"));
    if single.exists() {
        return read_file(&single);
    }
    let mut t = Table {
        columns: vec![],
        rows: vec![],
    };
    let dir = out.join(name);
    if !dir.exists() {
        return t;
    }
    for f in parquet_files(&dir) {
        let mut part = read_file(&f);
        let rel = f.strip_prefix(&dir).unwrap();
        let keys: Vec<(String, String)> = (rel.components())
            .filter_map(|c| {
                let c = c.as_os_str().to_str()?;
                let (k, v) = c.split_once('=')?;
                Some((k.to_string(), v.to_string()))
            })
            .collect();
        for row in &mut part.rows {
            for (k, v) in &keys {
                row.insert(k.clone(), V::S(v.clone()));
            }
        }
        t.columns = part.columns;
        t.rows.append(&mut part.rows);
    }
    t
}

/// A file's key-value metadata.
pub fn kv(path: &Path) -> HashMap<String, String> {
    let r = SerializedFileReader::new(std::fs::File::open(path).unwrap()).unwrap();
    let md = r.metadata().file_metadata().key_value_metadata().cloned();
    (md.unwrap_or_default().into_iter())
        .map(|k| (k.key, k.value.unwrap_or_default()))
        .collect()
}
