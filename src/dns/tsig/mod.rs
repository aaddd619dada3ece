//! TSIG (RFC 8945): the key file of `--tsig-key` (`key_file.rs`) and the
//! signing and checking of messages with it (`sign.rs`), used by zone
//! transfers, NOTIFY and the queries a secondary signs (its SOA checks).

pub(super) mod key_file;
pub(super) mod sign;
