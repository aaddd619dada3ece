//! Tests of the fake kube-apiserver, driven by the real kube client, watcher
//! and reflector.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use fake_apiserver::{FakeApiServer, ResourceType, RestartMode, Verb};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Namespace, Service, ServicePort, ServiceSpec};
use k8s_openapi::api::discovery::v1::{Endpoint, EndpointSlice};
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, ObjectMeta, Patch,
    PatchParams, PostParams, WatchEvent, WatchParams,
};
use kube::core::{PartialObjectMeta, Status};
use kube::runtime::utils::Backoff;
use kube::runtime::{WatchStreamExt, reflector, watcher};
use kube::{Client, Resource, ResourceExt};
use serde_json::json;

// ----- helpers -------------------------------------------------------------------

/// The `Status` of a failed call.
fn status(e: kube::Error) -> Status {
    match e {
        kube::Error::Api(s) => *s,
        other => panic!("expected an API error, got {other:?}"),
    }
}

/// Watcher backoff for tests: retry after 20 ms, forever.
struct Quick;

impl Iterator for Quick {
    type Item = Duration;
    fn next(&mut self) -> Option<Duration> {
        Some(Duration::from_millis(20))
    }
}

impl Backoff for Quick {
    fn reset(&mut self) {}
}

/// Polls `f` until it holds (panics after `secs`).
async fn eventually(secs: u64, what: &str, mut f: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(secs);
    while !f() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

fn service(name: &str, labels: &[(&str, &str)]) -> Service {
    Service {
        metadata: ObjectMeta {
            name: Some(name.into()),
            labels: Some(
                labels
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
            ),
            ..Default::default()
        },
        spec: Some(ServiceSpec {
            ports: Some(vec![ServicePort {
                port: 80,
                ..Default::default()
            }]),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn slice(name: &str, ip: &str) -> EndpointSlice {
    EndpointSlice {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some("default".into()),
            labels: Some(BTreeMap::from([(
                "kubernetes.io/service-name".into(),
                "web".into(),
            )])),
            ..Default::default()
        },
        address_type: "IPv4".into(),
        endpoints: Some(vec![Endpoint {
            addresses: vec![ip.into()],
            ..Default::default()
        }]),
        ports: None,
    }
}

fn mcs(kind: &str, plural: &str, version: &str) -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("multicluster.x-k8s.io", version, kind),
        plural,
    )
}

/// Name -> resourceVersion, for comparing a reflector store with the server.
fn versions<'a, K: Resource + 'a>(
    objs: impl IntoIterator<Item = &'a K>,
) -> BTreeMap<String, String> {
    objs.into_iter()
        .map(|o| {
            (
                o.meta().name.clone().unwrap_or_default(),
                o.meta().resource_version.clone().unwrap_or_default(),
            )
        })
        .collect()
}

/// Spawns a reflector over EndpointSlices in `default`; returns its store and an error counter.
fn slice_reflector(
    client: Client,
    config: watcher::Config,
) -> (
    reflector::Store<EndpointSlice>,
    Arc<AtomicUsize>,
    tokio::task::JoinHandle<()>,
) {
    let (reader, writer) = reflector::store();
    let errors = Arc::new(AtomicUsize::new(0));
    let errs = errors.clone();
    let api: Api<EndpointSlice> = Api::namespaced(client, "default");
    let stream = reflector(writer, watcher(api, config)).backoff(Quick);
    let task = tokio::spawn(async move {
        stream
            .for_each(|r| {
                if r.is_err() {
                    errs.fetch_add(1, Ordering::SeqCst);
                }
                async {}
            })
            .await;
    });
    (reader, errors, task)
}

fn converged(server: &FakeApiServer, store: &reflector::Store<EndpointSlice>) -> bool {
    versions::<EndpointSlice>(server.list::<EndpointSlice>(Some("default")).iter())
        == versions::<EndpointSlice>(store.state().iter().map(|a| a.as_ref()))
}

// ----- CRUD --------------------------------------------------------------------------

#[tokio::test]
async fn service_crud_with_server_owned_metadata() {
    let server = FakeApiServer::start().await;
    let api: Api<Service> = Api::namespaced(server.client(), "default");

    let created = api
        .create(&PostParams::default(), &service("web", &[("app", "web")]))
        .await
        .unwrap();
    assert!(created.metadata.uid.is_some());
    assert!(created.metadata.creation_timestamp.is_some());
    assert_eq!(created.metadata.generation, Some(1));
    let rv1: u64 = created.resource_version().unwrap().parse().unwrap();
    let spec = created.spec.as_ref().unwrap();
    assert_eq!(spec.type_.as_deref(), Some("ClusterIP"));
    assert!(spec.cluster_ip.as_deref().unwrap().starts_with("10.96."));
    assert_eq!(spec.ip_families.as_deref(), Some(&["IPv4".to_string()][..]));

    let got = api.get("web").await.unwrap();
    assert_eq!(got.metadata.uid, created.metadata.uid);

    // replace bumps the resourceVersion (one global counter) and keeps uid/creationTimestamp
    let mut changed = got.clone();
    changed.labels_mut().insert("tier".into(), "front".into());
    changed.metadata.uid = None;
    let replaced = api
        .replace("web", &PostParams::default(), &changed)
        .await
        .unwrap();
    let rv2: u64 = replaced.resource_version().unwrap().parse().unwrap();
    assert!(rv2 > rv1);
    assert_eq!(replaced.metadata.uid, created.metadata.uid);
    assert_eq!(
        replaced.metadata.generation,
        Some(1),
        "labels do not bump generation"
    );

    // a no-op replace keeps the resourceVersion
    let same = api
        .replace("web", &PostParams::default(), &replaced)
        .await
        .unwrap();
    assert_eq!(same.resource_version(), replaced.resource_version());

    // an update that leaves the ClusterIPs unset keeps them: here a no-op
    let p = json!({"spec": {"clusterIP": null, "clusterIPs": null}});
    let kept = api
        .patch("web", &PatchParams::default(), &Patch::Merge(&p))
        .await
        .unwrap();
    assert_eq!(kept.spec.as_ref().unwrap().cluster_ip, spec.cluster_ip);
    assert_eq!(kept.resource_version(), replaced.resource_version());

    // dual-stack allocation per requested family
    let mut dual = service("dual", &[]);
    let dual_spec = dual.spec.as_mut().unwrap();
    dual_spec.ip_families = Some(vec!["IPv6".into(), "IPv4".into()]);
    dual_spec.ip_family_policy = Some("RequireDualStack".into());
    let dual = api.create(&PostParams::default(), &dual).await.unwrap();
    let ips = dual.spec.unwrap().cluster_ips.unwrap();
    assert!(
        ips[0].contains(':') && ips[1].starts_with("10.96."),
        "{ips:?}"
    );
    api.delete("dual", &DeleteParams::default()).await.unwrap();

    let list = api.list(&ListParams::default()).await.unwrap();
    assert_eq!(list.items.len(), 1);
    assert_eq!(
        list.metadata.resource_version.as_deref(),
        Some(server.resource_version().to_string().as_str())
    );

    let deleted = api.delete("web", &DeleteParams::default()).await.unwrap();
    assert_eq!(deleted.left().unwrap().name_any(), "web");
    let missing = status(api.get("web").await.unwrap_err());
    assert_eq!((missing.code, missing.reason.as_str()), (404, "NotFound"));
    assert_eq!(missing.message, "services \"web\" not found");
    assert!(api.get_opt("web").await.unwrap().is_none());
    let missing = status(
        api.delete("web", &DeleteParams::default())
            .await
            .unwrap_err(),
    );
    assert_eq!(missing.code, 404);
}

#[tokio::test]
async fn dynamic_objects_across_versions_and_scopes() {
    let server = FakeApiServer::start().await;
    let client = server.client();
    let ar_alpha = mcs("ServiceExport", "serviceexports", "v1alpha1");
    let ar_beta = mcs("ServiceExport", "serviceexports", "v1beta1");
    let alpha: Api<DynamicObject> = Api::namespaced_with(client.clone(), "default", &ar_alpha);
    let beta: Api<DynamicObject> = Api::namespaced_with(client.clone(), "default", &ar_beta);

    let obj = DynamicObject::new("web", &ar_alpha)
        .within("default")
        .data(json!({"spec": {}}));
    let created = alpha.create(&PostParams::default(), &obj).await.unwrap();
    assert_eq!(
        created.types.as_ref().unwrap().api_version,
        "multicluster.x-k8s.io/v1alpha1"
    );
    // one storage, served at both versions
    let via_beta = beta.get("web").await.unwrap();
    assert_eq!(
        via_beta.types.as_ref().unwrap().api_version,
        "multicluster.x-k8s.io/v1beta1"
    );
    assert_eq!(via_beta.metadata.uid, created.metadata.uid);

    // all-namespaces list
    server.create_namespace("other");
    let other: Api<DynamicObject> = Api::namespaced_with(client.clone(), "other", &ar_beta);
    other
        .create(
            &PostParams::default(),
            &DynamicObject::new("db", &ar_beta).within("other"),
        )
        .await
        .unwrap();
    let all: Api<DynamicObject> = Api::all_with(client.clone(), &ar_beta);
    let names: Vec<String> = all
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .iter()
        .map(|o| o.name_any())
        .collect();
    assert_eq!(names, ["web", "db"]);

    // cluster-scoped custom resource
    let gvk = GroupVersionKind::gvk("about.k8s.io", "v1alpha1", "ClusterProperty");
    let ar_cp = ApiResource::from_gvk_with_plural(&gvk, "clusterproperties");
    let cps: Api<DynamicObject> = Api::all_with(client.clone(), &ar_cp);
    let cp = DynamicObject::new("cluster.clusterset.k8s.io", &ar_cp)
        .data(json!({"spec": {"value": "east"}}));
    cps.create(&PostParams::default(), &cp).await.unwrap();
    let got = cps.get("cluster.clusterset.k8s.io").await.unwrap();
    assert_eq!(got.data["spec"]["value"], "east");
    assert!(got.metadata.namespace.is_none());

    // a registered extra resource
    server
        .register(ResourceType::namespaced("example.com", "v1", "widgets", "Widget").custom(true));
    let ar_w = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("example.com", "v1", "Widget"),
        "widgets",
    );
    let widgets: Api<DynamicObject> = Api::namespaced_with(client.clone(), "default", &ar_w);
    widgets
        .create(
            &PostParams::default(),
            &DynamicObject::new("w", &ar_w).data(json!({"spec": {"size": 1}})),
        )
        .await
        .unwrap();
    assert_eq!(
        server
            .get_raw("example.com", "widgets", Some("default"), "w")
            .unwrap()["spec"]["size"],
        1
    );

    // an uninstalled version answers 404
    server.unregister("multicluster.x-k8s.io", "v1alpha1", "serviceexports");
    assert_eq!(status(alpha.get("web").await.unwrap_err()).code, 404);
    assert!(beta.get("web").await.is_ok());

    let deleted = beta.delete("web", &DeleteParams::default()).await.unwrap();
    assert!(deleted.is_left());
}

#[tokio::test]
async fn create_conflicts_generate_name_and_missing_namespace() {
    let server = FakeApiServer::start().await;
    let client = server.client();
    let api: Api<Service> = Api::namespaced(client.clone(), "default");
    api.create(&PostParams::default(), &service("web", &[]))
        .await
        .unwrap();
    let dup = status(
        api.create(&PostParams::default(), &service("web", &[]))
            .await
            .unwrap_err(),
    );
    assert_eq!((dup.code, dup.reason.as_str()), (409, "AlreadyExists"));
    assert!(dup.is_already_exists());
    assert_eq!(dup.message, "services \"web\" already exists");

    // generateName
    let mut gen_svc = service("", &[]);
    gen_svc.metadata.name = None;
    gen_svc.metadata.generate_name = Some("web-".into());
    let a = api.create(&PostParams::default(), &gen_svc).await.unwrap();
    let b = api.create(&PostParams::default(), &gen_svc).await.unwrap();
    assert!(a.name_any().starts_with("web-") && a.name_any().len() == 9);
    assert_ne!(a.name_any(), b.name_any());

    // the namespace must exist
    let missing: Api<Service> = Api::namespaced(client.clone(), "nope");
    let err = status(
        missing
            .create(&PostParams::default(), &service("web", &[]))
            .await
            .unwrap_err(),
    );
    assert_eq!((err.code, err.reason.as_str()), (404, "NotFound"));
    assert_eq!(err.message, "namespaces \"nope\" not found");
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let mut ns = Namespace::default();
    ns.metadata.name = Some("nope".into());
    let ns = namespaces
        .create(&PostParams::default(), &ns)
        .await
        .unwrap();
    assert_eq!(ns.status.unwrap().phase.as_deref(), Some("Active"));
    assert_eq!(
        ns.metadata.labels.unwrap()["kubernetes.io/metadata.name"],
        "nope"
    );
    missing
        .create(&PostParams::default(), &service("web", &[]))
        .await
        .unwrap();

    // deleting a namespace deletes what is in it
    namespaces
        .delete("nope", &DeleteParams::default())
        .await
        .unwrap();
    assert!(server.get::<Service>(Some("nope"), "web").is_none());
    assert!(server.get::<Namespace>(None, "nope").is_none());

    // copying a read object into a create keeps its resourceVersion: refused like etcd3 does
    let mut copy = api.get("web").await.unwrap();
    copy.metadata.name = Some("copy".into());
    let err = status(api.create(&PostParams::default(), &copy).await.unwrap_err());
    assert_eq!(err.code, 500);
    assert_eq!(
        err.message,
        "resourceVersion should not be set on objects to be created"
    );

    // dry run writes nothing
    let dry = PostParams {
        dry_run: true,
        ..Default::default()
    };
    api.create(&dry, &service("ghost", &[])).await.unwrap();
    assert!(api.get_opt("ghost").await.unwrap().is_none());
}

#[tokio::test]
async fn stale_writes_conflict() {
    let server = FakeApiServer::start().await;
    let client = server.client();
    let api: Api<Lease> = Api::namespaced(client.clone(), "default");
    let mut lease = Lease::default();
    lease.metadata.name = Some("leader".into());
    let v1 = api.create(&PostParams::default(), &lease).await.unwrap();
    let mut v2 = v1.clone();
    v2.spec.get_or_insert_default().holder_identity = Some("a".into());
    api.replace("leader", &PostParams::default(), &v2)
        .await
        .unwrap();

    // replace from the stale copy
    let mut stale = v1.clone();
    stale.spec.get_or_insert_default().holder_identity = Some("b".into());
    let err = status(
        api.replace("leader", &PostParams::default(), &stale)
            .await
            .unwrap_err(),
    );
    assert_eq!((err.code, err.reason.as_str()), (409, "Conflict"));
    assert!(err.is_conflict());
    assert!(
        err.message.contains("the object has been modified"),
        "{}",
        err.message
    );

    // patch carrying a stale resourceVersion
    let p = json!({"metadata": {"resourceVersion": v1.resource_version()}, "spec": {"holderIdentity": "c"}});
    let err = status(
        api.patch("leader", &PatchParams::default(), &Patch::Merge(&p))
            .await
            .unwrap_err(),
    );
    assert_eq!(err.code, 409);

    // delete precondition
    let dp = DeleteParams {
        preconditions: Some(kube::api::Preconditions {
            resource_version: v1.resource_version(),
            uid: None,
        }),
        ..Default::default()
    };
    assert_eq!(
        status(api.delete("leader", &dp).await.unwrap_err()).code,
        409
    );

    // replace of something missing
    let mut ghost = v1.clone();
    ghost.metadata.name = Some("ghost".into());
    assert_eq!(
        status(
            api.replace("ghost", &PostParams::default(), &ghost)
                .await
                .unwrap_err()
        )
        .code,
        404
    );

    // custom resources refuse unconditional updates
    let ar = mcs("ServiceImport", "serviceimports", "v1beta1");
    let imports: Api<DynamicObject> = Api::namespaced_with(client.clone(), "default", &ar);
    let si = imports
        .create(
            &PostParams::default(),
            &DynamicObject::new("web", &ar).data(json!({"spec": {"type": "ClusterSetIP"}})),
        )
        .await
        .unwrap();
    let mut unconditional = si.clone();
    unconditional.metadata.resource_version = None;
    let err = status(
        imports
            .replace("web", &PostParams::default(), &unconditional)
            .await
            .unwrap_err(),
    );
    assert_eq!((err.code, err.reason.as_str()), (422, "Invalid"));
    let mut changed = si.clone();
    changed.data["spec"]["type"] = json!("Headless");
    imports
        .replace("web", &PostParams::default(), &changed)
        .await
        .unwrap();
    changed.data["spec"]["type"] = json!("ClusterSetIP");
    let err = status(
        imports
            .replace("web", &PostParams::default(), &changed)
            .await
            .unwrap_err(),
    );
    assert_eq!(err.code, 409, "same base twice: the second is stale");
}

#[tokio::test]
async fn patches_and_status_subresource() {
    let server = FakeApiServer::start().await;
    let client = server.client();
    let ar = mcs("ServiceImport", "serviceimports", "v1beta1");
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), "default", &ar);

    // create drops .status
    let obj = DynamicObject::new("web", &ar).data(json!({
        "spec": {"type": "ClusterSetIP", "ports": [{"port": 80, "protocol": "TCP"}]},
        "status": {"clusters": [{"cluster": "east"}]},
    }));
    let created = api.create(&PostParams::default(), &obj).await.unwrap();
    assert!(created.data.get("status").is_none());
    assert_eq!(created.metadata.generation, Some(1));

    // merge patch on the object: spec changes (generation+1), status ignored
    let p = json!({"spec": {"ips": ["240.0.0.1"]}, "status": {"clusters": [{"cluster": "west"}]}, "metadata": {"labels": {"a": "b"}}});
    let patched = api
        .patch("web", &PatchParams::default(), &Patch::Merge(&p))
        .await
        .unwrap();
    assert_eq!(patched.data["spec"]["ips"], json!(["240.0.0.1"]));
    assert_eq!(patched.data["spec"]["type"], "ClusterSetIP");
    assert!(patched.data.get("status").is_none());
    assert_eq!(patched.metadata.generation, Some(2));
    assert_eq!(patched.labels()["a"], "b");

    // status patch: only status changes, generation stays
    let p = json!({"spec": {"type": "Headless"}, "status": {"clusters": [{"cluster": "east"}]}, "metadata": {"labels": {"a": "c"}}});
    let st = api
        .patch_status("web", &PatchParams::default(), &Patch::Merge(&p))
        .await
        .unwrap();
    assert_eq!(st.data["status"]["clusters"][0]["cluster"], "east");
    assert_eq!(st.data["spec"]["type"], "ClusterSetIP");
    assert_eq!(st.labels()["a"], "b");
    assert_eq!(st.metadata.generation, Some(2));
    assert_eq!(
        api.get_status("web").await.unwrap().data["status"],
        st.data["status"]
    );

    // replace_status with the current resourceVersion, then stale
    let mut next = st.clone();
    next.data["status"] = json!({"conditions": [{"type": "Ready", "status": "True"}]});
    let replaced = api
        .replace_status("web", &PostParams::default(), &next)
        .await
        .unwrap();
    assert_eq!(replaced.data["status"]["conditions"][0]["type"], "Ready");
    assert!(replaced.data["status"].get("clusters").is_none());
    let err = status(
        api.replace_status("web", &PostParams::default(), &next)
            .await
            .unwrap_err(),
    );
    assert_eq!(err.code, 409);

    // strategic merge is accepted (as a merge patch)
    api.patch(
        "web",
        &PatchParams::default(),
        &Patch::Strategic(json!({"spec": {"sessionAffinity": "None"}})),
    )
    .await
    .unwrap();

    // JSON patch
    let jp: json_patch::Patch = serde_json::from_value(json!([
        {"op": "test", "path": "/spec/type", "value": "ClusterSetIP"},
        {"op": "add", "path": "/spec/ips/-", "value": "fd00::1"},
    ]))
    .unwrap();
    let j = api
        .patch("web", &PatchParams::default(), &Patch::Json::<()>(jp))
        .await
        .unwrap();
    assert_eq!(j.data["spec"]["ips"], json!(["240.0.0.1", "fd00::1"]));
    let failing: json_patch::Patch =
        serde_json::from_value(json!([{"op": "test", "path": "/spec/type", "value": "Headless"}]))
            .unwrap();
    let err = status(
        api.patch("web", &PatchParams::default(), &Patch::Json::<()>(failing))
            .await
            .unwrap_err(),
    );
    assert_eq!(err.code, 422);

    // server-side apply: needs a field manager, creates when missing, merges otherwise
    let applied = json!({
        "apiVersion": "multicluster.x-k8s.io/v1beta1", "kind": "ServiceImport",
        "metadata": {"name": "db"}, "spec": {"type": "Headless"},
    });
    let err = status(
        api.patch("db", &PatchParams::default(), &Patch::Apply(&applied))
            .await
            .unwrap_err(),
    );
    assert_eq!(err.code, 422);
    let pp = PatchParams::apply("clusterset-dns").force();
    let db = api.patch("db", &pp, &Patch::Apply(&applied)).await.unwrap();
    assert_eq!(db.data["spec"]["type"], "Headless");
    let applied2 = json!({
        "apiVersion": "multicluster.x-k8s.io/v1beta1", "kind": "ServiceImport",
        "metadata": {"name": "db"}, "status": {"clusters": [{"cluster": "east"}]},
    });
    let db2 = api
        .patch_status("db", &pp, &Patch::Apply(&applied2))
        .await
        .unwrap();
    assert_eq!(db2.data["status"]["clusters"][0]["cluster"], "east");
    assert_eq!(db2.data["spec"]["type"], "Headless");

    // status of a missing object
    assert_eq!(
        status(
            api.patch_status("nope", &PatchParams::default(), &Patch::Merge(json!({})))
                .await
                .unwrap_err()
        )
        .code,
        404
    );
}

