//! Objects, the global resourceVersion counter, change history and watch
//! subscriptions. Everything happens under one lock, so a write, its history
//! entry and its fan-out to watchers are atomic and totally ordered (as etcd
//! revisions are).

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Arc;

use serde_json::{Map, Value, json};
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender, unbounded_channel};

use super::collection::{Collection, Json, Rollback};
use super::defaults;
use super::patch::{self, PatchKind};
use super::resource::{GroupResource, ResourceType};
use super::selector::Filter;
use super::status::ApiError;

pub(crate) use super::collection::Key;

/// The type of a stored change (and of the watch event it becomes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChangeKind {
    Added,
    Modified,
    Deleted,
}

/// One committed write. For `Deleted`, `new` is the last state stamped with the
/// deletion's resourceVersion (what a DELETED watch event carries). Both
/// states are shared with the store (and with the neighbouring changes).
#[derive(Debug)]
pub(crate) struct Change {
    pub rv: u64,
    pub gr: GroupResource,
    pub kind: ChangeKind,
    pub key: Key,
    pub old: Option<Arc<Json>>,
    pub new: Arc<Json>,
}

pub(crate) enum WatchMsg {
    Change(Arc<Change>),
    /// A bookmark at a resourceVersion; `initial_end` marks the end of
    /// `sendInitialEvents` (annotation `k8s.io/initial-events-end`).
    Bookmark {
        rv: u64,
        initial_end: bool,
    },
}

/// Where a watch starts.
#[derive(Clone, Copy, Debug)]
pub(crate) enum WatchStart {
    /// `resourceVersion` unset or "0": synthetic ADDED for the current state, then changes.
    Current,
    /// `sendInitialEvents=true`: ADDED for the current state, an initial-events-end bookmark, then changes.
    InitialEvents,
    /// Replay every change after this resourceVersion, then changes.
    After(u64),
}

struct Subscriber {
    id: u64,
    gr: GroupResource,
    tx: UnboundedSender<WatchMsg>,
}

/// Options of a list call.
#[derive(Clone, Debug, Default)]
pub(crate) struct ListOpts {
    pub resource_version: Option<String>,
    pub resource_version_match: Option<String>,
    pub limit: Option<usize>,
    pub continue_token: Option<String>,
}

pub(crate) struct ListResult {
    /// As stored: lists splice their JSON text into the response.
    pub items: Vec<Arc<Json>>,
    pub rv: u64,
    pub continue_token: Option<String>,
    pub remaining: Option<usize>,
}

/// DeleteOptions preconditions.
#[derive(Clone, Debug, Default)]
pub(crate) struct Preconditions {
    pub resource_version: Option<String>,
    pub uid: Option<String>,
}

/// What one resource holds (see [`Store::stored`]).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Stored {
    pub group: String,
    pub plural: String,
    pub objects: usize,
    /// Their size as compact JSON.
    pub json_bytes: u64,
}

/// One retained history entry, as exposed to tests.
#[derive(Clone, Debug, PartialEq)]
pub struct HistoryEntry {
    pub resource_version: u64,
    pub group: String,
    pub plural: String,
    pub namespace: String,
    pub name: String,
    pub kind: ChangeKind,
}

pub(crate) struct Store {
    pub rv: u64,
    /// Watches may resume from any resourceVersion >= this.
    pub oldest_rv: u64,
    pub history_limit: usize,
    resources: Vec<ResourceType>,
    objects: HashMap<GroupResource, Collection>,
    history: VecDeque<Arc<Change>>,
    subscribers: Vec<Subscriber>,
    next_sub: u64,
    rng: u64,
    pub(crate) ip_alloc: defaults::IpAlloc,
}

pub(crate) const DEFAULT_NAMESPACES: [&str; 4] =
    ["default", "kube-system", "kube-public", "kube-node-lease"];

impl Store {
    pub fn new() -> Self {
        let seed = {
            use std::hash::{BuildHasher, Hasher};
            let mut h = std::collections::hash_map::RandomState::new().build_hasher();
            h.write_u128(
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .unwrap_or_default()
                    .as_nanos(),
            );
            h.finish() | 1
        };
        let mut s = Self {
            rv: 0,
            oldest_rv: 0,
            history_limit: 100_000,
            resources: Vec::new(),
            objects: HashMap::new(),
            history: VecDeque::new(),
            subscribers: Vec::new(),
            next_sub: 0,
            rng: seed,
            ip_alloc: defaults::IpAlloc::default(),
        };
        for rt in ResourceType::builtins() {
            s.register(rt);
        }
        s.create_default_namespaces();
        s
    }

