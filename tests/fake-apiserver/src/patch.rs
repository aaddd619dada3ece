//! PATCH bodies: JSON merge patch (RFC 7386), strategic merge patch (treated as
//! a merge patch), JSON patch (RFC 6902) and server-side apply (merged like a
//! merge patch of the applied configuration).

use serde_json::Value;

use super::status::ApiError;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PatchKind {
    Merge,
    Strategic,
    Json,
    Apply,
}

impl PatchKind {
    pub fn from_content_type(ct: &str) -> Result<Self, ApiError> {
        let base = ct.split(';').next().unwrap_or("").trim();
        match base {
            "application/merge-patch+json" => Ok(Self::Merge),
            "application/strategic-merge-patch+json" => Ok(Self::Strategic),
            "application/json-patch+json" => Ok(Self::Json),
            "application/apply-patch+yaml" | "application/apply-patch+cbor" => Ok(Self::Apply),
            _ => Err(ApiError::unsupported_media_type(ct)),
        }
    }
}

/// Parses a patch body (JSON, or YAML for apply).
pub fn parse_body(kind: PatchKind, body: &[u8]) -> Result<Value, ApiError> {
    match serde_json::from_slice::<Value>(body) {
        Ok(v) => Ok(v),
        Err(e) if kind == PatchKind::Apply => serde_saphyr::from_slice::<Value>(body)
            .map_err(|y| ApiError::bad_request(format!("error decoding YAML: {y}; as JSON: {e}"))),
        Err(e) => Err(ApiError::bad_request(format!("error decoding patch: {e}"))),
    }
}

/// Applies a parsed patch to `target` in place.
pub fn apply(kind: PatchKind, target: &mut Value, patch: &Value) -> Result<(), ApiError> {
    match kind {
        PatchKind::Merge | PatchKind::Strategic | PatchKind::Apply => {
            if !patch.is_object() {
                return Err(ApiError::bad_request("patch body must be a JSON object"));
            }
            json_patch::merge(target, patch);
            Ok(())
        }
        PatchKind::Json => {
            let ops: json_patch::Patch = serde_json::from_value(patch.clone())
                .map_err(|e| ApiError::bad_request(format!("error decoding JSON patch: {e}")))?;
            json_patch::patch(target, &ops).map_err(|e| {
                ApiError::new(
                    422,
                    "Invalid",
                    format!("the server rejected our request due to an error in our request: {e}"),
                )
            })
        }
    }
}