/// Like Kubernetes' garbage collector: deleting an owner deletes the objects
/// whose `ownerReferences` name its uid, and no others.
#[tokio::test]
async fn deleting_an_owner_deletes_its_dependents() {
    let server = FakeApiServer::start().await;
    let services: Api<Service> = Api::namespaced(server.client(), "default");
    let slices: Api<EndpointSlice> = Api::namespaced(server.client(), "default");
    let owner = services
        .create(&PostParams::default(), &service("web", &[]))
        .await
        .unwrap();
    let mut owned = slice("owned", "10.0.0.1");
    owned.metadata.owner_references = Some(vec![owner.owner_ref(&()).unwrap()]);
    let mut other = slice("other", "10.0.0.2");
    other.metadata.owner_references = Some(vec![
        k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
            uid: "someone-else".into(),
            ..owner.owner_ref(&()).unwrap()
        },
    ]);
    for s in [owned, other, slice("free", "10.0.0.3")] {
        slices.create(&PostParams::default(), &s).await.unwrap();
    }
    services
        .delete("web", &DeleteParams::default())
        .await
        .unwrap();
    let mut left: Vec<String> = slices
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .iter()
        .map(|s| s.name_any())
        .collect();
    left.sort();
    assert_eq!(left, ["free", "other"]);
}

