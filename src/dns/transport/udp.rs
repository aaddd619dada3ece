//! The UDP socket loop: one thread per socket on `SO_REUSEPORT` sockets,
//! datagrams received and sent in batches (`recvmmsg`/`sendmmsg`), each
//! answered by the fast path (`message/fast_path.rs`).

use std::io::{IoSlice, IoSliceMut};
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::sys::socket::{MsgFlags, MultiHeaders, SockaddrStorage, recvmmsg, sendmmsg};
use tracing::{debug, warn};

use crate::dns::message::fast_path::answer;
use crate::dns::message::recent::Recent;
use crate::dns::metrics::{DnsMetrics, DnsRecorder};
use crate::dns::tsig::key_file::TsigKey;
use crate::index::Index;

/// Datagrams received and answered per system call.
const BATCH: usize = 32;
/// Largest query read (longer ones are cut and then answered FORMERR).
const MAX_REQUEST: usize = 4096;
/// How often a worker checks whether it should stop.
const POLL: Duration = Duration::from_millis(200);
/// Lines about failures a sender can cause: at most one a minute.
/// UDP worker threads; they stop when this is dropped.
pub(crate) struct UdpWorkers {
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
}

impl UdpWorkers {
    /// Starts one worker per socket.
    pub(crate) fn start(
        sockets: Vec<UdpSocket>,
        index: Arc<Index>,
        metrics: Arc<DnsMetrics>,
        tsig: Option<Arc<TsigKey>>,
    ) -> std::io::Result<Self> {
        let stop = Arc::new(AtomicBool::new(false));
        let mut threads = Vec::new();
        for (n, socket) in sockets.into_iter().enumerate() {
            socket.set_read_timeout(Some(POLL))?;
            let (index, stop, tsig) = (index.clone(), stop.clone(), tsig.clone());
            let recorder = metrics.recorder("udp");
            let thread = std::thread::Builder::new()
                .name(format!("dns-udp-{n}"))
                .spawn(move || serve(&socket, &index, tsig.as_deref(), recorder, &stop))?;
            threads.push(thread);
        }
        Ok(Self { stop, threads })
    }
}

impl Drop for UdpWorkers {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for thread in self.threads.drain(..) {
            let _ = thread.join();
        }
    }
}

/// Receives and answers datagrams in batches (`recvmmsg`/`sendmmsg`) until `stop`.
fn serve(
    socket: &UdpSocket,
    index: &Index,
    tsig: Option<&TsigKey>,
    mut recorder: DnsRecorder,
    stop: &AtomicBool,
) {
    let fd = socket.as_raw_fd();
    let mut requests: Box<[[u8; MAX_REQUEST]; BATCH]> = vec![[0u8; MAX_REQUEST]; BATCH]
        .into_boxed_slice()
        .try_into()
        .expect("BATCH buffers");
    let mut responses: Vec<Vec<u8>> = (0..BATCH)
        .map(|_| Vec::with_capacity(MAX_REQUEST))
        .collect();
    // Where each datagram came from; the answered ones' are moved to the
    // front, in the order of `responses`, for `sendmmsg`.
    let mut peers: [Option<SockaddrStorage>; BATCH] = [None; BATCH];
    let mut lens = [0usize; BATCH];
    let mut rx = MultiHeaders::<SockaddrStorage>::preallocate(BATCH, None);
    let mut tx = MultiHeaders::<SockaddrStorage>::preallocate(BATCH, None);
    let mut recent = Recent::default();
    // Nothing is allocated per batch: at a low rate a batch is one query,
    // and allocating its bookkeeping per batch was a measurable share of the
    // instructions per query (bench/README.md, "CPU per query"). The slices
    // borrow the buffers for one call.
    while !stop.load(Ordering::Relaxed) {
        let mut batch = 0;
        {
            let mut slices = requests.each_mut().map(|b| [IoSliceMut::new(b)]);
            match recvmmsg(
                fd,
                &mut rx,
                slices.iter_mut(),
                MsgFlags::MSG_WAITFORONE,
                None,
            ) {
                Ok(messages) => {
                    for ((len, peer), m) in lens.iter_mut().zip(&mut peers).zip(messages) {
                        (*len, *peer) = (m.bytes, m.address);
                        batch += 1;
                    }
                }
                Err(Errno::EAGAIN | Errno::EINTR) => continue,
                Err(error) => {
                    warn!(%error, "UDP receive failed");
                    continue;
                }
            }
        }
        let mut count = 0;
        for i in 0..batch {
            let Some(peer) = peers[i].as_ref().and_then(socket_addr) else {
                continue;
            };
            let out = &mut responses[count];
            out.clear();
            let started = Instant::now();
            let packet = &requests[i][..lens[i]];
            if let Some(outcome) = answer(index, Some(&mut recent), tsig, packet, peer, out) {
                recorder.record(outcome.rtype, outcome.rcode, started.elapsed());
                recorder.problem(outcome.problem);
                peers.swap(count, i);
                count += 1;
            }
        }
        recorder.flush();
        let mut sent = 0;
        while sent < count {
            let mut slices = [[IoSlice::new(&[])]; BATCH];
            for (slice, response) in slices.iter_mut().zip(&responses[sent..count]) {
                *slice = [IoSlice::new(response)];
            }
            match sendmmsg(
                fd,
                &mut tx,
                &slices[..count - sent],
                &peers[sent..count],
                [],
                MsgFlags::empty(),
            ) {
                Ok(done) => sent += done.count().max(1),
                Err(Errno::EINTR) => {}
                Err(error) => {
                    debug!(%error, "UDP send failed");
                    // Skip the datagram the kernel refused and go on with the rest.
                    sent += 1;
                }
            }
        }
    }
}

fn socket_addr(address: &SockaddrStorage) -> Option<SocketAddr> {
    if let Some(v4) = address.as_sockaddr_in() {
        return Some(SocketAddr::V4((*v4).into()));
    }
    address
        .as_sockaddr_in6()
        .map(|v6| SocketAddr::V6((*v6).into()))
}
