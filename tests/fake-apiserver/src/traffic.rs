//! Per-client accounting: requests by verb, request body bytes and response
//! body bytes (watch streams included, counted as each event is written),
//! keyed by the bearer token of the request's `Authorization` header, so one
//! server can tell its clients apart (give each a kubeconfig with its own
//! token: [`super::FakeApiServer::kubeconfig_yaml_with_token`]).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http_body_util::BodyExt;
use hyper::body::Frame;

use super::faults::Verb;
use super::server::Body;

/// The client of requests without a bearer token.
pub const ANONYMOUS: &str = "-";

/// What one client sent and received.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct Traffic {
    /// Requests by verb.
    pub requests: BTreeMap<Verb, u64>,
    /// Writes ([`Verb::is_write`]) by resource (plural), to tell a
    /// program's own work from its Lease renewals.
    pub writes_by_resource: BTreeMap<String, u64>,
    /// Request body bytes.
    pub request_bytes: u64,
    /// Response body bytes, watch events included.
    pub response_bytes: u64,
    /// Watch events sent by resource (plural; one line of a watch stream
    /// each, bookmarks and the ERROR that ends an expired watch included).
    pub watch_events: BTreeMap<String, u64>,
}

impl Traffic {
    /// Requests of one verb.
    pub fn count(&self, verb: Verb) -> u64 {
        self.requests.get(&verb).copied().unwrap_or(0)
    }

    /// Requests of any verb.
    pub fn total(&self) -> u64 {
        self.requests.values().sum()
    }

    /// Requests that change objects (create, update, patch, delete, deletecollection).
    pub fn writes(&self) -> u64 {
        self.requests
            .iter()
            .filter(|(verb, _)| verb.is_write())
            .map(|(_, n)| n)
            .sum()
    }

    /// Writes to resources other than these.
    pub fn writes_except(&self, plurals: &[&str]) -> u64 {
        sum_except(&self.writes_by_resource, plurals)
    }

    /// Watch events of resources other than these.
    pub fn watch_events_except(&self, plurals: &[&str]) -> u64 {
        sum_except(&self.watch_events, plurals)
    }

    /// What happened between `earlier` (a snapshot of the same client) and this.
    pub fn since(&self, earlier: &Traffic) -> Traffic {
        let requests = self
            .requests
            .iter()
            .map(|(verb, n)| (*verb, n - earlier.count(*verb)))
            .filter(|(_, n)| *n > 0)
            .collect();
        Traffic {
            requests,
            writes_by_resource: minus(&self.writes_by_resource, &earlier.writes_by_resource),
            request_bytes: self.request_bytes - earlier.request_bytes,
            response_bytes: self.response_bytes - earlier.response_bytes,
            watch_events: minus(&self.watch_events, &earlier.watch_events),
        }
    }
}

/// The counts of resources other than `plurals`, summed.
fn sum_except(by_resource: &BTreeMap<String, u64>, plurals: &[&str]) -> u64 {
    by_resource
        .iter()
        .filter(|(plural, _)| !plurals.contains(&plural.as_str()))
        .map(|(_, n)| n)
        .sum()
}

/// `now` minus `earlier`, resource by resource (the ones left unchanged left out).
fn minus(now: &BTreeMap<String, u64>, earlier: &BTreeMap<String, u64>) -> BTreeMap<String, u64> {
    now.iter()
        .map(|(plural, n)| {
            (
                plural.clone(),
                n - earlier.get(plural).copied().unwrap_or(0),
            )
        })
        .filter(|(_, n)| *n > 0)
        .collect()
}

/// Every client's [`Traffic`], by bearer token ([`ANONYMOUS`] without one).
pub type TrafficByClient = BTreeMap<String, Traffic>;

/// `now` minus `earlier`, client by client.
pub fn traffic_since(now: &TrafficByClient, earlier: &TrafficByClient) -> TrafficByClient {
    now.iter()
        .map(|(client, t)| {
            let before = earlier.get(client).cloned().unwrap_or_default();
            (client.clone(), t.since(&before))
        })
        .collect()
}

/// The counters, shared by the handlers and the watch streams.
#[derive(Default)]
pub(crate) struct Accounting {
    clients: Mutex<TrafficByClient>,
}

impl Accounting {
    /// Counts a request to `resource` (plural, empty for discovery) and its body.
    pub fn request(&self, client: &str, verb: Verb, resource: &str, body_bytes: usize) {
        let mut clients = self.clients.lock().unwrap();
        let t = clients.entry(client.to_owned()).or_default();
        *t.requests.entry(verb).or_default() += 1;
        if verb.is_write() {
            *t.writes_by_resource.entry(resource.to_owned()).or_default() += 1;
        }
        t.request_bytes += body_bytes as u64;
    }

    /// Counts a response frame; `watched`: the resource of the watch it
    /// is an event of.
    fn response(&self, client: &str, bytes: usize, watched: Option<&str>) {
        let mut clients = self.clients.lock().unwrap();
        let t = clients.entry(client.to_owned()).or_default();
        t.response_bytes += bytes as u64;
        if let Some(resource) = watched {
            match t.watch_events.get_mut(resource) {
                Some(n) => *n += 1,
                None => {
                    t.watch_events.insert(resource.to_owned(), 1);
                }
            }
        }
    }

    /// The response body, counting each frame's bytes for `client` as it is
    /// sent (and, for a [`Verb::Watch`] of `resource`, each frame as one of
    /// its watch events: the stream writes one event per frame).
    pub fn count_response(
        self: &Arc<Self>,
        client: String,
        verb: Verb,
        resource: String,
        body: Body,
    ) -> Body {
        let this = self.clone();
        let watched = (verb == Verb::Watch).then_some(resource);
        body.map_frame(move |frame: Frame<Bytes>| {
            if let Some(data) = frame.data_ref() {
                this.response(&client, data.len(), watched.as_deref());
            }
            frame
        })
        .boxed_unsync()
    }

    pub fn snapshot(&self) -> TrafficByClient {
        self.clients.lock().unwrap().clone()
    }

    pub fn reset(&self) {
        self.clients.lock().unwrap().clear();
    }
}

/// The client a request comes from: its bearer token, or [`ANONYMOUS`].
pub(crate) fn client_of(authorization: &str) -> String {
    authorization
        .strip_prefix("Bearer ")
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .unwrap_or(ANONYMOUS)
        .to_owned()
}
