//! HTTP: accept loop, routing (paths as kube-apiserver lays them out) and
//! the handlers for get/list/watch/create/update/patch/delete/deletecollection.

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response};
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::sync::watch as signal;
use tokio::task::{JoinHandle, JoinSet};

use super::collection::Json;
use super::discovery;
use super::faults::{Faults, RequestInfo, Verb};
use super::patch::{self, PatchKind};
use super::resource::ResourceType;
use super::selector::{FieldSelector, Filter, LabelSelector};
use super::status::ApiError;
use super::store::{ListOpts, Preconditions, Store, WatchStart};
use super::traffic::{self, Accounting};
use super::watch::{self, WatchParams};

pub(crate) type Body = UnsyncBoxBody<Bytes, Infallible>;

/// State shared by the server handle, the accept loop, handlers and watch tasks.
pub(crate) struct Shared {
    pub store: Mutex<Store>,
    pub faults: Faults,
    pub traffic: Arc<Accounting>,
    /// Bumped to end every open watch.
    pub cut: signal::Sender<u64>,
    /// Bumped to make every open watch (with bookmarks) send a bookmark now.
    pub bookmark_now: signal::Sender<u64>,
    /// Periodic bookmark interval for new watches (kube-apiserver: about a minute).
    pub bookmark_interval: Mutex<Option<Duration>>,
    pub address: Mutex<String>,
}

impl Shared {
    pub fn new() -> Self {
        Self {
            store: Mutex::new(Store::new()),
            faults: Faults::new(),
            traffic: Arc::default(),
            cut: signal::Sender::new(0),
            bookmark_now: signal::Sender::new(0),
            bookmark_interval: Mutex::new(Some(Duration::from_secs(60))),
            address: Mutex::new(String::new()),
        }
    }
}

/// Runs the accept loop; aborting the returned task drops every connection.
pub(crate) fn spawn(listener: TcpListener, shared: Arc<Shared>) -> JoinHandle<()> {
    tokio::spawn(async move {
        let mut conns = JoinSet::new();
        loop {
            tokio::select! {
                accepted = listener.accept() => {
                    let Ok((stream, _)) = accepted else {
                        tokio::time::sleep(Duration::from_millis(10)).await;
                        continue;
                    };
                    let _ = stream.set_nodelay(true);
                    let shared = shared.clone();
                    conns.spawn(async move {
                        let svc = service_fn(move |req| handle(shared.clone(), req));
                        let _ = http1::Builder::new().serve_connection(TokioIo::new(stream), svc).await;
                    });
                }
                Some(_) = conns.join_next(), if !conns.is_empty() => {}
            }
        }
    })
}

// ----- responses -------------------------------------------------------------

fn json_response(code: u16, v: &Value) -> Response<Body> {
    bytes_response(code, serde_json::to_vec(v).expect("json"))
}

fn bytes_response(code: u16, json: Vec<u8>) -> Response<Body> {
    Response::builder()
        .status(code)
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(json)).boxed_unsync())
        .expect("response")
}

fn error_response(e: &ApiError) -> Response<Body> {
    let mut r = json_response(e.code, &e.to_status());
    if e.code == 429 {
        r.headers_mut()
            .insert("retry-after", "1".parse().expect("header"));
    }
    r
}

fn text_404() -> Response<Body> {
    Response::builder()
        .status(404)
        .header("content-type", "text/plain; charset=utf-8")
        .body(Full::new(Bytes::from_static(b"404 page not found\n")).boxed_unsync())
        .expect("response")
}

/// The object as served at `version` (or as `PartialObjectMetadata`).
pub(crate) fn render_object(rt: &ResourceType, version: &str, obj: &Value, partial: bool) -> Value {
    if partial {
        return json!({
            "kind": "PartialObjectMetadata",
            "apiVersion": "meta.k8s.io/v1",
            "metadata": obj.get("metadata").cloned().unwrap_or_else(|| json!({})),
        });
    }
    let mut o = obj.clone();
    o["apiVersion"] = json!(rt.api_version(version));
    o["kind"] = json!(rt.kind);
    o
}

