//! The process-wide state behind every exported symbol (init count, poll
//! clock, loaded scenario, fault counters, the optional call log) and the
//! one path every call takes through it: check init, resolve the device,
//! apply faults, hang without holding the lock, answer. Catches panics so
//! none crosses FFI.

use std::fs::File;
use std::io::Write;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use nvml_wrapper_sys::bindings::nvmlReturn_t;

use crate::codes::{SUCCESS, UNINITIALIZED, UNKNOWN};
use crate::cuda::{self, Cuda};
use crate::funcs::{Func, FuncSet};
use crate::model::{DevRef, Device, Scenario};
use crate::scenario;

/// The environment variable naming the scenario file.
pub const SCENARIO_ENV: &str = "FAKE_NVML_SCENARIO";

/// The environment variable naming a file that gets one line per call made
/// while initialised: `<poll> <short name> <device> <return code>` (README,
/// "Call log").
pub const CALL_LOG_ENV: &str = "FAKE_NVML_CALL_LOG";

pub struct Loaded {
    pub scenario: Scenario,
    /// The fleet as of the current poll: `scenario.devices` plus every
    /// timeline step up to now.
    pub devices: Vec<Device>,
    text: String,
}

pub struct Global {
    init_attempts: u64,
    /// NVML counts inits and shutdowns; only the last shutdown uninitialises.
    refcount: u32,
    /// Polls so far (count calls and memory sweeps, see `sweep`); survives
    /// shutdown and re-init.
    pub poll: u64,
    /// The (memory call, GPU) pairs seen since the poll clock last ticked.
    swept: Vec<(Func, usize)>,
    /// `FAKE_NVML_CALL_LOG`, opened at the first init.
    call_log: Option<File>,
    /// How often each fault has fired, for `times`.
    fired: Vec<u32>,
    pub loaded: Option<Loaded>,
    /// The CUDA stand-in's state, beside NVML's so both see one fleet.
    pub cuda: Cuda,
}

static GLOBAL: Mutex<Global> = Mutex::new(Global {
    init_attempts: 0,
    refcount: 0,
    poll: 0,
    swept: Vec::new(),
    call_log: None,
    fired: Vec::new(),
    loaded: None,
    cuda: Cuda {
        initialised: false,
        touched: Vec::new(),
    },
});

/// Calls currently sleeping in a hang; lets a test wait for "the call is
/// stuck now" without sleeping itself.
pub static HANGING: AtomicU32 = AtomicU32::new(0);

/// A panic while the lock is held must not wedge every later call, so a
/// poisoned lock is taken over as is.
fn lock() -> MutexGuard<'static, Global> {
    GLOBAL.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Runs an export body; a panic becomes NVML_ERROR_UNKNOWN.
pub fn guard(body: impl FnOnce() -> nvmlReturn_t) -> nvmlReturn_t {
    catch_unwind(AssertUnwindSafe(body)).unwrap_or(UNKNOWN)
}

impl Global {
    pub fn devices(&self) -> &[Device] {
        self.loaded.as_ref().map_or(&[], |l| &l.devices)
    }

    /// The fleet, for the CUDA stand-in's checkpoint (which edits it).
    pub fn devices_mut(&mut self) -> &mut [Device] {
        self.loaded.as_mut().map_or(&mut [], |l| &mut l.devices)
    }

    pub fn scenario(&self) -> Option<&Scenario> {
        self.loaded.as_ref().map(|l| &l.scenario)
    }

    fn install(&mut self, text: String, scenario: Scenario) {
        let same = self.loaded.as_ref().is_some_and(|l| l.text == text);
        if !same {
            self.fired.clear();
        }
        self.fired.resize(scenario.faults.len(), 0);
        let mut devices = scenario.devices.clone();
        for step in scenario.steps.iter().filter(|s| s.poll <= self.poll) {
            step.apply(&mut devices);
        }
        self.loaded = Some(Loaded {
            scenario,
            devices,
            text,
        });
    }

    fn tick(&mut self) {
        self.poll += 1;
        self.swept.clear();
        if let Some(loaded) = &mut self.loaded {
            for step in loaded.scenario.steps.iter().filter(|s| s.poll == self.poll) {
                step.apply(&mut loaded.devices);
            }
        }
    }

