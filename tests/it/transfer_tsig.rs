//! TSIG (RFC 8945) on zone transfers, SOA checks and NOTIFY, with
//! `--tsig-key`: a real Knot secondary transfers with the key and follows
//! signed NOTIFYs; `dig -y`, `kdig -y` and hand-signed requests show that
//! transfers unsigned or signed with another key are refused, with the
//! RCODE and TSIG error of §5.2; the key file is reloaded like the TLS pair.

use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use hickory_proto::op::{Message, ResponseCode};
use hickory_proto::rr::RecordType::{A, AXFR, SOA};
use hickory_proto::rr::rdata::tsig::{TsigAlgorithm, TsigError};
use hickory_proto::rr::{Name, TSigResponseContext, TSigner};

use crate::common::*;

const ZONE: &str = "clusterset.local.";
const V4_REVERSE: &str = "243.in-addr.arpa.";

/// The key both sides hold (`tsig-keygen transfer` output, 32 random bytes).
fn key() -> TsigKeySpec {
    TsigKeySpec {
        name: "transfer".into(),
        algorithm: "hmac-sha256".into(),
        secret: "0jZ1v0bC2d0pYwqQ3JqfJ6m0Pzj0G4dBx3Pj4nXc4Pk=".into(),
    }
}

/// The same name and algorithm with another secret.
fn other_secret() -> TsigKeySpec {
    TsigKeySpec {
        secret: "cm90YXRlZC1zZWNyZXQtb2YtdGhlLXRyYW5zZmVyLWtleQ==".into(),
        ..key()
    }
}

/// One exported service, and a server with `--tsig-key` holding `spec`.
async fn signed_server(
    spec: &TsigKeySpec,
    extra: &[&str],
) -> (Clusterset, Server, tempfile::TempDir) {
    let cs = Clusterset::new();
    cs.write(
        "east",
        "web.yaml",
        &cluster_ip("shop", "web", &["10.96.0.10"]).exported(),
    );
    signed_server_of(cs, spec, extra).await
}

/// A server of `cs` with `--tsig-key` holding `spec`.
async fn signed_server_of(
    cs: Clusterset,
    spec: &TsigKeySpec,
    extra: &[&str],
) -> (Clusterset, Server, tempfile::TempDir) {
    let keys = tempfile::tempdir().expect("a temporary directory");
    let file = keys.path().join("transfer.key");
    std::fs::write(&file, spec.bind_syntax()).expect("key file written");
    let mut args = vec!["--tsig-key", file.to_str().expect("a UTF-8 path")];
    args.extend_from_slice(extra);
    let server = start(cs.dir(), &args).await;
    (cs, server, keys)
}

/// `dig` or `kdig` (Debian `bind9-dnsutils`, `knot-dnsutils`) asking `addr`
/// over TCP: its whole output, errors included.
fn ask(program: &str, addr: SocketAddr, args: &[&str]) -> String {
    let patience: &[&str] = match program {
        "kdig" => &["+timeout=3", "+retry=0"],
        _ => &["+time=3", "+tries=1"],
    };
    let output = Command::new(program)
        .arg("+tcp")
        .args(patience)
        .arg(format!("@{}", addr.ip()))
        .args(["-p", &addr.port().to_string()])
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("{program} runs: {e}"));
    let mut text = String::from_utf8_lossy(&output.stdout).into_owned();
    text.push_str(&String::from_utf8_lossy(&output.stderr));
    text
}

/// Whether `dig` output is a whole transfer whose every message's TSIG
/// `dig` verified (it prints "Couldn't verify signature" otherwise).
fn transferred(output: &str) -> bool {
    output.contains("XFR size:")
        && !output.contains("Transfer failed")
        && !output.contains("verify")
        && output.matches("\tSOA\t").count() == 2
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("after 1970")
        .as_secs()
}

fn signer(spec: &TsigKeySpec) -> TSigner {
    let secret = data_encoding::BASE64
        .decode(spec.secret.as_bytes())
        .expect("base64");
    let name = Name::from_ascii(&spec.name).expect("a key name");
    TSigner::new(secret, TsigAlgorithm::HmacSha256, name, 300).expect("a signer")
}

