//! One gzip member made of a compressed head that is kept and a tail that
//! is compressed per request: the head is the gzip header and a raw
//! deflate stream sync-flushed (byte-aligned, no final block), the tail a
//! second raw deflate stream finished after it, and the trailer's CRC32
//! runs on from the head's. Deflate blocks may follow one another so, and a
//! later stream never refers back, so the result is one ordinary member
//! that every gzip reader takes (unlike two concatenated members, which
//! some clients stop reading after the first). Fastest level, as the
//! response layer (`super::compression`). It owns the byte layout only;
//! what is cached, and when, is `exposition`'s.

use axum::body::Bytes;
use flate2::{Compress, Compression, FlushCompress, Status};

use crate::metrics::{SPILL_CHUNK, Spill};

/// The gzip header, no name or time; OS 255 (unknown), as flate2 writes it.
const HEADER: [u8; 10] = [0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 0xff];

/// A compressed head: the header and the sync-flushed deflate of `len`
/// plain bytes whose CRC32 is `crc`.
#[derive(Clone)]
pub struct Head {
    pub bytes: Bytes,
    crc: u32,
    len: u64,
}

/// Why a body could not be compressed (then it goes through the layer).
#[derive(Debug, thiserror::Error)]
pub enum GzipError {
    #[error("deflate failed: {0}")]
    Deflate(#[from] flate2::CompressError),
    #[error("deflate made no progress")]
    Stalled,
}

/// A raw deflate stream being written, with the CRC32 and length of what
/// went in. A deflate error is kept (a [`Spill`] cannot return one) and
/// given back when the stream is ended.
struct Deflater {
    c: Compress,
    out: Vec<u8>,
    crc: crc32fast::Hasher,
    len: u64,
    failed: Option<GzipError>,
}

impl Deflater {
    fn new(out: Vec<u8>, crc: crc32fast::Hasher, len: u64) -> Self {
        Self {
            c: Compress::new(Compression::fast(), false),
            out,
            crc,
            len,
            failed: None,
        }
    }

    fn feed(&mut self, plain: &[u8], flush: FlushCompress) {
        if self.failed.is_some() {
            return;
        }
        self.crc.update(plain);
        self.len += plain.len() as u64;
        if let Err(e) = deflate(&mut self.c, plain, &mut self.out, flush) {
            self.failed = Some(e);
        }
    }

    /// The stream ended by `flush` and what was written, or the first error.
    fn end(mut self, flush: FlushCompress) -> Result<(Vec<u8>, crc32fast::Hasher, u64), GzipError> {
        self.feed(&[], flush);
        match self.failed {
            Some(e) => Err(e),
            None => Ok((self.out, self.crc, self.len)),
        }
    }
}

/// A head compressed as its text is written ([`Spill`]): the whole text
/// never exists at once. End it with [`HeadWriter::finish`].
pub struct HeadWriter(Deflater);

impl Default for HeadWriter {
    fn default() -> Self {
        Self::new()
    }
}

impl HeadWriter {
    pub fn new() -> Self {
        let mut out = Vec::with_capacity(SPILL_CHUNK);
        out.extend_from_slice(&HEADER);
        Self(Deflater::new(out, crc32fast::Hasher::new(), 0))
    }

    /// The head of everything spilled into it.
    ///
    /// # Errors
    /// When deflate failed at any chunk.
    pub fn finish(self) -> Result<Head, GzipError> {
        let (out, crc, len) = self.0.end(FlushCompress::Sync)?;
        Ok(Head {
            bytes: fitted(out).into(),
            crc: crc.finalize(),
            len,
        })
    }
}

impl Spill for HeadWriter {
    fn spill(&mut self, text: &[u8]) {
        self.0.feed(text, FlushCompress::None);
    }
}

/// The rest of a member after a [`Head`], compressed as its text is
/// written. End it with [`TailWriter::finish`].
pub struct TailWriter(Deflater);

impl TailWriter {
    pub fn new(head: &Head) -> Self {
        let crc = crc32fast::Hasher::new_with_initial_len(head.crc, head.len);
        Self(Deflater::new(Vec::with_capacity(SPILL_CHUNK / 4), crc, head.len))
    }

