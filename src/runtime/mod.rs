//! What runs while serving: the one assembly every command is built from,
//! the apply loop both sources feed, start-up and shutdown, and the wiring
//! of Kubernetes mode.

pub mod assembly;
pub(crate) mod kubernetes;
pub(crate) mod pipeline;
pub mod serve;
pub(crate) mod vip_state;