fn render_list(
    rt: &ResourceType,
    version: &str,
    items: &[Value],
    meta: Value,
    partial: bool,
) -> Value {
    let items: Vec<Value> = items
        .iter()
        .map(|o| render_object(rt, version, o, partial))
        .collect();
    let (kind, api_version) = if partial {
        (
            "PartialObjectMetadataList".to_string(),
            "meta.k8s.io/v1".to_string(),
        )
    } else {
        (format!("{}List", rt.kind), rt.api_version(version))
    };
    json!({"kind": kind, "apiVersion": api_version, "metadata": meta, "items": items})
}

/// A list response from stored objects. Objects stored at the version asked
/// for (their text starts with that `apiVersion`: keys are sorted) are
/// spliced in as stored, without parsing: members listing 1.5 M objects on
/// start would otherwise wait on this server.
fn list_json(
    rt: &ResourceType,
    version: &str,
    items: &[Arc<Json>],
    meta: Value,
    partial: bool,
) -> Vec<u8> {
    if partial {
        let items: Vec<Value> = items.iter().map(|o| o.thaw()).collect();
        return serde_json::to_vec(&render_list(rt, version, &items, meta, partial)).expect("json");
    }
    let head = json!({"kind": format!("{}List", rt.kind), "apiVersion": rt.api_version(version), "metadata": meta});
    let mut out = serde_json::to_vec(&head).expect("json");
    out.pop(); // the closing brace: items follow
    out.extend_from_slice(b",\"items\":[");
    let as_stored = format!("{{\"apiVersion\":{}", json!(rt.api_version(version)));
    for (i, item) in items.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        if item.text().starts_with(&as_stored) {
            out.extend_from_slice(item.text().as_bytes());
        } else {
            let rendered = render_object(rt, version, &item.thaw(), false);
            serde_json::to_writer(&mut out, &rendered).expect("json");
        }
    }
    out.extend_from_slice(b"]}");
    out
}

// ----- routing -----------------------------------------------------------------

pub(crate) struct ResRoute {
    pub rt: ResourceType,
    pub version: String,
    pub namespace: Option<String>,
    pub name: Option<String>,
    pub subresource: Option<String>,
}

enum Route {
    Version,
    CoreVersions,
    Groups,
    Group(String),
    ResourceList(String, String),
    Resource(Box<ResRoute>),
    NotFoundText,
    NotFound(String),
}

fn route(store: &Store, path: &str) -> Route {
    let segs: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    match segs.as_slice() {
        ["version"] => Route::Version,
        ["api"] => Route::CoreVersions,
        ["apis"] => Route::Groups,
        ["apis", g] => {
            if store.resources().iter().any(|r| r.group == *g) {
                Route::Group(g.to_string())
            } else {
                Route::NotFoundText
            }
        }
        ["api", v, rest @ ..] => route_gv(store, "", v, rest),
        ["apis", g, v, rest @ ..] => route_gv(store, g, v, rest),
        _ => Route::NotFoundText,
    }
}

fn route_gv(store: &Store, group: &str, version: &str, rest: &[&str]) -> Route {
    if !store.serves_group_version(group, version) {
        return Route::NotFoundText;
    }
    if rest.is_empty() {
        return Route::ResourceList(group.into(), version.into());
    }
    let nf = || Route::NotFound("the server could not find the requested resource".into());
    let namespaced_form = rest[0] == "namespaces"
        && rest.len() >= 3
        && !(group.is_empty() && matches!(rest[2], "status" | "finalize"));
    let (namespace, rest) = if namespaced_form {
        (Some(rest[1].to_string()), &rest[2..])
    } else {
        (None, rest)
    };
    if rest.len() > 3 {
        return nf();
    }
    let Some(rt) = store.lookup(group, version, rest[0]) else {
        return nf();
    };
    if namespace.is_some() && !rt.namespaced {
        return nf();
    }
    let name = rest.get(1).map(|s| s.to_string());
    if rt.namespaced && namespace.is_none() && name.is_some() {
        return nf();
    }
    let subresource = rest.get(2).map(|s| s.to_string());
    if let Some(sub) = &subresource
        && !(sub == "status" && rt.status_subresource)
    {
        return nf();
    }
    Route::Resource(Box::new(ResRoute {
        rt,
        version: version.into(),
        namespace,
        name,
        subresource,
    }))
}