#[tokio::test]
async fn finalizers_delay_deletion() {
    let server = FakeApiServer::start().await;
    let ar = mcs("ServiceExport", "serviceexports", "v1alpha1");
    let api: Api<DynamicObject> = Api::namespaced_with(server.client(), "default", &ar);
    let mut obj = DynamicObject::new("web", &ar);
    obj.metadata.finalizers = Some(vec!["example.com/cleanup".into()]);
    api.create(&PostParams::default(), &obj).await.unwrap();
    let deleting = api
        .delete("web", &DeleteParams::default())
        .await
        .unwrap()
        .left()
        .unwrap();
    assert!(deleting.metadata.deletion_timestamp.is_some());
    assert!(api.get_opt("web").await.unwrap().is_some());
    api.patch(
        "web",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await
    .unwrap();
    assert!(api.get_opt("web").await.unwrap().is_none());
}

#[tokio::test]
async fn selectors_and_pagination() {
    let server = FakeApiServer::start().await;
    let api: Api<Service> = Api::namespaced(server.client(), "default");
    for (name, labels) in [
        ("a", vec![("app", "web"), ("tier", "front")]),
        ("b", vec![("app", "web"), ("tier", "back")]),
        ("c", vec![("app", "db")]),
        ("d", vec![]),
    ] {
        api.create(&PostParams::default(), &service(name, &labels))
            .await
            .unwrap();
    }
    let names = |l: kube::core::ObjectList<Service>| {
        l.items
            .iter()
            .map(|s| s.name_any())
            .collect::<Vec<_>>()
            .join(",")
    };
    for (selector, want) in [
        ("app=web", "a,b"),
        ("app==web,tier=back", "b"),
        ("app!=web", "c,d"),
        ("app in (web, db)", "a,b,c"),
        ("app notin (web)", "c,d"),
        ("tier", "a,b"),
        ("!tier", "c,d"),
        ("app=web,!tier", ""),
    ] {
        let got = api
            .list(&ListParams::default().labels(selector))
            .await
            .unwrap();
        assert_eq!(names(got), want, "selector {selector}");
    }
    let by_name = api
        .list(&ListParams::default().fields("metadata.name=c"))
        .await
        .unwrap();
    assert_eq!(names(by_name), "c");
    let not_ns = api
        .list(&ListParams::default().fields("metadata.namespace!=default"))
        .await
        .unwrap();
    assert_eq!(names(not_ns), "");
    let bad = status(
        api.list(&ListParams::default().fields("spec.bogus=1"))
            .await
            .unwrap_err(),
    );
    assert_eq!(bad.code, 400);
    let bad = status(
        api.list(&ListParams::default().labels("app in web"))
            .await
            .unwrap_err(),
    );
    assert_eq!(bad.code, 400);

    // limit/continue over a consistent snapshot
    let first = api.list(&ListParams::default().limit(3)).await.unwrap();
    assert_eq!(names(first.clone()), "a,b,c");
    assert_eq!(first.metadata.remaining_item_count, Some(1));
    let token = first.metadata.continue_.clone().unwrap();
    api.delete("d", &DeleteParams::default()).await.unwrap();
    api.create(&PostParams::default(), &service("e", &[]))
        .await
        .unwrap();
    let rest = api
        .list(&ListParams::default().limit(3).continue_token(&token))
        .await
        .unwrap();
    assert_eq!(
        names(rest.clone()),
        "d",
        "the snapshot still has d and not e"
    );
    assert!(rest.metadata.continue_.is_none());
    assert_eq!(
        rest.metadata.resource_version,
        first.metadata.resource_version
    );
    // exact list at an old version, then compaction expires both
    let exact = api
        .list(
            &ListParams::default()
                .at(first.metadata.resource_version.as_deref().unwrap())
                .matching(kube::api::VersionMatch::Exact),
        )
        .await
        .unwrap();
    assert_eq!(names(exact), "a,b,c,d");
    server.compact();
    let gone = status(
        api.list(&ListParams::default().limit(3).continue_token(&token))
            .await
            .unwrap_err(),
    );
    assert_eq!((gone.code, gone.reason.as_str()), (410, "Expired"));
    let gone = status(
        api.list(
            &ListParams::default()
                .at(first.metadata.resource_version.as_deref().unwrap())
                .matching(kube::api::VersionMatch::Exact),
        )
        .await
        .unwrap_err(),
    );
    assert_eq!(gone.code, 410);
    assert_eq!(
        names(api.list(&ListParams::default()).await.unwrap()),
        "a,b,c,e"
    );

    // delete_collection with a selector
    let dp = DeleteParams::default();
    api.delete_collection(&dp, &ListParams::default().labels("app=web"))
        .await
        .unwrap();
    assert_eq!(
        names(api.list(&ListParams::default()).await.unwrap()),
        "c,e"
    );
}

/// Pages of one list show the collection as it was at the first page's
/// resourceVersion (Kubernetes API concepts, "Retrieving large results sets
/// in chunks": the continue token keeps the list consistent), while a writer
/// deletes, relabels and adds objects between and during the pages.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paging_under_concurrent_writes() {
    const N: usize = 300;
    let server = FakeApiServer::start().await;
    let api: Api<Service> = Api::namespaced(server.client(), "default");
    for i in 0..N {
        let mut s = service(&format!("s{i:03}"), &[("v", "old")]);
        s.metadata.namespace = Some("default".into());
        server.put(&s).unwrap();
    }
    let first = api.list(&ListParams::default().limit(40)).await.unwrap();
    let at: u64 = first
        .metadata
        .resource_version
        .clone()
        .unwrap()
        .parse()
        .unwrap();
    let writer = {
        let api = api.clone();
        tokio::spawn(async move {
            for i in (0..N).step_by(3) {
                api.delete(&format!("s{i:03}"), &DeleteParams::default())
                    .await
                    .unwrap();
                let relabel = json!({"metadata": {"labels": {"v": "new"}}});
                let name = format!("s{:03}", i + 1);
                api.patch(&name, &PatchParams::default(), &Patch::Merge(&relabel))
                    .await
                    .unwrap();
                let added = service(&format!("s{i:03}x"), &[("v", "new")]);
                api.create(&PostParams::default(), &added).await.unwrap();
            }
        })
    };
    // some writes land before the second page, more during the others
    eventually(5, "writes", || server.resource_version() > at + 30).await;
    let mut seen = first.items.clone();
    let mut token = first.metadata.continue_.clone();
    assert_eq!(first.metadata.remaining_item_count, Some((N - 40) as i64));
    while let Some(t) = token {
        let page = api
            .list(&ListParams::default().limit(40).continue_token(&t))
            .await
            .unwrap();
        assert_eq!(
            page.metadata.resource_version.as_deref(),
            Some(&*at.to_string())
        );
        seen.extend(page.items.iter().cloned());
        if let Some(left) = page.metadata.remaining_item_count {
            assert_eq!(left as usize, N - seen.len(), "remainingItemCount");
        }
        token = page.metadata.continue_.clone();
    }
    writer.await.unwrap();
    let names: Vec<String> = seen.iter().map(|s| s.name_any()).collect();
    let want: Vec<String> = (0..N).map(|i| format!("s{i:03}")).collect();
    assert_eq!(
        names, want,
        "exactly the objects at the first page's version, in order"
    );
    for s in &seen {
        assert_eq!(s.labels()["v"], "old", "{} as it was", s.name_any());
        let rv: u64 = s.resource_version().unwrap().parse().unwrap();
        assert!(rv <= at, "{} at {rv} > {at}", s.name_any());
    }
    let now = api.list(&ListParams::default()).await.unwrap();
    assert_eq!(now.items.len(), N, "as many deleted as added");
    assert!(now.items.iter().any(|s| s.name_any() == "s000x"));
}

