//! The support only the integration tests use: the real binary (which only
//! a target of the root package can find), `status` lookups, zone
//! transfers, Knot as a secondary and a test CA for DNS over TLS. With
//! `use crate::common::*` a group also has what the `test-support` crate
//! (`tests/support`) shares with the other harnesses.

pub mod binary;
pub mod pki;
pub mod secondary;
pub mod status;
pub mod transfer;

pub use binary::*;
pub use pki::*;
pub use secondary::*;
pub use status::*;
pub use test_support::*;
pub use transfer::*;
