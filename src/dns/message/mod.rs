//! What a DNS message says: the question, the answer and its encoding,
//! truncation, OPT checks, rotation, and the UDP fast path with its cached
//! responses.

pub mod answer;
pub mod encode;
pub mod fast_path;
pub mod opt_check;
pub mod question;
pub mod recent;
pub mod response;
pub mod rotate;
