//! A fake kube-apiserver for tests: real HTTP/1.1 on `127.0.0.1`, the real
//! REST + watch protocol, driven by the real `kube` client.
//!
//! A dev-dependency of the tests and benchmarks of clusterset-dns
//! (ARCHITECTURE.md, "Test layout"):
//!
//! ```ignore
//! let server = FakeApiServer::start().await;
//! let client = server.client();                 // kube::Client, no auth
//! std::fs::write(&path, server.kubeconfig_yaml("member-1"))?; // for `--kubeconfig`
//! server.cut_watches();                          // faults, switchable at runtime
//! ```
//!
//! # Resources
//!
//! Pre-registered: `namespaces` (cluster-scoped, with `default`, `kube-system`,
//! `kube-public`, `kube-node-lease` present), `services`, `configmaps`, `discovery.k8s.io/v1`
//! `endpointslices`, `coordination.k8s.io/v1` `leases`,
//! `multicluster.x-k8s.io` `serviceexports` and `serviceimports` (served at
//! `v1alpha1` **and** `v1beta1` from one storage, status subresource, CRD
//! rules), `about.k8s.io/v1alpha1` `clusterproperties` (cluster-scoped, CRD).
//! [`FakeApiServer::register`] adds more; [`FakeApiServer::unregister`] stops
//! serving a version (a CRD "not installed": its paths answer 404).
//!
//! # Faithful to kube-apiserver (what kube-rs and the product depend on)
//!
//! - Paths `/api/v1/...`, `/apis/<g>/<v>/...`, namespaced
//!   (`namespaces/<ns>/<plural>[/<name>[/status]]`), cluster-scoped and
//!   all-namespaces collections; unknown group/versions answer a plain-text 404,
//!   unknown resources a `Status` 404.
//! - One global `resourceVersion` counter (like etcd revisions) stamped on every
//!   write; `uid`, `creationTimestamp`, `generation` (bumped when anything but
//!   metadata, and status for status-subresource types, changes) are server-owned;
//!   `generateName`. No-op updates do not bump the resourceVersion and emit no event.
//! - Errors are `Status` objects with kube-apiserver's code, `reason` and message
//!   wording: create of an existing name → 409 `AlreadyExists`; create in a
//!   missing namespace → 404 `NotFound` (`namespaces "x" not found`); PUT/PATCH
//!   with a stale `metadata.resourceVersion` (or a wrong `uid`) → 409 `Conflict`;
//!   missing → 404 `NotFound`; PUT without resourceVersion on custom resources →
//!   422 `Invalid`; apply without `fieldManager` → 422; name/namespace mismatch
//!   between URL and body → 400; create with `metadata.resourceVersion` set (an
//!   object read elsewhere and copied) → 500 `resourceVersion should not be set
//!   on objects to be created`, as etcd3 storage answers.
//! - Status subresource: create drops `.status`; writes to the object keep the
//!   stored `.status`; writes to `/status` change only `.status`.
//! - PATCH: `merge-patch+json` (RFC 7386), `json-patch+json` (RFC 6902),
//!   `strategic-merge-patch+json`, `apply-patch+yaml` (creates when missing, 201);
//!   a `resourceVersion` inside the patch is a precondition (409 when stale).
//! - DELETE returns 200 with the object and emits DELETED; `preconditions`
//!   (`uid`, `resourceVersion`) → 409; objects with finalizers only get
//!   `deletionTimestamp` (MODIFIED) and go once an update removes the last
//!   finalizer. `dryRun=All` on every write. `deletecollection` with selectors.
//! - list: `{kind: <Kind>List, apiVersion, metadata: {resourceVersion}, items}`,
//!   labelSelector (`=`, `==`, `!=`, `in`, `notin`, `key`, `!key`, `>`, `<`),
//!   fieldSelector on `metadata.name` / `metadata.namespace` (others 400 unless
//!   registered); `limit`/`continue` pagination over a consistent snapshot
//!   (an expired continue token → 410); `resourceVersion` with
//!   `resourceVersionMatch=Exact` lists the state at that version (410 `Expired`
//!   once compacted); unset/`0`/NotOlderThan list the current state.
//! - watch (`watch=true|1`): chunked newline-delimited `WatchEvent` JSON; from
//!   `resourceVersion=N` replays every change after N in order, then streams;
//!   unset or `0` first sends synthetic ADDED for the current state;
//!   `sendInitialEvents=true` (needs `resourceVersionMatch=NotOlderThan` +
//!   `allowWatchBookmarks`, else 422) sends the state then a BOOKMARK annotated
//!   `k8s.io/initial-events-end`; N older than the retained history → HTTP 200
//!   with one `ERROR` event carrying `Status` 410 `Expired`
//!   (`too old resource version: N (M)`), exactly as kube-apiserver.
//!   Label/field selector transitions become ADDED/DELETED like the watch cache.
//!   `timeoutSeconds` ends the stream; BOOKMARKs (only with
//!   `allowWatchBookmarks`) every [`FakeApiServer::set_bookmark_interval`]
//!   (default 60 s, like the real one) and on [`FakeApiServer::send_bookmarks`].
//!   Every watcher sees every event of its resource in resourceVersion order
//!   (writes and fan-out happen under one lock).
//! - kube-rs 5's `watcher::Config::default()` uses `InitialListStrategy::ListWatch`
//!   (list with `limit=500`, then watch from the list's resourceVersion with
//!   `allowWatchBookmarks=true&timeoutSeconds=290`); `.streaming_lists()` uses
//!   `sendInitialEvents`. Both work, including resumption after a cut and relist
//!   after 410.
//! - `Accept: ...;as=PartialObjectMetadata[List]` (kube's
//!   `Api<PartialObjectMeta<K>>`), legacy and aggregated (v2) discovery
//!   (`kube::Discovery::run`/`run_aggregated`, `discovery::pinned_kind`), `/version`.
//!
//! # Faults and observation (all switchable at runtime, `&self`)
//!
//! - [`FakeApiServer::cut_watches`] ends every open watch now; clients resume
//!   from their last resourceVersion. With [`FakeApiServer::compact`] first, the
//!   resumed watch gets 410 and kube's watcher relists.
//! - [`FakeApiServer::fail_requests`] / [`FakeApiServer::fail_requests_matching`]:
//!   the next n (matching) requests answer a `Status` with the given code. Note
//!   that kube-rs itself retries 429/503/504 (up to 15 times, 5 ms backoff
//!   doubling; 429 carries `Retry-After: 1`), so those codes are invisible to
//!   callers unless they outlast the retries; 500 (or any 4xx) surfaces at once.
//! - [`FakeApiServer::pause`] / [`FakeApiServer::resume`]: requests hang and open
//!   watches stop delivering (nothing is lost) until resumed.
//! - [`FakeApiServer::stop`] / [`FakeApiServer::restart`] on the same port, with a
//!   [`RestartMode`]: keep everything, keep objects but lose the watch history
//!   (what a real apiserver restart looks like), or wipe.
//! - [`FakeApiServer::requests`], [`FakeApiServer::request_count`] (by [`Verb`]),
//!   [`FakeApiServer::open_watches`], [`FakeApiServer::history`] for assertions.
//! - [`FakeApiServer::traffic`]: requests by verb and body bytes each way
//!   (watch streams included) per client, the client being the bearer token
//!   it sends ([`FakeApiServer::kubeconfig_yaml_with_token`]) or `-`;
//!   [`FakeApiServer::stored`]: objects and JSON bytes per resource.
//!   [`FakeApiServer::set_request_log`] turns the request log off for
//!   servers taking millions of requests.
//! - Back door for setup and assertions without HTTP (still versioned and
//!   watched): [`FakeApiServer::put`], [`FakeApiServer::get`],
//!   [`FakeApiServer::list`], [`FakeApiServer::remove`], `*_raw` variants,
//!   [`FakeApiServer::create_namespace`].
//!
//! # Simplified
//!
//! - No auth (a bearer token only names the client for accounting), no admission, no validation of object schemas (any JSON object is
//!   stored as given), no `managedFields`; protobuf is never served (JSON only).
//! - Server-side apply is a JSON merge patch of the applied configuration:
//!   `fieldManager` must be present but ownership is not tracked, `force` is
//!   ignored, lists are replaced rather than merged by key, and fields a manager
//!   stops applying are not removed.
//! - Strategic merge patch is treated as a JSON merge patch (lists replaced).
//! - Defaulting only for Namespaces (phase, `kubernetes.io/metadata.name`
//!   label) and Services (type, sessionAffinity, port protocol/targetPort,
//!   ClusterIP(s) allocated sequentially from 10.96.0.0/16 and fd00:10:96::/112
//!   per `ipFamilies`, no duplicate or immutability checks; an update leaving
//!   the ClusterIPs unset keeps them, as the real one does).
//! - Deleting a namespace is synchronous: MODIFIED (Terminating), DELETED for
//!   every object in it (finalizers ignored), DELETED for the namespace; there is
//!   no window in which creates into a terminating namespace get 403.
//! - One `resourceVersion` sequence per server; `limit` pages are exact (the real
//!   one may return fewer items per page when selectors filter).
//! - Unregistering the last version of a resource drops its objects without
//!   events. `propagationPolicy` and `gracePeriodSeconds` are ignored.
//! - Garbage collection is synchronous and always in the background style: a
//!   DELETE that removes an object (no finalizers) also deletes the objects of
//!   its namespace whose `ownerReferences` name its `uid`; an owner removed
//!   once its finalizers are gone leaves its dependents alone.
//! - A `resourceVersion` newer than the server's answers 504 `Timeout`
//!   ("Too large resource version") at once instead of waiting 3 s first.
//! - History is kept for the last [`FakeApiServer::set_history_limit`] changes
//!   (default 100 000) across all resources; [`FakeApiServer::compact`] drops it.
//! - [`FakeApiServer::restart`] keeps the resourceVersion counter monotonic even
//!   when data is wiped, so resumed watches get 410 and relist (a real wiped etcd
//!   would restart from a low revision).

