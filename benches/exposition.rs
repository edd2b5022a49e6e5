//! Our hand renderer (`metrics::render`) against the official Prometheus
//! client (`prometheus-client`, a custom `Collector` that walks the same
//! snapshot at scrape time, the way a snapshot exporter would use it), on
//! the `large` demo fleet (64 GPUs x 1000 processes) and the scrape
//! target's 8 x 64. Both render the same series (checked before timing):
//! every device, per-process (top 50, min_bytes), group and poll family.
//! Prints allocations per render from a counting allocator, then times
//! the renders with criterion. The command, machine and results are in
//! docs/design.md.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a measuring tool: a failed step ends the run

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::hint::black_box;
use std::sync::Arc;
use std::time::Duration;

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use gpumemd::app::config::{Config, Processes};
use gpumemd::collect::source::PollErrorReason;
use gpumemd::data::snapshot::{Device, Process, Snapshot};
use gpumemd::serve::metrics::{self, DaemonState, Format};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelValue, EncodeMetric, LabelValueEncoder};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::Registry;

#[path = "common/counting.rs"]
mod counting;
use counting::{Counting, allocations};

#[global_allocator]
static GLOBAL: Counting = Counting;

#[path = "common/fleet.rs"]
mod fleet;
use fleet::snapshot;

const SIZES: &[(usize, usize)] = &[(8, 64), (64, 1000)];

/// A label value: text, or an integer written without a `String`.
#[derive(Clone, Copy)]
enum V<'a> {
    S(&'a str),
    N(u64),
}

impl EncodeLabelValue for V<'_> {
    fn encode(&self, e: &mut LabelValueEncoder) -> std::fmt::Result {
        match self {
            V::S(s) => e.write_str(s),
            V::N(n) => write!(e, "{n}"),
        }
    }
}

/// The same families as `metrics::render` with no daemon state.
#[derive(Debug)]
struct SnapshotCollector {
    snap: Arc<Snapshot>,
    cfg: Processes,
}

fn cut(s: &str, max: usize) -> V<'_> {
    let mut n = s.len().min(max);
    while !s.is_char_boundary(n) {
        n -= 1;
    }
    V::S(&s[..n])
}

fn gauge<L: prometheus_client::encoding::EncodeLabelSet>(
    enc: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    rows: impl Iterator<Item = (L, f64)>,
) -> std::fmt::Result {
    let mut m = enc.encode_descriptor(name, help, None, MetricType::Gauge)?;
    for (labels, v) in rows {
        ConstGauge::new(v).encode(m.encode_family(&labels)?)?;
    }
    Ok(())
}

fn gauge_u<L: prometheus_client::encoding::EncodeLabelSet>(
    enc: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    rows: impl Iterator<Item = (L, u64)>,
) -> std::fmt::Result {
    let mut m = enc.encode_descriptor(name, help, None, MetricType::Gauge)?;
    for (labels, v) in rows {
        ConstGauge::new(v).encode(m.encode_family(&labels)?)?;
    }
    Ok(())
}

fn by_uuid(d: &Device, m: usize) -> [(&'static str, V<'_>); 1] {
    [("uuid", cut(&d.uuid, m))]
}

fn by_pid<'a>(d: &'a Device, p: &Process, m: usize) -> [(&'static str, V<'a>); 2] {
    [("uuid", cut(&d.uuid, m)), ("pid", V::N(u64::from(p.pid)))]
}

