//! A zone transfer client over TCP: AXFR, and IXFR with a serial.

use std::net::SocketAddr;
use std::time::Duration;

use hickory_proto::op::{Message, ResponseCode};
use hickory_proto::rr::rdata::SOA;
use hickory_proto::rr::{Name, RData, Record, RecordType};
use test_support::question;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// What a transfer request got: the messages, in order.
#[derive(Debug)]
pub struct Transfer {
    /// Every message received.
    pub messages: Vec<Message>,
}

impl Transfer {
    /// The response code of the first message.
    pub fn code(&self) -> ResponseCode {
        self.messages[0].metadata.response_code
    }

    /// Every answer record of every message, in order.
    pub fn records(&self) -> Vec<Record> {
        self.messages
            .iter()
            .flat_map(|m| m.answers.iter().cloned())
            .collect()
    }
}

/// The serial of a SOA record.
pub fn serial_of(record: &Record) -> u32 {
    match &record.data {
        RData::SOA(soa) => soa.serial,
        other => panic!("SOA expected, got {other:?}"),
    }
}

/// Asks `addr` for AXFR of `zone` (or IXFR from `ixfr_serial`) over TCP and
/// reads messages until the closing SOA, an error, or a lone SOA (IXFR: the
/// client is current).
pub async fn transfer(addr: SocketAddr, zone: &str, ixfr_serial: Option<u32>) -> Transfer {
    let mut request = question(zone, RecordType::AXFR);
    request.metadata.recursion_desired = false;
    if let Some(serial) = ixfr_serial {
        request.queries[0].set_query_type(RecordType::IXFR);
        let soa = SOA::new(Name::root(), Name::root(), serial, 0, 0, 0, 0);
        let name = Name::from_ascii(zone).expect("a zone name");
        request
            .authorities
            .push(Record::from_rdata(name, 0, RData::SOA(soa)));
    }
    let bytes = request.to_vec().expect("the request encodes");
    let exchange = async {
        let mut stream = TcpStream::connect(addr).await?;
        let len = u16::try_from(bytes.len()).expect("a small request");
        stream.write_all(&len.to_be_bytes()).await?;
        stream.write_all(&bytes).await?;
        let mut messages = Vec::new();
        let mut soas = 0;
        loop {
            let len = stream.read_u16().await?;
            let mut reply = vec![0u8; usize::from(len)];
            stream.read_exact(&mut reply).await?;
            let message = Message::from_vec(&reply).expect("a transfer message decodes");
            assert_eq!(message.metadata.id, request.metadata.id, "id echoed");
            let code = message.metadata.response_code;
            soas += message
                .answers
                .iter()
                .filter(|r| r.record_type() == RecordType::SOA)
                .count();
            let lone_soa = messages.is_empty() && message.answers.len() == 1 && soas == 1;
            messages.push(message);
            if code != ResponseCode::NoError || soas >= 2 || (lone_soa && ixfr_serial.is_some()) {
                return std::io::Result::Ok(messages);
            }
        }
    };
    let messages = tokio::time::timeout(Duration::from_secs(5), exchange)
        .await
        .expect("the transfer ends in time")
        .expect("the transfer reads");
    Transfer { messages }
}
