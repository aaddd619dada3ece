//! Leader election under clock skew and API outages, against the fake API
//! server with the real kube client. As client-go's leaderelection: a Lease
//! expires a full duration after *this replica* saw it change (its own
//! monotonic clock), whatever its `renewTime` says; a leader that cannot
//! renew stops leading within the renew deadline (two thirds of the
//! duration), before any other replica may take over. And between two
//! replicas of a member in a running clusterset: one leads and writes, and
//! hands over when it shuts down.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use clusterset_dns::ops::metrics::Metrics;
use clusterset_dns::writeback::lease::{Candidate, LEASE_NAME};
use fake_apiserver::FakeApiServer;
use hickory_proto::rr::RecordType;
use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use test_support::kube_clusterset::*;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::common::*;

const NAMESPACE: &str = "clusterset-dns";
const WEB: &str = "web.shop.svc.clusterset.local.";
/// `--lease-duration` of the candidates (the smallest allowed).
const DURATION: Duration = Duration::from_secs(3);
/// Longest wait for a change of leadership: generous, as the machines are
/// noisy; how long it took is printed, and only lower bounds (not before a
/// duration) are asserted, which a slow machine cannot break.
const BOUND: Duration = Duration::from_secs(30);

/// A replica campaigning for the Lease until dropped.
struct Campaign {
    leading: watch::Receiver<bool>,
    stop: CancellationToken,
}

impl Drop for Campaign {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

impl Campaign {
    fn start(api: &FakeApiServer, identity: &str) -> Self {
        let candidate = Candidate::new(api.client(), NAMESPACE, identity.into(), DURATION);
        let (tx, leading) = watch::channel(false);
        let stop = CancellationToken::new();
        let token = stop.clone();
        tokio::spawn(async move { candidate.run(tx, token, &Metrics::new()).await });
        Self { leading, stop }
    }

    fn leads(&self) -> bool {
        *self.leading.borrow()
    }

    /// Waits (at most [`BOUND`]) until leadership is `wanted`; how long that took.
    async fn until(&mut self, wanted: bool) -> Duration {
        let start = Instant::now();
        tokio::time::timeout(BOUND, self.leading.wait_for(|l| *l == wanted))
            .await
            .unwrap_or_else(|_| panic!("leading is not {wanted} after {BOUND:?}"))
            .unwrap();
        start.elapsed()
    }

    /// Asserts leadership stays `expected` for `time`.
    async fn stays(&mut self, expected: bool, time: Duration) {
        let changed = tokio::time::timeout(time, self.leading.wait_for(|l| *l != expected)).await;
        assert!(changed.is_err(), "leading became {}", !expected);
    }
}

/// Writes the Lease as a holder `ghost` whose clock is `skew` off.
fn ghost_renews(api: &FakeApiServer, skew: SignedDuration) {
    let renewed = Timestamp::now().checked_add(skew).unwrap();
    let lease = Lease {
        metadata: ObjectMeta {
            name: Some(LEASE_NAME.into()),
            namespace: Some(NAMESPACE.into()),
            ..ObjectMeta::default()
        },
        spec: Some(LeaseSpec {
            holder_identity: Some("ghost".into()),
            lease_duration_seconds: Some(3),
            renew_time: Some(MicroTime(renewed)),
            ..LeaseSpec::default()
        }),
    };
    api.put(&lease).expect("the Lease is written");
}

async fn api() -> FakeApiServer {
    let api = FakeApiServer::start().await;
    api.create_namespace(NAMESPACE);
    api
}

/// A holder whose clock runs an hour ahead stops renewing: its `renewTime`
/// is still in the future, yet the Lease is taken over one duration after
/// the candidate last saw it change, not an hour later.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_renewed_in_the_future_expires_on_the_local_clock() {
    let api = api().await;
    ghost_renews(&api, SignedDuration::from_hours(1));
    let mut candidate = Campaign::start(&api, "east-0");
    let started = Instant::now();
    candidate.stays(false, DURATION * 2 / 3).await;
    candidate.until(true).await;
    let took = started.elapsed();
    println!("a stale Lease renewed 1 h in the future was taken over after {took:.1?}");
    assert!(took >= DURATION, "not before a full duration: {took:?}");
    let lease: Lease = api.get(Some(NAMESPACE), LEASE_NAME).unwrap();
    assert_eq!(
        lease.spec.unwrap().holder_identity.as_deref(),
        Some("east-0")
    );
}

