//! One record of the BPF side's ring buffer (bpf/ledger.bpf.c `struct
//! event`): its 32-byte layout, the call and kind numbers, and the driver
//! call names. Owns decoding only; it must not keep books or touch BPF.

/// The driver call an event comes from (`enum call` in the C source).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Call {
    Alloc,
    Pitch,
    Managed,
    Async,
    Pool,
    Create,
    Free,
    FreeAsync,
    Release,
}

impl Call {
    fn from_u8(n: u8) -> Option<Call> {
        Some(match n {
            1 => Call::Alloc,
            2 => Call::Pitch,
            3 => Call::Managed,
            4 => Call::Async,
            5 => Call::Pool,
            6 => Call::Create,
            7 => Call::Free,
            8 => Call::FreeAsync,
            9 => Call::Release,
            _ => return None,
        })
    }

    /// The driver symbol.
    pub fn symbol(self) -> &'static str {
        match self {
            Call::Alloc => "cuMemAlloc_v2",
            Call::Pitch => "cuMemAllocPitch_v2",
            Call::Managed => "cuMemAllocManaged",
            Call::Async => "cuMemAllocAsync",
            Call::Pool => "cuMemAllocFromPoolAsync",
            Call::Create => "cuMemCreate",
            Call::Free => "cuMemFree_v2",
            Call::FreeAsync => "cuMemFreeAsync",
            Call::Release => "cuMemRelease",
        }
    }

    /// A generic allocation handle (cuMemCreate/cuMemRelease) rather than a
    /// device address: the two live in different key spaces.
    pub fn is_handle(self) -> bool {
        matches!(self, Call::Create | Call::Release)
    }
}

/// What happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// `addr` (or handle) now holds `size` bytes.
    Alloc,
    /// The call returned `code` for `size` bytes.
    Fail,
    /// `addr` (or handle) is given back.
    Free,
}

/// One decoded event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Event {
    pub pid: u32,
    pub kind: Kind,
    pub call: Call,
    /// The CUresult of a failed call; 2 is CUDA_ERROR_OUT_OF_MEMORY.
    pub code: i32,
    pub addr: u64,
    pub size: u64,
}

/// CUDA_ERROR_OUT_OF_MEMORY.
pub const OUT_OF_MEMORY: i32 = 2;

/// The size of one record.
pub const SIZE: usize = 32;

fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

fn u64_at(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(b.get(at..at + 8)?.try_into().ok()?))
}

impl Event {
    /// Decodes one record; `None` for a short record or unknown numbers.
    pub fn decode(b: &[u8]) -> Option<Event> {
        if b.len() < SIZE {
            return None;
        }
        let kind = match b[4] {
            1 => Kind::Alloc,
            2 => Kind::Fail,
            3 => Kind::Free,
            _ => return None,
        };
        Some(Event {
            pid: u32_at(b, 0)?,
            kind,
            call: Call::from_u8(b[5])?,
            code: i32::from_le_bytes(b.get(8..12)?.try_into().ok()?),
            addr: u64_at(b, 16)?,
            size: u64_at(b, 24)?,
        })
    }

    /// Encodes as the BPF side writes it (for tests and benches).
    pub fn encode(&self) -> [u8; SIZE] {
        let mut b = [0u8; SIZE];
        b[0..4].copy_from_slice(&self.pid.to_le_bytes());
        b[4] = match self.kind {
            Kind::Alloc => 1,
            Kind::Fail => 2,
            Kind::Free => 3,
        };
        b[5] = self.call as u8 + 1;
        b[8..12].copy_from_slice(&self.code.to_le_bytes());
        b[16..24].copy_from_slice(&self.addr.to_le_bytes());
        b[24..32].copy_from_slice(&self.size.to_le_bytes());
        b
    }
}
