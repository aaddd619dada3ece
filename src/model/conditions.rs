//! ServiceExport and ServiceImport conditions with the MCS API's types and reasons.

use std::borrow::Cow;
use std::fmt;

use serde::Serialize;

/// Why an export is in conflict with the oldest export of the same service.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
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
pub const VALID: &str = "Valid";
/// Condition type: the export (or import) is in effect.
pub const READY: &str = "Ready";
/// Condition type: the export disagrees with the oldest export.
pub const CONFLICT: &str = "Conflict";
