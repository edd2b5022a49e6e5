//! The scenario parser on its own (no library loading): every shipped
//! scenario validates, and each kind of mistake is rejected with a message
//! that names it, so a broken scenario fails init loudly.

use std::path::Path;

use fake_nvml::scenario::parse;

#[test]
fn every_shipped_scenario_parses() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios");
    let mut seen = 0;
    for entry in std::fs::read_dir(&dir).expect("scenarios dir") {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "toml") {
            let text = std::fs::read_to_string(&path).unwrap();
            let scenario = parse(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            assert!(!scenario.devices.is_empty(), "{}", path.display());
            seen += 1;
        }
    }
    assert!(seen >= 10, "only {seen} scenarios");
}

const GPU: &str = "[[device]]\nuuid = \"GPU-a\"\n";

#[test]
fn mistakes_are_rejected_by_name() {
    let cases: &[(&str, String)] = &[
        (
            "unknown NVML return code",
            format!("{GPU}[[fault]]\nfunction = \"uuid\"\ncode = \"GPU_ON_FIRE\""),
        ),
        (
            "unknown NVML function",
            format!("{GPU}[[fault]]\nfunction = \"fan_speed\"\ncode = \"UNKNOWN\""),
        ),
        (
            "no device",
            format!("{GPU}[[fault]]\nfunction = \"uuid\"\ndevice = 1\ncode = \"UNKNOWN\""),
        ),
        ("no device", format!("{GPU}[[step]]\npoll = 1\ndevice = \"GPU-b\"")),
        (
            "takes a device",
            format!("{GPU}[[fault]]\nfunction = \"count\"\ndevice = 0\ncode = \"UNKNOWN\""),
        ),
        (
            "needs a code, a hang or both",
            format!("{GPU}[[fault]]\nfunction = \"uuid\""),
        ),
        (
            "to_poll is before from_poll",
            format!("{GPU}[[fault]]\nfunction = \"uuid\"\nfrom_poll = 5\nto_poll = 4\ncode = \"UNKNOWN\""),
        ),
        (
            "either poll or from_poll",
            format!("{GPU}[[fault]]\nfunction = \"uuid\"\npoll = 5\nto_poll = 6\ncode = \"UNKNOWN\""),
        ),
        (
            "unknown duration unit",
            format!("{GPU}[[fault]]\nfunction = \"uuid\"\nhang = \"3 fortnights\""),
        ),
        (
            "listed twice",
            format!("{GPU}[[device.process]]\npid = 1\nused = 1\n[[device.process]]\npid = 1\nused = 2"),
        ),
        (
            "unknown process list",
            format!("{GPU}[[device.process]]\npid = 1\nused = 1\nlists = [\"vulkan\"]"),
        ),
        ("unknown size unit", format!("{GPU}total = \"80 parsecs\"")),
        (
            "utilisation is a percentage",
            format!("{GPU}[[device.process]]\npid = 1\nused = 1\nsm_util = 101"),
        ),
        (
            "need mig = true",
            format!("{GPU}[[device.mig_instance]]\nprofile = \"1g.10gb\"\ntotal = 1"),
        ),
        (
            "out of range or used twice",
            format!("{GPU}mig = true\n[[device.mig_instance]]\nslot = 7\nprofile = \"1g.10gb\"\ntotal = 1"),
        ),
        (
            "needs total",
            format!("{GPU}mig = true\n[[device.mig_instance]]\nprofile = \"1g.10gb\""),
        ),
        ("used twice", format!("{GPU}{GPU}")),
        ("is not like 00000000:19:00.0", format!("{GPU}pci_bus_id = \"19:00\"")),
        ("init.attempts needs init.fail", "[init]\nattempts = 3".to_string()),
        ("unknown field `colour`", format!("{GPU}colour = \"green\"")),
    ];
    for (needle, text) in cases {
        match parse(text) {
            Ok(_) => panic!("accepted:\n{text}"),
            Err(e) => assert!(e.contains(needle), "{e:?} should mention {needle:?} for:\n{text}"),
        }
    }
}

#[test]
fn sizes_defaults_and_steps() {
    let text = format!(
        "{GPU}reserved = \"1GiB\"\noverhead = 4096\n[[device.process]]\npid = 9\nused = \"unavailable\"\nactual = \"2GiB\"\nlists = [\"graphics\"]\n[[step]]\npoll = 2\ndevice = 0\nused = \"auto\"\n[[step]]\npoll = 1\ndevice = 0\nused = \"3GiB\""
    );
    let scenario = parse(&text).unwrap();
    let device = &scenario.devices[0];
    assert_eq!(device.holder.memory.total, 81_559 << 20, "H100 default");
    assert_eq!(device.holder.memory.reserved, 1 << 30);
    let process = &device.holder.processes[0];
    assert_eq!((process.used, process.actual), (None, 2 << 30));
    assert!(process.lists.graphics && !process.lists.compute);
    let polls: Vec<u64> = scenario.steps.iter().map(|s| s.poll).collect();
    assert_eq!(polls, [1, 2], "steps sorted by poll");
    assert_eq!(scenario.steps[0].used, Some(Some(3 << 30)));
    assert_eq!(scenario.steps[1].used, Some(None), "auto");
    assert_eq!(scenario.driver_version, "550.54.15");
}
