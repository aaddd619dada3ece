//! The TSIG key file of `--tsig-key`: one key in the syntax BIND's
//! `tsig-keygen` prints and `dig -k`, `nsupdate -k` and `named.conf` read:
//!
//! ```text
//! key "transfer" {
//!     algorithm hmac-sha256;
//!     secret "base64 secret";
//! };
//! ```
//!
//! Comments (`#`, `//`, `/* */`) are allowed. The file is read again when it
//! changes (`dns/polled.rs`): a rotated Secret takes effect without a
//! restart, and a broken one keeps the previous key in use.

use std::path::Path;
use std::sync::Arc;

use hickory_proto::rr::Name;
use hickory_proto::rr::TSigner;
use hickory_proto::rr::rdata::tsig::TsigAlgorithm;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::dns::metrics::DnsMetrics;
use crate::dns::polled::Polled;

/// How far a request's time may be from ours (RFC 8945 §10 recommends 300 s).
const FUDGE: u16 = 300;

/// The algorithms hickory-proto computes (RFC 8945 §6 makes HMAC-SHA256 mandatory).
const ALGORITHMS: [(&str, TsigAlgorithm); 3] = [
    ("hmac-sha256", TsigAlgorithm::HmacSha256),
    ("hmac-sha384", TsigAlgorithm::HmacSha384),
    ("hmac-sha512", TsigAlgorithm::HmacSha512),
];

/// The key of `--tsig-key`, as last read well from its file.
pub struct TsigKey {
    polled: Polled<TSigner>,
}

impl TsigKey {
    /// Reads the key file; an error names the file and what is wrong.
    pub fn load(path: &Path) -> anyhow::Result<Self> {
        let file = path.to_owned();
        let polled = Polled::load(vec![(file.clone(), "TSIG key file")], move |contents| {
            parse(&contents[0], &file)
        })?;
        Ok(Self { polled })
    }

    /// The key in use.
    pub(crate) fn signer(&self) -> Arc<TSigner> {
        self.polled.current()
    }

    /// Reads the file again when it changes until `shutdown`; a changed key
    /// that parses is used for the next message, one that does not is
    /// logged and counted, and the previous key stays in use.
    pub(crate) async fn follow(&self, metrics: Arc<DnsMetrics>, shutdown: CancellationToken) {
        let file = self.polled.file().display().to_string();
        self.polled
            .follow(shutdown, |changed| match changed {
                Ok(key) => {
                    metrics.tsig_key_reloaded(true);
                    info!(%file, key = %key.signer_name(), "TSIG key reloaded");
                }
                Err(error) => {
                    metrics.tsig_key_reloaded(false);
                    warn!(
                        error = format!("{error:#}"),
                        "TSIG key not reloaded; the previous one stays in use"
                    );
                }
            })
            .await;
    }
}

/// Names the file and the key only: the secret stays out of logs.
impl std::fmt::Debug for TsigKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TsigKey")
            .field("file", &self.polled.file())
            .field("name", self.signer().signer_name())
            .finish_non_exhaustive()
    }
}

/// The key in `text`, read from `file` (named in every error).
fn parse(text: &[u8], file: &Path) -> anyhow::Result<TSigner> {
    let fail = |what: String| anyhow::anyhow!("invalid TSIG key file {}: {what}", file.display());
    let text = std::str::from_utf8(text).map_err(|_| fail("not UTF-8 text".into()))?;
    let tokens = tokens(text).map_err(fail)?;
    let mut tokens = tokens.iter().map(String::as_str);
    let mut expect = |wanted: &str| match tokens.next() {
        Some(token) if token == wanted => Ok(()),
        other => Err(fail(format!(
            "expected `{wanted}`, found {}",
            other.map_or("the end of the file".to_owned(), |t| format!("`{t}`"))
        ))),
    };
    expect("key")?;
    let rest: Vec<&str> = tokens.collect();
    let [name, "{", body @ ..] = rest.as_slice() else {
        return Err(fail(
            "expected `key \"NAME\" { algorithm ...; secret \"...\"; };`".into(),
        ));
    };
    let (mut algorithm, mut secret) = (None, None);
    let mut statements = body.split(|t| *t == ";");
    let mut closed = false;
    for statement in statements.by_ref() {
        match statement {
            ["algorithm", value] => algorithm = Some(*value),
            ["secret", value] => secret = Some(*value),
            ["}"] => {
                closed = true;
                break;
            }
            [] => {}
            other => return Err(fail(format!("unexpected `{}`", other.join(" ")))),
        }
    }
    let trailing: Vec<&str> = statements.flatten().copied().collect();
    if !closed || !trailing.is_empty() {
        return Err(fail(
            "one `key` block closed by `};` expected, and nothing after it".into(),
        ));
    }
    let name = Name::from_ascii(name).map_err(|e| fail(format!("bad key name {name}: {e}")))?;
    let algorithm = algorithm.ok_or_else(|| fail("no `algorithm`".into()))?;
    let algorithm = ALGORITHMS
        .iter()
        .find(|(known, _)| known.eq_ignore_ascii_case(algorithm))
        .map(|(_, a)| a.clone())
        .ok_or_else(|| {
            let known: Vec<&str> = ALGORITHMS.iter().map(|(n, _)| *n).collect();
            fail(format!(
                "algorithm {algorithm} is not supported (use one of {})",
                known.join(", ")
            ))
        })?;
    let secret = secret.ok_or_else(|| fail("no `secret`".into()))?;
    let secret = data_encoding::BASE64
        .decode(secret.as_bytes())
        .map_err(|e| fail(format!("the secret is not valid base64: {e}")))?;
    if secret.is_empty() {
        return Err(fail("the secret is empty".into()));
    }
    TSigner::new(secret, algorithm, name, FUDGE).map_err(|e| fail(e.to_string()))
}