mod collection;
mod defaults;
mod discovery;
mod faults;
mod patch;
mod resource;
mod selector;
mod server;
mod status;
mod store;
mod traffic;
mod watch;

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

pub use faults::{RequestInfo, Verb};
pub use resource::ResourceType;
pub use status::ApiError;
pub use store::{ChangeKind, HistoryEntry, Stored};
pub use traffic::{ANONYMOUS, Traffic, TrafficByClient, traffic_since};

use server::Shared;
use store::Preconditions;

/// What survives [`FakeApiServer::restart`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RestartMode {
    /// Objects and watch history survive: watches resume where they were.
    KeepAll,
    /// Objects survive, history does not (a real apiserver restart: its new
    /// watch cache starts at the current revision, so resuming older
    /// resourceVersions gets 410 and clients relist).
    KeepObjects,
    /// Everything is lost (a rebuilt cluster): only the default namespaces exist.
    Wipe,
}

/// A running fake API server. Dropping it stops it.
pub struct FakeApiServer {
    shared: Arc<Shared>,
    port: u16,
    task: Mutex<Option<JoinHandle<()>>>,
}

impl FakeApiServer {
    /// Starts on an ephemeral port of 127.0.0.1.
    pub async fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind 127.0.0.1:0");
        let port = listener.local_addr().expect("local addr").port();
        let shared = Arc::new(Shared::new());
        *shared.address.lock().unwrap() = format!("127.0.0.1:{port}");
        let task = server::spawn(listener, shared.clone());
        Self {
            shared,
            port,
            task: Mutex::new(Some(task)),
        }
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// `http://127.0.0.1:PORT`
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// A client config for this server (no auth, namespace `default`, kube's default retries).
    pub fn config(&self) -> kube::Config {
        kube::Config::new(self.url().parse().expect("url"))
    }

