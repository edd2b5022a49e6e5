#!/usr/bin/env bash
# Builds the .deb with dpkg-deb from Cargo.toml's [package.metadata.deb]
# (the same table `cargo deb` reads): assets, conffiles, the systemd unit
# and its maintainer scripts, the changelog and a DEP-5 copyright file.
# Why not cargo-deb in CI: `cargo install cargo-deb` compiles ~120 crates,
# over 6 minutes on the 2-core CI machine (measured 2026-12-03: 351 s for
# the first 48); this needs only dpkg-deb and python3. `cargo deb
# --no-build` still works for packagers who have it.
# Usage: scripts/build-deb.sh [BIN] [ASSETS_DIR] [OUT_DIR]
#   defaults: target/release/gpumemd, target/deb-assets (scripts/deb-assets.sh
#   writes it), target/debian. Prints the path of the .deb.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${1:-target/release/gpumemd}
assets=${2:-target/deb-assets}
out=${3:-target/debian}
exec python3 - "$bin" "$assets" "$out" <<'PY'
import glob, gzip, hashlib, os, shutil, subprocess, sys, tempfile, textwrap, tomllib

bin_, assets_dir, out = sys.argv[1:]
cargo = tomllib.load(open("Cargo.toml", "rb"))
pkg, meta = cargo["package"], cargo["package"]["metadata"]["deb"]
name, arch = pkg["name"], subprocess.check_output(["dpkg", "--print-architecture"], text=True).strip()
version = f"{pkg['version']}-1"
root = tempfile.mkdtemp(prefix="gpumemd-deb-")
os.chmod(root, 0o755)

def put(src, dest, mode, named=None):
    if dest.endswith("/"):
        dest += os.path.basename(named or src)
    path = os.path.join(root, dest.lstrip("/"))
    os.makedirs(os.path.dirname(path), exist_ok=True)
    shutil.copyfile(src, path)
    os.chmod(path, int(mode, 8))

for asset, dest, mode in meta["assets"]:
    src = asset.replace("target/release/gpumemd", bin_).replace("target/deb-assets", assets_dir)
    files = sorted(f for f in glob.glob(src) if os.path.isfile(f))
    if not files:
        sys.exit(f"build-deb: asset {src} matches no file")
    for f in files:
        # The binary keeps its packaged name whatever BIN is called.
        put(f, dest, mode, named=asset if src == bin_ else None)
doc = f"usr/share/doc/{name}"
# The unit, where systemd looks for packaged units.
put(f"{meta['systemd-units']['unit-scripts']}/{name}.service", f"usr/lib/systemd/system/{name}.service", "644")
# Debian changelog and copyright (machine-readable, DEP-5).
with open(meta["changelog"], "rb") as f, open(os.path.join(root, doc, "changelog.Debian.gz"), "wb") as g:
    g.write(gzip.compress(f.read(), 9, mtime=0))
os.chmod(os.path.join(root, doc, "changelog.Debian.gz"), 0o644)
with open(os.path.join(root, doc, "copyright"), "w") as f:
    f.write(f"Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/\n"
            f"Upstream-Name: {name}\nSource: {pkg.get('repository', 'https://github.com/gpumemd/gpumemd')}\n\n"
            f"Files: *\nCopyright: 2026 {meta['copyright']}\nLicense: {pkg['license']}\n"
            " On Debian systems, the full text of the Apache License, Version 2.0\n"
            " can be found in the file /usr/share/common-licenses/Apache-2.0.\n")
os.chmod(os.path.join(root, doc, "copyright"), 0o644)
# Lintian overrides shipped with the package (tags accepted on purpose).
ov = "deploy/debian/lintian-overrides"
if os.path.exists(ov):
    put(ov, f"usr/share/lintian/overrides/{name}", "644")
# Directories 755, whatever the umask.
for d, _, _ in os.walk(root):
    os.chmod(d, 0o755)