    /// The tail: the deflate stream finished, then the CRC32 and length
    /// (mod 2^32) of head and tail together.
    ///
    /// # Errors
    /// When deflate failed at any chunk.
    pub fn finish(self) -> Result<Bytes, GzipError> {
        let (mut out, crc, len) = self.0.end(FlushCompress::Finish)?;
        out.extend_from_slice(&crc.finalize().to_le_bytes());
        // ISIZE is the length modulo 2^32 (RFC 1952): the cut is the format's.
        out.extend_from_slice(&(len as u32).to_le_bytes());
        Ok(out.into())
    }
}

impl Spill for TailWriter {
    fn spill(&mut self, text: &[u8]) {
        self.0.feed(text, FlushCompress::None);
    }
}

/// Compresses `plain`, held whole, as the head of a member.
///
/// # Errors
/// When deflate fails.
pub fn head(plain: &[u8]) -> Result<Head, GzipError> {
    let mut w = HeadWriter::new();
    w.spill(plain);
    w.finish()
}

/// The rest of the member after `head`: `plain`, held whole, compressed
/// (the daemon streams its tails; tests compare against this).
///
/// # Errors
/// When deflate fails.
#[cfg(test)]
pub fn tail(head: &Head, plain: &[u8]) -> Result<Bytes, GzipError> {
    let mut w = TailWriter::new(head);
    w.spill(plain);
    w.finish()
}

/// `out` without most of its spare capacity: a head is kept per snapshot,
/// and the doubling below may leave it half empty (a tail is dropped once
/// sent, so it keeps its room).
fn fitted(mut out: Vec<u8>) -> Vec<u8> {
    if out.capacity() > out.len() + out.len() / 8 {
        out.shrink_to_fit();
    }
    out
}

/// `input` fed to the raw deflate stream `c`, its output appended to `out`.
/// `None` leaves what deflate buffered inside it; `Sync` ends byte-aligned
/// and open; `Finish` writes the final block.
fn deflate(c: &mut Compress, input: &[u8], out: &mut Vec<u8>, flush: FlushCompress) -> Result<(), GzipError> {
    let start = c.total_in();
    loop {
        if out.capacity() - out.len() < 1024 {
            out.reserve(out.capacity().max(4096));
        }
        let (at, before) = ((c.total_in() - start) as usize, c.total_out());
        let status = c.compress_vec(&input[at.min(input.len())..], out, flush)?;
        let all_in = (c.total_in() - start) as usize >= input.len();
        // Done once the stream ended, or all input is in and the call left
        // room in `out`, so nothing of a sync flush is pending.
        let room = out.capacity() > out.len();
        match (status, flush) {
            (Status::StreamEnd, _) => return Ok(()),
            (_, FlushCompress::Finish) => {}
            _ if all_in && room => return Ok(()),
            _ => {}
        }
        if status == Status::BufError && (c.total_in() - start) as usize == at && c.total_out() == before {
            return Err(GzipError::Stalled);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::io::Read;

    use super::*;

    fn gunzip(parts: &[&[u8]]) -> Vec<u8> {
        let member: Vec<u8> = parts.concat();
        // GzDecoder reads one member only: a second member would be lost.
        let mut out = Vec::new();
        let mut d = flate2::read::GzDecoder::new(&member[..]);
        d.read_to_end(&mut out).unwrap_or_default();
        out
    }

    #[test]
    fn head_and_tail_make_one_member_of_both_texts() {
        let big: Vec<u8> = (0..200_000u32)
            .flat_map(|i| format!("m{{i=\"{}\"}} {i}\n", i % 97).into_bytes())
            .collect();
        for (h, t) in [
            (&big[..], &b"tail 1\n# EOF\n"[..]),
            (b"", b"only a tail"),
            (b"only a head", b""),
            (b"", b""),
            (&big[..1000], &big[..]),
        ] {
            let Ok(head) = head(h) else { panic!("head") };
            let Ok(tail) = tail(&head, t) else { panic!("tail") };
            assert_eq!(
                gunzip(&[&head.bytes, &tail]),
                [h, t].concat(),
                "{} + {}",
                h.len(),
                t.len()
            );
        }
    }

    #[test]
    fn text_fed_in_pieces_makes_the_member_of_the_whole() {
        let big: Vec<u8> = (0..300_000u32)
            .flat_map(|i| format!("g{{pid=\"{}\"}} {}\n", i % 5000, i * 3).into_bytes())
            .collect();
        let (h, t) = big.split_at(big.len() / 3);
        for piece in [97usize, 700, SPILL_CHUNK, SPILL_CHUNK * 3 + 5] {
            let mut hw = HeadWriter::new();
            h.chunks(piece).for_each(|c| hw.spill(c));
            hw.spill(b"");
            let Ok(head) = hw.finish() else { panic!("head") };
            let mut tw = TailWriter::new(&head);
            t.chunks(piece).for_each(|c| tw.spill(c));
            let Ok(tail) = tw.finish() else { panic!("tail") };
            assert_eq!(gunzip(&[&head.bytes, &tail]), big, "pieces of {piece}");
        }
    }

    #[test]
    fn one_head_serves_different_tails() {
        let Ok(head) = head(b"shared part\n") else {
            panic!("head")
        };
        for t in [&b"a 1\n"[..], b"a 2\n", b""] {
            let Ok(tail) = tail(&head, t) else { panic!("tail") };
            assert_eq!(gunzip(&[&head.bytes, &tail]), [&b"shared part\n"[..], t].concat());
        }
    }
}
