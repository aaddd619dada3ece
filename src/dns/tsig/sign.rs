//! TSIG (RFC 8945) on the wire, on hickory-proto's HMACs and TSIG records:
//! a signed request is checked (§5.2: key, MAC, time), the answer to a good
//! one is signed (§5.3), each message of a multi-message answer too (§5.3.1,
//! chained to the one before), and a bad one is answered NOTAUTH with the
//! TSIG error (§5.2.1 BADKEY, §5.2.2 BADSIG unsigned; §5.2.3 BADTIME
//! signed). A TSIG record is appended to a response already encoded, so the
//! answer paths encode as they do without TSIG.

use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use hickory_proto::ProtoError;
use hickory_proto::op::{Message, MessageType, Metadata, OpCode, Query, ResponseCode};
use hickory_proto::rr::rdata::tsig::{TSIG, TsigError, make_tsig_record};
use hickory_proto::rr::{Record, TSigner};
use hickory_proto::serialize::binary::{BinEncodable, BinEncoder, NameEncoding};
use hickory_server::zone_handler::MessageRequest;

use crate::dns::tsig::key_file::TsigKey;

/// Longest MAC of the algorithms a key file may name (HMAC-SHA512).
const MAX_MAC: usize = 64;

/// Seconds since the Unix epoch, the clock of TSIG's Time Signed (§4.2).
pub(crate) fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// What a request's TSIG came to.
pub(crate) enum Verdict {
    /// The request is not signed.
    Unsigned,
    /// Signed with our key, in time: sign the answer with this.
    Valid(Signing),
    /// Signed, but not acceptably: answer with this error.
    Rejected(Box<Rejection>),
}

impl Verdict {
    /// Checks the TSIG record `signature` of the request `packet` against
    /// `key` (none configured: every key is unknown) at `now` (RFC 8945 §5.2).
    pub(crate) fn of(
        key: Option<&TsigKey>,
        packet: &[u8],
        signature: Option<&Record<TSIG>>,
        now: u64,
    ) -> Self {
        let Some(signature) = signature else {
            return Self::Unsigned;
        };
        let tsig = &signature.data;
        let mut rejection = Box::new(Rejection {
            error: TsigError::BadKey,
            name: signature.name.clone(),
            request: tsig.clone(),
            signer: None,
        });
        let signer = key.map(TsigKey::signer);
        // §5.2.1: a key we do not have (by name and algorithm).
        let Some(signer) = signer
            .filter(|s| s.signer_name() == &signature.name && s.algorithm() == &tsig.algorithm)
        else {
            return Self::Rejected(rejection);
        };
        // §5.2.2: the MAC (hickory-proto compares in constant time; a
        // truncated MAC is refused too). hickory-proto subtracts the fudge
        // from Time Signed unchecked, so a time that low (1970) is refused
        // as unverifiable before it gets there.
        let verified = if tsig.time >= u64::from(tsig.fudge) {
            signer.verify_message_byte(packet, None, true).ok()
        } else {
            None
        };
        let Some((mac, _, window)) = verified else {
            rejection.error = TsigError::BadSig;
            return Self::Rejected(rejection);
        };
        // §5.2.3: Time Signed within Fudge of our clock.
        if !window.contains(&now) && window.end != now {
            rejection.error = TsigError::BadTime;
            rejection.signer = Some((signer, mac));
            return Self::Rejected(rejection);
        }
        Self::Valid(Signing {
            signer,
            previous_mac: mac,
            id: tsig.oid,
            first: true,
        })
    }
}

/// Signs the messages answering a verified request, in order: the first
/// covers the request's MAC and every TSIG variable (§5.3), each later one
/// the MAC before it and the timers only (§5.3.1).
pub(crate) struct Signing {
    signer: Arc<TSigner>,
    previous_mac: Vec<u8>,
    id: u16,
    first: bool,
}

impl Signing {
    /// The bytes the TSIG record will add to a message: what a UDP answer
    /// must leave free.
    pub(crate) fn room(&self) -> usize {
        let stub = TSIG::new(
            self.signer.algorithm().clone(),
            0,
            self.signer.fudge(),
            vec![0; MAX_MAC],
            self.id,
            None,
            Vec::new(),
        );
        let mut bytes = Vec::new();
        let record = make_tsig_record(self.signer.signer_name().clone(), stub);
        match record.emit(&mut BinEncoder::new(&mut bytes)) {
            Ok(()) => bytes.len(),
            // Cannot happen for a key that was read (its name is a name);
            // a room this large only makes the answer truncate early.
            Err(_) => 1024,
        }
    }