impl SnapshotCollector {
    fn exported<'a>(&self, d: &'a Device) -> (Vec<&'a Process>, usize) {
        let ok: Vec<&Process> = d
            .processes
            .iter()
            .filter(|p| p.used_bytes.is_none_or(|b| b >= self.cfg.min_bytes.0))
            .take(self.cfg.top_n)
            .collect();
        let left = d.processes.len() - ok.len();
        (ok, left)
    }

    fn devices(&self, enc: &mut DescriptorEncoder) -> std::fmt::Result {
        let (ds, m) = (&self.snap.devices, self.cfg.label_max_bytes);
        let uuid = |d| by_uuid(d, m);
        let up = || ds.iter().filter(|d| d.up);
        gauge_u(
            enc,
            "gpumem_device_info",
            "GPU or MIG instance identity; value is always 1.",
            ds.iter().map(|d| {
                let l = [
                    ("uuid", cut(&d.uuid, m)),
                    ("index", d.index.map_or(V::S(""), |i| V::N(u64::from(i)))),
                    ("name", cut(&d.name, m)),
                    ("pci_bus_id", cut(&d.pci_bus_id, m)),
                    ("parent_uuid", cut(&d.parent_uuid, m)),
                    ("mig_profile", cut(&d.mig_profile, m)),
                ];
                (l, 1)
            }),
        )?;
        gauge_u(
            enc,
            "gpumem_device_up",
            "1 if the device was read this poll.",
            ds.iter().map(|d| (uuid(d), u64::from(d.up))),
        )?;
        type F = fn(&gpumemd::data::snapshot::Memory) -> Option<u64>;
        let mem: [(&str, F); 4] = [
            ("gpumem_device_memory_total_bytes", |x| Some(x.total_bytes)),
            ("gpumem_device_memory_used_bytes", |x| Some(x.used_bytes)),
            ("gpumem_device_memory_free_bytes", |x| Some(x.free_bytes)),
            ("gpumem_device_memory_reserved_bytes", |x| x.reserved_bytes),
        ];
        for (name, get) in mem {
            gauge_u(
                enc,
                name,
                "Device memory.",
                up().filter_map(|d| Some((uuid(d), d.memory.as_ref().and_then(get)?))),
            )?;
        }
        gauge_u(
            enc,
            "gpumem_device_memory_used_max_bytes",
            "Peak used device memory.",
            up().filter_map(|d| Some((uuid(d), d.used_max_bytes?))),
        )?;
        let held = up().filter_map(|d| Some((d, d.holders?))).flat_map(|(d, h)| {
            [
                ("live", h.live),
                ("zombie", h.zombie),
                ("exited", h.exited),
                ("unattributed", h.unattributed),
            ]
            .map(|(k, v)| ([("uuid", cut(&d.uuid, m)), ("holder", V::S(k))], v))
        });
        gauge_u(enc, "gpumem_device_memory_held_bytes", "Used memory by holder.", held)?;
        let unrel = up()
            .filter(|d| d.holders.is_some())
            .map(|d| (uuid(d), d.unreleased.iter().map(|u| u.bytes).sum()));
        gauge_u(
            enc,
            "gpumem_device_memory_unreleased_bytes",
            "Memory not released.",
            unrel,
        )?;
        let n = up()
            .filter(|d| !d.processes_unreadable)
            .map(|d| (uuid(d), d.processes.len() as u64));
        gauge_u(
            enc,
            "gpumem_device_processes",
            "Processes with a context on the device.",
            n,
        )
    }

    fn processes(&self, enc: &mut DescriptorEncoder) -> std::fmt::Result {
        let m = self.cfg.label_max_bytes;
        let rows: Vec<(&Device, &Process)> = self
            .snap
            .devices
            .iter()
            .filter(|d| d.up)
            .flat_map(|d| self.exported(d).0.into_iter().map(move |p| (d, p)))
            .collect();
        let id = |d, p| by_pid(d, p, m);
        let used = rows.iter().filter_map(|&(d, p)| {
            let l = [
                ("comm", cut(&p.comm, m)),
                ("user", cut(&p.user, m)),
                ("container_id", cut(&p.placement.container, m)),
                ("pod_uid", cut(&p.placement.pod_uid, m)),
                ("unit", cut(&p.placement.unit, m)),
                ("slurm_job", cut(&p.placement.job, m)),
            ];
            Some(((id(d, p), l), p.used_bytes?))
        });
        gauge_u(
            enc,
            "gpumem_process_memory_used_bytes",
            "Device memory used by a process.",
            used,
        )?;
        let info = rows.iter().map(|&(d, p)| {
            let mut l = vec![
                ("comm", cut(&p.comm, m)),
                ("user", cut(&p.user, m)),
                ("state", cut(p.state.as_str(), m)),
                ("type", cut(p.kind.as_str(), m)),
                ("container_runtime", cut(&p.placement.container_runtime, m)),
            ];
            if let Some(c) = p.cmdline.as_deref().filter(|_| self.cfg.cmdline) {
                l.push(("cmdline", cut(c, m)));
            }
            ((id(d, p), l), 1)
        });
        gauge_u(enc, "gpumem_process_info", "Process identity and state.", info)?;
        type G = fn(&Process) -> Option<f64>;
        let gauges: [(&str, G); 5] = [
            ("gpumem_process_memory_used_max_bytes", |p| {
                p.used_max_bytes.map(|b| b as f64)
            }),
            ("gpumem_process_start_time_seconds", |p| p.start_time),
            ("gpumem_process_memory_growth_bytes_per_second", |p| {
                p.growth_bytes_per_second
            }),
            ("gpumem_process_leak_suspected", |p| {
                p.growth_bytes_per_second.map(|_| f64::from(u8::from(p.leak_suspected)))
            }),
            ("gpumem_process_idle_seconds", |p| p.idle_seconds),
        ];
        for (name, get) in gauges {
            gauge(
                enc,
                name,
                "Per-process gauge.",
                rows.iter().filter_map(|&(d, p)| Some((id(d, p), get(p)?))),
            )?;
        }
        let left = self.snap.devices.iter().filter(|d| d.up && !d.processes_unreadable);
        let left = left.map(|d| ([("uuid", cut(&d.uuid, m))], self.exported(d).1 as u64));
        gauge_u(enc, "gpumem_processes_not_exported", "Processes left out.", left)
    }

    fn groups(&self, enc: &mut DescriptorEncoder) -> std::fmt::Result {
        let m = self.cfg.label_max_bytes;
        let mut rows = Vec::new();
        for d in self.snap.devices.iter().filter(|d| d.up) {
            for &by in &self.cfg.group_by {
                let mut sums: BTreeMap<&str, u64> = BTreeMap::new();
                for p in &d.processes {
                    let g = p.group(by);
                    if !g.is_empty() {
                        *sums.entry(g).or_default() += p.used_bytes.unwrap_or(0);
                    }
                }
                rows.extend(sums.into_iter().map(|(g, v)| {
                    (
                        [
                            ("uuid", cut(&d.uuid, m)),
                            ("group_by", V::S(by.as_str())),
                            ("group", cut(g, m)),
                        ],
                        v,
                    )
                }));
            }
        }
        gauge_u(
            enc,
            "gpumem_group_memory_used_bytes",
            "Device memory used by a group.",
            rows.into_iter(),
        )
    }

    fn poll(&self, enc: &mut DescriptorEncoder) -> std::fmt::Result {
        let (s, p) = (&self.snap, &self.snap.poll);
        let none = || std::iter::once([] as [(&str, V<'_>); 0]);
        gauge_u(
            enc,
            "gpumem_nvml_up",
            "NVML answering.",
            none().map(|l| (l, u64::from(s.nvml_up))),
        )?;
        if let Some(d) = &s.driver {
            let l = [
                ("driver_version", V::S(&d.driver_version)),
                ("nvml_version", V::S(&d.nvml_version)),
                ("cuda_version", V::S(&d.cuda_version)),
            ];
            gauge_u(enc, "gpumem_driver_info", "Driver versions.", std::iter::once((l, 1)))?;
        }
        gauge(
            enc,
            "gpumem_poll_duration_seconds",
            "Poll duration.",
            none().map(|l| (l, p.duration_seconds)),
        )?;
        gauge(
            enc,
            "gpumem_poll_source_duration_seconds",
            "Source part.",
            none().map(|l| (l, p.source_seconds)),
        )?;
        if let Some(t) = p.last_success_timestamp {
            gauge(
                enc,
                "gpumem_last_poll_timestamp_seconds",
                "Last success.",
                none().map(|l| (l, t)),
            )?;
        }
        gauge_u(
            enc,
            "gpumem_poll_success",
            "Poll succeeded.",
            none().map(|l| (l, u64::from(p.success))),
        )?;
        let c = enc.encode_descriptor("gpumem_polls", "Polls started.", None, MetricType::Counter)?;
        ConstCounter::new(p.polls_total).encode(c)?;
        let mut c = enc.encode_descriptor("gpumem_poll_errors", "Poll errors.", None, MetricType::Counter)?;
        for r in PollErrorReason::ALL.map(PollErrorReason::as_str) {
            let v = p.errors_total.get(r).copied().unwrap_or(0);
            ConstCounter::new(v).encode(c.encode_family(&[("reason", V::S(r))])?)?;
        }
        let c = enc.encode_descriptor("gpumem_poll_overruns", "Overruns.", None, MetricType::Counter)?;
        ConstCounter::new(p.overruns_total).encode(c)?;
        let b = [("version", V::S("0.1.0")), ("revision", V::S("unknown"))];
        gauge_u(enc, "gpumem_build_info", "Build.", std::iter::once((b, 1)))
    }
}

impl Collector for SnapshotCollector {
    fn encode(&self, mut enc: DescriptorEncoder) -> std::fmt::Result {
        self.devices(&mut enc)?;
        self.processes(&mut enc)?;
        self.groups(&mut enc)?;
        self.poll(&mut enc)
    }
}

fn encode_client(reg: &Registry) -> String {
    let mut out = String::new();
    prometheus_client::encoding::text::encode(&mut out, reg).expect("encode");
    out
}

/// Sample identities (name and labels, values left out).
fn series(text: &str) -> BTreeSet<&str> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.rsplit_once(' ').map(|(s, _)| s))
        .collect()
}