/// RFC 8945 §5.3, §5.3.1 and RFC 1996 with a real secondary: Knot, holding
/// the key, signs its SOA checks and transfers, verifies every signed
/// answer, and takes signed NOTIFYs (its ACL requires the key); after an
/// edit it serves the new data.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn knot_transfers_with_the_key_and_follows_signed_notify() {
    let knot_addr = Knot::reserve();
    let notify = knot_addr.to_string();
    let spec = key();
    let (cs, server, _keys) =
        signed_server(&spec, &["--reverse-vip-pools", "--notify", &notify]).await;
    let knot = Knot::start_signed(knot_addr, server.addr, &[ZONE, V4_REVERSE], Some(&spec)).await;
    let serial = serial_of(&query(server.addr, ZONE, SOA).await.answers[0]);
    for zone in [ZONE, V4_REVERSE] {
        knot.wait_serial(zone, serial, Duration::from_secs(10))
            .await;
    }
    let web = svc("web.shop");
    assert_eq!(
        resolve(knot.addr, &web, A).await,
        resolve(server.addr, &web, A).await
    );

    knot.follows_an_edit(&cs, server.addr).await;
    let metrics = server.running().metrics_addr;
    let acknowledged = "clusterset_dns_notifies_total{result=\"acknowledged\"}";
    assert!(
        scrape(metrics, acknowledged).await >= 2.0,
        "signed NOTIFYs acknowledged"
    );
    for bad in ["refused", "badkey", "badsig", "badtime"] {
        for kind in ["AXFR", "IXFR"] {
            let series =
                format!("clusterset_dns_zone_transfers_total{{result=\"{bad}\",type=\"{kind}\"}}");
            assert_eq!(scrape(metrics, &series).await, 0.0, "{series}");
        }
    }
    assert!(
        !knot.log().contains("TSIG"),
        "Knot saw no TSIG error:\n{}",
        knot.log()
    );
}

/// RFC 8945 §5.2: with a key configured, an unsigned transfer is REFUSED;
/// one signed with an unknown key is NOTAUTH with BADKEY, with the right
/// key name and a wrong secret NOTAUTH with BADSIG (both unsigned,
/// §5.2.1-2); the right key gets the zone, signed. Queries stay open to
/// all, and a signed one is answered signed (§5.3; `kdig` checks).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transfers_without_the_key_are_refused() {
    let spec = key();
    let (_cs, server, _keys) = signed_server(&spec, &[]).await;
    let addr = server.addr;

    let unsigned = ask("dig", addr, &["AXFR", ZONE]);
    assert!(unsigned.contains("Transfer failed"), "{unsigned}");
    assert_eq!(
        transfer(addr, ZONE, None).await.code(),
        ResponseCode::Refused
    );

    let wrong = other_secret().dig_y();
    let badsig = ask("kdig", addr, &["-y", &wrong, "AXFR", ZONE]);
    assert!(badsig.contains("error 'BADSIG'"), "{badsig}");
    let unknown = TsigKeySpec {
        name: "someone-else".into(),
        ..key()
    };
    let badkey = ask("kdig", addr, &["-y", &unknown.dig_y(), "AXFR", ZONE]);
    assert!(badkey.contains("error 'BADKEY'"), "{badkey}");
    for (spec, error) in [
        (other_secret(), TsigError::BadSig),
        (unknown, TsigError::BadKey),
    ] {
        let mut request = question(ZONE, AXFR);
        request.finalize(&signer(&spec), now()).expect("signed");
        let reply = tcp_raw(addr, &request.to_vec().expect("encodes")).await;
        let message = Message::from_vec(&reply).expect("decodes");
        assert_eq!(message.metadata.response_code, ResponseCode::NotAuth);
        let tsig = &message.signature().expect("a TSIG record").data;
        assert_eq!(tsig.error, Some(error));
        assert!(tsig.mac.is_empty(), "{error:?} answers are unsigned");
    }
    let dig_wrong = ask("dig", addr, &["-y", &wrong, "AXFR", ZONE]);
    assert!(!transferred(&dig_wrong), "{dig_wrong}");

    let good = ask("dig", addr, &["-y", &spec.dig_y(), "AXFR", ZONE]);
    assert!(transferred(&good), "{good}");
    let kdig = ask("kdig", addr, &["-y", &spec.dig_y(), "AXFR", ZONE]);
    assert!(
        kdig.contains(";; Received") && !kdig.contains("error"),
        "{kdig}"
    );

    // A secondary's SOA check, signed, over UDP and TCP: the answer is signed.
    for transport in ["+notcp", "+tcp"] {
        let soa = ask("kdig", addr, &[transport, "-y", &spec.dig_y(), "SOA", ZONE]);
        assert!(
            soa.contains("NOERROR") && soa.contains("TSIG PSEUDOSECTION"),
            "{soa}"
        );
        assert!(!soa.contains("error"), "{soa}");
    }
    let open = ask("dig", addr, &["+short", "A", &svc("web.shop")]);
    assert!(
        !open.trim().is_empty(),
        "unsigned queries are answered: {open}"
    );

    let metrics = server.running().metrics_addr;
    let count = |result: &str| {
        format!("clusterset_dns_zone_transfers_total{{result=\"{result}\",type=\"AXFR\"}}")
    };
    assert_eq!(scrape(metrics, &count("refused")).await, 2.0);
    assert_eq!(scrape(metrics, &count("badsig")).await, 3.0);
    assert_eq!(scrape(metrics, &count("badkey")).await, 2.0);
    assert_eq!(scrape(metrics, &count("full")).await, 2.0);
}