    pub fn client(&self) -> kube::Client {
        kube::Client::try_from(self.config()).expect("kube client")
    }

    /// A kubeconfig whose cluster, user and current context are all named `name`.
    pub fn kubeconfig_yaml(&self, name: &str) -> String {
        self.kubeconfig_yaml_as(name, "{}")
    }

    /// [`Self::kubeconfig_yaml`] whose user sends `Authorization: Bearer <token>`:
    /// [`Self::traffic`] counts its requests under `token`.
    pub fn kubeconfig_yaml_with_token(&self, name: &str, token: &str) -> String {
        self.kubeconfig_yaml_as(name, &format!("{{token: {token}}}"))
    }

    fn kubeconfig_yaml_as(&self, name: &str, user: &str) -> String {
        format!(
            "apiVersion: v1\n\
             kind: Config\n\
             clusters:\n\
             - name: {name}\n  cluster:\n    server: {url}\n\
             users:\n\
             - name: {name}\n  user: {user}\n\
             contexts:\n\
             - name: {name}\n  context:\n    cluster: {name}\n    user: {name}\n    namespace: default\n\
             current-context: {name}\n",
            url = self.url()
        )
    }

    pub fn write_kubeconfig(&self, path: impl AsRef<Path>, name: &str) -> std::io::Result<()> {
        std::fs::write(path, self.kubeconfig_yaml(name))
    }

