//! A small-object allocator in front of the system's, for the binary.
//!
//! musl's malloc (mallocng) hands freed memory back to the kernel at once, so
//! the few thousand short-lived allocations of a start (clap's parse above
//! all) cost about thirty mmap/munmap pairs, each with page faults and a TLB
//! flush, and every readiness poll paid again. Here blocks of up to 32 KiB
//! come from twelve power-of-two size classes; a freed block goes onto its
//! class's free list and is reused, and new blocks are cut from 256 KiB
//! chunks taken from the system allocator and never given back. Memory
//! therefore stays at its peak per class, which for meshwrap is about a
//! hundred KiB. Larger or unusually aligned requests go straight to the
//! system allocator.
//!
//! The class of a block follows from its layout alone (size and alignment),
//! and `dealloc` is given the layout `alloc` was given, so no header and no
//! address lookup is needed to know where a block belongs. A block of class S
//! sits at an offset that is a multiple of S (or of 4 KiB, for larger S)
//! inside a 4 KiB-aligned chunk, and the class is chosen at least as large as
//! the requested alignment, which may not exceed 4 KiB.
//!
//! The first chunk is a static one in the binary's zero-initialised data
//! (.bss): a start takes its blocks from memory the kernel mapped with the
//! binary, so it makes no `mmap` and does not initialise musl's own
//! allocator (three `brk`/`mmap` calls and a page fault of its metadata)
//! unless meshwrap asks for more than a chunk's worth or a block larger than
//! the classes, or libc allocates for itself (a resolver thread's
//! `getaddrinfo`). Its pages cost nothing until touched, like a chunk's.
//!
//! meshwrap runs on one thread, but tokio may start a resolver thread for a
//! host name, so the state sits behind a spin lock, which is never held across
//! anything that could allocate through this allocator.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::UnsafeCell;
use std::ptr;
use std::sync::atomic::{AtomicBool, Ordering};

const CLASSES: usize = 12;
const SMALLEST: usize = 16;
const LARGEST: usize = SMALLEST << (CLASSES - 1);
const CHUNK: usize = 256 * 1024;
const CHUNK_ALIGN: usize = 4096;

/// The first chunk, in .bss; handed out once per process (`FIRST_TAKEN`),
/// to whichever allocator asks first (the global one, in the binary).
#[repr(C, align(4096))]
struct Arena(UnsafeCell<[u8; CHUNK]>);

// SAFETY: the arena is handed out once, by the swap of `FIRST_TAKEN`, and
// from then on is only reached through the allocator that took it.
unsafe impl Sync for Arena {}

static FIRST: Arena = Arena(UnsafeCell::new([0; CHUNK]));
static FIRST_TAKEN: AtomicBool = AtomicBool::new(false);

/// A fresh chunk: the static one the first time, the system's after.
fn new_chunk() -> *mut u8 {
    if !FIRST_TAKEN.swap(true, Ordering::Relaxed) {
        return FIRST.0.get().cast();
    }
    // SAFETY: the layout has a non-zero size and a power-of-two alignment.
    unsafe { System.alloc(Layout::from_size_align_unchecked(CHUNK, CHUNK_ALIGN)) }
}

pub struct SmallAlloc {
    locked: AtomicBool,
    state: UnsafeCell<State>,
}

struct State {
    /// Per class, the most recently freed block; each free block starts with
    /// a pointer to the next one.
    free: [*mut u8; CLASSES],
    /// The unused rest of the current chunk.
    next: *mut u8,
    end: *mut u8,
}

// SAFETY: `state` is only touched while `locked` is held (see `with_state`).
unsafe impl Sync for SmallAlloc {}

impl SmallAlloc {
    pub const fn new() -> SmallAlloc {
        SmallAlloc {
            locked: AtomicBool::new(false),
            state: UnsafeCell::new(State {
                free: [ptr::null_mut(); CLASSES],
                next: ptr::null_mut(),
                end: ptr::null_mut(),
            }),
        }
    }

    fn with_state<T>(&self, f: impl FnOnce(&mut State) -> T) -> T {
        while self
            .locked
            .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            std::hint::spin_loop();
        }
        // SAFETY: the lock is held, so this is the only reference to the state.
        let result = f(unsafe { &mut *self.state.get() });
        self.locked.store(false, Ordering::Release);
        result
    }
}

impl Default for SmallAlloc {
    fn default() -> Self {
        SmallAlloc::new()
    }
}