/// RFC 8945 §5.2.3 and §5.3.2: a request signed an hour ago is NOTAUTH
/// with BADTIME, signed with the key over the request's MAC, its Time
/// Signed the request's and its Other Data the server's time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_signature_is_badtime_and_the_error_is_signed() {
    let spec = key();
    let (_cs, server, _keys) = signed_server(&spec, &[]).await;
    let signer = signer(&spec);
    let signed_at = now() - 3600;
    let mut request = question(ZONE, AXFR);
    let mut verifier = request
        .finalize(&signer, signed_at)
        .expect("signed")
        .expect("a verifier");
    let reply = tcp_raw(server.addr, &request.to_vec().expect("encodes")).await;
    let message = Message::from_vec(&reply).expect("decodes");
    assert_eq!(message.metadata.response_code, ResponseCode::NotAuth);
    let tsig = &message.signature().expect("a TSIG record").data;
    assert_eq!(tsig.error, Some(TsigError::BadTime));
    assert_eq!(tsig.time, signed_at);
    let other: [u8; 6] = tsig.other.as_slice().try_into().expect("48-bit time");
    let server_time = u64::from_be_bytes([
        0, 0, other[0], other[1], other[2], other[3], other[4], other[5],
    ]);
    assert!(
        server_time.abs_diff(now()) < 60,
        "Other Data is the server's time"
    );
    verifier
        .verify(&reply)
        .expect("the BADTIME answer is signed with the key");
}

/// RFC 8945 §5.3.1: every message of a multi-message AXFR is signed, each
/// over the MAC before it; hickory-proto's verifier and `dig` check them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_message_of_a_large_transfer_is_signed() {
    let spec = key();
    let (_cs, server, _keys) = signed_server_of(super::transfer::large_zone(), &spec, &[]).await;

    let signer = signer(&spec);
    let mut request = question(ZONE, AXFR);
    let mut verifier = request
        .finalize(&signer, now())
        .expect("signed")
        .expect("a verifier");
    let bytes = request.to_vec().expect("encodes");
    let replies = read_transfer(server.addr, &bytes).await;
    assert!(replies.len() > 1, "{} messages", replies.len());
    for (n, reply) in replies.iter().enumerate() {
        verifier
            .verify(reply)
            .unwrap_or_else(|e| panic!("message {n} of {}: {e}", replies.len()));
    }
    let output = ask("dig", server.addr, &["-y", &spec.dig_y(), "AXFR", ZONE]);
    assert!(
        transferred(&output),
        "{}",
        output.lines().last().unwrap_or_default()
    );
}

/// Reads the messages answering the transfer request `bytes` until the
/// closing SOA (the second SOA record).
async fn read_transfer(addr: SocketAddr, bytes: &[u8]) -> Vec<Vec<u8>> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(addr)
        .await
        .expect("connects");
    let len = u16::try_from(bytes.len()).expect("small");
    stream.write_all(&len.to_be_bytes()).await.expect("sent");
    stream.write_all(bytes).await.expect("sent");
    let (mut replies, mut soas) = (Vec::new(), 0);
    while soas < 2 {
        let len = stream.read_u16().await.expect("a message");
        let mut reply = vec![0u8; usize::from(len)];
        stream.read_exact(&mut reply).await.expect("a message");
        let message = Message::from_vec(&reply).expect("decodes");
        assert_eq!(message.metadata.response_code, ResponseCode::NoError);
        soas += message
            .answers
            .iter()
            .filter(|r| r.record_type() == SOA)
            .count();
        replies.push(reply);
    }
    replies
}

