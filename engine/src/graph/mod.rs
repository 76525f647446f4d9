//! (not yet written)
