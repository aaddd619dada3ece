//! Shared harness of the integration tests: manifest builders, servers
//! (in-process and the real binary), a DNS client and `status` lookups.
//! Each test crate uses a part of it.
#![allow(dead_code, unused_imports)]

pub mod client;
pub mod manifests;
pub mod ops_http;
pub mod secondary;
pub mod server;
pub mod status;
pub mod transfer;

pub use client::*;
pub use manifests::*;
pub use ops_http::*;
pub use secondary::*;
pub use server::*;
pub use status::*;
pub use transfer::*;