/// The key file is read again when it changes, as the TLS pair is: a new
/// secret takes over without a restart; a broken file is logged and
/// counted, and the key before it stays in use. At start-up a broken file
/// stops `check` (and `serve`) with the file named.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_key_file_is_reloaded_and_a_broken_one_keeps_the_old_key() {
    let (_cs, server, keys) = signed_server(&key(), &[]).await;
    let addr = server.addr;
    let file = keys.path().join("transfer.key");
    let rotated = other_secret();
    std::fs::write(&file, rotated.bind_syntax()).expect("key file rewritten");
    eventually_within(
        Duration::from_secs(10),
        "the new secret in use",
        true,
        || async { transferred(&ask("dig", addr, &["-y", &rotated.dig_y(), "AXFR", ZONE])) },
    )
    .await;
    let old = ask("dig", addr, &["-y", &key().dig_y(), "AXFR", ZONE]);
    assert!(
        !transferred(&old),
        "the old secret no longer transfers: {old}"
    );

    std::fs::write(&file, "key \"transfer\" { algorithm hmac-sha256; };\n").expect("broken");
    let metrics = server.running().metrics_addr;
    let rejected = "clusterset_dns_tsig_key_reloads_total{result=\"rejected\"}";
    eventually_within(
        Duration::from_secs(10),
        "the broken file rejected",
        1.0,
        || async { scrape(metrics, rejected).await },
    )
    .await;
    let loaded = "clusterset_dns_tsig_key_reloads_total{result=\"loaded\"}";
    assert_eq!(scrape(metrics, loaded).await, 1.0);
    let still = ask("dig", addr, &["-y", &rotated.dig_y(), "AXFR", ZONE]);
    assert!(
        transferred(&still),
        "the last good key stays in use: {still}"
    );

    let broken = file.to_str().expect("a UTF-8 path");
    let output = check_with_key(broken);
    let stderr = String::from_utf8_lossy(&output.stderr);
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(!output.status.success());
    assert!(
        format!("{stdout}{stderr}")
            .contains(&format!("invalid TSIG key file {broken}: no `secret`")),
        "{stdout}{stderr}"
    );
}

/// `check` of the demo manifests with `--tsig-key` `file`.
fn check_with_key(file: &str) -> std::process::Output {
    let demo = Path::new(env!("CARGO_MANIFEST_DIR")).join("config/demo");
    run_binary(&[
        "check",
        "--manifests",
        demo.to_str().unwrap(),
        "--tsig-key",
        file,
    ])
}

/// RFC 8945 §5.1 and §5.4 on NOTIFY: each NOTIFY carries a TSIG that the
/// key verifies; an unsigned NOERROR answer does not acknowledge it (it is
/// counted `malformed` and the NOTIFY resent); an answer signed with the
/// key over the NOTIFY's MAC does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn notify_is_signed_and_only_a_signed_answer_acknowledges_it() {
    let secondary = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let target = secondary.local_addr().unwrap().to_string();
    let spec = key();
    let (_cs, server, _keys) = signed_server(&spec, &["--notify", &target]).await;
    let signer = signer(&spec);
    let receive = async || {
        let mut buffer = [0u8; 4096];
        let (len, from) =
            tokio::time::timeout(Duration::from_secs(30), secondary.recv_from(&mut buffer))
                .await
                .expect("a NOTIFY within 30 s")
                .unwrap();
        (buffer[..len].to_vec(), from)
    };
    // The answer to `notify`, signed over its MAC or not.
    let answer = |notify: &[u8], signed: bool| {
        let (mac, _, window) = signer
            .verify_message_byte(notify, None, true)
            .expect("the NOTIFY is signed with the key");
        assert!(window.contains(&now()), "signed now");
        let mut reply = Message::from_vec(notify).expect("decodes");
        assert_eq!(reply.metadata.op_code, hickory_proto::op::OpCode::Notify);
        reply.take_signature();
        reply.metadata.message_type = hickory_proto::op::MessageType::Response;
        if signed {
            let bytes = reply.to_vec().unwrap();
            let context =
                TSigResponseContext::new(reply.metadata.id, now(), signer.clone(), mac, None);
            reply.set_signature(context.sign(&bytes).expect("signed"));
        }
        reply.to_vec().unwrap()
    };
    let metrics = server.running().metrics_addr;
    let series = |result: &str| format!("clusterset_dns_notifies_total{{result=\"{result}\"}}");

    let (first, from) = receive().await;
    secondary
        .send_to(&answer(&first, false), from)
        .await
        .unwrap();
    eventually_within(
        Duration::from_secs(10),
        "the unsigned answer ignored",
        1.0,
        || async { scrape(metrics, &series("malformed")).await },
    )
    .await;
    assert_eq!(scrape(metrics, &series("acknowledged")).await, 0.0);

    // Answer the latest NOTIFY, signed, until one is taken (a resend may
    // overtake an answer on a busy machine).
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (latest, from) = receive().await;
        secondary
            .send_to(&answer(&latest, true), from)
            .await
            .unwrap();
        let acknowledged = tokio::time::timeout(Duration::from_secs(3), async {
            while scrape(metrics, &series("acknowledged")).await < 1.0 {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
        .await;
        if acknowledged.is_ok() {
            break;
        }
        assert!(Instant::now() < deadline, "no signed answer was taken");
    }
}
