//! Small helpers shared by everything that writes to an API server.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{DeleteParams, PostParams, Preconditions};
use kube::core::Request;
use kube::{Api, Resource};
use serde::{Deserialize, Serialize};

/// Whether an API error carries this HTTP status code.
pub(crate) fn is_code(error: &kube::Error, code: u16) -> bool {
    matches!(error, kube::Error::Api(status) if status.code == code)
}

/// Whether an API server refused a write because the object's namespace is
/// being deleted (403, cause `NamespaceTerminating`): the namespace watch
/// retracts its services next, so this is no refusal to report.
pub(crate) fn is_namespace_terminating(error: &kube::Error) -> bool {
    matches!(error, kube::Error::Api(status) if status.code == 403
    && status.details.as_ref().is_some_and(|d| {
        d.causes.iter().any(|c| c.reason == "NamespaceTerminating")
    }))
}

/// Delete parameters that only delete the version of the object that was
/// read (`409 Conflict` when someone changed or replaced it meanwhile).
pub(crate) fn delete_if_unchanged(meta: &ObjectMeta) -> DeleteParams {
    delete_if_at(meta.resource_version.clone(), meta.uid.clone())
}

/// [`delete_if_unchanged`] given the `resourceVersion` and `uid` read.
pub(crate) fn delete_if_at(resource_version: Option<String>, uid: Option<String>) -> DeleteParams {
    DeleteParams {
        preconditions: Some(Preconditions {
            resource_version,
            uid,
        }),
        ..DeleteParams::default()
    }
}

/// A write's outcome: done (true), lost to another writer (false), or failed.
pub(crate) fn conflict_is_false<T>(result: Result<T, kube::Error>) -> Result<bool, kube::Error> {
    match result {
        Ok(_) => Ok(true),
        Err(e) if is_code(&e, 409) => Ok(false),
        Err(e) => Err(e),
    }
}

/// The part of a write's answer the writers read: the object's `uid`. The
/// API server answers a create or replace with the whole object; serde skips
/// every other field without building it, where `Api::create`/`replace`
/// would decode each endpoint of an EndpointSlice just written.
#[derive(Deserialize)]
struct Answer {
    metadata: AnswerMeta,
}

#[derive(Deserialize)]
struct AnswerMeta {
    uid: Option<String>,
}

/// `Api::create`, reading only the `uid` of the created object.
pub(crate) async fn create<K: Resource + Clone + Serialize>(
    api: &Api<K>,
    object: &K,
) -> Result<Option<String>, kube::Error> {
    let body = serde_json::to_vec(object).map_err(kube::Error::SerdeError)?;
    let request = Request::new(api.resource_url())
        .create(&PostParams::default(), body)
        .map_err(kube::Error::BuildRequest)?;
    send(api, request, "create").await
}

/// `Api::replace`, reading only the `uid` of the replaced object.
pub(crate) async fn replace<K: Resource + Clone + Serialize>(
    api: &Api<K>,
    name: &str,
    object: &K,
) -> Result<Option<String>, kube::Error> {
    let body = serde_json::to_vec(object).map_err(kube::Error::SerdeError)?;
    let request = Request::new(api.resource_url())
        .replace(name, &PostParams::default(), body)
        .map_err(kube::Error::BuildRequest)?;
    send(api, request, "replace").await
}

async fn send<K: Resource + Clone>(
    api: &Api<K>,
    mut request: http::Request<Vec<u8>>,
    verb: &'static str,
) -> Result<Option<String>, kube::Error> {
    // The verb names the request in kube's traces, as `Api`'s own methods do.
    request.extensions_mut().insert(verb);
    let answer: Answer = api.clone().into_client().request(request).await?;
    Ok(answer.metadata.uid)
}