/// A holder whose clock runs an hour behind keeps renewing: every
/// `renewTime` it writes is an hour old, yet the Lease stays its own; once it
/// stops, the candidate takes over one duration later.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_renewed_in_the_past_is_not_taken_while_renewed() {
    let api = api().await;
    ghost_renews(&api, SignedDuration::from_hours(-1));
    let mut candidate = Campaign::start(&api, "east-0");
    for _ in 0..8 {
        candidate.stays(false, Duration::from_millis(500)).await;
        ghost_renews(&api, SignedDuration::from_hours(-1));
    }
    assert!(!candidate.leads());
    let took = candidate.until(true).await;
    println!("a Lease renewed 1 h in the past was taken over {took:.1?} after its last renewal");
    assert!(
        took >= DURATION * 2 / 3,
        "not long before a full duration: {took:?}"
    );
}

/// The API server stops answering (requests hang) or fails every Lease
/// request: the leader stops leading, and leads again once it can renew.
/// When it stops is asserted exactly under a paused clock below.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_that_cannot_renew_stops_leading_and_leads_again() {
    let api = api().await;
    let mut leader = Campaign::start(&api, "east-0");
    leader.until(true).await;
    tokio::time::sleep(DURATION).await;

    api.pause();
    let took = leader.until(false).await;
    println!("API server hanging: the leader stopped leading after {took:.1?}");
    api.resume();
    leader.until(true).await;

    api.fail_requests_matching(usize::MAX, 500, |r| r.resource == "leases");
    let took = leader.until(false).await;
    println!("Lease requests failing: the leader stopped leading after {took:.1?}");
    api.clear_failures();
    leader.until(true).await;
}

/// client-go's leaderelection guarantee, exactly: a leader that cannot renew
/// (its requests hang, or fail) stops leading at its last renewal plus the
/// renew deadline (two thirds of the duration), not a moment earlier or
/// later, so before any other replica may take the Lease over (a full
/// duration after it last changed). The clock is paused and the Lease is
/// served from memory, so only the candidate's own timers move time.
#[tokio::test(start_paused = true)]
async fn a_leader_that_cannot_renew_stops_at_the_renew_deadline() {
    for outage in [Outage::Hang, Outage::Fail] {
        let api = MemoryLease::default();
        let candidate = Candidate::new(api.client(), NAMESPACE, "east-0".into(), DURATION);
        let deadline = candidate.renew_deadline();
        assert!(deadline < DURATION, "before anyone may take over");
        let (tx, mut leading) = watch::channel(false);
        let stop = CancellationToken::new();
        let token = stop.clone();
        let campaign = tokio::spawn(async move { candidate.run(tx, token, &Metrics::new()).await });
        leading.wait_for(|l| *l).await.unwrap();
        // Off the renewals' beat, so no round is under way at the outage.
        tokio::time::sleep(DURATION + Duration::from_millis(100)).await;

        api.set_outage(Some(outage));
        let renewed = api.last_renewal().expect("renewed while leading");
        tokio::time::sleep_until(renewed + deadline - Duration::from_millis(1)).await;
        assert!(*leading.borrow(), "{outage:?}: stopped before the deadline");
        leading.wait_for(|l| !*l).await.unwrap();
        assert_eq!(
            tokio::time::Instant::now() - renewed,
            deadline,
            "{outage:?}: stopped leading at the last renewal plus the renew deadline"
        );
        stop.cancel();
        api.set_outage(None);
        campaign.await.unwrap();
    }
}

/// How the in-memory Lease server fails.
#[derive(Clone, Copy, Debug)]
enum Outage {
    /// Requests are never answered.
    Hang,
    /// Requests are answered 500.
    Fail,
}

/// One Lease served from memory to the real kube client (a `tower` service
/// in place of the HTTP connection), with `resourceVersion` checks as the
/// API server makes them. No socket: under a paused clock, time moves only
/// when every task waits on a timer.
#[derive(Clone, Default)]
struct MemoryLease(Arc<Mutex<LeaseState>>);

#[derive(Default)]
struct LeaseState {
    lease: Option<Lease>,
    version: u64,
    outage: Option<Outage>,
    /// When the Lease was last written by its holder.
    renewed: Option<tokio::time::Instant>,
}

impl MemoryLease {
    fn client(&self) -> kube::Client {
        let server = self.clone();
        let service = tower::service_fn(move |request: http::Request<kube::client::Body>| {
            let server = server.clone();
            async move { server.answer(request).await }
        });
        kube::Client::new(service, NAMESPACE)
    }

    fn set_outage(&self, outage: Option<Outage>) {
        self.0.lock().unwrap().outage = outage;
    }