/// The size class for a layout, or None for the system allocator.
fn class(layout: Layout) -> Option<usize> {
    let size = layout.size().max(layout.align()).max(SMALLEST);
    if size > LARGEST || layout.align() > CHUNK_ALIGN {
        return None;
    }
    Some(size.next_power_of_two().trailing_zeros() as usize - SMALLEST.trailing_zeros() as usize)
}

impl State {
    /// A block of `class`, from its free list or cut from the current chunk.
    ///
    /// # Safety
    /// The free lists must hold only blocks of their class that nothing uses.
    unsafe fn take(&mut self, class: usize) -> *mut u8 {
        let head = self.free[class];
        if !head.is_null() {
            // SAFETY: a free block starts with the next-pointer `give` wrote.
            self.free[class] = unsafe { head.cast::<*mut u8>().read() };
            return head;
        }
        let size = SMALLEST << class;
        // Aligned to the class size up to 4 KiB (the chunk's own alignment,
        // and the most `class` lets a layout ask for).
        let at = (self.next as usize).next_multiple_of(size.min(CHUNK_ALIGN));
        if self.next.is_null() || at + size > self.end as usize {
            let chunk = new_chunk();
            if chunk.is_null() {
                return chunk;
            }
            self.next = chunk.wrapping_add(size);
            self.end = chunk.wrapping_add(CHUNK);
            return chunk;
        }
        let block = self.next.wrapping_add(at - self.next as usize);
        self.next = block.wrapping_add(size);
        block
    }

    /// Puts a block back onto its class's free list.
    ///
    /// # Safety
    /// `block` must have come from `take(class)` and be no longer in use.
    unsafe fn give(&mut self, class: usize, block: *mut u8) {
        // SAFETY: the block is at least 16 bytes and aligned to its size, so it
        // holds an aligned pointer.
        unsafe { block.cast::<*mut u8>().write(self.free[class]) };
        self.free[class] = block;
    }
}

