//! The Kubernetes-mode source: the connection to the local cluster and the
//! broker, and what each watched object means to the engine.

pub mod client;
pub mod facts;
pub mod readers;
