//! Kubernetes object formats: the MCS kinds as Rust types and the version
//! each API server serves them at, their conversion into [`crate::model`]
//! facts, and the records Kubernetes mode keeps on the broker.

pub(crate) mod convert;
pub mod crd;
pub mod records;
pub mod served_versions;