    pub fn create_default_namespaces(&mut self) {
        let ns_rt = self.namespaces_rt();
        for ns in DEFAULT_NAMESPACES {
            let obj = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}});
            let _ = self.create(&ns_rt, None, obj, false);
        }
    }

    fn namespaces_rt(&self) -> ResourceType {
        self.lookup_gr("", "namespaces")
            .expect("namespaces are always registered")
    }

    // ----- registry -----------------------------------------------------

    pub fn register(&mut self, rt: ResourceType) {
        if let Some(existing) = self.resources.iter_mut().find(|r| r.gr() == rt.gr()) {
            let mut versions = existing.versions.clone();
            for v in &rt.versions {
                if !versions.contains(v) {
                    versions.push(v.clone());
                }
            }
            *existing = ResourceType { versions, ..rt };
        } else {
            self.resources.push(rt);
        }
    }

    /// Stops serving one version; when no version is left the resource and its
    /// objects are gone (like deleting a CRD).
    pub fn unregister(&mut self, group: &str, version: &str, plural: &str) {
        if let Some(i) = self
            .resources
            .iter()
            .position(|r| r.group == group && r.plural == plural)
        {
            self.resources[i].versions.retain(|v| v != version);
            if self.resources[i].versions.is_empty() {
                let rt = self.resources.remove(i);
                self.objects.remove(&rt.gr());
            }
        }
    }

    /// Stops serving one version, keeping the objects even when no version is
    /// left (like `served: false` on every version of a CRD: a 404 at each).
    pub fn unserve(&mut self, group: &str, version: &str, plural: &str) {
        if let Some(rt) = self
            .resources
            .iter_mut()
            .find(|r| r.group == group && r.plural == plural)
        {
            rt.versions.retain(|v| v != version);
        }
    }

    pub fn resources(&self) -> &[ResourceType] {
        &self.resources
    }

    pub fn lookup(&self, group: &str, version: &str, plural: &str) -> Option<ResourceType> {
        self.resources
            .iter()
            .find(|r| {
                r.group == group && r.plural == plural && r.versions.iter().any(|v| v == version)
            })
            .cloned()
    }

    pub fn lookup_gr(&self, group: &str, plural: &str) -> Option<ResourceType> {
        self.resources
            .iter()
            .find(|r| r.group == group && r.plural == plural)
            .cloned()
    }

    /// Resource of an object by its `apiVersion` and `kind`.
    pub fn lookup_kind(&self, api_version: &str, kind: &str) -> Option<(ResourceType, String)> {
        let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
        self.resources
            .iter()
            .find(|r| r.group == group && r.kind == kind && r.versions.iter().any(|v| v == version))
            .map(|r| (r.clone(), version.to_string()))
    }

    pub fn serves_group_version(&self, group: &str, version: &str) -> bool {
        self.resources
            .iter()
            .any(|r| r.group == group && r.versions.iter().any(|v| v == version))
    }

    // ----- ids and time -------------------------------------------------

    fn next_random(&mut self) -> u64 {
        // xorshift64*
        let mut x = self.rng;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.rng = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn new_uid(&mut self) -> String {
        let a = self.next_random();
        let b = self.next_random();
        format!(
            "{:08x}-{:04x}-4{:03x}-{:04x}-{:012x}",
            a >> 32,
            (a >> 16) & 0xffff,
            a & 0xfff,
            0x8000 | (b >> 48 & 0x3fff),
            b & 0xffff_ffff_ffff
        )
    }

    fn generated_suffix(&mut self) -> String {
        const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
        let mut r = self.next_random();
        (0..5)
            .map(|_| {
                let c = ALPHABET[(r % ALPHABET.len() as u64) as usize] as char;
                r /= ALPHABET.len() as u64;
                c
            })
            .collect()
    }

    // ----- reads --------------------------------------------------------

    fn key(rt: &ResourceType, ns: Option<&str>, name: &str) -> Key {
        let ns = if rt.namespaced { ns.unwrap_or("") } else { "" };
        (ns.to_string(), name.to_string())
    }

    pub fn get(&self, rt: &ResourceType, ns: Option<&str>, name: &str) -> Result<Value, ApiError> {
        self.objects
            .get(&rt.gr())
            .and_then(|c| c.get(&Self::key(rt, ns, name)))
            .map(|v| v.thaw())
            .ok_or_else(|| ApiError::not_found(rt, name))
    }

    pub fn namespace_exists(&self, ns: &str) -> bool {
        self.objects
            .get(&GroupResource {
                group: String::new(),
                plural: "namespaces".into(),
            })
            .is_some_and(|c| c.contains(&(String::new(), ns.to_string())))
    }

    /// The keys of `gr` written after `at`, with their state at `at`: what
    /// turns the live collection back into the one a list at `at` saw. Costs
    /// the changes since `at`, not the collection's size.
    fn rollback(
        &self,
        gr: &GroupResource,
        at: u64,
        expired: impl Fn() -> ApiError,
    ) -> Result<Rollback, ApiError> {
        let mut rollback = Rollback::new();
        if at >= self.rv {
            return Ok(rollback);
        }
        if at < self.oldest_rv {
            return Err(expired());
        }
        // Newest first: the oldest change after `at` has the last word.
        for change in self.history.iter().rev().take_while(|c| c.rv > at) {
            if &change.gr != gr {
                continue;
            }
            let before = match change.kind {
                ChangeKind::Added => None,
                ChangeKind::Modified | ChangeKind::Deleted => change.old.clone(),
            };
            rollback.insert(change.key.clone(), before);
        }
        Ok(rollback)
    }

    pub fn list(
        &self,
        rt: &ResourceType,
        filter: &Filter,
        opts: &ListOpts,
    ) -> Result<ListResult, ApiError> {
        let gr = rt.gr();
        let (at, resumed) = match opts.continue_token.as_deref().filter(|t| !t.is_empty()) {
            Some(token) => {
                let token = ContinueToken::parse(token)?;
                (token.at, Some(token))
            }
            None => (self.list_version(opts)?, None),
        };
        if at > self.rv {
            return Err(too_large(at, self.rv));
        }
        let rollback = self.rollback(&gr, at, || {
            if resumed.is_some() {
                ApiError::expired(
                    "The provided continue parameter is too old to display a consistent list result. \
                     You can start a new list without the continue parameter.",
                )
            } else {
                ApiError::too_old(at, self.oldest_rv)
            }
        })?;
        let empty = Collection::default();
        let coll = self.objects.get(&gr).unwrap_or(&empty);
        let namespace = filter.namespace.as_deref();
        let after = resumed.as_ref().map(|t| &t.after);
        // page_at keeps to the namespace; only selectors need the object parsed.
        let mut matching = coll
            .page_at(&rollback, namespace, after)
            .filter(|(_, v)| filter.selects_all() || filter.matches(&v.thaw()));
        let limit = opts.limit.filter(|l| *l > 0).unwrap_or(usize::MAX);
        let page: Vec<_> = matching.by_ref().take(limit).collect();
        let last = page.last().map(|(k, _)| (*k).clone());
        let items: Vec<Arc<Json>> = page.into_iter().map(|(_, v)| v.clone()).collect();
        if matching.next().is_none() {
            return Ok(ListResult {
                items,
                rv: at,
                continue_token: None,
                remaining: None,
            });
        }
        let returned = resumed.as_ref().map_or(0, |t| t.returned) + items.len();
        let unfiltered = filter.labels.is_empty() && filter.fields.is_empty();
        let remaining =
            unfiltered.then(|| coll.len_at(&rollback, namespace).saturating_sub(returned));
        let last = last.expect("a full page");
        Ok(ListResult {
            items,
            rv: at,
            continue_token: Some(
                ContinueToken {
                    at,
                    returned,
                    after: last,
                }
                .render(),
            ),
            remaining,
        })
    }

    /// The resourceVersion a list without continue token reads at.
    fn list_version(&self, opts: &ListOpts) -> Result<u64, ApiError> {
        match opts.resource_version.as_deref() {
            None | Some("") | Some("0") => Ok(self.rv),
            Some(s) => {
                let n = s.parse::<u64>().map_err(|_| {
                    ApiError::bad_request(format!("invalid resource version {s:?}"))
                })?;
                match opts.resource_version_match.as_deref() {
                    Some("Exact") => Ok(n),
                    None | Some("") | Some("NotOlderThan") => {
                        if n > self.rv {
                            return Err(too_large(n, self.rv));
                        }
                        Ok(self.rv)
                    }
                    Some(other) => Err(ApiError::bad_request(format!(
                        "unknown resourceVersionMatch {other:?}"
                    ))),
                }
            }
        }
    }

    /// Objects and JSON bytes per resource holding any, in one namespace or all.
    pub fn stored(&self, namespace: Option<&str>) -> Vec<Stored> {
        self.resources
            .iter()
            .filter_map(|rt| {
                let (objects, json_bytes) = self.objects.get(&rt.gr())?.footprint(namespace);
                (objects > 0).then(|| Stored {
                    group: rt.group.clone(),
                    plural: rt.plural.clone(),
                    objects,
                    json_bytes,
                })
            })
            .collect()
    }

    pub fn history(&self) -> Vec<HistoryEntry> {
        self.history
            .iter()
            .map(|c| {
                let (namespace, name) = c.key.clone();
                HistoryEntry {
                    resource_version: c.rv,
                    group: c.gr.group.clone(),
                    plural: c.gr.plural.clone(),
                    namespace,
                    name,
                    kind: c.kind,
                }
            })
            .collect()
    }

    // ----- writes -------------------------------------------------------

    /// Stamps the next resourceVersion, stores, records history (the state it
    /// replaces is the one stored) and fans out.
    fn commit(&mut self, gr: &GroupResource, kind: ChangeKind, mut new: Value) -> Value {
        self.rv += 1;
        meta_mut(&mut new).insert("resourceVersion".into(), Value::String(self.rv.to_string()));
        let key = key_of(&new);
        let frozen = Json::freeze(&new);
        let coll = self.objects.entry(gr.clone()).or_default();
        let old = if kind == ChangeKind::Deleted {
            coll.remove(&key)
        } else {
            coll.insert(key.clone(), frozen.clone())
        };
        let change = Arc::new(Change {
            rv: self.rv,
            gr: gr.clone(),
            kind,
            key,
            old,
            new: frozen,
        });
        self.history.push_back(change.clone());
        while self.history.len() > self.history_limit {
            if let Some(c) = self.history.pop_front() {
                self.oldest_rv = c.rv;
            }
        }
        self.subscribers
            .retain(|s| s.gr != *gr || s.tx.send(WatchMsg::Change(change.clone())).is_ok());
        new
    }

    /// Forgets all history: every resourceVersion before now is expired (410).
    pub fn compact(&mut self) {
        self.history.clear();
        self.oldest_rv = self.rv;
    }

    pub fn set_history_limit(&mut self, limit: usize) {
        self.history_limit = limit;
        while self.history.len() > self.history_limit {
            if let Some(c) = self.history.pop_front() {
                self.oldest_rv = c.rv;
            }
        }
    }

    /// Drops every object without events. The resourceVersion counter keeps
    /// counting up and skips one, so every version a client has seen is expired
    /// (resumed watches get 410 and relist).
    pub fn wipe(&mut self) {
        self.objects.clear();
        self.rv += 1;
        self.compact();
        self.create_default_namespaces();
    }

    fn check_namespace(
        &self,
        rt: &ResourceType,
        url_ns: Option<&str>,
        obj: &mut Value,
    ) -> Result<Option<String>, ApiError> {
        let meta = meta_mut(obj);
        if !rt.namespaced {
            meta.remove("namespace");
            return Ok(None);
        }
        let body_ns = meta
            .get("namespace")
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .map(str::to_string);
        let ns = match (url_ns, body_ns) {
            (Some(u), Some(b)) if u != b => {
                return Err(ApiError::bad_request(
                    "the namespace of the provided object does not match the namespace sent on the request",
                ));
            }
            (Some(u), _) => u.to_string(),
            (None, Some(b)) => b,
            (None, None) => {
                return Err(ApiError::bad_request(
                    "an empty namespace may not be set during creation",
                ));
            }
        };
        meta.insert("namespace".into(), Value::String(ns.clone()));
        Ok(Some(ns))
    }

    /// POST. `admin` (test back door): keep `.status` even with a status
    /// subresource and ignore a `resourceVersion` in the body.
    pub fn create_with(
        &mut self,
        rt: &ResourceType,
        url_ns: Option<&str>,
        mut obj: Value,
        dry_run: bool,
        admin: bool,
    ) -> Result<Value, ApiError> {
        if !obj.is_object() {
            return Err(ApiError::bad_request(
                "the body of the request must be a JSON object",
            ));
        }
        if !admin && meta_str(&obj, "resourceVersion").is_some_and(|rv| !rv.is_empty()) {
            // etcd3 store: a plain error, hence 500 InternalError.
            return Err(ApiError::new(
                500,
                "InternalError",
                "resourceVersion should not be set on objects to be created",
            ));
        }
        let ns = self.check_namespace(rt, url_ns, &mut obj)?;
        if let Some(ns) = &ns
            && !self.namespace_exists(ns)
        {
            return Err(ApiError::namespace_not_found(ns));
        }
        let gr = rt.gr();
        let meta = meta_mut(&mut obj);
        let name = match meta
            .get("name")
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
        {
            Some(n) => n.to_string(),
            None => match meta
                .get("generateName")
                .and_then(Value::as_str)
                .filter(|s| !s.is_empty())
            {
                Some(prefix) => {
                    let prefix = prefix.to_string();
                    loop {
                        let candidate = format!("{prefix}{}", self.generated_suffix());
                        let key = (ns.clone().unwrap_or_default(), candidate.clone());
                        if !self.objects.get(&gr).is_some_and(|c| c.contains(&key)) {
                            break candidate;
                        }
                    }
                }
                None => {
                    return Err(ApiError::invalid(
                        rt,
                        "",
                        "metadata.name: Required value: name or generateName is required",
                    ));
                }
            },
        };
        let key = (ns.clone().unwrap_or_default(), name.clone());
        if self.objects.get(&gr).is_some_and(|c| c.contains(&key)) {
            return Err(ApiError::already_exists(rt, &name));
        }
        let uid = self.new_uid();
        let meta = meta_mut(&mut obj);
        meta.insert("name".into(), Value::String(name));
        meta.insert("uid".into(), Value::String(uid));
        // The back door may backdate an object; the API never lets clients set this.
        if !(admin && meta.get("creationTimestamp").is_some_and(Value::is_string)) {
            meta.insert("creationTimestamp".into(), Value::String(now_rfc3339()));
        }
        meta.insert("generation".into(), json!(1));
        for f in [
            "resourceVersion",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "managedFields",
            "selfLink",
        ] {
            meta.remove(f);
        }
        set_types(rt, &mut obj);
        if rt.status_subresource && !admin {
            obj.as_object_mut().expect("object").remove("status");
        }
        defaults::apply(rt, None, &mut obj, &mut self.ip_alloc);
        if dry_run {
            return Ok(obj);
        }
        Ok(self.commit(&gr, ChangeKind::Added, obj))
    }

    pub fn create(
        &mut self,
        rt: &ResourceType,
        url_ns: Option<&str>,
        obj: Value,
        dry_run: bool,
    ) -> Result<Value, ApiError> {
        self.create_with(rt, url_ns, obj, dry_run, false)
    }

    fn check_name(obj: &mut Value, name: &str) -> Result<(), ApiError> {
        let meta = meta_mut(obj);
        match meta
            .get("name")
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
        {
            Some(n) if n != name => Err(ApiError::bad_request(format!(
                "the name of the object ({n}) does not match the name on the URL ({name})"
            ))),
            Some(_) => Ok(()),
            None => {
                meta.insert("name".into(), Value::String(name.into()));
                Ok(())
            }
        }
    }

    fn check_preconditions(
        rt: &ResourceType,
        name: &str,
        current: &Value,
        rv: Option<&str>,
        uid: Option<&str>,
    ) -> Result<(), ApiError> {
        let cur_uid = meta_str(current, "uid").unwrap_or_default();
        if let Some(uid) = uid.filter(|u| !u.is_empty())
            && uid != cur_uid
        {
            return Err(ApiError::precondition_conflict(
                rt,
                name,
                &format!(
                    "Precondition failed: UID in precondition: {uid}, UID in object meta: {cur_uid}"
                ),
            ));
        }
        if let Some(rv) = rv.filter(|r| !r.is_empty())
            && Some(rv) != meta_str(current, "resourceVersion")
        {
            return Err(ApiError::conflict(rt, name));
        }
        Ok(())
    }

    /// PUT on the object (`status_only == false`) or on `/status`.
    pub fn update(
        &mut self,
        rt: &ResourceType,
        url_ns: Option<&str>,
        name: &str,
        mut obj: Value,
        status_only: bool,
        dry_run: bool,
    ) -> Result<Value, ApiError> {
        if !obj.is_object() {
            return Err(ApiError::bad_request(
                "the body of the request must be a JSON object",
            ));
        }
        Self::check_name(&mut obj, name)?;
        let ns = self.check_namespace(rt, url_ns, &mut obj)?;
        let old = self.get(rt, ns.as_deref(), name)?;
        let rv = meta_str(&obj, "resourceVersion").filter(|s| !s.is_empty());
        if rv.is_none() && !rt.allow_unconditional_update {
            return Err(ApiError::invalid(
                rt,
                name,
                "metadata.resourceVersion: Invalid value: 0x0: must be specified for an update",
            ));
        }
        Self::check_preconditions(rt, name, &old, rv, meta_str(&obj, "uid"))?;
        self.finish_update(rt, old, obj, Scope::of(status_only), dry_run)
    }

    /// PATCH; returns the object and whether it was created (server-side apply).
    #[allow(clippy::too_many_arguments)]
    pub fn patch(
        &mut self,
        rt: &ResourceType,
        url_ns: Option<&str>,
        name: &str,
        kind: PatchKind,
        body: &Value,
        status_only: bool,
        dry_run: bool,
        field_manager: Option<&str>,
    ) -> Result<(Value, bool), ApiError> {
        if kind == PatchKind::Apply {
            if field_manager.is_none_or(str::is_empty) {
                return Err(ApiError::new(
                    422,
                    "Invalid",
                    "PatchOptions.meta.k8s.io \"\" is invalid: fieldManager: Required value: is required for apply patch",
                ));
            }
            if body
                .get("apiVersion")
                .and_then(Value::as_str)
                .is_none_or(str::is_empty)
                || body
                    .get("kind")
                    .and_then(Value::as_str)
                    .is_none_or(str::is_empty)
            {
                return Err(ApiError::bad_request(
                    "apply patch must set apiVersion and kind",
                ));
            }
        }
        let ns = if rt.namespaced { url_ns } else { None };
        let current = self.get(rt, ns, name);
        let old = match current {
            Ok(old) => old,
            Err(_) if kind == PatchKind::Apply && !status_only => {
                let mut obj = body.clone();
                Self::check_name(&mut obj, name)?;
                if meta_str(&obj, "resourceVersion").is_some_and(|rv| !rv.is_empty()) {
                    // A resourceVersion precondition cannot hold for a missing object.
                    return Err(ApiError::conflict(rt, name));
                }
                return self.create(rt, ns, obj, dry_run).map(|v| (v, true));
            }
            Err(e) => return Err(e),
        };
        let mut target = old.clone();
        patch::apply(kind, &mut target, body)?;
        if !target.is_object() {
            return Err(ApiError::bad_request("patch produced a non-object"));
        }
        Self::check_preconditions(
            rt,
            name,
            &old,
            meta_str(&target, "resourceVersion"),
            meta_str(&target, "uid"),
        )?;
        self.finish_update(rt, old, target, Scope::of(status_only), dry_run)
            .map(|v| (v, false))
    }

    /// Shared tail of PUT and PATCH: status-subresource rules, server-owned
    /// metadata, generation, no-op detection, finalizer-driven deletion.
    fn finish_update(
        &mut self,
        rt: &ResourceType,
        old: Value,
        new: Value,
        scope: Scope,
        dry_run: bool,
    ) -> Result<Value, ApiError> {
        let status_only = scope == Scope::Status;
        let mut new = if rt.status_subresource && scope != Scope::Whole {
            let (mut base, from) = if status_only {
                (old.clone(), &new)
            } else {
                (new.clone(), &old)
            };
            let obj = base.as_object_mut().expect("object");
            match from.get("status") {
                Some(s) => {
                    obj.insert("status".into(), s.clone());
                }
                None => {
                    obj.remove("status");
                }
            }
            base
        } else {
            new
        };
        {
            let old_meta = old
                .get("metadata")
                .and_then(Value::as_object)
                .cloned()
                .unwrap_or_default();
            let meta = meta_mut(&mut new);
            for f in [
                "name",
                "namespace",
                "uid",
                "creationTimestamp",
                "generation",
                "deletionTimestamp",
                "deletionGracePeriodSeconds",
                "resourceVersion",
            ] {
                match old_meta.get(f) {
                    Some(v) => {
                        meta.insert(f.into(), v.clone());
                    }
                    None => {
                        meta.remove(f);
                    }
                }
            }
            meta.remove("managedFields");
            meta.remove("selfLink");
        }
        set_types(rt, &mut new);
        if scope != Scope::Status {
            defaults::apply(rt, Some(&old), &mut new, &mut self.ip_alloc);
        }
        if !status_only && spec_of(rt, &old) != spec_of(rt, &new) {
            let generation = old
                .pointer("/metadata/generation")
                .and_then(Value::as_i64)
                .unwrap_or(0)
                + 1;
            meta_mut(&mut new).insert("generation".into(), json!(generation));
        }
        if new == old {
            return Ok(old);
        }
        let gr = rt.gr();
        let deleting = old.pointer("/metadata/deletionTimestamp").is_some();
        let finalizers_left = new
            .pointer("/metadata/finalizers")
            .and_then(Value::as_array)
            .is_some_and(|f| !f.is_empty());
        if dry_run {
            return Ok(new);
        }
        if deleting && !finalizers_left {
            let m = self.commit(&gr, ChangeKind::Modified, new);
            return Ok(self.commit(&gr, ChangeKind::Deleted, m));
        }
        Ok(self.commit(&gr, ChangeKind::Modified, new))
    }

    /// DELETE one object. Objects with finalizers get `deletionTimestamp` and stay.
    pub fn delete(
        &mut self,
        rt: &ResourceType,
        ns: Option<&str>,
        name: &str,
        pre: &Preconditions,
        dry_run: bool,
    ) -> Result<Value, ApiError> {
        let ns = if rt.namespaced { ns } else { None };
        let old = self.get(rt, ns, name)?;
        Self::check_preconditions(
            rt,
            name,
            &old,
            pre.resource_version.as_deref(),
            pre.uid.as_deref(),
        )?;
        let gr = rt.gr();
        if dry_run {
            return Ok(old);
        }
        if rt.group.is_empty() && rt.plural == "namespaces" {
            return Ok(self.delete_namespace(old));
        }
        let has_finalizers = old
            .pointer("/metadata/finalizers")
            .and_then(Value::as_array)
            .is_some_and(|f| !f.is_empty());
        if has_finalizers {
            if old.pointer("/metadata/deletionTimestamp").is_some() {
                return Ok(old);
            }
            let mut new = old.clone();
            let meta = meta_mut(&mut new);
            meta.insert("deletionTimestamp".into(), Value::String(now_rfc3339()));
            meta.insert("deletionGracePeriodSeconds".into(), json!(0));
            return Ok(self.commit(&gr, ChangeKind::Modified, new));
        }
        self.commit(&gr, ChangeKind::Deleted, old.clone());
        self.collect_dependents(&old);
        Ok(old)
    }

    /// Garbage collection, synchronously (background propagation): the
    /// objects of the owner's namespace naming its `uid` in their
    /// `ownerReferences` are deleted with it.
    fn collect_dependents(&mut self, owner: &Value) {
        let Some(uid) = meta_str(owner, "uid").map(str::to_owned) else {
            return;
        };
        let ns = meta_str(owner, "namespace").unwrap_or_default().to_owned();
        let owned = |v: &Json| {
            // The text test first: most objects are owned by nothing.
            v.text().contains(uid.as_str())
                && v.thaw()
                    .pointer("/metadata/ownerReferences")
                    .and_then(Value::as_array)
                    .is_some_and(|refs| refs.iter().any(|r| r["uid"] == uid.as_str()))
        };
        let mut seen = HashSet::new();
        let mut dependents = Vec::new();
        for rt in self.resources.iter().filter(|rt| seen.insert(rt.gr())) {
            let Some(objects) = self.objects.get(&rt.gr()) else {
                continue;
            };
            dependents.extend(
                objects
                    .range(Some(&ns), None)
                    .filter(|(_, v)| owned(v))
                    .map(|((_, name), _)| (rt.clone(), name.clone())),
            );
        }
        for (rt, name) in dependents {
            let ns = (!ns.is_empty()).then_some(ns.as_str());
            let _ = self.delete(&rt, ns, &name, &Preconditions::default(), false);
        }
    }

    /// Namespace deletion, synchronously: the namespace turns `Terminating`
    /// (MODIFIED), everything in it is deleted, then the namespace (DELETED).
    fn delete_namespace(&mut self, old: Value) -> Value {
        let ns_gr = self.namespaces_rt().gr();
        let name = meta_str(&old, "name").unwrap_or_default().to_string();
        let mut terminating = old.clone();
        meta_mut(&mut terminating).insert("deletionTimestamp".into(), Value::String(now_rfc3339()));
        terminating["status"] = json!({"phase": "Terminating"});
        let terminating = self.commit(&ns_gr, ChangeKind::Modified, terminating);
        let namespaced: Vec<GroupResource> = self
            .resources
            .iter()
            .filter(|r| r.namespaced)
            .map(|r| r.gr())
            .collect();
        for gr in namespaced {
            let victims: Vec<Value> = self
                .objects
                .get(&gr)
                .map(|c| c.range(Some(&name), None).map(|(_, v)| v.thaw()).collect())
                .unwrap_or_default();
            for v in victims {
                self.commit(&gr, ChangeKind::Deleted, v);
            }
        }
        self.commit(&ns_gr, ChangeKind::Deleted, terminating.clone());
        terminating
    }

    pub fn delete_collection(
        &mut self,
        rt: &ResourceType,
        filter: &Filter,
        dry_run: bool,
    ) -> Result<Vec<Value>, ApiError> {
        let names: Vec<Key> = self
            .objects
            .get(&rt.gr())
            .map(|c| {
                c.range(filter.namespace.as_deref(), None)
                    .filter(|(_, v)| filter.matches(&v.thaw()))
                    .map(|(k, _)| k.clone())
                    .collect()
            })
            .unwrap_or_default();
        let mut out = Vec::new();
        for (ns, name) in names {
            let ns = (!ns.is_empty()).then_some(ns);
            out.push(self.delete(rt, ns.as_deref(), &name, &Preconditions::default(), dry_run)?);
        }
        Ok(out)
    }

    /// Writes an object as given (create or overwrite, `.status` included, no
    /// resourceVersion check): a test's back door that still bumps
    /// resourceVersions and notifies watchers.
    pub fn put(&mut self, obj: Value) -> Result<Value, ApiError> {
        let api_version = obj
            .get("apiVersion")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let kind = obj.get("kind").and_then(Value::as_str).unwrap_or_default();
        let Some((rt, _)) = self.lookup_kind(api_version, kind) else {
            return Err(ApiError::bad_request(format!(
                "no resource registered for {api_version} {kind}"
            )));
        };
        let name = meta_str(&obj, "name").unwrap_or_default().to_string();
        let ns = meta_str(&obj, "namespace").map(str::to_string);
        match self.get(&rt, ns.as_deref(), &name) {
            Err(_) => self.create_with(&rt, ns.as_deref(), obj, false, true),
            Ok(old) => self.finish_update(&rt, old, obj, Scope::Whole, false),
        }
    }

    // ----- watches ------------------------------------------------------

    pub fn watch(
        &mut self,
        rt: &ResourceType,
        filter: &Filter,
        start: WatchStart,
    ) -> Result<(u64, UnboundedReceiver<WatchMsg>), ApiError> {
        let gr = rt.gr();
        let (tx, rx) = unbounded_channel();
        match start {
            WatchStart::Current | WatchStart::InitialEvents => {
                if let Some(c) = self.objects.get(&gr) {
                    let objects = c.range(filter.namespace.as_deref(), None);
                    for (key, obj) in
                        objects.filter(|(_, o)| filter.selects_all() || filter.matches(&o.thaw()))
                    {
                        let rv = meta_str(&obj.thaw(), "resourceVersion")
                            .and_then(|s| s.parse().ok())
                            .unwrap_or(self.rv);
                        let change = Change {
                            rv,
                            gr: gr.clone(),
                            kind: ChangeKind::Added,
                            key: key.clone(),
                            old: None,
                            new: obj.clone(),
                        };
                        let _ = tx.send(WatchMsg::Change(Arc::new(change)));
                    }
                }
                if matches!(start, WatchStart::InitialEvents) {
                    let _ = tx.send(WatchMsg::Bookmark {
                        rv: self.rv,
                        initial_end: true,
                    });
                }
            }
            WatchStart::After(n) => {
                if n < self.oldest_rv {
                    return Err(ApiError::too_old(n, self.oldest_rv));
                }
                if n > self.rv {
                    return Err(too_large(n, self.rv));
                }
                // The history is in resourceVersion order: skip to `n` at once.
                let from = self.history.partition_point(|c| c.rv <= n);
                for c in self.history.range(from..).filter(|c| c.gr == gr) {
                    let _ = tx.send(WatchMsg::Change(c.clone()));
                }
            }
        }
        self.next_sub += 1;
        let id = self.next_sub;
        self.subscribers.push(Subscriber { id, gr, tx });
        Ok((id, rx))
    }

    pub fn unsubscribe(&mut self, id: u64) {
        self.subscribers.retain(|s| s.id != id);
    }

    pub fn open_watches(&self) -> usize {
        self.subscribers
            .iter()
            .filter(|s| !s.tx.is_closed())
            .count()
    }
}

