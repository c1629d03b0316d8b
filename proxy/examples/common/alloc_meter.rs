//! A global allocator wrapper that measures the peak of live heap bytes on the
//! current thread while a closure runs. Shared by the hostile-input test and the
//! `fuzz_codec` example.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

thread_local! {
    static LIVE: Cell<isize> = const { Cell::new(0) };
    static PEAK: Cell<isize> = const { Cell::new(0) };
}

fn track(delta: isize) {
    // `try_with`: the thread-local may already be gone during thread teardown.
    let _ = LIVE.try_with(|live| {
        let now = live.get() + delta;
        live.set(now);
        let _ = PEAK.try_with(|peak| {
            if now > peak.get() {
                peak.set(now)
            }
        });
    });
}

/// Counts allocations per thread; install with `#[global_allocator]`.
pub struct AllocMeter;

unsafe impl GlobalAlloc for AllocMeter {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        track(layout.size() as isize);
        System.alloc(layout)
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        track(-(layout.size() as isize));
        System.dealloc(ptr, layout)
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // During a moving realloc both blocks are live: count the new one first.
        track(new_size as isize);
        let p = System.realloc(ptr, layout, new_size);
        track(-(layout.size() as isize));
        p
    }
}

/// Runs `f` and returns its result with the peak number of heap bytes it had
/// live at once on this thread (beyond what was live before it started).
#[allow(dead_code)]
pub fn bytes_allocated_by<T>(f: impl FnOnce() -> T) -> (T, usize) {
    let base = LIVE.with(|l| l.get());
    PEAK.with(|p| p.set(base));
    let out = f();
    let peak = PEAK.with(|p| p.get());
    (out, (peak - base).max(0) as usize)
}
