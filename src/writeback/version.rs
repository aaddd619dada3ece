//! What identifies one version of an object to the writer: its `uid`, its
//! `resourceVersion`, whether this controller manages it, and a digest of the
//! parts this controller owns. Kept per written object at clusterset size
//! (hundreds of thousands), so the two strings are kept in their canonical
//! binary form where they have one (see [`Token`]).

use std::hash::{BuildHasher, Hash, Hasher as _};
use std::sync::LazyLock;

use k8s_openapi::api::core::v1::{ConfigMap, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition as K8sCondition;
use kube::Resource;
use kube::api::DeleteParams;
use serde::Serialize;
use uuid::Uuid;

use super::api::delete_if_at;
use crate::k8s::crd::ServiceImportStatus;
use crate::k8s::crd::{ServiceExport, ServiceImport};
use crate::k8s::records::{
    ANNOTATION_FIRST_SEEN, LABEL_MANAGED_BY, LABEL_SLICE_MANAGED_BY, MANAGER,
};
use crate::model::Hasher;

/// A digest of the parts of an object this controller writes and compares.
pub(crate) trait Owned {
    /// Equal for objects whose owned parts are equal.
    fn owned_digest(&self) -> u64;

    /// Takes from `current` what a rewrite of it must keep though a plan
    /// made without it could not know (nothing, for most kinds).
    fn keep_from(&mut self, current: &Self) {
        let _ = current;
    }
}

impl Owned for ServiceImport {
    fn owned_digest(&self) -> u64 {
        let meta = &self.metadata;
        digest(&(&self.spec, &meta.labels, &meta.annotations))
    }

    /// An export record's first-seen time, which the broker's policy never
    /// lets change (`records::ANNOTATION_FIRST_SEEN`).
    fn keep_from(&mut self, current: &Self) {
        let kept = current.metadata.annotations.as_ref();
        if let Some(first_seen) = kept.and_then(|a| a.get(ANNOTATION_FIRST_SEEN)) {
            let annotations = self.metadata.annotations.get_or_insert_default();
            annotations.insert(ANNOTATION_FIRST_SEEN.to_owned(), first_seen.clone());
        }
    }
}

impl Owned for ConfigMap {
    fn owned_digest(&self) -> u64 {
        digest(&(&self.data, &self.metadata.labels))
    }
}

impl Owned for ServiceExport {
    fn owned_digest(&self) -> u64 {
        let conditions = self.status.as_ref().map(|s| s.conditions.as_slice());
        conditions_digest(conditions.unwrap_or_default())
    }
}

/// The digest of a ServiceExport whose status has these conditions.
pub(crate) fn conditions_digest(conditions: &[K8sCondition]) -> u64 {
    digest(&conditions)
}

impl Owned for EndpointSlice {
    fn owned_digest(&self) -> u64 {
        let meta = &self.metadata;
        digest(&(
            &self.address_type,
            &meta.owner_references,
            &self.endpoints,
            &self.ports,
            &meta.labels,
            &meta.annotations,
        ))
    }
}

impl Owned for Service {
    /// What a derived Service is planned with (`records::build::derived_service`);
    /// the API server's defaults (target ports, session affinity, traffic
    /// policies) are not compared.
    fn owned_digest(&self) -> u64 {
        let meta = &self.metadata;
        let spec = self.spec.as_ref();
        let ports: Vec<_> = spec
            .and_then(|s| s.ports.as_ref())
            .into_iter()
            .flatten()
            .map(|p| (&p.name, &p.protocol, p.port, &p.app_protocol))
            .collect();
        digest(&(
            &meta.labels,
            &meta.annotations,
            &meta.owner_references,
            spec.map(|s| (&s.type_, &s.selector, &s.cluster_ips)),
            spec.map(|s| (&s.ip_families, &s.ip_family_policy)),
            ports,
        ))
    }
}

/// The digest of a ServiceImport status, to compare a new one with one
/// written before.
pub(crate) fn status_digest(status: &ServiceImportStatus) -> u64 {
    digest(status)
}

/// The seed of digests and fingerprints: random once per process, like the
/// maps', so that nobody who can edit a written object can aim an edit at
/// the digest the writer expects.
static SEED: LazyLock<Hasher> = LazyLock::new(Hasher::default);

/// A hash of a value's JSON form, stable within the process (foldhash: at a
/// relist every object is digested, and SipHash was 6% of a restart's CPU).
fn digest(value: &impl Serialize) -> u64 {
    struct Feed(foldhash::fast::FoldHasher<'static>);
    impl std::io::Write for Feed {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0.write(bytes);
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut feed = Feed(SEED.build_hasher());
    serde_json::to_writer(&mut feed, value).expect("Kubernetes objects serialize");
    feed.0.finish()
}

/// A hash of what an object is built from, stable within the process: far
/// cheaper than building the object and taking its [`Owned::owned_digest`].
pub(crate) fn fingerprint(value: &impl Hash) -> u64 {
    SEED.hash_one(value)
}

/// One object as the writer needs it: enough to compare, to write with a
/// precondition and to know whether it is this controller's to delete. Not
/// its `uid`: a `resourceVersion` precondition already fails for any other
/// object of the name (versions are the store's revisions, never reused),
/// and only a ServiceImport's uid is read (`caches.rs`, `WrittenImport`).
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Version {
    /// `metadata.resourceVersion`.
    resource_version: Option<Token>,
    /// Whether it carries this controller's managed-by label.
    pub managed: bool,
    /// [`Owned::owned_digest`] of the object as it is.
    pub digest: u64,
}

impl Version {
    /// The version of `object`.
    pub(crate) fn of<K: Resource + Owned>(object: &K) -> Self {
        let meta = object.meta();
        let labels = meta.labels.as_ref();
        let label = |l: &str| labels.and_then(|ls| ls.get(l)).map(String::as_str);
        Self {
            resource_version: meta.resource_version.as_deref().map(Token::new),
            managed: label(LABEL_MANAGED_BY) == Some(MANAGER)
                || label(LABEL_SLICE_MANAGED_BY) == Some(MANAGER),
            digest: object.owned_digest(),
        }
    }

    /// `metadata.resourceVersion`, as read.
    pub(crate) fn resource_version(&self) -> Option<String> {
        self.resource_version.as_ref().map(Token::text)
    }

    /// Delete parameters that delete only this version (`409 Conflict` when
    /// someone changed or replaced the object meanwhile).
    pub(crate) fn delete_params(&self) -> DeleteParams {
        delete_if_at(self.resource_version(), None)
    }
}

/// A `uid` or `resourceVersion`, both opaque strings to a client (API
/// conventions, "Concurrency Control and Consistency"), kept as the UUID or
/// the number it spells when it spells one exactly (the API server's uids are
/// RFC 9562 UUIDs in lowercase, etcd's versions decimal revisions): 24 bytes,
/// where a string would take 16 and a 36-byte allocation. Any other text is
/// kept as it is, so [`Token::text`] always gives back what was read.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Token {
    Uuid(Uuid),
    Number(u64),
    Text(Box<str>),
}

impl Token {
    /// Read once per watch event of a kept object: compares spellings
    /// without allocating.
    pub(crate) fn new(text: &str) -> Self {
        let mut spelled = [0; uuid::fmt::Hyphenated::LENGTH];
        if let Ok(uuid) = Uuid::try_parse(text)
            && uuid.hyphenated().encode_lower(&mut spelled) == text
        {
            return Token::Uuid(uuid);
        }
        let decimal =
            text.bytes().all(|b| b.is_ascii_digit()) && (text == "0" || !text.starts_with('0'));
        match text.parse::<u64>() {
            Ok(n) if decimal => Token::Number(n),
            _ => Token::Text(text.into()),
        }
    }

    /// The text as read.
    pub(crate) fn text(&self) -> String {
        match self {
            Token::Uuid(uuid) => uuid.hyphenated().to_string(),
            Token::Number(n) => n.to_string(),
            Token::Text(text) => text.to_string(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A record created again after a lost race keeps the first-seen time
    /// the broker already has: the ownership policy refuses any other.
    #[test]
    fn a_rewrite_keeps_the_first_seen_time() {
        let with = |first_seen: &str| {
            let mut record = ServiceImport::default();
            let annotations = [(ANNOTATION_FIRST_SEEN.to_owned(), first_seen.to_owned())];
            record.metadata.annotations = Some(annotations.into());
            record
        };
        let mut desired = with("2026-12-07T14:00:05Z");
        desired.keep_from(&with("2026-12-07T14:00:00Z"));
        assert_eq!(
            desired.owned_digest(),
            with("2026-12-07T14:00:00Z").owned_digest()
        );
    }

    /// Whatever was read is given back as it was: a precondition with
    /// another spelling of the same uid or version would fail with 409.
    #[test]
    fn tokens_give_back_what_was_read() {
        for text in [
            "6f1c3b2e-8d4a-4f4e-9c1a-2b3c4d5e6f70",
            "6F1C3B2E-8D4A-4F4E-9C1A-2B3C4D5E6F70",
            "6f1c3b2e8d4a4f4e9c1a2b3c4d5e6f70",
            "{6f1c3b2e-8d4a-4f4e-9c1a-2b3c4d5e6f70}",
            "123456",
            "0",
            "0123",
            "+5",
            "18446744073709551616",
            "uid-1",
            "",
        ] {
            assert_eq!(Token::new(text).text(), text);
        }
        assert!(matches!(
            Token::new("6f1c3b2e-8d4a-4f4e-9c1a-2b3c4d5e6f70"),
            Token::Uuid(_)
        ));
        assert!(matches!(Token::new("123456"), Token::Number(123456)));
        assert!(matches!(Token::new("0"), Token::Number(0)));
        assert!(matches!(Token::new("0123"), Token::Text(_)));
        assert!(matches!(Token::new("+5"), Token::Text(_)));
        assert_eq!(std::mem::size_of::<Token>(), 24);
    }
}
