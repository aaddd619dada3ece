//! What the binary does besides serving (`serve` is [`crate::runtime`]):
//! `status`, `explain`, `check`, and the snapshot of Kubernetes mode the
//! first two read.

pub mod check;
pub mod explain;
pub mod snapshot;
pub mod status;
