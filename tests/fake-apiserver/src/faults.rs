//! Request log, injected failures and the pause switch.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::watch;

/// The Kubernetes verb of a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
pub enum Verb {
    Get,
    List,
    Watch,
    Create,
    Update,
    Patch,
    Delete,
    DeleteCollection,
    /// `/api`, `/apis`, `/api/v1`, `/apis/<g>/<v>`, `/version`.
    Discovery,
    /// Anything unroutable.
    Other,
}

impl Verb {
    /// Whether requests of this verb change objects.
    pub fn is_write(self) -> bool {
        matches!(
            self,
            Self::Create | Self::Update | Self::Patch | Self::Delete | Self::DeleteCollection
        )
    }
}

/// What the server knew about one request, as logged.
#[derive(Clone, Debug)]
pub struct RequestInfo {
    pub verb: Verb,
    pub method: String,
    pub path: String,
    pub query: String,
    pub group: String,
    pub version: String,
    /// Plural resource name, empty for non-resource requests.
    pub resource: String,
    pub namespace: Option<String>,
    pub name: Option<String>,
    pub subresource: Option<String>,
    /// HTTP code of the injected failure this request got, if any.
    pub injected_failure: Option<u16>,
}

type Predicate = Arc<dyn Fn(&RequestInfo) -> bool + Send + Sync>;

struct FailRule {
    remaining: usize,
    code: u16,
    predicate: Option<Predicate>,
}

pub(crate) struct Faults {
    log: Mutex<Vec<RequestInfo>>,
    /// Off for servers taking millions of requests (benchmarks), where the
    /// log would grow without bound.
    logging: AtomicBool,
    rules: Mutex<Vec<FailRule>>,
    paused: watch::Sender<bool>,
}

impl Faults {
    pub fn new() -> Self {
        Self {
            log: Mutex::new(Vec::new()),
            logging: AtomicBool::new(true),
            rules: Mutex::new(Vec::new()),
            paused: watch::Sender::new(false),
        }
    }

    /// Decides whether this request fails, and logs it.
    pub fn arrive(&self, mut info: RequestInfo) -> Option<u16> {
        let code = {
            let mut rules = self.rules.lock().unwrap();
            let hit = rules
                .iter_mut()
                .find(|r| r.remaining > 0 && r.predicate.as_ref().is_none_or(|p| p(&info)));
            hit.map(|r| {
                r.remaining -= 1;
                r.code
            })
        };
        if code.is_some() {
            self.rules.lock().unwrap().retain(|r| r.remaining > 0);
        }
        info.injected_failure = code;
        if self.logging.load(Ordering::Relaxed) {
            self.log.lock().unwrap().push(info);
        }
        code
    }

    pub fn add_rule(&self, n: usize, code: u16, predicate: Option<Predicate>) {
        self.rules.lock().unwrap().push(FailRule {
            remaining: n,
            code,
            predicate,
        });
    }

    pub fn clear_rules(&self) {
        self.rules.lock().unwrap().clear();
    }

    pub fn pending_failures(&self) -> usize {
        self.rules.lock().unwrap().iter().map(|r| r.remaining).sum()
    }

    pub fn log(&self) -> Vec<RequestInfo> {
        self.log.lock().unwrap().clone()
    }

    pub fn count(&self, f: impl Fn(&RequestInfo) -> bool) -> usize {
        self.log.lock().unwrap().iter().filter(|i| f(i)).count()
    }

    pub fn set_logging(&self, on: bool) {
        self.logging.store(on, Ordering::Relaxed);
    }

    pub fn reset_log(&self) {
        self.log.lock().unwrap().clear();
    }

    pub fn set_paused(&self, paused: bool) {
        self.paused.send_replace(paused);
    }

    pub fn paused_rx(&self) -> watch::Receiver<bool> {
        self.paused.subscribe()
    }

    pub async fn wait_unpaused(&self) {
        let mut rx = self.paused.subscribe();
        let _ = rx.wait_for(|p| !*p).await;
    }
}
