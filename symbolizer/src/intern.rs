//! Names shared by every frame that gives them: a trace names the same
//! functions and files over and over, and a frame holds an `Arc` instead of
//! a copy.

use std::cell::RefCell;
use std::sync::Arc;

use rustc_hash::FxHashMap;

/// Strings derived from bytes that stay put for as long as the interner's
/// owner lives (a mapped file, section buffers, any .dwo addr2line loaded,
/// addr2line's parsed line tables), keyed by where those bytes are: cheaper
/// to hash than the text, and a string stored twice merely gets two entries.
/// The default SipHash showed in profiles of lookups; an address key needs
/// only rustc-hash's multiply.
#[derive(Default)]
pub(crate) struct Interner(RefCell<FxHashMap<usize, Arc<str>>>);

impl Interner {
    /// The string made from `bytes` by `make`, made the first time only.
    pub fn get(&self, bytes: &[u8], make: impl FnOnce(&[u8]) -> Arc<str>) -> Arc<str> {
        self.0
            .borrow_mut()
            .entry(bytes.as_ptr() as usize)
            .or_insert_with(|| make(bytes))
            .clone()
    }
}
