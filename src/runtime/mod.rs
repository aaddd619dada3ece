//! What runs while serving: the one assembly every command is built from,
//! the apply loop both sources feed, start-up and shutdown, and the wiring
//! of Kubernetes mode.

pub mod assembly;
pub mod kubernetes;
pub mod pipeline;
pub mod serve;
pub mod vip_state;