    fn last_renewal(&self) -> Option<tokio::time::Instant> {
        self.0.lock().unwrap().renewed
    }

    async fn answer(
        &self,
        request: http::Request<kube::client::Body>,
    ) -> Result<http::Response<http_body_util::Full<bytes::Bytes>>, std::convert::Infallible> {
        let outage = self.0.lock().unwrap().outage;
        match outage {
            Some(Outage::Hang) => std::future::pending::<()>().await,
            Some(Outage::Fail) => return Ok(status(500, "InternalError")),
            None => {}
        }
        let (parts, body) = request.into_parts();
        let body = http_body_util::BodyExt::collect(body)
            .await
            .map(|b| b.to_bytes())
            .unwrap_or_default();
        let mut state = self.0.lock().unwrap();
        let stored_version = state.version.to_string();
        let answer = match parts.method {
            http::Method::GET => match &state.lease {
                Some(lease) => ok(200, lease),
                None => status(404, "NotFound"),
            },
            http::Method::POST | http::Method::PUT => {
                let mut lease: Lease = serde_json::from_slice(&body).expect("a Lease");
                let create = parts.method == http::Method::POST;
                let current = lease.metadata.resource_version.as_deref();
                if create == state.lease.is_some()
                    || (!create && current != Some(stored_version.as_str()))
                {
                    return Ok(status(409, "Conflict"));
                }
                state.version += 1;
                lease.metadata.resource_version = Some(state.version.to_string());
                state.lease = Some(lease.clone());
                state.renewed = Some(tokio::time::Instant::now());
                ok(if create { 201 } else { 200 }, &lease)
            }
            _ => status(405, "MethodNotAllowed"),
        };
        Ok(answer)
    }
}

fn ok(code: u16, lease: &Lease) -> http::Response<http_body_util::Full<bytes::Bytes>> {
    respond(code, serde_json::to_vec(lease).unwrap())
}

/// A `Status` object, as the API server answers a failed request.
fn status(code: u16, reason: &str) -> http::Response<http_body_util::Full<bytes::Bytes>> {
    let status = serde_json::json!({
        "kind": "Status", "apiVersion": "v1", "status": "Failure",
        "message": reason, "reason": reason, "code": code,
    });
    respond(code, serde_json::to_vec(&status).unwrap())
}

fn respond(code: u16, body: Vec<u8>) -> http::Response<http_body_util::Full<bytes::Bytes>> {
    http::Response::builder()
        .status(code)
        .header("content-type", "application/json")
        .body(http_body_util::Full::new(bytes::Bytes::from(body)))
        .unwrap()
}

/// Two replicas in one cluster: one holds the Lease and writes, both answer;
/// when the leader shuts down it releases the Lease and the other takes over.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_replica_leads_and_hands_over_on_shutdown() {
    let mut set = KubeClusterset::three(&[]).await;
    set.add_replica(0).await;
    let first = east_leader(&set).await;
    set.apply("east", cluster_ip("shop", "web", &["10.1.0.10"]).exported());
    served_everywhere(&set, WEB).await;
    let vip = agreed_vip(&set, "shop", "web").await;
    for server in &set.member("east").servers {
        assert_eq!(
            resolve(server.addr, WEB, RecordType::A).await,
            Outcome::Ips([vip].into())
        );
    }
    let writes = |addr| {
        scrape(
            addr,
            "clusterset_dns_api_writes_total{kind=\"ServiceImport\",result=\"created\"}",
        )
    };
    let east = &set.member("east").servers;
    let follower = east[1 - first].running().metrics_addr;
    eventually_within(CONVERGE, "the leader writes", true, || async {
        writes(east[first].running().metrics_addr).await >= 1.0
    })
    .await;
    assert_eq!(writes(follower).await, 0.0, "the follower does not");

    set.stop_replica(0, first).await;
    let lease = set
        .member("east")
        .api
        .get::<k8s_openapi::api::coordination::v1::Lease>(Some(LEASE_NAMESPACE), "clusterset-dns")
        .expect("the Lease");
    let holder = lease.spec.and_then(|s| s.holder_identity);
    assert_ne!(
        holder,
        Some(format!("east-{first}")),
        "the Lease was released on shutdown"
    );
    eventually_within(
        std::time::Duration::from_secs(5),
        "the other replica leads",
        vec![1],
        || east_leading(&set),
    )
    .await;
    set.apply("east", cluster_ip("shop", "api", &["10.1.0.11"]).exported());
    served_everywhere(&set, "api.shop.svc.clusterset.local.").await;
}