fn exposition(c: &mut Criterion) {
    let cfg = Config::defaults(false);
    let build = metrics::BuildInfo {
        version: "0.1.0",
        revision: "unknown",
    };
    let daemon = DaemonState::default();
    for &(gpus, per_gpu) in SIZES {
        let snap = Arc::new(snapshot(&cfg, gpus, per_gpu));
        let mut reg = Registry::default();
        reg.register_collector(Box::new(SnapshotCollector {
            snap: snap.clone(),
            cfg: cfg.processes.clone(),
        }));
        let ours = |f| metrics::render(&snap, &daemon, &cfg.processes, &build, f);
        let (text, ta, tb) = allocations(|| ours(Format::Prometheus));
        let (om, oa, ob) = allocations(|| ours(Format::OpenMetrics));
        let (client, ca, cb) = allocations(|| encode_client(&reg));
        let (a, b) = (series(&om), series(&client));
        let only: Vec<_> = a.symmetric_difference(&b).take(5).collect();
        assert!(only.is_empty(), "both render the same series; in one only: {only:?}");
        println!(
            "{gpus}x{per_gpu}: {} series; allocations per render (count, bytes): ours text {ta} {tb} ({} B out), ours OpenMetrics {oa} {ob} ({} B), prometheus-client {ca} {cb} ({} B)",
            series(&om).len(),
            text.len(),
            om.len(),
            client.len()
        );
        let id = format!("{gpus}x{per_gpu}");
        let mut g = c.benchmark_group("exposition");
        g.bench_with_input(BenchmarkId::new("ours_text", &id), &(), |b, ()| {
            b.iter(|| black_box(ours(Format::Prometheus)));
        });
        g.bench_with_input(BenchmarkId::new("ours_openmetrics", &id), &(), |b, ()| {
            b.iter(|| black_box(ours(Format::OpenMetrics)));
        });
        g.bench_with_input(BenchmarkId::new("prometheus_client", &id), &(), |b, ()| {
            b.iter(|| black_box(encode_client(&reg)));
        });
        g.finish();
    }
}

fn config() -> Criterion {
    Criterion::default()
        .sample_size(20)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
        .without_plots()
}

criterion_group! { name = benches; config = config(); targets = exposition }
criterion_main!(benches);
