//! A UDP worker's own table of the cached responses it served lately. At
//! 100k queries/s the index's response cache (the service's entry in one
//! map, then the question in the entry's own map) spends most of its time
//! waiting on memory: each query touches about ten cold cache lines. A
//! repeated question here touches one slot of a flat array, then the bytes
//! it copies anyway (ARCHITECTURE.md, "Our own UDP loop, not hickory-server's").
//!
//! A slot is trusted only while the index's version is the one read before
//! its response was taken from the index: any update or commit voids every
//! slot at once, so this table never serves what the index no longer would.

use std::hash::BuildHasher;
use std::sync::Arc;

use foldhash::fast::RandomState;

use crate::dns::message::rotate::Layout;

/// Slots in the table (a power of two): 2 MiB per worker (64-byte slots;
/// one worker per core by default).
const SLOTS: usize = 1 << 15;
/// Longest question section: a 255-byte name, type and class.
const MAX_QUESTION: usize = 255 + 4;

/// What identifies a response: the question (name in any case, type,
/// class), the client's size limit and its EDNS DO bit (None: no EDNS).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Key {
    hash: u64,
    limit: u16,
    edns: Option<bool>,
}

/// A cached response as a worker serves it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Response {
    /// The encoded response (ID, RD, CD and question case still to patch).
    pub bytes: Arc<[u8]>,
    /// Whether our OPT record is still to be added.
    pub add_opt: bool,
    /// Where its answer's records lie, when they rotate (see `rotate`).
    pub layout: Option<Layout>,
}

impl Response {
    /// This response, to send with rotation `turn`.
    pub(crate) fn view(&self, turn: usize) -> View<'_> {
        View {
            bytes: &self.bytes,
            add_opt: self.add_opt,
            layout: self.layout.as_ref(),
            turn,
        }
    }
}

/// A response to send, borrowed, and the rotation to send it with.
#[derive(Clone, Copy, Debug)]
pub(crate) struct View<'a> {
    /// The encoded response.
    pub bytes: &'a [u8],
    /// Whether our OPT record is still to be added.
    pub add_opt: bool,
    /// Where its answer's records lie, when they rotate.
    pub layout: Option<&'a Layout>,
    /// Which record goes first.
    pub turn: usize,
}

/// A slot holds a [`Response`]'s fields side by side, so that it takes 64
/// bytes with the rotation counter.
#[derive(Default)]
struct Slot {
    key: Option<Key>,
    version: u64,
    bytes: Option<Arc<[u8]>>,
    layout: Option<Layout>,
    add_opt: bool,
    /// The rotation of the next response served from this slot.
    turn: u32,
}

/// Recently served responses of one worker thread.
pub(crate) struct Recent {
    slots: Box<[Slot]>,
    hasher: RandomState,
}

impl Default for Recent {
    fn default() -> Self {
        Self {
            slots: (0..SLOTS).map(|_| Slot::default()).collect(),
            hasher: RandomState::default(),
        }
    }
}

impl Recent {
    /// The key of a `question` section asked with this limit and EDNS; None
    /// if it is longer than a question can be. Inlined into the fast path:
    /// out of line it costs instructions per query (`bench/instructions.sh`).
    #[inline]
    pub(crate) fn key(&self, question: &[u8], limit: u16, edns: Option<bool>) -> Option<Key> {
        let mut lower = [0u8; MAX_QUESTION];
        let lower = lower.get_mut(..question.len())?;
        lower.copy_from_slice(question);
        // Type and class are numbers: only the name's bytes change case.
        let name_end = question.len().checked_sub(4)?;
        lower[..name_end].make_ascii_lowercase();
        Some(Key {
            hash: self.hasher.hash_one((&*lower, limit, edns)),
            limit,
            edns,
        })
    }

    /// Whether a response is stored for `key` while the index is at `version`.
    pub(crate) fn has(&self, key: Key, version: u64) -> bool {
        let slot = &self.slots[self.index(key)];
        slot.key == Some(key) && slot.version == version && slot.bytes.is_some()
    }

