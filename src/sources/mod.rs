//! Sources: what turns the outside world into [`Change`](crate::model::Change)s for the engine.
//!
//! A source watches some description of the member clusters (a manifest
//! directory, or the Kubernetes API servers) and reports, per cluster, each
//! ServiceExport, Service and EndpointSlice that appears, changes or goes away,
//! already reduced to [`crate::model`] facts by [`crate::k8s::convert`].

pub mod kubernetes;
pub mod manifests;

pub use manifests::{ManifestSource, Problem};