    /// Writes [`Self::kubeconfig_yaml_with_token`].
    pub fn write_kubeconfig_with_token(
        &self,
        path: impl AsRef<Path>,
        name: &str,
        token: &str,
    ) -> std::io::Result<()> {
        std::fs::write(path, self.kubeconfig_yaml_with_token(name, token))
    }

    // ----- resources ------------------------------------------------------

    /// Serves another resource (or another version of a registered one).
    pub fn register(&self, rt: ResourceType) {
        self.shared.store.lock().unwrap().register(rt);
    }

    /// Stops serving `group/version` `plural`; the last version takes the objects with it.
    pub fn unregister(&self, group: &str, version: &str, plural: &str) {
        self.shared
            .store
            .lock()
            .unwrap()
            .unregister(group, version, plural);
    }

    /// Stops serving one version of a resource, keeping its objects even
    /// when no version is left (`served: false` on every version of a CRD).
    pub fn unserve(&self, group: &str, version: &str, plural: &str) {
        self.shared
            .store
            .lock()
            .unwrap()
            .unserve(group, version, plural);
    }

    // ----- direct data access (no HTTP; still versioned and watched) ------

    /// Creates a namespace (no-op if it exists).
    pub fn create_namespace(&self, name: &str) {
        let obj = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}});
        let mut store = self.shared.store.lock().unwrap();
        if !store.namespace_exists(name) {
            store.put(obj).expect("create namespace");
        }
    }

    /// Writes an object as given, by its `apiVersion`/`kind`: created if missing
    /// (keeping a given `creationTimestamp`, to backdate it), otherwise
    /// overwritten (including `.status`, without resourceVersion check).
    pub fn put_raw(&self, obj: Value) -> Result<Value, ApiError> {
        self.shared.store.lock().unwrap().put(obj)
    }

    /// Typed [`Self::put_raw`].
    pub fn put<K: Serialize + DeserializeOwned>(&self, obj: &K) -> Result<K, ApiError> {
        let v = serde_json::to_value(obj).map_err(|e| ApiError::bad_request(e.to_string()))?;
        let out = self.put_raw(v)?;
        serde_json::from_value(out).map_err(|e| ApiError::bad_request(e.to_string()))
    }

    /// The stored object (`apiVersion` as first registered version).
    pub fn get_raw(
        &self,
        group: &str,
        plural: &str,
        namespace: Option<&str>,
        name: &str,
    ) -> Option<Value> {
        let store = self.shared.store.lock().unwrap();
        let rt = store.lookup_gr(group, plural)?;
        store.get(&rt, namespace, name).ok()
    }

    pub fn get<K>(&self, namespace: Option<&str>, name: &str) -> Option<K>
    where
        K: kube::Resource<DynamicType: Default> + DeserializeOwned,
    {
        let dt = K::DynamicType::default();
        let store = self.shared.store.lock().unwrap();
        let rt = store.lookup_gr(&K::group(&dt), &K::plural(&dt))?;
        let obj = store.get(&rt, namespace, name).ok()?;
        serde_json::from_value(server::render_object(&rt, &K::version(&dt), &obj, false)).ok()
    }

    /// All objects of a resource (in one namespace, or everywhere).
    pub fn list_raw(&self, group: &str, plural: &str, namespace: Option<&str>) -> Vec<Value> {
        let store = self.shared.store.lock().unwrap();
        let Some(rt) = store.lookup_gr(group, plural) else {
            return Vec::new();
        };
        let filter = selector::Filter {
            namespace: namespace.map(str::to_string),
            ..Default::default()
        };
        store
            .list(&rt, &filter, &store::ListOpts::default())
            .map(|r| r.items.iter().map(|v| v.thaw()).collect())
            .unwrap_or_default()
    }

    pub fn list<K>(&self, namespace: Option<&str>) -> Vec<K>
    where
        K: kube::Resource<DynamicType = ()> + DeserializeOwned,
    {
        let store = self.shared.store.lock().unwrap();
        let Some(rt) = store.lookup_gr(&K::group(&()), &K::plural(&())) else {
            return Vec::new();
        };
        let filter = selector::Filter {
            namespace: namespace.map(str::to_string),
            ..Default::default()
        };
        let items = store
            .list(&rt, &filter, &store::ListOpts::default())
            .map(|r| r.items)
            .unwrap_or_default();
        items
            .iter()
            .filter_map(|o| {
                let o = o.thaw();
                serde_json::from_value(server::render_object(&rt, &K::version(&()), &o, false)).ok()
            })
            .collect()
    }

    /// Deletes like an HTTP DELETE (finalizers respected). False if it did not exist.
    pub fn remove_raw(
        &self,
        group: &str,
        plural: &str,
        namespace: Option<&str>,
        name: &str,
    ) -> bool {
        let mut store = self.shared.store.lock().unwrap();
        let Some(rt) = store.lookup_gr(group, plural) else {
            return false;
        };
        store
            .delete(&rt, namespace, name, &Preconditions::default(), false)
            .is_ok()
    }

    pub fn remove<K: kube::Resource<DynamicType: Default>>(
        &self,
        namespace: Option<&str>,
        name: &str,
    ) -> bool {
        let dt = K::DynamicType::default();
        self.remove_raw(&K::group(&dt), &K::plural(&dt), namespace, name)
    }

    // ----- resourceVersions and history -----------------------------------

    /// The latest resourceVersion handed out.
    pub fn resource_version(&self) -> u64 {
        self.shared.store.lock().unwrap().rv
    }

    /// Forgets all history: watches/lists from any earlier resourceVersion get 410 Gone.
    /// Open watches keep streaming (combine with [`Self::cut_watches`] to force resumption).
    pub fn compact(&self) {
        self.shared.store.lock().unwrap().compact();
    }

    /// Keeps only the last `n` changes for watch resumption.
    pub fn set_history_limit(&self, n: usize) {
        self.shared.store.lock().unwrap().set_history_limit(n);
    }

    /// Retained changes, oldest first.
    pub fn history(&self) -> Vec<HistoryEntry> {
        self.shared.store.lock().unwrap().history()
    }

    // ----- watches --------------------------------------------------------

    /// Ends every open watch stream now (clean end of the chunked response;
    /// events not yet written are dropped, clients resume from their last version).
    pub fn cut_watches(&self) {
        self.shared.cut.send_modify(|n| *n += 1);
    }

    /// Makes every open watch that asked for bookmarks send one now.
    pub fn send_bookmarks(&self) {
        self.shared.bookmark_now.send_modify(|n| *n += 1);
    }

    /// Periodic bookmark interval for watches opened from now on (`None`: never).
    pub fn set_bookmark_interval(&self, every: Option<Duration>) {
        *self.shared.bookmark_interval.lock().unwrap() = every;
    }

    /// Number of watch streams currently open.
    pub fn open_watches(&self) -> usize {
        self.shared.store.lock().unwrap().open_watches()
    }

    /// Waits until at least `n` watches are open; false on timeout.
    pub async fn wait_for_watches(&self, n: usize, timeout: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + timeout;
        while self.open_watches() < n {
            if tokio::time::Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        true
    }

    // ----- faults ---------------------------------------------------------

    /// The next `n` requests (any kind) answer `code` with a `Status` body
    /// (429 also carries `Retry-After: 1`).
    pub fn fail_requests(&self, n: usize, code: u16) {
        self.shared.faults.add_rule(n, code, None);
    }

    /// The next `n` requests matching `predicate` answer `code`.
    pub fn fail_requests_matching(
        &self,
        n: usize,
        code: u16,
        predicate: impl Fn(&RequestInfo) -> bool + Send + Sync + 'static,
    ) {
        self.shared
            .faults
            .add_rule(n, code, Some(Arc::new(predicate)));
    }

    /// Drops all pending injected failures.
    pub fn clear_failures(&self) {
        self.shared.faults.clear_rules();
    }

    /// Injected failures not yet consumed.
    pub fn pending_failures(&self) -> usize {
        self.shared.faults.pending_failures()
    }

    /// New requests hang (after being logged) and open watches stop
    /// delivering until [`Self::resume`]; nothing is lost.
    pub fn pause(&self) {
        self.shared.faults.set_paused(true);
    }

    pub fn resume(&self) {
        self.shared.faults.set_paused(false);
    }

    /// Stops listening and drops every connection (in-flight requests and
    /// watches fail, new connections are refused). Data is kept.
    pub async fn stop(&self) {
        let task = self.task.lock().unwrap().take();
        if let Some(task) = task {
            task.abort();
            let _ = task.await;
        }
        self.cut_watches();
    }

    /// Whether the server is currently listening.
    pub fn is_running(&self) -> bool {
        self.task.lock().unwrap().is_some()
    }

    /// Stops (if running) and listens again on the same port.
    pub async fn restart(&self, mode: RestartMode) {
        self.stop().await;
        {
            let mut store = self.shared.store.lock().unwrap();
            match mode {
                RestartMode::KeepAll => {}
                RestartMode::KeepObjects => store.compact(),
                RestartMode::Wipe => store.wipe(),
            }
        }
        let addr = format!("127.0.0.1:{}", self.port);
        let mut tries = 0;
        let listener = loop {
            match TcpListener::bind(&addr).await {
                Ok(l) => break l,
                Err(_) if tries < 200 => {
                    tries += 1;
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
                Err(e) => panic!("rebinding {addr}: {e}"),
            }
        };
        *self.task.lock().unwrap() = Some(server::spawn(listener, self.shared.clone()));
    }

    // ----- request log ----------------------------------------------------

    /// Every request so far (including failed and paused ones), in arrival order.
    pub fn requests(&self) -> Vec<RequestInfo> {
        self.shared.faults.log()
    }

    /// Requests with this verb.
    pub fn request_count(&self, verb: Verb) -> usize {
        self.shared.faults.count(|i| i.verb == verb)
    }

    /// Requests with this verb on this resource (plural).
    pub fn request_count_for(&self, verb: Verb, plural: &str) -> usize {
        self.shared
            .faults
            .count(|i| i.verb == verb && i.resource == plural)
    }

    pub fn reset_requests(&self) {
        self.shared.faults.reset_log();
    }

    /// Whether [`Self::requests`] keeps a log (default on). Turn it off where a
    /// server takes millions of requests; [`Self::traffic`] still counts.
    pub fn set_request_log(&self, on: bool) {
        self.shared.faults.set_logging(on);
    }

    // ----- accounting -----------------------------------------------------

    /// Requests by verb and body bytes each way, per client (bearer token,
    /// [`ANONYMOUS`] without), since the start or [`Self::reset_traffic`];
    /// [`traffic_since`] diffs two snapshots.
    pub fn traffic(&self) -> TrafficByClient {
        self.shared.traffic.snapshot()
    }

    pub fn reset_traffic(&self) {
        self.shared.traffic.reset();
    }

    /// Objects and their JSON bytes per resource, in one namespace or all.
    pub fn stored(&self, namespace: Option<&str>) -> Vec<Stored> {
        self.shared.store.lock().unwrap().stored(namespace)
    }
}

impl Drop for FakeApiServer {
    fn drop(&mut self) {
        if let Some(task) = self.task.lock().unwrap().take() {
            task.abort();
        }
        self.cut_watches();
    }
}
