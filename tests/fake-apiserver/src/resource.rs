//! Resource types served by the fake: group, versions, plural, kind, scope.

/// One API resource (a group/resource with one storage, possibly served at
/// several versions, like a CRD with `conversion: None`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResourceType {
    /// API group, `""` for the core group.
    pub group: String,
    /// Served versions; all share one storage (objects are identical apart
    /// from `apiVersion`, which is rewritten to the requested version).
    pub versions: Vec<String>,
    /// Lower-case plural, as in the URL (`serviceexports`).
    pub plural: String,
    /// Lower-case singular (`serviceexport`).
    pub singular: String,
    /// `kind` (`ServiceExport`).
    pub kind: String,
    /// Namespaced or cluster-scoped.
    pub namespaced: bool,
    /// Has a `status` subresource: writes to the main resource ignore `.status`,
    /// writes to `/status` change only `.status`, `create` drops `.status`.
    pub status_subresource: bool,
    /// Whether `PUT` without `metadata.resourceVersion` is allowed (true for
    /// built-in types, false for custom resources, as in kube-apiserver).
    pub allow_unconditional_update: bool,
    /// Field paths accepted in `fieldSelector` besides `metadata.name` and
    /// `metadata.namespace` (dotted JSON paths such as `spec.nodeName`).
    pub extra_field_selectors: Vec<String>,
    /// Short names listed in discovery.
    pub short_names: Vec<String>,
}

impl ResourceType {
    fn new(group: &str, version: &str, plural: &str, kind: &str, namespaced: bool) -> Self {
        let singular = kind.to_ascii_lowercase();
        Self {
            group: group.into(),
            versions: vec![version.into()],
            plural: plural.into(),
            singular,
            kind: kind.into(),
            namespaced,
            status_subresource: false,
            allow_unconditional_update: true,
            extra_field_selectors: Vec::new(),
            short_names: Vec::new(),
        }
    }

    /// A namespaced resource (no status subresource, unconditional updates allowed).
    pub fn namespaced(group: &str, version: &str, plural: &str, kind: &str) -> Self {
        Self::new(group, version, plural, kind, true)
    }

    /// A cluster-scoped resource.
    pub fn cluster_scoped(group: &str, version: &str, plural: &str, kind: &str) -> Self {
        Self::new(group, version, plural, kind, false)
    }

    /// A custom resource as a CRD would serve it: unconditional `PUT` is
    /// rejected (422), optionally with the status subresource.
    pub fn custom(mut self, status_subresource: bool) -> Self {
        self.allow_unconditional_update = false;
        self.status_subresource = status_subresource;
        self
    }

    /// Enables the `status` subresource.
    pub fn with_status(mut self) -> Self {
        self.status_subresource = true;
        self
    }

    /// Adds a served version (same storage).
    pub fn with_version(mut self, version: &str) -> Self {
        if !self.versions.iter().any(|v| v == version) {
            self.versions.push(version.into());
        }
        self
    }

    /// Adds short names (discovery only).
    pub fn with_short_names(mut self, names: &[&str]) -> Self {
        self.short_names = names.iter().map(|s| s.to_string()).collect();
        self
    }

    /// Allows a field path in `fieldSelector`.
    pub fn with_field_selector(mut self, path: &str) -> Self {
        self.extra_field_selectors.push(path.into());
        self
    }

    /// `group/version` (or `version` for core).
    pub fn api_version(&self, version: &str) -> String {
        if self.group.is_empty() {
            version.to_string()
        } else {
            format!("{}/{}", self.group, version)
        }
    }

    /// `plural.group` as used in error messages (`services`, `leases.coordination.k8s.io`).
    pub fn qualified(&self) -> String {
        if self.group.is_empty() {
            self.plural.clone()
        } else {
            format!("{}.{}", self.plural, self.group)
        }
    }

    /// Storage identity.
    pub(crate) fn gr(&self) -> GroupResource {
        GroupResource {
            group: self.group.clone(),
            plural: self.plural.clone(),
        }
    }

    /// The resources every fake server starts with.
    pub fn builtins() -> Vec<ResourceType> {
        const MCS: &str = "multicluster.x-k8s.io";
        vec![
            ResourceType::cluster_scoped("", "v1", "namespaces", "Namespace")
                .with_status()
                .with_field_selector("status.phase")
                .with_short_names(&["ns"]),
            ResourceType::namespaced("", "v1", "services", "Service")
                .with_status()
                .with_short_names(&["svc"]),
            ResourceType::namespaced("", "v1", "configmaps", "ConfigMap").with_short_names(&["cm"]),
            ResourceType::namespaced("discovery.k8s.io", "v1", "endpointslices", "EndpointSlice"),
            ResourceType::namespaced("coordination.k8s.io", "v1", "leases", "Lease"),
            ResourceType::namespaced(MCS, "v1alpha1", "serviceexports", "ServiceExport")
                .with_version("v1beta1")
                .custom(true)
                .with_short_names(&["svcex"]),
            ResourceType::namespaced(MCS, "v1alpha1", "serviceimports", "ServiceImport")
                .with_version("v1beta1")
                .custom(true)
                .with_short_names(&["svcim"]),
            ResourceType::cluster_scoped(
                "about.k8s.io",
                "v1alpha1",
                "clusterproperties",
                "ClusterProperty",
            )
            .custom(false)
            .with_short_names(&["clusterproperty"]),
        ]
    }
}

/// Storage key of a resource: one per (group, plural), shared by its versions.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct GroupResource {
    pub group: String,
    pub plural: String,
}

/// Priority of a version string, kube-style: GA > beta > alpha > other, higher numbers first.
pub(crate) fn version_priority(v: &str) -> (u8, u32, u32) {
    let Some(rest) = v.strip_prefix('v') else {
        return (0, 0, 0);
    };
    let digits: String = rest.chars().take_while(|c| c.is_ascii_digit()).collect();
    let Ok(major) = digits.parse::<u32>() else {
        return (0, 0, 0);
    };
    let tail = &rest[digits.len()..];
    if tail.is_empty() {
        return (3, major, 0);
    }
    for (prefix, rank) in [("beta", 2u8), ("alpha", 1u8)] {
        if let Some(n) = tail.strip_prefix(prefix)
            && let Ok(n) = n.parse::<u32>()
        {
            return (rank, major, n);
        }
    }
    (0, 0, 0)
}
