//! Compile-time proof that every export has exactly the signature
//! nvml-wrapper-sys loads it as: a mismatch fails to build this test.

use nvml_wrapper_sys::bindings::NvmlLib;

use super::*;

/// Ties an export to the type of the `NvmlLib` field that nvml-wrapper
/// calls through: the field fixes `T` first, then the export's fn item
/// must coerce to that fn pointer type.
fn same<T, E>(_field: fn(&NvmlLib) -> &Result<T, E>) -> impl FnOnce(T) {
    |_export| {}
}

#[test]
fn exports_match_nvml_wrapper_sys_signatures() {
    same(|l| &l.nvmlInit_v2)(nvmlInit_v2);
    same(|l| &l.nvmlInitWithFlags)(nvmlInitWithFlags);
    same(|l| &l.nvmlShutdown)(nvmlShutdown);
    same(|l| &l.nvmlErrorString)(nvmlErrorString);
    same(|l| &l.nvmlSystemGetDriverVersion)(nvmlSystemGetDriverVersion);
    same(|l| &l.nvmlSystemGetNVMLVersion)(nvmlSystemGetNVMLVersion);
    same(|l| &l.nvmlSystemGetCudaDriverVersion)(nvmlSystemGetCudaDriverVersion);
    same(|l| &l.nvmlSystemGetCudaDriverVersion_v2)(nvmlSystemGetCudaDriverVersion_v2);
    same(|l| &l.nvmlDeviceGetCount_v2)(nvmlDeviceGetCount_v2);
    same(|l| &l.nvmlDeviceGetHandleByIndex_v2)(nvmlDeviceGetHandleByIndex_v2);
    same(|l| &l.nvmlDeviceGetHandleByUUID)(nvmlDeviceGetHandleByUUID);
    same(|l| &l.nvmlDeviceGetUUID)(nvmlDeviceGetUUID);
    same(|l| &l.nvmlDeviceGetName)(nvmlDeviceGetName);
    same(|l| &l.nvmlDeviceGetPciInfo_v3)(nvmlDeviceGetPciInfo_v3);
    same(|l| &l.nvmlDeviceGetIndex)(nvmlDeviceGetIndex);
    same(|l| &l.nvmlDeviceGetMemoryInfo)(nvmlDeviceGetMemoryInfo);
    same(|l| &l.nvmlDeviceGetMemoryInfo_v2)(nvmlDeviceGetMemoryInfo_v2);
    same(|l| &l.nvmlDeviceGetComputeRunningProcesses_v3)(nvmlDeviceGetComputeRunningProcesses_v3);
    same(|l| &l.nvmlDeviceGetGraphicsRunningProcesses_v3)(nvmlDeviceGetGraphicsRunningProcesses_v3);
    same(|l| &l.nvmlDeviceGetMPSComputeRunningProcesses_v3)(nvmlDeviceGetMPSComputeRunningProcesses_v3);
    same(|l| &l.nvmlDeviceGetMigMode)(nvmlDeviceGetMigMode);
    same(|l| &l.nvmlDeviceGetMaxMigDeviceCount)(nvmlDeviceGetMaxMigDeviceCount);
    same(|l| &l.nvmlDeviceGetMigDeviceHandleByIndex)(nvmlDeviceGetMigDeviceHandleByIndex);
    same(|l| &l.nvmlDeviceIsMigDeviceHandle)(nvmlDeviceIsMigDeviceHandle);
    same(|l| &l.nvmlDeviceGetDeviceHandleFromMigDeviceHandle)(nvmlDeviceGetDeviceHandleFromMigDeviceHandle);
    same(|l| &l.nvmlDeviceGetProcessUtilization)(nvmlDeviceGetProcessUtilization);
    same(|l| &l.nvmlDeviceGetUtilizationRates)(nvmlDeviceGetUtilizationRates);
    same(|l| &l.nvmlDeviceGetEccMode)(nvmlDeviceGetEccMode);
    same(|l| &l.nvmlDeviceGetTotalEccErrors)(nvmlDeviceGetTotalEccErrors);
    same(|l| &l.nvmlDeviceGetRemappedRows)(nvmlDeviceGetRemappedRows);
    same(|l| &l.nvmlDeviceGetRetiredPages)(nvmlDeviceGetRetiredPages);
    same(|l| &l.nvmlDeviceGetRetiredPages_v2)(nvmlDeviceGetRetiredPages_v2);
    same(|l| &l.nvmlDeviceGetRetiredPagesPendingStatus)(nvmlDeviceGetRetiredPagesPendingStatus);
    same(|l| &l.nvmlDeviceGetFieldValues)(nvmlDeviceGetFieldValues);
    same(|l| &l.nvmlDeviceGetSupportedEventTypes)(nvmlDeviceGetSupportedEventTypes);
    same(|l| &l.nvmlEventSetCreate)(nvmlEventSetCreate);
    same(|l| &l.nvmlDeviceRegisterEvents)(nvmlDeviceRegisterEvents);
    same(|l| &l.nvmlEventSetWait_v2)(nvmlEventSetWait_v2);
    same(|l| &l.nvmlEventSetFree)(nvmlEventSetFree);
}
