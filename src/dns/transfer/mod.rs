//! Zone transfer (AXFR/IXFR) and NOTIFY to secondaries.

pub mod notify;
pub(super) mod zone;
