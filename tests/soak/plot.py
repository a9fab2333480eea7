#!/usr/bin/env python3
"""Draw the soak's RSS and CPU over time (samples.csv of tests/soak/) into a PNG.

usage: plot.py SAMPLES_CSV OUT_PNG
"""
import csv
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main(samples_path: str, out_path: str) -> None:
    with open(samples_path, newline="") as f:
        rows = list(csv.DictReader(f))
    t = [float(r["t_s"]) / 60 for r in rows]
    rss = [int(r["rss_kib"]) / 1024 for r in rows]
    cpu = [float(r["cpu_percent"]) for r in rows]
    pending = [float(r["otlp_pending"]) for r in rows]

    fig, (ax_rss, ax_cpu) = plt.subplots(2, 1, figsize=(10, 6), sharex=True)
    ax_rss.plot(t, rss, color="tab:blue", label="RSS (MiB)")
    ax_rss.set_ylabel("RSS (MiB)")
    ax_rss.set_ylim(bottom=0)
    ax_q = ax_rss.twinx()
    ax_q.step(t, pending, color="tab:orange", where="post", alpha=0.6, label="OTLP pending requests")
    ax_q.set_ylabel("OTLP pending")
    ax_q.set_ylim(bottom=0)
    ax_rss.legend(loc="upper left")
    ax_q.legend(loc="upper right")
    ax_cpu.plot(t, cpu, color="tab:green")
    ax_cpu.set_ylabel("CPU (% of one core)")
    ax_cpu.set_xlabel("minutes")
    ax_cpu.set_ylim(bottom=0)
    fig.suptitle("dcgm-otel soak: RSS and CPU (shared 2-core machine: CPU is noisy)")
    fig.tight_layout()
    fig.savefig(out_path, dpi=100)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])