    /// Appends to the encoded response `message` its TSIG record, signed at `now`.
    pub(crate) fn sign(&mut self, message: &mut Vec<u8>, now: u64) -> Result<(), ProtoError> {
        let signer = &self.signer;
        let stub = TSIG::new(
            signer.algorithm().clone(),
            now,
            signer.fudge(),
            Vec::new(),
            self.id,
            None,
            Vec::new(),
        );
        let digested = if std::mem::take(&mut self.first) {
            signer.encode_response_tbs(&self.previous_mac, message, &stub)?
        } else {
            let mut digested = Vec::with_capacity(message.len() + self.previous_mac.len() + 10);
            let mut encoder = BinEncoder::new(&mut digested);
            encoder.emit_u16(self.previous_mac.len() as u16)?;
            encoder.emit_vec(&self.previous_mac)?;
            encoder.emit_vec(message)?;
            encoder.emit_u16((now >> 32) as u16)?;
            encoder.emit_u32(now as u32)?;
            encoder.emit_u16(signer.fudge())?;
            digested
        };
        let mac = signer
            .sign(&digested)
            .map_err(|e| ProtoError::from(e.to_string()))?;
        let record = make_tsig_record(signer.signer_name().clone(), stub.set_mac(mac.clone()));
        append(message, &record)?;
        self.previous_mac = mac;
        Ok(())
    }
}

/// A signed request refused (§5.2): the TSIG error and what the answer's
/// TSIG record echoes.
pub(crate) struct Rejection {
    error: TsigError,
    name: hickory_proto::rr::Name,
    request: TSIG,
    /// BADTIME only: our key and the request's MAC, to sign the answer with.
    signer: Option<(Arc<TSigner>, Vec<u8>)>,
}

impl Rejection {
    /// The TSIG error, as the metrics name it (`badkey`, `badsig`, `badtime`).
    pub(crate) fn label(&self) -> &'static str {
        match self.error {
            TsigError::BadKey => "badkey",
            TsigError::BadSig => "badsig",
            _ => "badtime",
        }
    }

    /// The NOTAUTH answer to the request of `metadata` and `query`, with a
    /// TSIG record carrying the error: unsigned after BADKEY and BADSIG
    /// (§5.2.1, §5.2.2: the client's key cannot be trusted), signed after
    /// BADTIME with our time as Other Data and the request's Time Signed
    /// (§5.2.3).
    pub(crate) fn answer(
        &self,
        metadata: &Metadata,
        query: Option<&Query>,
        now: u64,
    ) -> Result<Vec<u8>, ProtoError> {
        let mut response = Message::new(metadata.id, MessageType::Response, OpCode::Query);
        response.metadata = Metadata::response_from_request(metadata);
        response.metadata.response_code = ResponseCode::NotAuth;
        response.add_queries(query.cloned());
        let mut bytes = response.to_vec()?;
        let request = &self.request;
        let mut tsig = TSIG::new(
            request.algorithm.clone(),
            request.time,
            request.fudge,
            Vec::new(),
            request.oid,
            Some(self.error),
            Vec::new(),
        );
        if let Some((signer, request_mac)) = &self.signer {
            tsig = TSIG::new(
                request.algorithm.clone(),
                request.time,
                signer.fudge(),
                Vec::new(),
                request.oid,
                Some(self.error),
                now.to_be_bytes()[2..].to_vec(),
            );
            let digested = signer.encode_response_tbs(request_mac, &bytes, &tsig)?;
            let mac = signer
                .sign(&digested)
                .map_err(|e| ProtoError::from(e.to_string()))?;
            tsig = tsig.set_mac(mac);
        }
        append(&mut bytes, &make_tsig_record(self.name.clone(), tsig))?;
        Ok(bytes)
    }
}

/// The answer to a signed query (not a zone transfer): signed when its
/// TSIG is good (§5.3), NOTAUTH with the TSIG error when not (§5.2).
pub(crate) enum SignedAnswer {
    /// The answer, signed.
    Signed(Vec<u8>),
    /// The request's TSIG failed: this NOTAUTH answer.
    Rejected(Vec<u8>),
}

/// Answers the query `packet` (decoded as `request`) if it is signed; None
/// when it is not (it is answered as usual). `encode` builds the answer,
/// leaving the given bytes free for the TSIG record.
pub(crate) fn answer_query(
    key: Option<&TsigKey>,
    packet: &[u8],
    request: &MessageRequest,
    encode: impl FnOnce(usize) -> Result<Vec<u8>, ProtoError>,
) -> Option<Result<SignedAnswer, ProtoError>> {
    let now = now();
    let query = request.queries.queries().first().map(|q| q.original());
    match Verdict::of(key, packet, request.signature.as_deref(), now) {
        Verdict::Unsigned => None,
        Verdict::Rejected(rejection) => Some(
            rejection
                .answer(&request.metadata, query, now)
                .map(SignedAnswer::Rejected),
        ),
        Verdict::Valid(mut signing) => Some(encode(signing.room()).and_then(|mut bytes| {
            signing.sign(&mut bytes, now)?;
            Ok(SignedAnswer::Signed(bytes))
        })),
    }
}