    /// A daemon that keeps the device count and handles between polls
    /// starts a poll with a GPU's memory read, not a count call: a memory
    /// read of a GPU already read since the last tick starts the next poll.
    /// v1 and v2 are told apart, so the v1 fallback after a v2 failure is
    /// the same poll; MIG instances do not count (their parent does).
    fn sweep(&mut self, func: Func, at: Option<DevRef>) {
        let Some(DevRef { dev, slot: None }) = at else {
            return;
        };
        if !matches!(func, Func::MemoryV1 | Func::MemoryV2) {
            return;
        }
        if self.swept.contains(&(func, dev)) {
            self.tick();
        }
        self.swept.push((func, dev));
    }

    /// Appends `<poll> <short name> <device> <return code>` to the call
    /// log, if any. Failing to write is ignored: the log is a test aid.
    fn log_call(&mut self, func: Func, at: Option<DevRef>, rc: nvmlReturn_t) {
        let Some(file) = &mut self.call_log else { return };
        let device = match at {
            None => "-".to_string(),
            Some(DevRef { dev, slot: None }) => dev.to_string(),
            Some(DevRef { dev, slot: Some(s) }) => format!("{dev}/{s}"),
        };
        // One write per line, so a reader never sees half a line.
        let line = format!("{} {} {device} {rc}\n", self.poll, FuncSet::short_name(func));
        let _ = file.write_all(line.as_bytes());
    }

    /// The first matching fault's code wins; hangs take the longest.
    fn fire_faults(&mut self, func: Func, at: Option<DevRef>) -> (Option<nvmlReturn_t>, Duration) {
        let Global {
            loaded: Some(loaded),
            fired,
            poll,
            ..
        } = self
        else {
            return (None, Duration::ZERO);
        };
        let mut code = None;
        let mut hang = Duration::ZERO;
        for (fault, count) in loaded.scenario.faults.iter().zip(fired.iter_mut()) {
            let aimed = match (&fault.target, at) {
                (None, _) => true,
                (Some(target), Some(at)) => target.matches(&loaded.devices, at),
                (Some(_), None) => false,
            };
            let spent = fault.times.is_some_and(|times| *count >= times);
            if fault.funcs.contains(func) && fault.active_at(*poll) && aimed && !spent {
                *count += 1;
                code = code.or(fault.code);
                hang = hang.max(fault.hang);
            }
        }
        (code, hang)
    }
}

/// Resolves the device a call is about, or the code that rejects it.
pub type Resolve<'a> = &'a dyn Fn(&Global) -> Result<Option<DevRef>, nvmlReturn_t>;

/// The common path of every call made while initialised.
pub fn call(
    func: Func,
    resolve: Resolve,
    body: impl FnOnce(&mut Global, Option<DevRef>) -> nvmlReturn_t,
) -> nvmlReturn_t {
    guard(|| {
        let mut global = lock();
        if global.refcount == 0 {
            return UNINITIALIZED;
        }
        if let Ok(at) = resolve(&global) {
            global.sweep(func, at);
        }
        finish(global, func, resolve, body)
    })
}

/// Faults, hang and answer, once the caller holds the lock.
fn finish(
    mut global: MutexGuard<'static, Global>,
    func: Func,
    resolve: Resolve,
    body: impl FnOnce(&mut Global, Option<DevRef>) -> nvmlReturn_t,
) -> nvmlReturn_t {
    let mut at = match resolve(&global) {
        Ok(at) => at,
        Err(code) => {
            global.log_call(func, None, code);
            return code;
        }
    };
    let (code, hang) = global.fire_faults(func, at);
    if !hang.is_zero() {
        drop(global);
        HANGING.fetch_add(1, Ordering::SeqCst);
        std::thread::sleep(hang);
        HANGING.fetch_sub(1, Ordering::SeqCst);
        global = lock();
        // The world may have moved on while this call slept (another thread
        // shut NVML down), so the call is checked again as if it had just come in.
        if global.refcount == 0 && func != Func::Init && !FuncSet::is_cuda(func) {
            return UNINITIALIZED;
        }
        at = match resolve(&global) {
            Ok(at) => at,
            Err(code) => {
                global.log_call(func, None, code);
                return code;
            }
        };
    }
    let rc = match code {
        Some(code) => code,
        None => body(&mut global, at),
    };
    global.log_call(func, at, rc);
    rc
}

