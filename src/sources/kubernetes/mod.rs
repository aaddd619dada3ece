//! The Kubernetes-mode source: the connection to the local cluster and the
//! broker, what each watched object means to the engine, and the watches
//! themselves with the batches they send the apply loop.

pub mod client;
pub(crate) mod facts;
pub(crate) mod readers;
pub(crate) mod served;
pub(crate) mod watch;
