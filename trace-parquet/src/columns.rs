//! Column buffers and the tables' schemas.
//!
//! Each table is a struct of typed column builders made by [`table!`]: a row is pushed
//! column by column, and [`Batch::finish`] turns the buffered rows into an Arrow
//! `RecordBatch`. Strings that repeat (host, run, thread, function, binary, state...) are
//! dictionary columns: the row holds the key of a string interned once in [`Strings`],
//! so pushing a row never hashes or copies a string.

use std::sync::Arc;

use arrow_array::builder::{BooleanBuilder, Int32Builder, Int64Builder, StringBuilder};
use arrow_array::types::Int32Type;
use arrow_array::{ArrayRef, DictionaryArray, RecordBatch, StringArray};
use arrow_schema::{DataType, Field, Schema, SchemaRef};
use rustc_hash::FxHashMap;

use crate::sink::BATCH_ROWS;

/// The strings of dictionary columns, interned: a key is an index into them.
#[derive(Default)]
pub(crate) struct Strings {
    values: Vec<String>,
    index: FxHashMap<String, i32>,
    /// The values as an Arrow array, remade when strings were added since.
    array: Option<Arc<StringArray>>,
}

impl Strings {
    /// The key of `s`, interning it at first sight.
    pub(crate) fn key(&mut self, s: &str) -> i32 {
        if let Some(&k) = self.index.get(s) {
            return k;
        }
        let k = self.values.len() as i32;
        self.values.push(s.to_string());
        self.index.insert(s.to_string(), k);
        self.array = None;
        k
    }

    /// The string of key `k`.
    pub(crate) fn get(&self, k: i32) -> &str {
        &self.values[k as usize]
    }

    /// Every interned string, as the values of dictionary arrays.
    fn array(&mut self) -> Arc<StringArray> {
        if self.array.is_none() {
            self.array = Some(Arc::new(StringArray::from_iter_values(&self.values)));
        }
        self.array.clone().unwrap()
    }
}

/// A dictionary column: keys into [`Strings`].
#[derive(Default)]
pub(crate) struct Dict(Int32Builder);

impl Dict {
    #[inline]
    pub(crate) fn push(&mut self, key: i32) {
        self.0.append_value(key);
    }
    #[inline]
    pub(crate) fn push_opt(&mut self, key: Option<i32>) {
        self.0.append_option(key);
    }
    fn finish(&mut self, strings: &mut Strings) -> ArrayRef {
        let keys = std::mem::replace(&mut self.0, Int32Builder::with_capacity(BATCH_ROWS)).finish();
        // SAFETY: every key was handed out by `strings`, whose array holds them all.
        Arc::new(unsafe { DictionaryArray::<Int32Type>::new_unchecked(keys, strings.array()) })
    }
    fn data_type() -> DataType {
        DataType::Dictionary(Box::new(DataType::Int32), Box::new(DataType::Utf8))
    }
}

/// Column kinds of [`table!`]: how each maps to a builder and an Arrow type.
pub(crate) trait Column: Default {
    fn data_type() -> DataType;
    fn finish_array(&mut self, strings: &mut Strings) -> ArrayRef;
}

impl Column for Dict {
    fn data_type() -> DataType {
        Dict::data_type()
    }
    fn finish_array(&mut self, strings: &mut Strings) -> ArrayRef {
        self.finish(strings)
    }
}

// A finished builder is replaced by one with room for a batch: growing one row by row
// copied each batch's values several times.
macro_rules! plain_column {
    ($builder:ty, $dt:expr, $fresh:expr) => {
        impl Column for $builder {
            fn data_type() -> DataType {
                $dt
            }
            fn finish_array(&mut self, _: &mut Strings) -> ArrayRef {
                Arc::new(std::mem::replace(self, $fresh).finish())
            }
        }
    };
}
plain_column!(
    Int64Builder,
    DataType::Int64,
    Int64Builder::with_capacity(BATCH_ROWS)
);
plain_column!(
    Int32Builder,
    DataType::Int32,
    Int32Builder::with_capacity(BATCH_ROWS)
);
plain_column!(
    BooleanBuilder,
    DataType::Boolean,
    BooleanBuilder::with_capacity(BATCH_ROWS)
);
// Strings of the small tables: few rows.
plain_column!(StringBuilder, DataType::Utf8, StringBuilder::new());

/// Column types of the tables, by the names [`table!`] uses.
pub(crate) type I64 = Int64Builder;
pub(crate) type I32 = Int32Builder;
pub(crate) type Bool = BooleanBuilder;
pub(crate) type Str = StringBuilder;

/// A table's buffered rows.
pub(crate) trait Batch: Default {
    /// Its name: the file (or directory) name of its output.
    const NAME: &'static str;
    /// Its columns: (name, Arrow type, nullable).
    fn columns() -> Vec<(&'static str, DataType, bool)>;
    /// The rows buffered.
    fn len(&self) -> usize;
    /// The rows buffered as a batch; the buffers start over.
    fn finish(&mut self, strings: &mut Strings) -> RecordBatch;
    /// The Arrow schema of [`Batch::columns`].
    fn schema() -> SchemaRef {
        let fields: Vec<Field> = (Self::columns().into_iter())
            .map(|(n, t, null)| Field::new(n, t, null))
            .collect();
        Arc::new(Schema::new(fields))
    }
}

/// Defines a table: `table!(Name "file" { column: Kind [null], ... })`, `null` marking the
/// nullable columns.
macro_rules! table {
    ($(#[$doc:meta])* $name:ident $file:literal { $($col:ident : $kind:ident $($null:ident)?),* $(,)? }) => {
        $(#[$doc])*
        #[derive(Default)]
        pub(crate) struct $name {
            $(pub(crate) $col: $crate::columns::$kind,)*
            rows: usize,
        }

        impl $name {
            /// One more row has been pushed into every column.
            #[inline]
            pub(crate) fn row(&mut self) {
                self.rows += 1;
            }
        }

        impl $crate::columns::Batch for $name {
            const NAME: &'static str = $file;
            fn columns() -> Vec<(&'static str, arrow_schema::DataType, bool)> {
                use $crate::columns::Column;
                vec![$((
                    stringify!($col),
                    <$crate::columns::$kind>::data_type(),
                    false $(|| table!(@null $null))?,
                ),)*]
            }
            fn len(&self) -> usize {
                self.rows
            }
            fn finish(&mut self, strings: &mut $crate::columns::Strings) -> arrow_array::RecordBatch {
                use $crate::columns::Column;
                let arrays: Vec<arrow_array::ArrayRef> =
                    vec![$(self.$col.finish_array(strings),)*];
                self.rows = 0;
                arrow_array::RecordBatch::try_new(Self::schema(), arrays)
                    .expect("every column has a value per row")
            }
        }
    };
    (@null null) => { true };
}
pub(crate) use table;
