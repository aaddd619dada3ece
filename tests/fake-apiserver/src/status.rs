//! `meta.k8s.io/v1` `Status` failures, worded like kube-apiserver's.

use serde_json::{Value, json};

use super::resource::ResourceType;

/// A failed request: HTTP code, `reason` and message, rendered as a `Status`.
#[derive(Clone, Debug, PartialEq)]
pub struct ApiError {
    pub code: u16,
    pub reason: String,
    pub message: String,
    pub details: Option<Value>,
}

impl ApiError {
    pub fn new(code: u16, reason: &str, message: impl Into<String>) -> Self {
        Self {
            code,
            reason: reason.into(),
            message: message.into(),
            details: None,
        }
    }

    fn with_details(mut self, rt: &ResourceType, name: &str) -> Self {
        self.details = Some(json!({"name": name, "group": rt.group, "kind": rt.plural}));
        self
    }

    pub fn not_found(rt: &ResourceType, name: &str) -> Self {
        Self::new(
            404,
            "NotFound",
            format!("{} \"{name}\" not found", rt.qualified()),
        )
        .with_details(rt, name)
    }

    pub fn namespace_not_found(ns: &str) -> Self {
        let mut e = Self::new(404, "NotFound", format!("namespaces \"{ns}\" not found"));
        e.details = Some(json!({"name": ns, "kind": "namespaces"}));
        e
    }

    pub fn already_exists(rt: &ResourceType, name: &str) -> Self {
        Self::new(
            409,
            "AlreadyExists",
            format!("{} \"{name}\" already exists", rt.qualified()),
        )
        .with_details(rt, name)
    }

    pub fn conflict(rt: &ResourceType, name: &str) -> Self {
        Self::new(
            409,
            "Conflict",
            format!(
                "Operation cannot be fulfilled on {} \"{name}\": the object has been modified; \
                 please apply your changes to the latest version and try again",
                rt.qualified()
            ),
        )
        .with_details(rt, name)
    }

    pub fn precondition_conflict(rt: &ResourceType, name: &str, what: &str) -> Self {
        Self::new(
            409,
            "Conflict",
            format!(
                "Operation cannot be fulfilled on {} \"{name}\": {what}",
                rt.qualified()
            ),
        )
        .with_details(rt, name)
    }

    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(400, "BadRequest", message)
    }

    pub fn invalid(rt: &ResourceType, name: &str, message: impl Into<String>) -> Self {
        let message = message.into();
        Self::new(
            422,
            "Invalid",
            format!("{} \"{name}\" is invalid: {message}", rt.qualified()),
        )
        .with_details(rt, name)
    }

    pub fn forbidden(message: impl Into<String>) -> Self {
        Self::new(403, "Forbidden", message)
    }

    pub fn expired(message: impl Into<String>) -> Self {
        Self::new(410, "Expired", message)
    }

    pub fn too_old(requested: u64, oldest: u64) -> Self {
        Self::expired(format!("too old resource version: {requested} ({oldest})"))
    }

    pub fn method_not_allowed(message: impl Into<String>) -> Self {
        Self::new(405, "MethodNotAllowed", message)
    }

    pub fn unsupported_media_type(ct: &str) -> Self {
        Self::new(
            415,
            "UnsupportedMediaType",
            format!(
                "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml, application/strategic-merge-patch+json (got {ct:?})"
            ),
        )
    }

    /// The `Status` for an injected fault with a given HTTP code.
    pub fn injected(code: u16) -> Self {
        let reason = match code {
            400 => "BadRequest",
            401 => "Unauthorized",
            403 => "Forbidden",
            404 => "NotFound",
            405 => "MethodNotAllowed",
            409 => "Conflict",
            410 => "Expired",
            422 => "Invalid",
            429 => "TooManyRequests",
            500 => "InternalError",
            503 => "ServiceUnavailable",
            504 => "Timeout",
            _ => "",
        };
        Self::new(
            code,
            reason,
            format!("fake-apiserver: injected failure {code}"),
        )
    }

    /// The full `Status` object.
    pub fn to_status(&self) -> Value {
        let mut v = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        });
        if let Some(d) = &self.details {
            v["details"] = d.clone();
        }
        v
    }
}
