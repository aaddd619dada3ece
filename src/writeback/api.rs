//! Small helpers shared by everything that writes to an API server.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{DeleteParams, Preconditions};

/// Whether an API error carries this HTTP status code.
pub fn is_code(error: &kube::Error, code: u16) -> bool {
    matches!(error, kube::Error::Api(status) if status.code == code)
}

/// Delete parameters that only delete the version of the object that was
/// read (`409 Conflict` when someone changed or replaced it meanwhile).
pub fn delete_if_unchanged(meta: &ObjectMeta) -> DeleteParams {
    delete_if_at(meta.resource_version.clone(), meta.uid.clone())
}

/// [`delete_if_unchanged`] given the `resourceVersion` and `uid` read.
pub fn delete_if_at(resource_version: Option<String>, uid: Option<String>) -> DeleteParams {
    DeleteParams {
        preconditions: Some(Preconditions {
            resource_version,
            uid,
        }),
        ..DeleteParams::default()
    }
}

/// A write's outcome: done (true), lost to another writer (false), or failed.
pub fn conflict_is_false<T>(result: Result<T, kube::Error>) -> Result<bool, kube::Error> {
    match result {
        Ok(_) => Ok(true),
        Err(e) if is_code(&e, 409) => Ok(false),
        Err(e) => Err(e),
    }
}