/// Every request is counted for the client whose bearer token it carries
/// ("-" without), with its body and the response body, watch events included.
#[tokio::test]
async fn traffic_per_client() {
    let server = FakeApiServer::start().await;
    let dir = tempfile::tempdir().unwrap();
    let mut clients = Vec::new();
    for token in ["east", "west"] {
        let path = dir.path().join(token);
        server
            .write_kubeconfig_with_token(&path, token, token)
            .unwrap();
        let kubeconfig = kube::config::Kubeconfig::read_from(&path).unwrap();
        let options = kube::config::KubeConfigOptions::default();
        let config = kube::Config::from_custom_kubeconfig(kubeconfig, &options)
            .await
            .unwrap();
        clients.push(Client::try_from(config).unwrap());
    }
    let east: Api<Service> = Api::namespaced(clients[0].clone(), "default");
    let created = east
        .create(&PostParams::default(), &service("web", &[]))
        .await
        .unwrap();
    let request = hyper::Request::get("/api/v1/namespaces/default/services")
        .body(Vec::new())
        .unwrap();
    let listed = clients[1].request_text(request).await.unwrap();
    let traffic = server.traffic();
    let (e, w) = (&traffic["east"], &traffic["west"]);
    assert_eq!((e.count(Verb::Create), e.total(), e.writes()), (1, 1, 1));
    assert_eq!(
        e.writes_by_resource,
        BTreeMap::from([("services".into(), 1)])
    );
    assert_eq!(
        (e.writes_except(&["services"]), e.writes_except(&[])),
        (0, 1)
    );
    assert_eq!(
        e.request_bytes,
        serde_json::to_vec(&service("web", &[])).unwrap().len() as u64
    );
    assert!(e.response_bytes > 100, "the created object came back");
    assert_eq!(
        (w.count(Verb::List), w.writes(), w.request_bytes),
        (1, 0, 0)
    );
    assert_eq!(w.response_bytes, listed.len() as u64);
    assert!(
        e.watch_events.is_empty() && w.watch_events.is_empty(),
        "no watch yet"
    );
    assert!(!traffic.contains_key(fake_apiserver::ANONYMOUS));

    // a watch's events are counted as they are streamed
    let before = server.traffic();
    let rv = created.resource_version().unwrap();
    let mut events = east
        .watch(&WatchParams::default(), &rv)
        .await
        .unwrap()
        .boxed();
    // anonymous: counted under "-"
    Api::<Service>::namespaced(server.client(), "default")
        .delete("web", &DeleteParams::default())
        .await
        .unwrap();
    let deleted = tokio::time::timeout(Duration::from_secs(5), events.next()).await;
    assert!(matches!(deleted, Ok(Some(Ok(WatchEvent::Deleted(_))))));
    let delta = fake_apiserver::traffic_since(&server.traffic(), &before);
    assert_eq!(delta["east"].count(Verb::Watch), 1);
    assert!(delta["east"].response_bytes > 100, "the DELETED event");
    assert_eq!(
        delta["east"].watch_events,
        BTreeMap::from([("services".into(), 1)]),
        "one event, the DELETED"
    );
    assert_eq!(delta["east"].watch_events_except(&["services"]), 0);
    assert!(delta[fake_apiserver::ANONYMOUS].watch_events.is_empty());
    assert_eq!(delta[fake_apiserver::ANONYMOUS].count(Verb::Delete), 1);
    server.reset_traffic();
    assert!(server.traffic().values().all(|t| t.response_bytes < 100));
}

