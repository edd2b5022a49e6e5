//! The NVML entry points the fake implements, and the names (NVML symbol,
//! short name or group) a scenario uses to aim a fault at some of them.

/// One exported NVML function, or a family that shares one behaviour
/// (`Init` covers `nvmlInit_v2` and `nvmlInitWithFlags`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Func {
    Init,
    Shutdown,
    DriverVersion,
    NvmlVersion,
    CudaVersion,
    Count,
    HandleByIndex,
    HandleByUuid,
    Uuid,
    Name,
    PciInfo,
    Index,
    MemoryV1,
    MemoryV2,
    ComputeProcesses,
    GraphicsProcesses,
    MpsProcesses,
    MigMode,
    MigCount,
    MigHandle,
    IsMig,
    MigParent,
    ProcessUtilization,
    UtilizationRates,
    CuInit,
    CuVersion,
    CuGetState,
    CuLock,
    CuCheckpoint,
    CuRestore,
    CuUnlock,
    EccMode,
    EccErrors,
    RemappedRows,
    RetiredPages,
    RetiredPending,
    FieldValues,
    EventTypes,
    RegisterEvents,
    EventSetCreate,
    EventSetWait,
    EventSetFree,
}

use Func::*;

/// (function, NVML symbols, short name).
const NAMES: &[(Func, &[&str], &str)] = &[
    (Init, &["nvmlInit_v2", "nvmlInitWithFlags"], "init"),
    (Shutdown, &["nvmlShutdown"], "shutdown"),
    (DriverVersion, &["nvmlSystemGetDriverVersion"], "driver_version"),
    (NvmlVersion, &["nvmlSystemGetNVMLVersion"], "nvml_version"),
    (
        CudaVersion,
        &["nvmlSystemGetCudaDriverVersion_v2", "nvmlSystemGetCudaDriverVersion"],
        "cuda_version",
    ),
    (Count, &["nvmlDeviceGetCount_v2"], "count"),
    (HandleByIndex, &["nvmlDeviceGetHandleByIndex_v2"], "handle_by_index"),
    (HandleByUuid, &["nvmlDeviceGetHandleByUUID"], "handle_by_uuid"),
    (Uuid, &["nvmlDeviceGetUUID"], "uuid"),
    (Name, &["nvmlDeviceGetName"], "name"),
    (PciInfo, &["nvmlDeviceGetPciInfo_v3"], "pci_info"),
    (Index, &["nvmlDeviceGetIndex"], "index"),
    (MemoryV1, &["nvmlDeviceGetMemoryInfo"], "memory_v1"),
    (MemoryV2, &["nvmlDeviceGetMemoryInfo_v2"], "memory_v2"),
    (
        ComputeProcesses,
        &["nvmlDeviceGetComputeRunningProcesses_v3"],
        "compute_processes",
    ),
    (
        GraphicsProcesses,
        &["nvmlDeviceGetGraphicsRunningProcesses_v3"],
        "graphics_processes",
    ),
    (
        MpsProcesses,
        &["nvmlDeviceGetMPSComputeRunningProcesses_v3"],
        "mps_processes",
    ),
    (MigMode, &["nvmlDeviceGetMigMode"], "mig_mode"),
    (MigCount, &["nvmlDeviceGetMaxMigDeviceCount"], "mig_count"),
    (MigHandle, &["nvmlDeviceGetMigDeviceHandleByIndex"], "mig_handle"),
    (IsMig, &["nvmlDeviceIsMigDeviceHandle"], "is_mig"),
    (
        MigParent,
        &["nvmlDeviceGetDeviceHandleFromMigDeviceHandle"],
        "mig_parent",
    ),
    (
        ProcessUtilization,
        &["nvmlDeviceGetProcessUtilization"],
        "process_utilization",
    ),
    (
        UtilizationRates,
        &["nvmlDeviceGetUtilizationRates"],
        "utilization_rates",
    ),
    (CuInit, &["cuInit"], "cu_init"),
    (CuVersion, &["cuDriverGetVersion"], "cu_version"),
    (CuGetState, &["cuCheckpointProcessGetState"], "cu_get_state"),
    (CuLock, &["cuCheckpointProcessLock"], "cu_lock"),
    (CuCheckpoint, &["cuCheckpointProcessCheckpoint"], "cu_checkpoint"),
    (CuRestore, &["cuCheckpointProcessRestore"], "cu_restore"),
    (CuUnlock, &["cuCheckpointProcessUnlock"], "cu_unlock"),
    (EccMode, &["nvmlDeviceGetEccMode"], "ecc_mode"),
    (EccErrors, &["nvmlDeviceGetTotalEccErrors"], "ecc_errors"),
    (RemappedRows, &["nvmlDeviceGetRemappedRows"], "remapped_rows"),
    (
        RetiredPages,
        &["nvmlDeviceGetRetiredPages", "nvmlDeviceGetRetiredPages_v2"],
        "retired_pages",
    ),
    (
        RetiredPending,
        &["nvmlDeviceGetRetiredPagesPendingStatus"],
        "retired_pending",
    ),
    (FieldValues, &["nvmlDeviceGetFieldValues"], "field_values"),
    (EventTypes, &["nvmlDeviceGetSupportedEventTypes"], "event_types"),
    (RegisterEvents, &["nvmlDeviceRegisterEvents"], "register_events"),
    (EventSetCreate, &["nvmlEventSetCreate"], "event_set_create"),
    (EventSetWait, &["nvmlEventSetWait_v2"], "event_set_wait"),
    (EventSetFree, &["nvmlEventSetFree"], "event_set_free"),
];

