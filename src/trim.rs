//! Gives the memory of dropped lanes back to the system. A wave of 100,000 lanes frees
//! its memory into glibc's heaps in small pieces scattered among live ones; glibc
//! returns only the top of a heap by itself, so without `malloc_trim` the process's
//! RSS stays at the wave's peak. Lanes report what they drop, and the fleet the lanes'
//! cells it lets go (later, at a sync or a join); the periodic refresh trims once
//! enough have gone, off the request path.

use std::sync::atomic::{AtomicUsize, Ordering};

/// Lanes dropped since the last trim that make the next one worth its walk of the
/// heaps (a few milliseconds with a large heap).
const WORTH_TRIMMING: usize = 1000;

static DROPPED: AtomicUsize = AtomicUsize::new(0);

/// `n` lanes were dropped.
pub fn dropped(n: usize) {
    DROPPED.fetch_add(n, Ordering::Relaxed);
}

/// Returns freed memory to the system if enough lanes went since the last time.
/// Called by the once-a-second refresh, when the lanes dropped at the previous one
/// have ended their tasks and freed what they held.
pub fn if_worth_it() {
    if DROPPED.load(Ordering::Relaxed) < WORTH_TRIMMING {
        return;
    }
    DROPPED.store(0, Ordering::Relaxed);
    trim();
}

// The one FFI call, allowed here only (Cargo.toml denies unsafe code).
#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[allow(unsafe_code)]
fn trim() {
    // SAFETY: malloc_trim only walks glibc's own heaps and gives their free pages
    // back; any thread may call it at any time.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// Other allocators give memory back by themselves, or not at all.
#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn trim() {}