/// `stored` counts objects and their compact JSON bytes per resource.
#[tokio::test]
async fn stored_objects_and_bytes() {
    let server = FakeApiServer::start().await;
    server.create_namespace("shop");
    for name in ["a", "b"] {
        let mut s = service(name, &[]);
        s.metadata.namespace = Some("shop".into());
        server.put(&s).unwrap();
    }
    server.put(&slice("web-1", "10.0.0.1")).unwrap();
    let bytes = |plural: &str, ns: &str| -> u64 {
        server
            .list_raw("", plural, Some(ns))
            .iter()
            .map(|o| serde_json::to_vec(o).unwrap().len() as u64)
            .sum()
    };
    let shop = server.stored(Some("shop"));
    assert_eq!(shop.len(), 1, "{shop:?}");
    assert_eq!((shop[0].plural.as_str(), shop[0].objects), ("services", 2));
    assert_eq!(shop[0].json_bytes, bytes("services", "shop"));
    let all = server.stored(None);
    let plural = |p: &str| all.iter().find(|s| s.plural == p).map(|s| s.objects);
    assert_eq!(plural("endpointslices"), Some(1));
    assert_eq!(plural("namespaces"), Some(5));
    assert_eq!(plural("services"), Some(2));
}

// ----- watch ---------------------------------------------------------------------------