fn is_watch(q: &HashMap<String, String>) -> bool {
    matches!(q.get("watch").map(String::as_str), Some("true" | "1"))
}

fn verb_of(method: &Method, r: &ResRoute, q: &HashMap<String, String>) -> Verb {
    match (method.as_str(), r.name.is_some()) {
        ("GET", true) => Verb::Get,
        ("GET", false) if is_watch(q) => Verb::Watch,
        ("GET", false) => Verb::List,
        ("POST", _) => Verb::Create,
        ("PUT", _) => Verb::Update,
        ("PATCH", _) => Verb::Patch,
        ("DELETE", true) => Verb::Delete,
        ("DELETE", false) => Verb::DeleteCollection,
        _ => Verb::Other,
    }
}

// ----- handler -----------------------------------------------------------------

async fn handle(shared: Arc<Shared>, req: Request<Incoming>) -> Result<Response<Body>, Infallible> {
    let method = req.method().clone();
    let path = req.uri().path().to_string();
    let query_string = req.uri().query().unwrap_or("").to_string();
    let q: HashMap<String, String> = form_urlencoded::parse(query_string.as_bytes())
        .into_owned()
        .collect();
    let header = |name: &str| {
        req.headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_string()
    };
    let accept = header("accept");
    let content_type = header("content-type");
    let client = traffic::client_of(&header("authorization"));
    let route = route(&shared.store.lock().unwrap(), &path);

    let mut info = RequestInfo {
        verb: Verb::Discovery,
        method: method.to_string(),
        path: path.clone(),
        query: query_string.clone(),
        group: String::new(),
        version: String::new(),
        resource: String::new(),
        namespace: None,
        name: None,
        subresource: None,
        injected_failure: None,
    };
    match &route {
        Route::Resource(r) => {
            info.verb = verb_of(&method, r, &q);
            info.group = r.rt.group.clone();
            info.version = r.version.clone();
            info.resource = r.rt.plural.clone();
            info.namespace = r.namespace.clone();
            info.name = r.name.clone();
            info.subresource = r.subresource.clone();
        }
        Route::NotFound(_) | Route::NotFoundText => info.verb = Verb::Other,
        _ => {}
    }
    let (verb, resource) = (info.verb, info.resource.clone());
    let injected = shared.faults.arrive(info);
    shared.faults.wait_unpaused().await;
    let body = match req.into_body().collect().await {
        Ok(b) => b.to_bytes(),
        Err(_) => Bytes::new(),
    };
    shared.traffic.request(&client, verb, &resource, body.len());
    let resp = match injected {
        Some(code) => error_response(&ApiError::injected(code)),
        None => respond(&shared, route, &q, &accept, &content_type, &method, &body),
    };
    Ok(resp.map(|b| shared.traffic.count_response(client, verb, resource, b)))
}

/// The response to a routed request.
fn respond(
    shared: &Arc<Shared>,
    route: Route,
    q: &HashMap<String, String>,
    accept: &str,
    content_type: &str,
    method: &Method,
    body: &[u8],
) -> Response<Body> {
    let aggregated = accept.contains("as=APIGroupDiscoveryList");
    match route {
        Route::Version => json_response(200, &discovery::version()),
        Route::CoreVersions if aggregated => aggregated_response(&discovery::aggregated(
            shared.store.lock().unwrap().resources(),
            true,
        )),
        Route::CoreVersions => json_response(
            200,
            &discovery::core_versions(&shared.address.lock().unwrap()),
        ),
        Route::Groups if aggregated => aggregated_response(&discovery::aggregated(
            shared.store.lock().unwrap().resources(),
            false,
        )),
        Route::Groups => json_response(
            200,
            &discovery::group_list(shared.store.lock().unwrap().resources()),
        ),
        Route::Group(g) => match discovery::group(shared.store.lock().unwrap().resources(), &g) {
            Some(v) => json_response(200, &v),
            None => text_404(),
        },
        Route::ResourceList(g, v) => json_response(
            200,
            &discovery::resource_list(shared.store.lock().unwrap().resources(), &g, &v),
        ),
        Route::NotFoundText => text_404(),
        Route::NotFound(msg) => error_response(&ApiError::new(404, "NotFound", msg)),
        Route::Resource(r) => {
            let partial = accept.contains("as=PartialObjectMetadata");
            match resource(shared, method, &r, q, content_type, body, partial) {
                Ok(resp) => resp,
                Err(e) => error_response(&e),
            }
        }
    }
}