# Depends: the packages of the shared libraries the binary links.
libs = [l.split("=>")[1].split()[0] for l in subprocess.check_output(["ldd", bin_], text=True).splitlines() if "=> /" in l]
deps = set()
for lib in libs:
    r = subprocess.run(["dpkg", "-S", os.path.realpath(lib)], capture_output=True, text=True)
    r = r if r.returncode == 0 else subprocess.run(["dpkg", "-S", lib], capture_output=True, text=True)
    if r.returncode == 0:
        p = r.stdout.split(":")[0]
        v = subprocess.check_output(["dpkg-query", "-W", "-f=${Version}", p], text=True).split("-")[0]
        deps.add(f"{p} (>= {v})")
size = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(root) for f in fs)
desc = "\n".join(" " + (l or ".") for l in textwrap.wrap(meta["extended-description"], 78))
control = os.path.join(root, "DEBIAN")
os.makedirs(control)
with open(os.path.join(control, "control"), "w") as f:
    f.write(f"Package: {name}\nVersion: {version}\nArchitecture: {arch}\nMaintainer: {meta['maintainer']}\n"
            f"Installed-Size: {(size + 1023) // 1024}\n"
            + (f"Depends: {', '.join(sorted(deps))}\n" if deps else "")
            + f"Suggests: {meta['suggests']}\nSection: {meta['section']}\nPriority: {meta['priority']}\n"
            f"Homepage: {pkg.get('homepage', 'https://github.com/gpumemd/gpumemd')}\n"
            f"Description: {pkg['description']}\n{desc}\n")
with open(os.path.join(control, "conffiles"), "w") as f:
    f.write("".join(c + "\n" for c in meta["conf-files"]))
with open(os.path.join(control, "md5sums"), "w") as f:
    for d, _, fs in sorted(os.walk(root)):
        for fn in sorted(fs):
            p = os.path.join(d, fn)
            rel = os.path.relpath(p, root)
            if not rel.startswith("DEBIAN"):
                f.write(f"{hashlib.md5(open(p, 'rb').read()).hexdigest()}  {rel}\n")
# Maintainer scripts: debhelper's systemd snippets (enable and start on
# install, restart after upgrade, stop on removal, purge the enablement).
unit = f"{name}.service"
scripts = {
    "postinst": f"""#!/bin/sh
set -e
if [ "$1" = "configure" ] || [ "$1" = "abort-upgrade" ] || [ "$1" = "abort-deconfigure" ] || [ "$1" = "abort-remove" ] ; then
	deb-systemd-helper unmask '{unit}' >/dev/null || true
	if deb-systemd-helper --quiet was-enabled '{unit}'; then
		deb-systemd-helper enable '{unit}' >/dev/null || true
	else
		deb-systemd-helper update-state '{unit}' >/dev/null || true
	fi
	if [ -d /run/systemd/system ]; then
		systemctl --system daemon-reload >/dev/null || true
		if [ -n "$2" ]; then _dh_action=restart; else _dh_action=start; fi
		deb-systemd-invoke $_dh_action '{unit}' >/dev/null || true
	fi
fi
""",
    "prerm": f"""#!/bin/sh
set -e
if [ -d /run/systemd/system ] && [ "$1" = remove ]; then
	deb-systemd-invoke stop '{unit}' >/dev/null || true
fi
""",
    "postrm": f"""#!/bin/sh
set -e
if [ -d /run/systemd/system ]; then
	systemctl --system daemon-reload >/dev/null || true
fi
if [ "$1" = "remove" ]; then
	if [ -x "/usr/bin/deb-systemd-helper" ]; then
		deb-systemd-helper mask '{unit}' >/dev/null || true
	fi
fi
if [ "$1" = "purge" ]; then
	if [ -x "/usr/bin/deb-systemd-helper" ]; then
		deb-systemd-helper purge '{unit}' >/dev/null || true
		deb-systemd-helper unmask '{unit}' >/dev/null || true
	fi
fi
""",
}
for s, text in scripts.items():
    with open(os.path.join(control, s), "w") as f:
        f.write(text)
    os.chmod(os.path.join(control, s), 0o755)
for f in ("control", "conffiles", "md5sums"):
    os.chmod(os.path.join(control, f), 0o644)
os.makedirs(out, exist_ok=True)
deb = os.path.join(out, f"{name}_{version}_{arch}.deb")
subprocess.run(["dpkg-deb", "--root-owner-group", "-Zxz", "--build", root, deb], check=True, stdout=subprocess.DEVNULL)
shutil.rmtree(root)
print(deb)
PY