#[tokio::test]
async fn raw_watch_protocol() {
    let server = FakeApiServer::start().await;
    let api: Api<Service> = Api::namespaced(server.client(), "default");
    api.create(&PostParams::default(), &service("a", &[("app", "web")]))
        .await
        .unwrap();
    let start = server.resource_version().to_string();

    let wp = WatchParams::default().labels("app=web");
    let mut events = api.watch(&wp, &start).await.unwrap().boxed();
    api.create(&PostParams::default(), &service("b", &[("app", "web")]))
        .await
        .unwrap();
    api.create(&PostParams::default(), &service("c", &[("app", "db")]))
        .await
        .unwrap();
    api.patch(
        "c",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {"app": "web"}}})),
    )
    .await
    .unwrap();
    api.patch(
        "a",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {"app": "db"}}})),
    )
    .await
    .unwrap();
    api.delete("b", &DeleteParams::default()).await.unwrap();
    server.send_bookmarks();
    let mut seen = Vec::new();
    let mut last_rv = 0u64;
    while seen.len() < 5 {
        let ev = tokio::time::timeout(Duration::from_secs(5), events.try_next())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        let (tag, rv) = match &ev {
            WatchEvent::Added(s) => (
                format!("ADDED {}", s.name_any()),
                s.resource_version().unwrap(),
            ),
            WatchEvent::Modified(s) => (
                format!("MODIFIED {}", s.name_any()),
                s.resource_version().unwrap(),
            ),
            WatchEvent::Deleted(s) => (
                format!("DELETED {}", s.name_any()),
                s.resource_version().unwrap(),
            ),
            WatchEvent::Bookmark(b) => {
                ("BOOKMARK".to_string(), b.metadata.resource_version.clone())
            }
            WatchEvent::Error(e) => panic!("{e:?}"),
        };
        let rv: u64 = rv.parse().unwrap();
        assert!(rv >= last_rv, "resourceVersions go up");
        last_rv = rv;
        seen.push(tag);
    }
    // c enters the selector (ADDED), a leaves it (DELETED)
    assert_eq!(
        seen,
        ["ADDED b", "ADDED c", "DELETED a", "DELETED b", "BOOKMARK"]
    );
    assert_eq!(last_rv, server.resource_version());

    // resuming from a compacted version: HTTP 200 and an ERROR event with 410
    server.compact();
    let mut expired = api
        .watch(&WatchParams::default(), &start)
        .await
        .unwrap()
        .boxed();
    match expired.try_next().await.unwrap().unwrap() {
        WatchEvent::Error(e) => {
            assert_eq!((e.code, e.reason.as_str()), (410, "Expired"));
            assert!(
                e.message.starts_with("too old resource version"),
                "{}",
                e.message
            );
        }
        other => panic!("expected a 410 ERROR event, got {other:?}"),
    }
    assert!(expired.try_next().await.unwrap().is_none());

    // periodic bookmarks, only when asked for
    server.set_bookmark_interval(Some(Duration::from_millis(50)));
    let now = server.resource_version().to_string();
    let mut with = api
        .watch(&WatchParams::default(), &now)
        .await
        .unwrap()
        .boxed();
    let ev = tokio::time::timeout(Duration::from_secs(2), with.try_next())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert!(matches!(ev, WatchEvent::Bookmark(b) if b.metadata.resource_version == now));
    let mut without = api
        .watch(&WatchParams::default().disable_bookmarks(), &now)
        .await
        .unwrap()
        .boxed();
    assert!(
        tokio::time::timeout(Duration::from_millis(200), without.try_next())
            .await
            .is_err()
    );

    // timeoutSeconds ends the stream
    let mut short = api
        .watch(
            &WatchParams::default().timeout(1),
            &server.resource_version().to_string(),
        )
        .await
        .unwrap()
        .boxed();
    let t0 = tokio::time::Instant::now();
    while short.try_next().await.unwrap().is_some() {}
    assert!(t0.elapsed() >= Duration::from_millis(900));
}

#[tokio::test]
async fn watcher_sees_events_in_order() {
    let server = FakeApiServer::start().await;
    let api: Api<Service> = Api::namespaced(server.client(), "default");
    api.create(&PostParams::default(), &service("pre", &[]))
        .await
        .unwrap();
    let mut stream = watcher(api.clone(), watcher::Config::default()).boxed();
    let mut next = async || {
        tokio::time::timeout(Duration::from_secs(5), stream.try_next())
            .await
            .unwrap()
            .unwrap()
            .unwrap()
    };
    assert!(matches!(next().await, watcher::Event::Init));
    assert!(matches!(next().await, watcher::Event::InitApply(s) if s.name_any() == "pre"));
    assert!(matches!(next().await, watcher::Event::InitDone));

    api.create(&PostParams::default(), &service("web", &[]))
        .await
        .unwrap();
    api.patch(
        "web",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {"x": "1"}}})),
    )
    .await
    .unwrap();
    api.delete("web", &DeleteParams::default()).await.unwrap();
    match next().await {
        watcher::Event::Apply(s) => assert!(s.labels().is_empty() && s.name_any() == "web"),
        other => panic!("{other:?}"),
    }
    match next().await {
        watcher::Event::Apply(s) => assert_eq!(s.labels()["x"], "1"),
        other => panic!("{other:?}"),
    }
    assert!(matches!(next().await, watcher::Event::Delete(s) if s.name_any() == "web"));
    assert_eq!(server.request_count(Verb::List), 1);
    assert_eq!(server.request_count(Verb::Watch), 1);
    let watch = server
        .requests()
        .into_iter()
        .find(|r| r.verb == Verb::Watch)
        .unwrap();
    assert!(
        watch.query.contains("allowWatchBookmarks=true"),
        "{}",
        watch.query
    );
}

