//! ServiceExport and ServiceImport conditions with the MCS API's types and reasons.

use std::borrow::Cow;
use std::fmt;

use serde::Serialize;

/// Why an export is in conflict with the oldest export of the same service.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
// The variants are the MCS API's reasons, spelled as it spells them.
#[allow(clippy::enum_variant_names)]
pub enum ConflictReason {
    /// Its ports differ from the oldest export's.
    PortConflict,
    /// ClusterSetIP against Headless.
    TypeConflict,
    /// `sessionAffinity` differs.
    SessionAffinityConflict,
    /// `sessionAffinityConfig` differs.
    SessionAffinityConfigConflict,
    /// `exportedLabels` differ.
    LabelsConflict,
    /// `exportedAnnotations` differ.
    AnnotationsConflict,
    /// `internalTrafficPolicy` differs.
    InternalTrafficPolicyConflict,
    /// `trafficDistribution` differs.
    TrafficDistributionConflict,
    /// No IP family in common with the older exports: left out of the import.
    IPFamilyConflict,
    /// The clusterset VIP setting (annotation or global flag) differs.
    ClusterSetIPConflict,
}

impl ConflictReason {
    /// Every reason, for metrics that list each one (zero included).
    pub const ALL: [ConflictReason; 10] = [
        ConflictReason::PortConflict,
        ConflictReason::TypeConflict,
        ConflictReason::SessionAffinityConflict,
        ConflictReason::SessionAffinityConfigConflict,
        ConflictReason::LabelsConflict,
        ConflictReason::AnnotationsConflict,
        ConflictReason::InternalTrafficPolicyConflict,
        ConflictReason::TrafficDistributionConflict,
        ConflictReason::IPFamilyConflict,
        ConflictReason::ClusterSetIPConflict,
    ];
}

impl fmt::Display for ConflictReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

/// One status condition (`type`, `status`, `reason`, `message`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Condition {
    /// `Valid`, `Ready` or `Conflict`.
    #[serde(rename = "type")]
    pub type_: &'static str,
    /// `True` or `False`.
    #[serde(serialize_with = "status_text")]
    pub status: bool,
    /// CamelCase reason; several conflict reasons are comma-joined.
    /// (Most reasons and messages are fixed texts, so they are not copied.)
    pub reason: Cow<'static, str>,
    /// Human-readable detail.
    pub message: Cow<'static, str>,
}

impl Condition {
    /// Builds a condition.
    pub fn new(
        type_: &'static str,
        status: bool,
        reason: impl Into<Cow<'static, str>>,
        message: impl Into<Cow<'static, str>>,
    ) -> Self {
        Self {
            type_,
            status,
            reason: reason.into(),
            message: message.into(),
        }
    }

    /// `True` / `False`, as Kubernetes spells condition statuses.
    pub fn status_str(&self) -> &'static str {
        if self.status { "True" } else { "False" }
    }
}

fn status_text<S: serde::Serializer>(status: &bool, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(if *status { "True" } else { "False" })
}

/// Condition type: the export refers to an exportable Service.
pub(crate) const VALID: &str = "Valid";
/// Condition type: the export (or import) is in effect.
pub(crate) const READY: &str = "Ready";
/// Condition type: the export disagrees with the oldest export.
pub(crate) const CONFLICT: &str = "Conflict";

