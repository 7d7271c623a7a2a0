//! `Words`: an immutable run of 64-bit words with a 64-bit tag, shared by reference count, in one
//! allocation behind a thin pointer.
//!
//! A row is one of these (`storage::Row`), and rows are most of what an engine holds: JOB 26a's
//! search space alone is 92,369 rows of eight values. `triomphe::ThinArc` spends 24 bytes before
//! the words (an 8-byte count, the tag, an 8-byte length); this header spends 16 (a 4-byte count, a
//! 4-byte length, the tag), which moves an eight-value row from malloc's 112-byte chunks to its
//! 96-byte ones.

use std::alloc::{alloc, dealloc, handle_alloc_error, Layout};
use std::ptr::NonNull;
use std::sync::atomic::{fence, AtomicU32, Ordering};

#[repr(C)]
struct Header {
    count: AtomicU32,
    len: u32,
    tag: u64,
}

const HEADER: usize = std::mem::size_of::<Header>();

/// Past this many references a clone aborts, as `Arc` does past `isize::MAX`: a count that wrapped
/// would free words still in use.
const MAX_COUNT: u32 = u32::MAX / 2;

pub struct Words(NonNull<Header>);

// The words and the tag never change after construction, and the count is atomic: sharing a
// `Words` between threads is as safe as sharing an `Arc<[u64]>`.
unsafe impl Send for Words {}
unsafe impl Sync for Words {}

impl Words {
    fn layout(len: usize) -> Layout {
        let size = HEADER.checked_add(len.checked_mul(8).expect("a row fits in memory")).expect("a row fits in memory");
        Layout::from_size_align(size, std::mem::align_of::<Header>()).expect("a row fits in memory")
    }

    pub fn new(tag: u64, words: &[u64]) -> Words {
        let len = u32::try_from(words.len()).expect("a row holds fewer than 2^32 words");
        let layout = Self::layout(words.len());
        // SAFETY: the layout has a nonzero size (the header); the header and the words are written
        // before the pointer is used, and the words start right after the 16-byte, 8-aligned header.
        unsafe {
            let raw = alloc(layout) as *mut Header;
            let Some(ptr) = NonNull::new(raw) else { handle_alloc_error(layout) };
            raw.write(Header { count: AtomicU32::new(1), len, tag });
            std::ptr::copy_nonoverlapping(words.as_ptr(), (raw as *mut u8).add(HEADER) as *mut u64, words.len());
            Words(ptr)
        }
    }

    #[inline]
    fn header(&self) -> &Header {
        // SAFETY: the pointer is live while `self` holds a reference.
        unsafe { self.0.as_ref() }
    }

    #[inline]
    pub fn tag(&self) -> u64 {
        self.header().tag
    }

    #[inline]
    pub fn words(&self) -> &[u64] {
        let len = self.header().len as usize;
        // SAFETY: `new` wrote `len` words right after the header, and they are never changed.
        unsafe { std::slice::from_raw_parts((self.0.as_ptr() as *const u8).add(HEADER) as *const u64, len) }
    }

    /// Whether both are the same allocation.
    #[inline]
    pub fn same(&self, other: &Words) -> bool {
        self.0 == other.0
    }
}

impl Clone for Words {
    #[inline]
    fn clone(&self) -> Words {
        // Relaxed, as in `Arc::clone`: a new reference is made from an existing one, which keeps
        // the allocation alive meanwhile.
        if self.header().count.fetch_add(1, Ordering::Relaxed) >= MAX_COUNT {
            std::process::abort();
        }
        Words(self.0)
    }
}

impl Drop for Words {
    #[inline]
    fn drop(&mut self) {
        if self.header().count.fetch_sub(1, Ordering::Release) != 1 {
            return;
        }
        fence(Ordering::Acquire);
        let layout = Self::layout(self.header().len as usize);
        // SAFETY: this was the last reference, so no other `Words` reads the allocation, which
        // `new` made with this layout.
        unsafe { dealloc(self.0.as_ptr() as *mut u8, layout) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_and_tag_read_back_as_written() {
        let w = Words::new(7, &[1, 2, u64::MAX]);
        assert_eq!(w.tag(), 7);
        assert_eq!(w.words(), &[1, 2, u64::MAX]);
        assert!(Words::new(0, &[]).words().is_empty());
    }

    #[test]
    fn a_clone_shares_the_allocation_and_outlives_the_original() {
        let w = Words::new(1, &[5, 6]);
        let c = w.clone();
        assert!(c.same(&w));
        assert!(!c.same(&Words::new(1, &[5, 6])));
        drop(w);
        assert_eq!(c.words(), &[5, 6]);
        assert_eq!(c.header().count.load(Ordering::Relaxed), 1);
    }

    #[test]
    fn the_header_takes_sixteen_bytes() {
        assert_eq!(HEADER, 16);
        assert_eq!(Words::layout(8).size(), 80);
    }
}