#[tokio::test]
async fn streaming_list_watcher_and_metadata_watcher() {
    let server = FakeApiServer::start().await;
    let api: Api<Service> = Api::namespaced(server.client(), "default");
    api.create(&PostParams::default(), &service("a", &[]))
        .await
        .unwrap();
    api.create(&PostParams::default(), &service("b", &[]))
        .await
        .unwrap();
    let mut stream = watcher(api.clone(), watcher::Config::default().streaming_lists()).boxed();
    let mut kinds = Vec::new();
    loop {
        let ev = tokio::time::timeout(Duration::from_secs(5), stream.try_next())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        match ev {
            watcher::Event::Init => kinds.push("init".to_string()),
            watcher::Event::InitApply(s) => kinds.push(s.name_any()),
            watcher::Event::InitDone => break,
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(kinds, ["init", "a", "b"]);
    assert_eq!(
        server.request_count(Verb::List),
        0,
        "streaming lists do not list"
    );

    let meta_api: Api<PartialObjectMeta<Service>> = Api::namespaced(server.client(), "default");
    let mut meta = watcher(meta_api, watcher::Config::default())
        .applied_objects()
        .boxed();
    let first = tokio::time::timeout(Duration::from_secs(5), meta.try_next())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(first.name_any(), "a");
    assert!(first.metadata.uid.is_some());
    let m = api.get_metadata("b").await.unwrap();
    assert_eq!(m.types.unwrap().kind, "PartialObjectMetadata");
}

#[tokio::test]
async fn reflector_converges_through_cut_watches() {
    let server = FakeApiServer::start().await;
    let client = server.client();
    let api: Api<EndpointSlice> = Api::namespaced(client.clone(), "default");
    for i in 0..5 {
        api.create(&PostParams::default(), &slice(&format!("s{i}"), "10.0.0.1"))
            .await
            .unwrap();
    }
    let (store, _errors, task) = slice_reflector(client.clone(), watcher::Config::default());
    store.wait_until_ready().await.unwrap();
    for round in 0..20 {
        let name = format!("s{}", round % 7);
        let ip = format!("10.0.1.{round}");
        match api.get_opt(&name).await.unwrap() {
            Some(mut s) if round % 3 == 0 => {
                s.endpoints.as_mut().unwrap()[0].addresses = vec![ip];
                api.replace(&name, &PostParams::default(), &s)
                    .await
                    .unwrap();
            }
            Some(_) => {
                api.delete(&name, &DeleteParams::default()).await.unwrap();
            }
            None => {
                api.create(&PostParams::default(), &slice(&name, &ip))
                    .await
                    .unwrap();
            }
        }
        if round % 4 == 1 {
            server.cut_watches();
        }
    }
    eventually(10, "reflector convergence", || converged(&server, &store)).await;
    assert!(
        server.request_count(Verb::Watch) >= 5,
        "watches were re-opened"
    );
    assert_eq!(
        server.request_count(Verb::List),
        1,
        "resumed, never relisted"
    );
    task.abort();
}

#[tokio::test]
async fn compaction_forces_410_and_relist() {
    let server = FakeApiServer::start().await;
    let client = server.client();
    let api: Api<EndpointSlice> = Api::namespaced(client.clone(), "default");
    api.create(&PostParams::default(), &slice("a", "10.0.0.1"))
        .await
        .unwrap();
    let (store, errors, task) = slice_reflector(client.clone(), watcher::Config::default());
    store.wait_until_ready().await.unwrap();
    assert!(server.wait_for_watches(1, Duration::from_secs(5)).await);

    // The watch stalls, changes happen, history is compacted and the watch is cut:
    // the watcher resumes from its last version, gets 410 Gone, relists and converges.
    server.pause();
    server.put(&slice("b", "10.0.0.2")).unwrap();
    server.remove::<EndpointSlice>(Some("default"), "a");
    server.compact();
    server.cut_watches();
    server.resume();
    eventually(10, "relist after 410", || {
        converged(&server, &store) && store.state().len() == 1
    })
    .await;
    assert!(
        errors.load(Ordering::SeqCst) >= 1,
        "the 410 surfaced as a watcher error"
    );
    assert_eq!(server.request_count(Verb::List), 2, "exactly one relist");
    task.abort();
}

// ----- faults ---------------------------------------------------------------------------

#[tokio::test]
async fn injected_failures() {
    let server = FakeApiServer::start().await;
    let api: Api<Service> = Api::namespaced(server.client(), "default");
    api.create(&PostParams::default(), &service("web", &[]))
        .await
        .unwrap();

    server.fail_requests(1, 500);
    let err = status(api.get("web").await.unwrap_err());
    assert_eq!((err.code, err.reason.as_str()), (500, "InternalError"));
    api.get("web").await.unwrap();

    // kube-rs retries 503 (and 429/504) by itself
    server.reset_requests();
    server.fail_requests(2, 503);
    api.get("web").await.unwrap();
    assert_eq!(server.request_count(Verb::Get), 3);
    assert_eq!(
        server
            .requests()
            .iter()
            .filter(|r| r.injected_failure == Some(503))
            .count(),
        2
    );

    // only creates fail
    server.fail_requests_matching(1, 500, |r| {
        r.verb == Verb::Create && r.resource == "services"
    });
    api.get("web").await.unwrap();
    assert_eq!(server.pending_failures(), 1);
    assert_eq!(
        status(
            api.create(&PostParams::default(), &service("x", &[]))
                .await
                .unwrap_err()
        )
        .code,
        500
    );
    api.create(&PostParams::default(), &service("x", &[]))
        .await
        .unwrap();
    assert_eq!(server.request_count_for(Verb::Create, "services"), 2);

    // a watcher survives failing lists and watches
    server.fail_requests_matching(3, 500, |r| matches!(r.verb, Verb::List | Verb::Watch));
    let (reader, writer) = reflector::store::<Service>();
    let errors = Arc::new(AtomicUsize::new(0));
    let errs = errors.clone();
    let task = tokio::spawn(
        reflector(writer, watcher(api.clone(), watcher::Config::default()))
            .backoff(Quick)
            .for_each(move |r| {
                if r.is_err() {
                    errs.fetch_add(1, Ordering::SeqCst);
                }
                async {}
            }),
    );
    eventually(5, "reflector after failures", || reader.state().len() == 2).await;
    assert_eq!(errors.load(Ordering::SeqCst), 3);
    task.abort();
}

#[tokio::test]
async fn pause_and_resume() {
    let server = FakeApiServer::start().await;
    let api: Api<Service> = Api::namespaced(server.client(), "default");
    server.pause();
    let pending = tokio::spawn({
        let api = api.clone();
        async move {
            api.create(&PostParams::default(), &service("web", &[]))
                .await
        }
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!pending.is_finished());
    assert_eq!(
        server.request_count(Verb::Create),
        1,
        "logged while hanging"
    );
    assert!(server.get::<Service>(Some("default"), "web").is_none());
    server.resume();
    let created = tokio::time::timeout(Duration::from_secs(5), pending)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(created.name_any(), "web");
}

#[tokio::test]
async fn restart_keeps_or_loses_data() {
    let server = FakeApiServer::start().await;
    let client = server.client();
    let api: Api<EndpointSlice> = Api::namespaced(client.clone(), "default");
    api.create(&PostParams::default(), &slice("a", "10.0.0.1"))
        .await
        .unwrap();
    let (store, _errors, task) = slice_reflector(client.clone(), watcher::Config::default());
    store.wait_until_ready().await.unwrap();

    server.stop().await;
    assert!(!server.is_running());
    assert!(
        api.get("a").await.is_err(),
        "connection refused while stopped"
    );
    server.put(&slice("b", "10.0.0.2")).unwrap();
    server.restart(RestartMode::KeepAll).await;
    assert_eq!(api.get("a").await.unwrap().name_any(), "a");
    eventually(10, "reflector after restart", || {
        converged(&server, &store) && store.state().len() == 2
    })
    .await;
    assert_eq!(
        server.request_count(Verb::List),
        1,
        "history kept: resumed without relisting"
    );

    // a real restart: objects survive, the watch cache does not -> 410 -> relist
    server.stop().await;
    server.put(&slice("c", "10.0.0.3")).unwrap();
    server.restart(RestartMode::KeepObjects).await;
    eventually(10, "reflector after KeepObjects restart", || {
        converged(&server, &store) && store.state().len() == 3
    })
    .await;
    assert_eq!(server.request_count(Verb::List), 2);

    // the cluster is rebuilt: everything gone
    server.restart(RestartMode::Wipe).await;
    assert!(api.get_opt("a").await.unwrap().is_none());
    let namespaces: Api<Namespace> = Api::all(client.clone());
    assert!(namespaces.get_opt("default").await.unwrap().is_some());
    eventually(10, "reflector after wipe", || store.state().is_empty()).await;
    task.abort();
}

// ----- client plumbing -------------------------------------------------------------------

#[tokio::test]
async fn kubeconfig_and_discovery() {
    let server = FakeApiServer::start().await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("kubeconfig");
    server.write_kubeconfig(&path, "member-1").unwrap();
    let kubeconfig = kube::config::Kubeconfig::read_from(&path).unwrap();
    let config = kube::Config::from_custom_kubeconfig(
        kubeconfig,
        &kube::config::KubeConfigOptions::default(),
    )
    .await
    .unwrap();
    assert_eq!(config.cluster_url.to_string(), format!("{}/", server.url()));
    let client = Client::try_from(config).unwrap();
    let version = client.apiserver_version().await.unwrap();
    assert_eq!(version.major, "1");

    let discovery = kube::Discovery::new(client.clone()).run().await.unwrap();
    let group = discovery.get("multicluster.x-k8s.io").unwrap();
    assert_eq!(group.preferred_version_or_latest(), "v1beta1");
    let (ar, caps) = group.recommended_kind("ServiceExport").unwrap();
    assert_eq!(
        (ar.version.as_str(), ar.plural.as_str()),
        ("v1beta1", "serviceexports")
    );
    assert!(caps.supports_operation(kube::discovery::verbs::WATCH));
    assert!(discovery.has_group("coordination.k8s.io"));
    let aggregated = kube::Discovery::new(client.clone())
        .run_aggregated()
        .await
        .unwrap();
    assert!(aggregated.get("about.k8s.io").is_some());
    assert!(
        aggregated
            .get("")
            .unwrap()
            .recommended_kind("Service")
            .is_some()
    );
    let gvk = GroupVersionKind::gvk("multicluster.x-k8s.io", "v1alpha1", "ServiceImport");
    let (ar, caps) = kube::discovery::pinned_kind(&client, &gvk).await.unwrap();
    assert_eq!(ar.plural, "serviceimports");
    assert_eq!(caps.scope, kube::discovery::Scope::Namespaced);
    assert!(
        caps.subresources
            .iter()
            .any(|(sub, _)| sub.plural == "status")
    );

    server.unregister("multicluster.x-k8s.io", "v1alpha1", "serviceimports");
    assert!(kube::discovery::pinned_kind(&client, &gvk).await.is_err());
    assert!(server.request_count(Verb::Discovery) > 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_writers_and_watchers_agree() {
    let server = FakeApiServer::start().await;
    let client = server.client();
    let ar = mcs("ServiceImport", "serviceimports", "v1beta1");
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), "default", &ar);
    api.create(
        &PostParams::default(),
        &DynamicObject::new("web", &ar).data(json!({"spec": {"ips": []}})),
    )
    .await
    .unwrap();
    let start = server.resource_version().to_string();

    // raw watchers record every event
    let mut watchers = Vec::new();
    for _ in 0..3 {
        let stream = api.watch(&WatchParams::default(), &start).await.unwrap();
        watchers.push(tokio::spawn(async move {
            let mut stream = stream.boxed();
            let mut seen = Vec::new();
            while let Ok(Some(Ok(ev))) =
                tokio::time::timeout(Duration::from_secs(2), stream.next()).await
            {
                if let WatchEvent::Modified(o) = ev {
                    seen.push(o.resource_version().unwrap().parse::<u64>().unwrap());
                }
            }
            seen
        }));
    }
    assert!(server.wait_for_watches(3, Duration::from_secs(5)).await);

    // 6 writers append their IPs with read-modify-write and Conflict retries
    let conflicts = Arc::new(AtomicUsize::new(0));
    let mut writers = Vec::new();
    for w in 0..6 {
        let api = api.clone();
        let conflicts = conflicts.clone();
        writers.push(tokio::spawn(async move {
            for i in 0..5 {
                loop {
                    let mut cur = api.get("web").await.unwrap();
                    cur.data["spec"]["ips"]
                        .as_array_mut()
                        .unwrap()
                        .push(json!(format!("10.{w}.0.{i}")));
                    match api.replace("web", &PostParams::default(), &cur).await {
                        Ok(_) => break,
                        Err(kube::Error::Api(s)) if s.code == 409 => {
                            conflicts.fetch_add(1, Ordering::SeqCst);
                        }
                        Err(e) => panic!("{e}"),
                    }
                }
            }
        }));
    }
    for w in writers {
        w.await.unwrap();
    }
    let fin = api.get("web").await.unwrap();
    assert_eq!(
        fin.data["spec"]["ips"].as_array().unwrap().len(),
        30,
        "no lost update"
    );
    for w in watchers {
        let seen = w.await.unwrap();
        assert_eq!(seen.len(), 30, "every watcher saw every write");
        assert!(seen.windows(2).all(|p| p[0] < p[1]), "in order");
        assert_eq!(
            seen.last().copied(),
            fin.resource_version().and_then(|r| r.parse().ok())
        );
    }
    assert_eq!(
        server.request_count(Verb::Update),
        30 + conflicts.load(Ordering::SeqCst)
    );
}
