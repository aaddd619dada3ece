//! What a DNS message says: the question, the answer and its encoding,
//! truncation, OPT checks, rotation, and the UDP fast path with its cached
//! responses.

pub(super) mod answer;
pub(super) mod encode;
pub(super) mod fast_path;
pub(super) mod opt_check;
pub(super) mod question;
pub(super) mod recent;
pub(super) mod response;
pub(super) mod rotate;