/// The CUDA driver calls (the checkpoint stand-in, `cuda.rs`).
const CUDA_GROUP: &[Func] = &[CuInit, CuVersion, CuGetState, CuLock, CuCheckpoint, CuRestore, CuUnlock];

/// Functions answering about one device (they take a handle, or an index
/// or UUID naming one): what a GPU that fell off the bus stops answering.
const DEVICE_GROUP: &[Func] = &[
    HandleByIndex,
    HandleByUuid,
    Uuid,
    Name,
    PciInfo,
    Index,
    MemoryV1,
    MemoryV2,
    ComputeProcesses,
    GraphicsProcesses,
    MpsProcesses,
    MigMode,
    MigCount,
    MigHandle,
    IsMig,
    MigParent,
    ProcessUtilization,
    UtilizationRates,
    EccMode,
    EccErrors,
    RemappedRows,
    RetiredPages,
    RetiredPending,
    FieldValues,
    EventTypes,
    RegisterEvents,
];

/// A set of functions, as a bit mask over `Func`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FuncSet(u64);

impl FuncSet {
    pub fn of(funcs: &[Func]) -> Self {
        Self(funcs.iter().fold(0, |bits, f| bits | Self::bit(*f)))
    }

    pub fn contains(self, func: Func) -> bool {
        self.0 & Self::bit(func) != 0
    }

    pub fn union(self, other: Self) -> Self {
        Self(self.0 | other.0)
    }

    pub fn intersects(self, other: Self) -> bool {
        self.0 & other.0 != 0
    }

    pub fn device_group() -> Self {
        Self::of(DEVICE_GROUP)
    }

    /// Whether `func` is a CUDA driver call (its own init flag and codes).
    pub fn is_cuda(func: Func) -> bool {
        CUDA_GROUP.contains(&func)
    }

    /// The short name a scenario (and the call log) uses for `func`.
    pub fn short_name(func: Func) -> &'static str {
        NAMES
            .iter()
            .find(|(f, _, _)| *f == func)
            .map_or("?", |(_, _, short)| short)
    }

    fn bit(func: Func) -> u64 {
        1 << func as u32
    }

    /// Resolves one name: an NVML symbol, a short name, `memory` (both
    /// memory calls), `processes` (the three lists), `device`, `system` or
    /// `all` / `*`.
    pub fn parse(name: &str) -> Result<Self, String> {
        let group = match name {
            "all" | "*" => Some(NAMES.iter().map(|(f, _, _)| *f).collect::<Vec<_>>()),
            "device" => Some(DEVICE_GROUP.to_vec()),
            "system" => Some(vec![DriverVersion, NvmlVersion, CudaVersion]),
            "memory" => Some(vec![MemoryV1, MemoryV2]),
            "processes" => Some(vec![ComputeProcesses, GraphicsProcesses, MpsProcesses]),
            "cuda" => Some(CUDA_GROUP.to_vec()),
            "health" => Some(vec![
                EccMode,
                EccErrors,
                RemappedRows,
                RetiredPages,
                RetiredPending,
                FieldValues,
            ]),
            _ => None,
        };
        if let Some(funcs) = group {
            return Ok(Self::of(&funcs));
        }
        NAMES
            .iter()
            .find(|(_, symbols, short)| *short == name || symbols.contains(&name))
            .map(|(func, _, _)| Self::of(&[*func]))
            .ok_or_else(|| format!("unknown NVML function {name:?}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_resolve() {
        let v2 = FuncSet::parse("nvmlDeviceGetMemoryInfo_v2").unwrap();
        assert!(v2.contains(MemoryV2) && !v2.contains(MemoryV1));
        assert_eq!(FuncSet::parse("memory_v2"), Ok(v2));
        let memory = FuncSet::parse("memory").unwrap();
        assert!(memory.contains(MemoryV1) && memory.contains(MemoryV2));
        let device = FuncSet::parse("device").unwrap();
        assert!(device.contains(HandleByIndex) && !device.contains(Count));
        assert!(FuncSet::parse("*").unwrap().contains(Count));
        assert!(FuncSet::parse("nvmlDeviceGetFanSpeed").is_err());
        assert_eq!(FuncSet::short_name(ComputeProcesses), "compute_processes");
    }

    #[test]
    fn every_func_is_named() {
        let all = FuncSet::parse("all").unwrap();
        for func in DEVICE_GROUP.iter().chain(&[Init, Shutdown, Count, CudaVersion]) {
            assert!(all.contains(*func), "{func:?}");
        }
    }
}