/// The reasons of the conditions this program writes, as KEP-1645 and the
/// MCS API (mcs-api v0.5) name them; [`ConflictReason`] has the `Conflict`
/// condition's.
pub(crate) mod reason {
    /// ServiceExport `Valid=True`.
    pub(crate) const VALID: &str = "Valid";
    /// ServiceExport `Valid=False`: no Service of that namespace and name.
    pub(crate) const NO_SERVICE: &str = "NoService";
    /// ServiceExport `Valid=False`: an ExternalName Service.
    pub(crate) const INVALID_SERVICE_TYPE: &str = "InvalidServiceType";
    /// ServiceExport `Valid=False`: a Service of a protected namespace
    /// (`model/trust.rs`; this program's reason, as the MCS API allows).
    pub(crate) const NAMESPACE_PROTECTED: &str = "NamespaceProtected";
    /// ServiceExport `Valid=False`: a namespace outside the cluster's
    /// allow-list (`--cluster-namespaces`; this program's reason).
    pub(crate) const NAMESPACE_NOT_ALLOWED: &str = "NamespaceNotAllowed";
    /// ServiceExport `Valid=False`: the cluster exports more services than
    /// `--max-exports-per-cluster` and this one is past the cap.
    pub(crate) const EXPORT_LIMIT_REACHED: &str = "ExportLimitReached";
    /// ServiceExport `Valid=False`: the cluster's exports hold more endpoints
    /// than `--max-endpoints-per-cluster` and this one is past the cap.
    pub(crate) const ENDPOINT_LIMIT_REACHED: &str = "EndpointLimitReached";
    /// ServiceImport `Ready=True` without clusterset VIPs: its namespace
    /// holds `--max-vips-per-namespace` of them already.
    pub(crate) const VIP_LIMIT_REACHED: &str = "VIPLimitReached";
    /// ServiceImport `Ready=True` whose derived Service holds a ClusterIP of
    /// the member's range: the API server refused it the clusterset VIPs
    /// (`--derived-services clusterset`; ARCHITECTURE.md, "Derived Services").
    pub(crate) const VIP_NOT_PINNED: &str = "VIPNotPinned";
    /// ServiceExport `Ready=True`: the export is in the import (pushed to the broker).
    pub(crate) const EXPORTED: &str = "Exported";
    /// ServiceExport `Ready=False` while it cannot take effect yet (no
    /// Service); ServiceImport `Ready=False` while no exporting cluster is
    /// live (it waits for one to return).
    pub(crate) const PENDING: &str = "Pending";
    /// ServiceExport `Ready=False`: it cannot take effect (an ExternalName
    /// Service, or IP families sharing none with the clusterset's).
    pub(crate) const FAILED: &str = "Failed";
    /// ServiceExport `Conflict=False`.
    pub(crate) const NO_CONFLICTS: &str = "NoConflicts";
    /// ServiceImport `Ready=True`.
    pub(crate) const READY: &str = "Ready";
    /// ServiceImport `Ready=False`: the local cluster supports none of its IP families.
    pub(crate) const IP_FAMILY_NOT_SUPPORTED: &str = "IPFamilyNotSupported";
}

/// The kind a condition is written on.
#[cfg(test)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum On {
    /// `ServiceExport.status.conditions`.
    ServiceExport,
    /// `ServiceImport.status.conditions`.
    ServiceImport,
}

/// Every `(kind, type, status, reason)` this program writes, but for
/// `Conflict=True`, whose reason is one or more [`ConflictReason`]s joined
/// by commas. The engine's tests check that it writes nothing else (so it
/// is compiled for tests only).
#[cfg(test)]
pub(crate) const WRITTEN: [(On, &str, bool, &str); 16] = [
    (On::ServiceExport, VALID, true, reason::VALID),
    (On::ServiceImport, READY, true, reason::VIP_NOT_PINNED),
    (On::ServiceExport, VALID, false, reason::NAMESPACE_PROTECTED),
    (
        On::ServiceExport,
        VALID,
        false,
        reason::NAMESPACE_NOT_ALLOWED,
    ),
    (
        On::ServiceExport,
        VALID,
        false,
        reason::EXPORT_LIMIT_REACHED,
    ),
    (
        On::ServiceExport,
        VALID,
        false,
        reason::ENDPOINT_LIMIT_REACHED,
    ),
    (On::ServiceImport, READY, true, reason::VIP_LIMIT_REACHED),
    (On::ServiceExport, VALID, false, reason::NO_SERVICE),
    (
        On::ServiceExport,
        VALID,
        false,
        reason::INVALID_SERVICE_TYPE,
    ),
    (On::ServiceExport, READY, true, reason::EXPORTED),
    (On::ServiceExport, READY, false, reason::PENDING),
    (On::ServiceExport, READY, false, reason::FAILED),
    (On::ServiceExport, CONFLICT, false, reason::NO_CONFLICTS),
    (On::ServiceImport, READY, true, reason::READY),
    (On::ServiceImport, READY, false, reason::PENDING),
    (
        On::ServiceImport,
        READY,
        false,
        reason::IP_FAMILY_NOT_SUPPORTED,
    ),
];

