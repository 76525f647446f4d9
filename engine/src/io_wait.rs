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
