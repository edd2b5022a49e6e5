"""Plots scrape latency against process count from a side-by-side run.

Usage: python3 benches/h200/plot.py side-by-side.json OUT.png

gpumemd's points are the simulated fleets of the run's sweep (`gpumemd
--demo FILE`, 8 and 64 GPUs); the peers' are their one measured size (the
real PyTorch processes of the same run), so the plot shows both how
gpumemd scales and where the peers stand at the size they were run at.
Needs matplotlib (the GPU machine's python3 has it; elsewhere
`pip install matplotlib`).
"""

import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: plot.py side-by-side.json OUT.png")
    with open(sys.argv[1]) as f:
        doc = json.load(f)
    sweep = [r for r in doc.get("sweep", []) if "scrapes" in r and r["scrapes"].get("p50_ms") is not None]
    if not sweep:
        sys.exit(f"{sys.argv[1]}: no sweep results to plot")
    fig, ax = plt.subplots(figsize=(11, 5), dpi=120)
    for gpus, marker in ((8, "o"), (64, "s")):
        pts = sorted((r["gpus"] * r["per_gpu"], r["scrapes"]["p50_ms"], r["scrapes"]["p99_ms"])
                     for r in sweep if r["gpus"] == gpus)
        if not pts:
            continue
        n = [p[0] for p in pts]
        ax.plot(n, [p[1] for p in pts], marker=marker, color="tab:blue", label=f"gpumemd p50, {gpus} GPUs (simulated)")
        ax.plot(n, [p[2] for p in pts], marker=marker, color="tab:blue", linestyle="--", alpha=0.6,
                label=f"gpumemd p99, {gpus} GPUs (simulated)")
    procs = int(doc.get("workload", "0").split()[0] or 0) if doc.get("workload", "")[:1].isdigit() else 0
    colours = {"gpumemd": "tab:blue", "nvitop-exporter": "tab:orange", "all-smi": "tab:green",
               "nvidia-smi": "tab:red"}
    for e in doc.get("exporters", []):
        s = e.get("scrapes") or {}
        if s.get("p50_ms") is None or procs == 0:
            continue
        key = next((k for k in colours if e["name"].startswith(k)), None)
        ax.errorbar([procs], [s["p50_ms"]], yerr=[[0], [max(0.0, s["p99_ms"] - s["p50_ms"])]], fmt="D",
                    color=colours.get(key, "black"), capsize=4,
                    label=f"{e['name']} p50 (bar to p99), {procs} real processes, 1 GPU")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("GPU processes on the node (per-process series: top 50 per GPU)")
    ax.set_ylabel("scrape latency, ms (new connection per scrape)")
    ax.set_title(f"Scrape latency against process count ({doc.get('date', '')} UTC)")
    ax.axhline(0.3, color="grey", linewidth=0.8, linestyle=":")
    ax.text(ax.get_xlim()[0] * 1.1, 0.31, "target p50 0.3 ms at 8 x 64", fontsize=8, color="grey")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.tight_layout()
    fig.savefig(sys.argv[2])
    print(f"wrote {sys.argv[2]}")


if __name__ == "__main__":
    main()