/// Signs the request `message` (a NOTIFY) with `key` at `now` (§5.1); the
/// verifier checks the response's signature.
pub(crate) fn sign_request(
    message: &mut Message,
    key: &TsigKey,
    now: u64,
) -> Result<hickory_proto::rr::TSigVerifier, ProtoError> {
    message
        .finalize(&key.signer(), now)?
        .ok_or_else(|| ProtoError::from("no TSIG verifier"))
}

/// Appends `record` to the additional section of the encoded `message`
/// (§4.2: the TSIG record is the last record of the message).
fn append(message: &mut Vec<u8>, record: &Record<TSIG>) -> Result<(), ProtoError> {
    let mut tail = Vec::new();
    {
        let mut encoder = BinEncoder::new(&mut tail);
        // Its names stand alone: no pointer into a buffer it is not in.
        let mut encoder = encoder.with_name_encoding(NameEncoding::Uncompressed);
        record.emit(&mut encoder)?;
    }
    let count = u16::from_be_bytes([message[10], message[11]]);
    let count = count
        .checked_add(1)
        .ok_or_else(|| ProtoError::from("too many additional records for TSIG"))?;
    message[10..12].copy_from_slice(&count.to_be_bytes());
    message.extend_from_slice(&tail);
    Ok(())
}

#[cfg(test)]
mod tests {
    use hickory_proto::op::Query;
    use hickory_proto::rr::rdata::tsig::TsigAlgorithm;
    use hickory_proto::rr::{Name, RecordType};

    use super::*;

    /// A key file holding `transfer` with the secret "secret-secret-secret".
    fn key() -> (TsigKey, tempfile::TempDir) {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("transfer.key");
        let text =
            "key \"transfer\" { algorithm hmac-sha256; secret \"c2VjcmV0LXNlY3JldC1zZWNyZXQ=\"; };";
        std::fs::write(&file, text).unwrap();
        (TsigKey::load(&file).unwrap(), dir)
    }

    /// An AXFR request signed at `time` with `secret` under the name `transfer`.
    fn request(secret: &[u8], time: u64) -> Vec<u8> {
        let name = Name::from_ascii("transfer").unwrap();
        let signer = TSigner::new(secret.to_vec(), TsigAlgorithm::HmacSha256, name, 300).unwrap();
        let mut message = Message::query();
        message.add_query(Query::query(
            Name::from_ascii("clusterset.local.").unwrap(),
            RecordType::AXFR,
        ));
        message.finalize(&signer, time).unwrap();
        message.to_vec().unwrap()
    }

    fn verdict(key: Option<&TsigKey>, packet: &[u8], now: u64) -> &'static str {
        let message = Message::from_vec(packet).unwrap();
        match Verdict::of(key, packet, message.signature(), now) {
            Verdict::Unsigned => "unsigned",
            Verdict::Valid(_) => "valid",
            Verdict::Rejected(rejection) => rejection.label(),
        }
    }

    /// RFC 8945 §5.2: the key (no key configured: every key is unknown),
    /// then the MAC, then the time, within the fudge on both sides; a Time
    /// Signed too low to subtract the fudge from is refused, not a panic.
    #[test]
    fn requests_are_checked_key_mac_then_time() {
        let (key, _dir) = key();
        let now = 1_800_000_000;
        let good = request(b"secret-secret-secret", now);
        assert_eq!(verdict(Some(&key), &good, now), "valid");
        assert_eq!(verdict(Some(&key), &good, now + 300), "valid");
        assert_eq!(verdict(Some(&key), &good, now - 300), "valid");
        assert_eq!(verdict(Some(&key), &good, now + 301), "badtime");
        assert_eq!(verdict(None, &good, now), "badkey");
        let wrong = request(b"another-secret", now);
        assert_eq!(verdict(Some(&key), &wrong, now), "badsig");
        let ancient = request(b"secret-secret-secret", 10);
        assert_eq!(verdict(Some(&key), &ancient, now), "badsig");
        let mut unsigned = Message::from_vec(&good).unwrap();
        unsigned.take_signature();
        assert_eq!(
            verdict(Some(&key), &unsigned.to_vec().unwrap(), now),
            "unsigned"
        );
    }
}