fn aggregated_response(v: &Value) -> Response<Body> {
    let mut r = json_response(200, v);
    r.headers_mut().insert(
        "content-type",
        "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"
            .parse()
            .expect("header"),
    );
    r
}

fn filter_of(r: &ResRoute, q: &HashMap<String, String>) -> Result<Filter, ApiError> {
    let labels = LabelSelector::parse(q.get("labelSelector").map(String::as_str).unwrap_or(""))
        .map_err(|e| ApiError::bad_request(format!("unable to parse requirement: {e}")))?;
    let fields = FieldSelector::parse(
        q.get("fieldSelector").map(String::as_str).unwrap_or(""),
        &r.rt.extra_field_selectors,
    )
    .map_err(ApiError::bad_request)?;
    Ok(Filter {
        namespace: r.namespace.clone(),
        labels,
        fields,
    })
}

fn parse_json(body: &[u8]) -> Result<Value, ApiError> {
    serde_json::from_slice(body)
        .map_err(|e| ApiError::bad_request(format!("error decoding request body: {e}")))
}

fn dry_run(q: &HashMap<String, String>) -> bool {
    q.get("dryRun").is_some_and(|v| v == "All")
}

fn resource(
    shared: &Arc<Shared>,
    method: &Method,
    r: &ResRoute,
    q: &HashMap<String, String>,
    content_type: &str,
    body: &[u8],
    partial: bool,
) -> Result<Response<Body>, ApiError> {
    let verb = verb_of(method, r, q);
    let rt = &r.rt;
    let ns = r.namespace.as_deref();
    let status_only = r.subresource.is_some();
    let render = |o: &Value| render_object(rt, &r.version, o, partial);
    match verb {
        Verb::Get => {
            let obj = shared
                .store
                .lock()
                .unwrap()
                .get(rt, ns, r.name.as_deref().unwrap_or(""))?;
            Ok(json_response(200, &render(&obj)))
        }
        Verb::List => {
            let filter = filter_of(r, q)?;
            let opts = ListOpts {
                resource_version: q.get("resourceVersion").cloned(),
                resource_version_match: q.get("resourceVersionMatch").cloned(),
                limit: match q.get("limit") {
                    Some(l) => Some(
                        l.parse()
                            .map_err(|_| ApiError::bad_request(format!("invalid limit {l:?}")))?,
                    ),
                    None => None,
                },
                continue_token: q.get("continue").cloned(),
            };
            let res = shared.store.lock().unwrap().list(rt, &filter, &opts)?;
            let mut meta = json!({"resourceVersion": res.rv.to_string()});
            if let Some(c) = res.continue_token {
                meta["continue"] = json!(c);
            }
            if let Some(n) = res.remaining {
                meta["remainingItemCount"] = json!(n);
            }
            Ok(bytes_response(
                200,
                list_json(rt, &r.version, &res.items, meta, partial),
            ))
        }
        Verb::Watch => {
            let filter = filter_of(r, q)?;
            let bookmarks = q
                .get("allowWatchBookmarks")
                .is_some_and(|v| v == "true" || v == "1");
            let initial = q
                .get("sendInitialEvents")
                .is_some_and(|v| v == "true" || v == "1");
            let rv = q.get("resourceVersion").map(String::as_str).unwrap_or("");
            let start = if initial {
                if q.get("resourceVersionMatch").map(String::as_str) != Some("NotOlderThan")
                    || !bookmarks
                {
                    return Err(ApiError::new(
                        422,
                        "Invalid",
                        "ListOptions.meta.k8s.io \"\" is invalid: sendInitialEvents requires \
                         resourceVersionMatch=NotOlderThan and allowWatchBookmarks=true",
                    ));
                }
                WatchStart::InitialEvents
            } else if rv.is_empty() || rv == "0" {
                WatchStart::Current
            } else {
                WatchStart::After(rv.parse().map_err(|_| {
                    ApiError::bad_request(format!("invalid resource version {rv:?}"))
                })?)
            };
            let params = WatchParams {
                rt: rt.clone(),
                version: r.version.clone(),
                filter,
                bookmarks,
                timeout: watch::timeout_param(q.get("timeoutSeconds"))?,
                partial,
                start,
            };
            Ok(watch::serve(shared.clone(), params))
        }
        Verb::Create => {
            if r.subresource.is_some() || (rt.namespaced && ns.is_none()) {
                return Err(ApiError::method_not_allowed(
                    "create is not allowed on this path",
                ));
            }
            let obj = parse_json(body)?;
            let created = shared
                .store
                .lock()
                .unwrap()
                .create(rt, ns, obj, dry_run(q))?;
            Ok(json_response(201, &render(&created)))
        }
        Verb::Update => {
            let name = r
                .name
                .as_deref()
                .ok_or_else(|| ApiError::method_not_allowed("update needs a name"))?;
            let obj = parse_json(body)?;
            let updated =
                shared
                    .store
                    .lock()
                    .unwrap()
                    .update(rt, ns, name, obj, status_only, dry_run(q))?;
            Ok(json_response(200, &render(&updated)))
        }
        Verb::Patch => {
            let name = r
                .name
                .as_deref()
                .ok_or_else(|| ApiError::method_not_allowed("patch needs a name"))?;
            let kind = PatchKind::from_content_type(content_type)?;
            let patch_body = patch::parse_body(kind, body)?;
            let field_manager = q.get("fieldManager").map(String::as_str);
            let (obj, created) = shared.store.lock().unwrap().patch(
                rt,
                ns,
                name,
                kind,
                &patch_body,
                status_only,
                dry_run(q),
                field_manager,
            )?;
            Ok(json_response(
                if created { 201 } else { 200 },
                &render(&obj),
            ))
        }
        Verb::Delete => {
            if r.subresource.is_some() {
                return Err(ApiError::method_not_allowed(
                    "delete is not allowed on a subresource",
                ));
            }
            let opts: Value = if body.iter().all(u8::is_ascii_whitespace) {
                json!({})
            } else {
                parse_json(body)?
            };
            let pre = Preconditions {
                resource_version: opts
                    .pointer("/preconditions/resourceVersion")
                    .and_then(Value::as_str)
                    .map(str::to_string),
                uid: opts
                    .pointer("/preconditions/uid")
                    .and_then(Value::as_str)
                    .map(str::to_string),
            };
            let body_dry = opts
                .get("dryRun")
                .and_then(Value::as_array)
                .is_some_and(|a| a.iter().any(|v| v == "All"));
            let deleted = shared.store.lock().unwrap().delete(
                rt,
                ns,
                r.name.as_deref().unwrap_or(""),
                &pre,
                dry_run(q) || body_dry,
            )?;
            Ok(json_response(200, &render(&deleted)))
        }
        Verb::DeleteCollection => {
            let filter = filter_of(r, q)?;
            let mut store = shared.store.lock().unwrap();
            let deleted = store.delete_collection(rt, &filter, dry_run(q))?;
            let meta = json!({"resourceVersion": store.rv.to_string()});
            Ok(json_response(
                200,
                &render_list(rt, &r.version, &deleted, meta, partial),
            ))
        }
        Verb::Discovery | Verb::Other => Err(ApiError::method_not_allowed(format!(
            "method {method} is not allowed"
        ))),
    }
}
