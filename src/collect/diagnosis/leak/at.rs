//! [`At`]: where a sample time falls among a leak tracker's buckets. Owns
//! that arithmetic only; must not keep state or judge.

/// Where a sample time falls among the buckets.
#[derive(Debug, Clone, Copy)]
pub(super) struct At {
    pub(super) t: f64,
    /// `floor(t / bucket_width)`, saturating for absurd `t`.
    pub(super) idx: i64,
    /// How far into that bucket (0..1).
    pub(super) into: f64,
    /// Seconds per bucket.
    pub(super) width: f64,
}

impl At {
    pub(super) fn new(t: f64, width: f64) -> Self {
        let pos = t / width;
        let floor = pos.floor();
        // `as` saturates, so absurd times still give ordered indices.
        At {
            t,
            idx: floor as i64,
            into: pos - floor,
            width,
        }
    }
}