/// Which part of an object a write may change.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Scope {
    /// The main resource: `.status` is kept from the stored object when the
    /// resource has a status subresource.
    Main,
    /// The `/status` subresource: only `.status` changes.
    Status,
    /// Everything (test back door).
    Whole,
}

impl Scope {
    fn of(status_only: bool) -> Self {
        if status_only {
            Self::Status
        } else {
            Self::Main
        }
    }
}

/// `<resourceVersion>/<items returned so far>/<namespace>/<name of the last
/// item>`: where the next page starts, at which version, and what
/// `remainingItemCount` subtracts. Opaque to clients, as kube-apiserver's is.
struct ContinueToken {
    at: u64,
    returned: usize,
    after: Key,
}

impl ContinueToken {
    fn parse(token: &str) -> Result<Self, ApiError> {
        let bad = || ApiError::bad_request(format!("invalid continue token {token:?}"));
        let mut parts = token.splitn(4, '/');
        let (Some(at), Some(returned), Some(ns), Some(name)) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(bad());
        };
        Ok(Self {
            at: at.parse().map_err(|_| bad())?,
            returned: returned.parse().map_err(|_| bad())?,
            after: (ns.to_owned(), name.to_owned()),
        })
    }

    fn render(&self) -> String {
        let (ns, name) = &self.after;
        format!("{}/{}/{ns}/{name}", self.at, self.returned)
    }
}