/// The words, quoted strings (unquoted), braces and semicolons of `text`,
/// comments left out.
fn tokens(text: &str) -> Result<Vec<String>, String> {
    let mut tokens = Vec::new();
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            c if c.is_whitespace() => {}
            '#' => while chars.next_if(|c| *c != '\n').is_some() {},
            '/' if chars.peek() == Some(&'/') => while chars.next_if(|c| *c != '\n').is_some() {},
            '/' if chars.peek() == Some(&'*') => {
                chars.next();
                let mut last = ' ';
                loop {
                    match chars.next() {
                        Some('/') if last == '*' => break,
                        Some(c) => last = c,
                        None => return Err("a `/*` comment is not closed".into()),
                    }
                }
            }
            '{' | '}' | ';' => tokens.push(c.to_string()),
            '"' => {
                let mut quoted = String::new();
                loop {
                    match chars.next() {
                        Some('"') => break,
                        Some(c) => quoted.push(c),
                        None => return Err("a quoted string is not closed".into()),
                    }
                }
                tokens.push(quoted);
            }
            c => {
                let mut word = c.to_string();
                while let Some(c) =
                    chars.next_if(|c| !c.is_whitespace() && !matches!(c, '{' | '}' | ';' | '"'))
                {
                    word.push(c);
                }
                tokens.push(word);
            }
        }
    }
    Ok(tokens)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed(text: &str) -> anyhow::Result<TSigner> {
        parse(text.as_bytes(), Path::new("/etc/tsig/key.conf"))
    }

    /// What `tsig-keygen transfer` prints is read as it is.
    #[test]
    fn reads_what_tsig_keygen_prints() {
        let key = parsed(
            "key \"transfer\" {\n\talgorithm hmac-sha256;\n\tsecret \"c2VjcmV0LXNlY3JldC1zZWNyZXQ=\";\n};\n",
        )
        .unwrap();
        assert_eq!(key.signer_name().to_string(), "transfer.");
        assert_eq!(key.algorithm(), &TsigAlgorithm::HmacSha256);
        assert_eq!(key.key(), b"secret-secret-secret");
        assert_eq!(key.fudge(), 300);
        let commented = parsed(
            "# made by hand\nkey xfr.example. { // the name\n secret \"AAEC\"; /* order */ algorithm HMAC-SHA512; };",
        )
        .unwrap();
        assert_eq!(commented.algorithm(), &TsigAlgorithm::HmacSha512);
        assert_eq!(commented.key(), [0, 1, 2]);
    }

    /// Every fault names the file and what is wrong with it.
    #[test]
    fn errors_name_the_file_and_the_fault() {
        for (text, fault) in [
            ("", "expected `key`"),
            ("key k { algorithm hmac-sha256; };", "no `secret`"),
            ("key k { secret \"AAEC\"; };", "no `algorithm`"),
            (
                "key k { algorithm hmac-md5; secret \"AAEC\"; };",
                "hmac-md5 is not supported",
            ),
            (
                "key k { algorithm hmac-sha256; secret \"not base64!\"; };",
                "not valid base64",
            ),
            (
                "key k { algorithm hmac-sha256; secret \"AAEC\";",
                "closed by `};`",
            ),
            (
                "key k { algorithm hmac-sha256; secret \"AAEC\"; }; key j { };",
                "nothing after it",
            ),
            (
                "key k { algorithm hmac-sha256; port 53; };",
                "unexpected `port 53`",
            ),
            ("key \"k { };", "not closed"),
        ] {
            let Err(error) = parsed(text) else {
                panic!("{text:?} was read as a key")
            };
            let error = format!("{error:#}");
            assert!(
                error.contains("invalid TSIG key file /etc/tsig/key.conf") && error.contains(fault),
                "{text:?}: {error}"
            );
        }
    }
}
