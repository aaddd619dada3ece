//! Whether an API server serves a kind at the version this program reads.
//!
//! Clusters of one clusterset may run different CRD releases of the MCS
//! API (mcs-api v0.5 stores `v1beta1` and still serves `v1alpha1`; older
//! releases serve only `v1alpha1`), and a CRD can be missing or stop serving
//! a version. An MCS kind is read at the version its API server serves
//! ([`Place`], `k8s/served_versions.rs`), found again after a 404. A list or
//! watch of a kind served at no version answers 404: that says nothing
//! about its objects, which must never read as "there are none"
//! (ARCHITECTURE.md, "Where each rule is decided": CRD version skew).

use kube::core::DynamicResourceScope;
use kube::runtime::watcher;
use kube::{Api, Resource};

use crate::k8s::crd::McsVersion;
use crate::k8s::served_versions::ServedVersion;

/// Where a watched kind's objects are read: a built-in kind at its one
/// version, an MCS kind at the version its API server serves now.
pub struct Place<K> {
    api: Box<dyn Fn() -> Api<K> + Send + Sync>,
    /// Where the kind follows its API server's version: MCS kinds.
    served: Option<ServedVersion>,
}

impl<K: Resource + Clone + 'static> Place<K> {
    /// A built-in kind at `api`.
    pub fn fixed(api: Api<K>) -> Self
    where
        K: Resource<DynamicType = ()>,
    {
        Self {
            api: Box::new(move || api.clone()),
            served: None,
        }
    }

    /// An MCS kind in `namespace` (None: every namespace), at the version
    /// `served` says.
    pub fn mcs(served: ServedVersion, namespace: Option<&str>) -> Self
    where
        K: Resource<DynamicType = McsVersion, Scope = DynamicResourceScope>,
    {
        let (at, namespace) = (served.clone(), namespace.map(str::to_owned));
        Self {
            api: Box::new(move || at.api(at.get(), namespace.as_deref())),
            served: Some(served),
        }
    }

    /// The API to read now.
    pub fn api(&self) -> Api<K> {
        (self.api)()
    }

    /// After a 404: whether the kind is now served at another version
    /// ([`Self::api`] reads there).
    pub async fn moved(&self) -> bool {
        match &self.served {
            Some(served) => served.rediscover().await,
            None => false,
        }
    }

    /// The resource as a CRD names it, at the version read now (see [`resource_name`]).
    pub fn resource_name(&self) -> String
    where
        K::DynamicType: Default,
    {
        match &self.served {
            Some(served) => served.resource_name(),
            None => resource_name::<K>(&Default::default()),
        }
    }
}

/// The resource as a CRD names it, with the version read:
/// `serviceexports.multicluster.x-k8s.io/v1alpha1`, or `services/v1` for a
/// built-in kind of the core group.
pub(crate) fn resource_name<K: Resource>(dt: &K::DynamicType) -> String {
    let (plural, group, version) = (K::plural(dt), K::group(dt), K::version(dt));
    if group.is_empty() {
        format!("{plural}/{version}")
    } else {
        format!("{plural}.{group}/{version}")
    }
}

/// Whether a request failed because its resource is not served (404 on a
/// collection: the CRD is missing or does not serve that version).
pub(crate) fn is_not_served(error: &kube::Error) -> bool {
    matches!(error, kube::Error::Api(status) if status.code == 404)
}

/// What a failed request of `resource` (see [`resource_name`]) tells an
/// operator: which CRD and version when it was not served.
pub(crate) fn why(resource: &str, error: &kube::Error) -> String {
    if is_not_served(error) {
        format!("{resource} is not served (404: the CRD is missing or does not serve this version)")
    } else {
        error.to_string()
    }
}

/// [`is_not_served`] for a watcher's failure (its list or its watch).
pub(crate) fn watch_not_served(error: &watcher::Error) -> bool {
    match error {
        watcher::Error::InitialListFailed(e)
        | watcher::Error::WatchStartFailed(e)
        | watcher::Error::WatchFailed(e) => is_not_served(e),
        watcher::Error::WatchError(status) => status.code == 404,
        _ => false,
    }
}

/// What to tell an operator when `resource` (see [`resource_name`]) is
/// not served by `server` (`the broker`, `the local cluster (east)`).
pub(crate) fn not_served_message(resource: &str, server: &str) -> String {
    format!(
        "{resource} is not served by {server} (404: the CRD is missing or does \
         not serve this version); its objects are unknown, not gone: nothing read from it before \
         is forgotten and nothing is deleted on its account until it is served again"
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::k8s::crd::{McsVersion, ServiceExport};
    use k8s_openapi::api::core::v1::Service;
    use kube::core::Status;

    #[test]
    fn names_read_like_crds() {
        assert_eq!(
            resource_name::<ServiceExport>(&McsVersion::V1alpha1),
            "serviceexports.multicluster.x-k8s.io/v1alpha1"
        );
        assert_eq!(resource_name::<Service>(&()), "services/v1");
    }

    #[test]
    fn only_404_is_not_served() {
        let api = |code| kube::Error::Api(Status::failure("x", "y").with_code(code).boxed());
        assert!(is_not_served(&api(404)));
        assert!(!is_not_served(&api(403)));
        assert!(watch_not_served(&watcher::Error::InitialListFailed(api(
            404
        ))));
        assert!(watch_not_served(&watcher::Error::WatchStartFailed(api(
            404
        ))));
        assert!(!watch_not_served(&watcher::Error::InitialListFailed(api(
            500
        ))));
    }
}
