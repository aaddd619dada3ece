//! What both the DNS side (`dns/`) and the operations listener (`ops/`)
//! run on, below both: the accept loop and connection caps every TCP
//! listener shares (`listen.rs`), rate limits for log lines a remote sender
//! can cause (`log_limit.rs`), and the helpers every metric is made with
//! (`metrics.rs`). Knows neither DNS nor HTTP.

pub(crate) mod listen;
pub(crate) mod log_limit;
pub(crate) mod metrics;
