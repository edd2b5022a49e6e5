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

/// Compresses `plain` as the head of a member.
///
/// # Errors
/// When deflate fails.
pub fn head(plain: &[u8]) -> Result<Head, GzipError> {
    let mut out = Vec::with_capacity(HEADER.len() + plain.len() / 6 + 1024);
    out.extend_from_slice(&HEADER);
    deflate(plain, &mut out, FlushCompress::Sync)?;
    Ok(Head {
        bytes: out.into(),
        crc: crc32fast::hash(plain),
        len: plain.len() as u64,
    })
}

/// The rest of the member after `head`: `plain` compressed and finished,
/// then the CRC32 and length (mod 2^32) of head and tail together.
///
/// # Errors
/// When deflate fails.
pub fn tail(head: &Head, plain: &[u8]) -> Result<Bytes, GzipError> {
    let mut out = Vec::with_capacity(plain.len() / 2 + 1024);
    deflate(plain, &mut out, FlushCompress::Finish)?;
    let mut crc = crc32fast::Hasher::new_with_initial_len(head.crc, head.len);
    crc.update(plain);
    out.extend_from_slice(&crc.finalize().to_le_bytes());
    // ISIZE is the length modulo 2^32 (RFC 1952): the cut is the format's.
    let total = (head.len + plain.len() as u64) as u32;
    out.extend_from_slice(&total.to_le_bytes());
    Ok(out.into())
}

/// `input` as one raw deflate stream appended to `out`, ended by `flush`
/// (`Sync`: byte-aligned and open; `Finish`: with its final block).
fn deflate(input: &[u8], out: &mut Vec<u8>, flush: FlushCompress) -> Result<(), GzipError> {
    let mut c = Compress::new(Compression::fast(), false);
    loop {
        if out.capacity() - out.len() < 1024 {
            out.reserve(out.capacity().max(4096));
        }
        let (at, before) = (c.total_in() as usize, c.total_out());
        let status = c.compress_vec(&input[at.min(input.len())..], out, flush)?;
        if status == Status::BufError && c.total_in() as usize == at && c.total_out() == before {
            return Err(GzipError::Stalled);
        }
        let all_in = c.total_in() as usize >= input.len();
        // Done once the stream ended, or (sync) all input is in and the
        // call left room in `out`, so nothing of the flush is pending.
        let room = out.capacity() > out.len();
        match (status, flush) {
            (Status::StreamEnd, _) => return Ok(()),
            (_, FlushCompress::Sync) if all_in && room => return Ok(()),
            _ => {}
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
