//! The time-to-full forecast as a snapshot carries it: who makes a GPU's
//! memory grow and how fast. Plain data; the forecast itself is computed
//! in `diagnosis::forecast`, and this module must not judge anything.

use arcstr::ArcStr;
use serde::{Deserialize, Serialize};

use super::Holder;

/// One holder whose memory grows steadily on a device (its growth is
/// confirmed by the leak detector's verdict, not a single slope).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Grower {
    /// The process; `None` for memory no listed process accounts for.
    pub pid: Option<u32>,
    pub comm: ArcStr,
    pub user: ArcStr,
    /// Live, zombie, exited or unattributed.
    pub holder: Option<Holder>,
    pub bytes_per_second: f64,
}