/// Whether `condition` on `on` is one [`WRITTEN`] lists (or a `Conflict=True`
/// of [`ConflictReason`]s).
#[cfg(test)]
pub(crate) fn is_written(on: On, condition: &Condition) -> bool {
    if on == On::ServiceExport && condition.type_ == CONFLICT && condition.status {
        return condition.reason.split(',').all(|r| {
            ConflictReason::ALL
                .iter()
                .any(|known| known.to_string() == r)
        });
    }
    WRITTEN.iter().any(|&(o, type_, status, reason)| {
        (o, type_, status, reason)
            == (
                on,
                condition.type_,
                condition.status,
                condition.reason.as_ref(),
            )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    // The condition types and reasons of the MCS API, copied from
    // sigs.k8s.io/mcs-api v0.5.2, pkg/apis/v1beta1/serviceexport.go and
    // pkg/apis/v1beta1/serviceimport.go (v1alpha1 has the same constants):
    // (kind, type, status, reason) for every reason the doc comments allow.
    const UPSTREAM: [(On, &str, &str, &str); 21] = [
        // ServiceExportConditionValid
        (On::ServiceExport, "Valid", "True", "Valid"),
        (On::ServiceExport, "Valid", "False", "NoService"),
        (On::ServiceExport, "Valid", "False", "InvalidServiceType"),
        // ServiceExportConditionReady
        (On::ServiceExport, "Ready", "True", "Exported"),
        (On::ServiceExport, "Ready", "True", "Ready"),
        (On::ServiceExport, "Ready", "False", "Pending"),
        (On::ServiceExport, "Ready", "False", "Failed"),
        (On::ServiceExport, "Ready", "Unknown", "Pending"),
        // ServiceExportConditionConflict
        (On::ServiceExport, "Conflict", "True", "PortConflict"),
        (On::ServiceExport, "Conflict", "True", "TypeConflict"),
        (
            On::ServiceExport,
            "Conflict",
            "True",
            "SessionAffinityConflict",
        ),
        (
            On::ServiceExport,
            "Conflict",
            "True",
            "SessionAffinityConfigConflict",
        ),
        (On::ServiceExport, "Conflict", "True", "LabelsConflict"),
        (On::ServiceExport, "Conflict", "True", "AnnotationsConflict"),
        (
            On::ServiceExport,
            "Conflict",
            "True",
            "InternalTrafficPolicyConflict",
        ),
        (
            On::ServiceExport,
            "Conflict",
            "True",
            "TrafficDistributionConflict",
        ),
        (On::ServiceExport, "Conflict", "True", "IPFamilyConflict"),
        (On::ServiceExport, "Conflict", "False", "NoConflicts"),
        // ServiceImportConditionReady
        (On::ServiceImport, "Ready", "True", "Ready"),
        (On::ServiceImport, "Ready", "False", "Pending"),
        (On::ServiceImport, "Ready", "False", "IPFamilyNotSupported"),
    ];

    /// Reasons of ours the MCS API does not name ("Controllers may raise
    /// this condition with other reasons"): the clusterset VIP switch
    /// (`clusterset-dns.io/clusterset-ip` or `--clusterset-ip`) is this
    /// program's, so a disagreement about it has no upstream name.
    const EXTENSIONS: [ConflictReason; 1] = [ConflictReason::ClusterSetIPConflict];

    /// Likewise the refusals and limits of issue 46: a protected
    /// namespace's export (Lighthouse refuses them too, under a reason of
    /// its own), one outside the cluster's allow-list, one past a cap; and
    /// a derived Service refused the clusterset VIPs (issue 47).
    const OWN_REASONS: [&str; 6] = [
        reason::VIP_NOT_PINNED,
        reason::NAMESPACE_PROTECTED,
        reason::NAMESPACE_NOT_ALLOWED,
        reason::EXPORT_LIMIT_REACHED,
        reason::ENDPOINT_LIMIT_REACHED,
        reason::VIP_LIMIT_REACHED,
    ];

    fn upstream(on: On, type_: &str, status: &str, reason: &str) -> bool {
        UPSTREAM.contains(&(on, type_, status, reason))
    }

    #[test]
    fn every_condition_written_is_named_by_the_mcs_api() {
        for (on, type_, status, reason) in WRITTEN {
            let status = if status { "True" } else { "False" };
            assert!(
                upstream(on, type_, status, reason) != OWN_REASONS.contains(&reason),
                "{on:?} {type_}={status} {reason} is not an mcs-api v0.5 reason"
            );
        }
        for reason in ConflictReason::ALL {
            let name = reason.to_string();
            assert_eq!(
                upstream(On::ServiceExport, CONFLICT, "True", &name),
                !EXTENSIONS.contains(&reason),
                "Conflict=True {name}"
            );
        }
    }

    #[test]
    fn every_upstream_conflict_reason_is_detected() {
        for (on, type_, status, reason) in UPSTREAM {
            if (on, type_, status) == (On::ServiceExport, "Conflict", "True") {
                assert!(
                    ConflictReason::ALL.iter().any(|r| r.to_string() == reason),
                    "{reason} is never raised"
                );
            }
        }
    }

    #[test]
    fn conflict_reasons_may_be_joined() {
        let joined = Condition::new(CONFLICT, true, "PortConflict,TypeConflict", "");
        assert!(is_written(On::ServiceExport, &joined));
        let unknown = Condition::new(CONFLICT, true, "PortConflict,Nope", "");
        assert!(!is_written(On::ServiceExport, &unknown));
        let dead = Condition::new(READY, false, "ClustersUnreachable", "");
        assert!(!is_written(On::ServiceImport, &dead));
    }
}
