//! Hooks around the reads a thread blocks on, so that the process embedding the engine can
//! say what it waits for (PostgreSQL: the wait event in `pg_stat_activity`). The engine never
//! calls the embedder otherwise; the hooks must be cheap and may be called from any thread.

use std::sync::OnceLock;

/// Called before a thread blocks on a batch of reads, and after it returns.
#[derive(Clone, Copy)]
pub struct WaitHooks {
    pub start: fn(),
    pub end: fn(),
}

static HOOKS: OnceLock<WaitHooks> = OnceLock::new();

/// Installs the hooks for the life of the process; false if some were installed already.
pub fn set_wait_hooks(hooks: WaitHooks) -> bool {
    HOOKS.set(hooks).is_ok()
}

/// Runs the start hook now and the end hook when dropped (also on an early return).
pub(crate) struct Waiting(Option<WaitHooks>);

impl Waiting {
    pub(crate) fn begin() -> Waiting {
        let hooks = HOOKS.get().copied();
        if let Some(h) = hooks {
            (h.start)();
        }
        Waiting(hooks)
    }
}

impl Drop for Waiting {
    fn drop(&mut self) {
        if let Some(h) = self.0 {
            (h.end)();
        }
    }
}

/// Work a thread does while its reads are in flight (LIOS, RFC 0004 §4): after a batch of
/// reads is submitted and before the thread waits for them. Installed on one thread for the
/// duration of one call ([`with_stall_work`]); only io_uring batches call it (a pread batch
/// has no stall to fill).
pub trait StallWork {
    /// `in_flight` reads were just submitted; whatever runs here overlaps them.
    fn stalled(&mut self, in_flight: usize);
    /// The batch's completions are all in: `since_submit` is how long after the submit,
    /// `worked` how long `stalled` ran (zero when it was not called). With no work, the
    /// first is an idle-time sample; with work, any excess of `worked` over the reads is
    /// latency the work added.
    fn completed(
        &mut self,
        in_flight: usize,
        since_submit: std::time::Duration,
        worked: std::time::Duration,
    );
}

thread_local! {
    static STALL_WORK: std::cell::Cell<Option<*mut (dyn StallWork + 'static)>> =
        const { std::cell::Cell::new(None) };
}

/// Runs `f` with `work` called in this thread's read stalls, and uninstalls it when `f`
/// returns or unwinds. Nested calls replace the outer work until they return.
pub fn with_stall_work<R>(work: &mut dyn StallWork, f: impl FnOnce() -> R) -> R {
    struct Restore(Option<*mut (dyn StallWork + 'static)>);
    impl Drop for Restore {
        fn drop(&mut self) {
            STALL_WORK.with(|w| w.set(self.0));
        }
    }
    // SAFETY: only the lifetime is erased. The pointer is stored in this thread's cell and
    // removed by `Restore` before this function returns or unwinds, so it is never used
    // after `work`'s borrow ends; `take_stall_work` removes it while it runs, so it is never
    // aliased by a nested stall.
    let erased: *mut (dyn StallWork + 'static) = unsafe {
        std::mem::transmute::<*mut (dyn StallWork + '_), *mut (dyn StallWork + 'static)>(work)
    };
    let _restore = Restore(STALL_WORK.with(|w| w.replace(Some(erased))));
    f()
}

/// The stall work installed on this thread, taken out while the caller uses it (a read the
/// work itself issues must not run it again).
pub(crate) struct StallSlot(Option<*mut (dyn StallWork + 'static)>);

impl StallSlot {
    pub(crate) fn take() -> StallSlot {
        StallSlot(STALL_WORK.with(|w| w.take()))
    }

    pub(crate) fn is_set(&self) -> bool {
        self.0.is_some()
    }

    pub(crate) fn with(&mut self, f: impl FnOnce(&mut dyn StallWork)) {
        if let Some(p) = self.0 {
            // SAFETY: installed by `with_stall_work`, whose borrow outlives this call (it is
            // still on this thread's stack below us), and taken out of the cell, so this is
            // the only reference.
            f(unsafe { &mut *p })
        }
    }
}

impl Drop for StallSlot {
    fn drop(&mut self) {
        if let Some(p) = self.0 {
            STALL_WORK.with(|w| w.set(Some(p)));
        }
    }
}