// SAFETY: every block handed out is at least `layout.size()` bytes, aligned to
// `layout.align()` (see the module docs), and not handed out again until it
// has been freed; blocks of the system allocator go back to it.
unsafe impl GlobalAlloc for SmallAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        match class(layout) {
            // SAFETY: the free lists only ever hold freed blocks of their class.
            Some(class) => self.with_state(|state| unsafe { state.take(class) }),
            // SAFETY: the caller's layout is valid, as GlobalAlloc requires.
            None => unsafe { System.alloc(layout) },
        }
    }

    unsafe fn dealloc(&self, block: *mut u8, layout: Layout) {
        match class(layout) {
            // SAFETY: the caller passes the layout the block was allocated with,
            // so `class` is the class it was taken from.
            Some(class) => self.with_state(|state| unsafe { state.give(class, block) }),
            // SAFETY: as above; this block came from the system allocator.
            None => unsafe { System.dealloc(block, layout) },
        }
    }

    unsafe fn realloc(&self, block: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: GlobalAlloc's contract: `new_size` rounded to `layout.align()`
        // does not overflow, so this layout is valid.
        let new_layout = unsafe { Layout::from_size_align_unchecked(new_size, layout.align()) };
        let (old, new) = (class(layout), class(new_layout));
        if old.is_some() && old == new {
            return block;
        }
        if old.is_none() && new.is_none() {
            // SAFETY: both sizes belong to the system allocator.
            return unsafe { System.realloc(block, layout, new_size) };
        }
        // SAFETY: `new_layout` is valid; the old block is valid for
        // `layout.size()` bytes and is freed with its own layout.
        unsafe {
            let moved = self.alloc(new_layout);
            if !moved.is_null() {
                ptr::copy_nonoverlapping(block, moved, layout.size().min(new_size));
                self.dealloc(block, layout);
            }
            moved
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    /// The static chunk is one per process: the tests that take chunks run
    /// one at a time, so that one of them may hand it out afresh.
    static CHUNKS: Mutex<()> = Mutex::new(());

    #[test]
    fn the_static_chunk_comes_first_and_once() {
        let _one = CHUNKS.lock().unwrap_or_else(|e| e.into_inner());
        // No allocator of an earlier test uses its blocks any more.
        FIRST_TAKEN.store(false, Ordering::Relaxed);
        let first = FIRST.0.get().cast::<u8>();
        let chunks = [new_chunk(), new_chunk(), new_chunk()];
        assert_eq!(chunks[0], first);
        for &chunk in &chunks[1..] {
            assert!(!chunk.is_null());
            assert!((chunk as usize).is_multiple_of(CHUNK_ALIGN));
            assert!(chunk as usize >= first as usize + CHUNK || chunk as usize + CHUNK <= first as usize);
            // SAFETY: a chunk from the system allocator, with its layout.
            unsafe { System.dealloc(chunk, Layout::from_size_align_unchecked(CHUNK, CHUNK_ALIGN)) };
        }
        // A fresh allocator's first block is the static chunk's start.
        FIRST_TAKEN.store(false, Ordering::Relaxed);
        let a = SmallAlloc::new();
        // SAFETY: a valid, non-zero layout.
        assert_eq!(unsafe { a.alloc(Layout::from_size_align(24, 8).unwrap()) }, first);
    }

    #[test]
    fn classes_cover_size_and_alignment() {
        let l = |size, align| Layout::from_size_align(size, align).unwrap();
        assert_eq!(class(l(1, 1)), Some(0));
        assert_eq!(class(l(16, 8)), Some(0));
        assert_eq!(class(l(17, 8)), Some(1));
        assert_eq!(class(l(8, 64)), Some(2));
        assert_eq!(class(l(1024, 8)), Some(6));
        assert_eq!(class(l(1025, 8)), Some(7));
        assert_eq!(class(l(32768, 8)), Some(11));
        assert_eq!(class(l(32769, 8)), None);
        assert_eq!(class(l(8, 4096)), Some(8));
        assert_eq!(class(l(8, 8192)), None);
    }

    #[test]
    fn blocks_are_aligned_distinct_and_reused() {
        let _one = CHUNKS.lock().unwrap_or_else(|e| e.into_inner());
        let a = SmallAlloc::new();
        let mut live = Vec::new();
        // Mixed sizes across several chunks (fewer under Miri, which
        // interprets every byte: the same classes and paths, in minutes).
        let n = if cfg!(miri) { 150 } else { 5_000usize };
        for i in 0..n {
            let layout = Layout::from_size_align(1 + (i * 37) % 40_000, 1 << (i % 13)).unwrap();
            // SAFETY: a valid, non-zero layout.
            let p = unsafe { a.alloc(layout) };
            assert!(!p.is_null());
            assert_eq!(p as usize % layout.align(), 0);
            // SAFETY: the block is at least layout.size() bytes.
            unsafe { ptr::write_bytes(p, (i % 251) as u8, layout.size()) };
            live.push((p, layout, (i % 251) as u8));
            if i % 3 == 0 {
                let (p, layout, fill) = live.swap_remove(i % live.len());
                // SAFETY: reading the bytes written above, then freeing with the same layout.
                unsafe {
                    assert!(std::slice::from_raw_parts(p, layout.size()).iter().all(|&b| b == fill));
                    a.dealloc(p, layout);
                }
            }
        }
        // No two live blocks overlap, and every one kept its contents.
        let mut spans: Vec<(usize, usize)> = live.iter().map(|(p, l, _)| (*p as usize, l.size())).collect();
        spans.sort_unstable();
        assert!(spans.windows(2).all(|w| w[0].0 + w[0].1 <= w[1].0));
        for (p, layout, fill) in live {
            // SAFETY: as above.
            unsafe {
                assert!(std::slice::from_raw_parts(p, layout.size()).iter().all(|&b| b == fill));
                a.dealloc(p, layout);
            }
        }
        // A freed block is the next one handed out for its class.
        let layout = Layout::from_size_align(100, 8).unwrap();
        // SAFETY: a valid layout; the block is freed once.
        unsafe {
            let p = a.alloc(layout);
            a.dealloc(p, layout);
            assert_eq!(a.alloc(layout), p);
        }
    }

    #[test]
    fn realloc_keeps_contents_across_classes() {
        let _one = CHUNKS.lock().unwrap_or_else(|e| e.into_inner());
        let a = SmallAlloc::new();
        let mut layout = Layout::from_size_align(10, 1).unwrap();
        // SAFETY: valid layouts; each block is used within its current size.
        unsafe {
            let mut p = a.alloc(layout);
            ptr::copy_nonoverlapping(b"0123456789".as_ptr(), p, 10);
            for size in [12, 40, 700, 3000, 50_000, 60_000, 20, 10] {
                p = a.realloc(p, layout, size);
                layout = Layout::from_size_align(size, 1).unwrap();
                assert_eq!(std::slice::from_raw_parts(p, 10), b"0123456789");
            }
            a.dealloc(p, layout);
        }
    }
}