    /// The response stored for `key` while the index was at `version`, with
    /// the slot's next rotation (each call takes one: a name asked again and
    /// again goes round all its records). Another question can share a
    /// hash: the caller compares the question.
    pub(crate) fn get(&mut self, key: Key, version: u64) -> Option<View<'_>> {
        let at = self.index(key);
        let slot = &mut self.slots[at];
        if slot.key != Some(key) || slot.version != version {
            return None;
        }
        let turn = slot.turn;
        slot.turn = turn.wrapping_add(1);
        Some(View {
            bytes: slot.bytes.as_deref()?,
            add_opt: slot.add_opt,
            layout: slot.layout.as_ref(),
            turn: turn as usize,
        })
    }

    /// Keeps `response`, taken from the index at `version` (read before it),
    /// its rotations starting at `turn` (varied, so that a slot filled again
    /// after each change of the index does not always start at one record).
    pub(crate) fn put(&mut self, key: Key, version: u64, response: Response, turn: usize) {
        let at = self.index(key);
        // The low bits of the counter; truncation is the point.
        #[allow(clippy::cast_possible_truncation)]
        let turn = turn as u32;
        self.slots[at] = Slot {
            key: Some(key),
            version,
            bytes: Some(response.bytes),
            layout: response.layout,
            add_opt: response.add_opt,
            turn,
        };
    }

    fn index(&self, key: Key) -> usize {
        // The low bits of a 64-bit hash; truncation is the point.
        #[allow(clippy::cast_possible_truncation)]
        let low = key.hash as usize;
        low & (SLOTS - 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const QUESTION: &[u8] = b"\x03web\x04shop\x00\x00\x01\x00\x01";

    fn response(byte: u8) -> Response {
        Response {
            bytes: Arc::from(vec![byte; 20]),
            add_opt: true,
            layout: None,
        }
    }

    /// What `get` gives, owned, without the turn.
    fn got(recent: &mut Recent, key: Key, version: u64) -> Option<Response> {
        let view = recent.get(key, version)?;
        Some(Response {
            bytes: Arc::from(view.bytes),
            add_opt: view.add_opt,
            layout: view.layout.cloned(),
        })
    }

    /// Names compare without regard to case (RFC 4343 §3), so a resolver's
    /// 0x20 randomisation still finds the response; type and class do not fold.
    #[test]
    fn keys_fold_the_case_of_the_name_only_rfc4343_3() {
        let recent = Recent::default();
        let key = |q: &[u8]| recent.key(q, 1232, Some(false)).unwrap();
        assert_eq!(key(QUESTION), key(b"\x03wEb\x04ShOp\x00\x00\x01\x00\x01"));
        // Type 0x0041 vs 0x0061 ('A' vs 'a' as bytes): different questions.
        assert_ne!(
            key(b"\x03web\x04shop\x00\x00\x41\x00\x01"),
            key(b"\x03web\x04shop\x00\x00\x61\x00\x01")
        );
        assert_ne!(key(QUESTION), recent.key(QUESTION, 512, None).unwrap());
        assert_ne!(
            key(QUESTION),
            recent.key(QUESTION, 1232, Some(true)).unwrap()
        );
        assert!(recent.key(&[0; MAX_QUESTION + 1], 512, None).is_none());
    }

    /// A response is served only for its key and only while the index's
    /// version is the one it was taken at.
    #[test]
    fn a_response_is_served_for_its_key_at_its_version_only() {
        let mut recent = Recent::default();
        let key = recent.key(QUESTION, 512, None).unwrap();
        let other = recent.key(QUESTION, 1232, None).unwrap();
        assert!(recent.get(key, 7).is_none(), "empty");
        assert!(!recent.has(key, 7));
        recent.put(key, 7, response(1), 0);
        assert!(recent.has(key, 7));
        assert_eq!(got(&mut recent, key, 7), Some(response(1)));
        assert!(recent.get(key, 8).is_none(), "the index changed since");
        assert!(!recent.has(key, 8));
        assert!(recent.get(other, 7).is_none(), "another limit");
        recent.put(key, 8, response(2), 0);
        assert_eq!(got(&mut recent, key, 8), Some(response(2)));
    }

    /// ARCHITECTURE.md, "Load spread": each response served from a slot
    /// takes the next rotation, from where `put` started it.
    #[test]
    fn each_response_served_takes_the_next_rotation() {
        let mut recent = Recent::default();
        let key = recent.key(QUESTION, 512, None).unwrap();
        recent.put(key, 1, response(1), 41);
        let turns: Vec<usize> = (0..3).map(|_| recent.get(key, 1).unwrap().turn).collect();
        assert_eq!(turns, [41, 42, 43]);
        recent.put(key, 2, response(1), 7);
        assert_eq!(
            recent.get(key, 2).unwrap().turn,
            7,
            "started where put says"
        );
    }

    /// A slot, rotation counter included, takes 64 bytes (one cache line
    /// when aligned): the table's size is what keeps it fast.
    #[test]
    fn a_slot_takes_64_bytes() {
        assert_eq!(std::mem::size_of::<Slot>(), 64);
    }
}