/// `nvmlDeviceGetCount_v2`: ticks the poll clock before anything else, so a
/// fault "from poll 5" already applies to a count call that starts poll 5.
pub fn count(body: impl FnOnce(&mut Global, Option<DevRef>) -> nvmlReturn_t) -> nvmlReturn_t {
    guard(|| {
        let mut global = lock();
        if global.refcount == 0 {
            return UNINITIALIZED;
        }
        global.tick();
        finish(global, Func::Count, &|_| Ok(None), body)
    })
}

/// `nvmlInit_v2` / `nvmlInitWithFlags`.
pub fn init() -> nvmlReturn_t {
    guard(|| {
        let mut global = lock();
        global.init_attempts += 1;
        if global.call_log.is_none() {
            global.call_log = open_call_log();
        }
        if global.refcount == 0 {
            match load_from_env() {
                Ok((text, scenario)) => global.install(text, scenario),
                Err(why) => {
                    eprintln!("fake-nvml: nvmlInit failed: {why}");
                    return UNKNOWN;
                }
            }
        }
        let attempt = global.init_attempts;
        let init_fail = global.scenario().and_then(|s| s.init_fail);
        if let Some(fail) = init_fail.filter(|f| f.attempts.is_none_or(|n| attempt <= n)) {
            return fail.code;
        }
        finish(global, Func::Init, &|_| Ok(None), |global, _| {
            global.refcount += 1;
            SUCCESS
        })
    })
}

/// `nvmlShutdown`. The scenario stays loaded (for the poll clock and fault
/// counters) but every call answers UNINITIALIZED until the next init.
pub fn shutdown() -> nvmlReturn_t {
    call(Func::Shutdown, &|_| Ok(None), |global, _| {
        global.refcount = global.refcount.saturating_sub(1);
        SUCCESS
    })
}

/// A `cu*` call: CUDA_ERROR_NOT_INITIALIZED before `cuInit`, then the same
/// faults and hangs as NVML calls.
pub fn cu_call(func: Func, body: impl FnOnce(&mut Global) -> nvmlReturn_t) -> nvmlReturn_t {
    guard(|| {
        let global = lock();
        if !global.cuda.initialised {
            return cuda::NOT_INITIALIZED;
        }
        finish(global, func, &|_| Ok(None), |g, _| body(g))
    })
}

/// `cuInit`: loads the scenario if NVML has not yet (the library may be
/// loaded as `--cuda-lib` alone).
pub fn cu_init() -> nvmlReturn_t {
    guard(|| {
        let mut global = lock();
        if global.loaded.is_none() {
            match load_from_env() {
                Ok((text, scenario)) => global.install(text, scenario),
                Err(why) => {
                    eprintln!("fake-nvml: cuInit failed: {why}");
                    return cuda::NOT_INITIALIZED;
                }
            }
        }
        finish(global, Func::CuInit, &|_| Ok(None), |g, _| {
            g.cuda.initialised = true;
            SUCCESS
        })
    })
}

pub fn poll() -> u64 {
    lock().poll
}

/// The call log named by `FAKE_NVML_CALL_LOG`, appended to (a daemon may
/// load the library again after a failed init).
fn open_call_log() -> Option<File> {
    let path = std::env::var_os(CALL_LOG_ENV)?;
    match File::options().create(true).append(true).open(&path) {
        Ok(f) => Some(f),
        Err(e) => {
            eprintln!("fake-nvml: cannot open {}: {e}", path.to_string_lossy());
            None
        }
    }
}

fn load_from_env() -> Result<(String, Scenario), String> {
    let path = std::env::var_os(SCENARIO_ENV).ok_or(format!("{SCENARIO_ENV} is not set"))?;
    let shown = path.to_string_lossy().into_owned();
    let text = std::fs::read_to_string(&path).map_err(|e| format!("cannot read {shown}: {e}"))?;
    let scenario = scenario::parse(&text).map_err(|e| format!("invalid scenario {shown}: {e}"))?;
    Ok((text, scenario))
}
