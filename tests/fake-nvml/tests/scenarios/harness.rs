//! Test plumbing: finding the built library, running a test body in a
//! child process of this binary with `FAKE_NVML_SCENARIO` set, and raw
//! access to what nvml-wrapper does not wrap (v1 memory, the test hooks).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use nvml_wrapper::error::NvmlError;
use nvml_wrapper::{Device, Nvml};
use nvml_wrapper_sys::bindings::{nvmlMemory_t, nvmlReturn_t};

/// Set in a child to the name of the one test it must run for real.
const CHILD_ENV: &str = "FAKE_NVML_TEST_CHILD";
const SCENARIO_ENV: &str = "FAKE_NVML_SCENARIO";
const LIB_NAME: &str = "libfake_nvml.so";

/// Declares a test that runs `$body` in a child process with the scenario
/// file `$scenario` (a name in `scenarios/`).
macro_rules! scenario_test {
    ($name:ident, $scenario:literal, $body:path) => {
        #[test]
        fn $name() {
            let test = $crate::harness::test_path(module_path!(), stringify!($name));
            let scenario = $crate::harness::scenario($scenario);
            if let Some(output) = $crate::harness::in_child(&test, Some(&scenario), $body) {
                $crate::harness::assert_passed(&test, &output);
            }
        }
    };
}

/// The library cargo built for this test run. `cargo test` links the
/// cdylib into `deps/`, beside this binary, but does not refresh the copy
/// in `target/<profile>/`, so `deps/` comes first (any profile, any
/// CARGO_TARGET_DIR); `FAKE_NVML_LIB` overrides.
pub fn lib_path() -> PathBuf {
    if let Some(path) = std::env::var_os("FAKE_NVML_LIB") {
        return path.into();
    }
    let exe = std::env::current_exe().expect("current_exe");
    let mut tried = Vec::new();
    let deps = exe.parent().map(Path::to_path_buf);
    let profile = deps.as_deref().and_then(Path::parent).map(Path::to_path_buf);
    let target_dir = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target"));
    let candidates = deps.into_iter().chain(profile).chain([target_dir.join("debug")]);
    for candidate in candidates.map(|dir| dir.join(LIB_NAME)) {
        if candidate.is_file() {
            return candidate;
        }
        tried.push(candidate);
    }
    panic!("{LIB_NAME} not found (tried {tried:?}); build it with `cargo build -p fake-nvml`");
}

pub fn scenario(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios").join(name)
}

pub fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures").join(name)
}

/// The name libtest knows a test by: its module path without the crate.
pub fn test_path(module: &str, name: &str) -> String {
    let module = module.split_once("::").map_or("", |(_, rest)| rest);
    if module.is_empty() {
        name.to_string()
    } else {
        format!("{module}::{name}")
    }
}

/// In the child, runs `body` and returns `None`; in the parent, re-runs
/// this binary filtered to `test` with the scenario set, and returns its
/// output.
pub fn in_child(test: &str, scenario: Option<&Path>, body: impl FnOnce()) -> Option<Output> {
    if std::env::var(CHILD_ENV).as_deref() == Ok(test) {
        body();
        return None;
    }
    let mut command = Command::new(std::env::current_exe().expect("current_exe"));
    command
        .args([test, "--exact", "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, test);
    match scenario {
        Some(path) => command.env(SCENARIO_ENV, path),
        None => command.env_remove(SCENARIO_ENV),
    };
    Some(command.output().expect("run the test binary again"))
}

/// The child passed, and really ran the test (a filter matching nothing
/// would pass too).
pub fn assert_passed(test: &str, output: &Output) {
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success() && stdout.contains("1 passed"),
        "child for {test} failed ({}):\n--- stdout\n{stdout}\n--- stderr\n{stderr}",
        output.status
    );
}

pub fn init() -> Result<Nvml, NvmlError> {
    let path = lib_path();
    Nvml::builder().lib_path(path.as_os_str()).init()
}

/// The fake's poll clock, through its test hook.
pub fn poll(nvml: &Nvml) -> u64 {
    // SAFETY: the hook's signature is `extern "C" fn() -> u64`.
    unsafe {
        let hook = nvml
            .lib()
            .__library
            .get::<unsafe extern "C" fn() -> u64>(b"fake_nvml_poll\0");
        hook.expect("fake_nvml_poll")()
    }
}

/// Calls asleep in a hang right now, through the fake's test hook.
pub fn hanging_calls(nvml: &Nvml) -> u32 {
    // SAFETY: the hook's signature is `extern "C" fn() -> c_uint`.
    unsafe {
        let hook = nvml
            .lib()
            .__library
            .get::<unsafe extern "C" fn() -> u32>(b"fake_nvml_hanging_calls\0");
        hook.expect("fake_nvml_hanging_calls")()
    }
}

/// `nvmlDeviceGetMemoryInfo` (v1), which nvml-wrapper 0.13 has no method
/// for; gpumemd calls it the same raw way when v2 is unsupported.
pub fn memory_v1(nvml: &Nvml, device: &Device) -> Result<nvmlMemory_t, nvmlReturn_t> {
    let symbol = nvml.lib().nvmlDeviceGetMemoryInfo.as_ref().expect("v1 symbol");
    let mut memory = nvmlMemory_t {
        total: 0,
        free: 0,
        used: 0,
    };
    // SAFETY: a handle from this library and a valid out-pointer.
    let code = unsafe { symbol(device.handle(), &mut memory) };
    if code == 0 { Ok(memory) } else { Err(code) }
}

/// Spins (yielding, never sleeping) until `condition` holds; panics at the
/// deadline.
pub fn wait_until(what: &str, deadline: Duration, condition: impl Fn() -> bool) {
    let start = Instant::now();
    while !condition() {
        assert!(start.elapsed() < deadline, "timed out waiting for {what}");
        std::thread::yield_now();
    }
}