fn too_large(requested: u64, current: u64) -> ApiError {
    let mut e = ApiError::new(
        504,
        "Timeout",
        format!("Too large resource version: {requested}, current: {current}"),
    );
    e.details = Some(
        json!({"causes": [{"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}], "retryAfterSeconds": 1}),
    );
    e
}

/// The part of an object whose change bumps `metadata.generation`.
fn spec_of(rt: &ResourceType, obj: &Value) -> Value {
    let mut v = obj.clone();
    if let Some(o) = v.as_object_mut() {
        o.remove("metadata");
        o.remove("apiVersion");
        o.remove("kind");
        if rt.status_subresource {
            o.remove("status");
        }
    }
    v
}

fn set_types(rt: &ResourceType, obj: &mut Value) {
    let o = obj.as_object_mut().expect("object");
    o.insert(
        "apiVersion".into(),
        Value::String(rt.api_version(rt.versions.first().map_or("", String::as_str))),
    );
    o.insert("kind".into(), Value::String(rt.kind.clone()));
}

pub(crate) fn meta_mut(obj: &mut Value) -> &mut Map<String, Value> {
    let o = obj.as_object_mut().expect("object");
    let m = o.entry("metadata").or_insert_with(|| json!({}));
    if !m.is_object() {
        *m = json!({});
    }
    m.as_object_mut().expect("metadata object")
}

pub(crate) fn meta_str<'a>(obj: &'a Value, field: &str) -> Option<&'a str> {
    obj.get("metadata")
        .and_then(|m| m.get(field))
        .and_then(Value::as_str)
}

pub(crate) fn key_of(obj: &Value) -> Key {
    (
        meta_str(obj, "namespace").unwrap_or_default().to_string(),
        meta_str(obj, "name").unwrap_or_default().to_string(),
    )
}

/// Current UTC time as RFC 3339 with second precision (`metav1.Time`).
pub(crate) fn now_rfc3339() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0);
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    // civil_from_days (Howard Hinnant)
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}
