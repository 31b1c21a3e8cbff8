#!/usr/bin/env bash
# Issue 27's bench, not a timed test: adaptive duration against the tbf
# truth, beside a fixed probe of 1 s omitted + 5 s and iperf3 -t 5 -O 1,
# in the same run, in namespaces a -- r -- b (tests/lab/lab.sh) with tbf
# on r. For each case and tool it prints the error against the truth, the
# bytes tbf passed toward the receiver, the wall time, and the adaptive
# probe's stop reason.
#
#   benches/adaptive.sh            (as root; needs iperf3, nft, tc, python3)
#
# Cases: TCP at 20, 200 and 1000 Mbit/s, each without and with 0.5% nft
# loss, and at 200 Mbit/s with a 100 ms queue on the bottleneck; UDP paced
# under (100m) and over (300m) a 200 Mbit/s bottleneck; the tbf rate
# changed from 200 to 50 Mbit/s one second into the probe (the truth is
# then the rate at the end).
#
# The truth: TCP payload R x 1448/1514 (MSS 1448, 66 header bytes a frame
# as tbf meters it); UDP payload min(rate asked, R x 1448/1490). With nft
# loss no tool reaches the tbf rate (cubic is loss-limited), so the truth
# of a lossy case is what a long run gets: a fixed probe of LONG seconds
# (default 30) in the same round, printed as the case's `long run` row.
#
# Environment: PATHPROBE=/path/to/pathprobe (default target/release),
#              ROUNDS=N runs per case and tool (default 1), NAME=lab name,
#              ONLY=TEXT runs only the cases whose name contains TEXT,
#              LONG=S the lossy cases' long run (0: the tbf rate instead).
set -euo pipefail
cd "$(dirname "$0")/.."
[ "$(id -u)" -eq 0 ] || { echo "adaptive.sh: needs root for the namespaces" >&2; exit 1; }
export PATHPROBE=${PATHPROBE:-target/release/pathprobe}
[ -x "$PATHPROBE" ] || cargo build --release --locked
export NAME=${NAME:-adb} ROUNDS=${ROUNDS:-1} ONLY=${ONLY:-} LONG=${LONG:-30}
exec python3 - <<'PY'
import json, os, subprocess, threading, time

LAB = "tests/lab/lab.sh"
NAME = os.environ["NAME"]
PP = os.environ["PATHPROBE"]
ROUNDS = int(os.environ["ROUNDS"])
ONLY = os.environ["ONLY"]
LONG = float(os.environ["LONG"])
PORT, IPORT = "25391", "25392"

def lab(*a, check=True):
    return subprocess.run([LAB, *a], capture_output=True, text=True, check=check).stdout

def in_ns(end, *cmd, **kw):
    return [LAB, "exec", NAME, end, *cmd]

def tbf_bytes():
    out = subprocess.run(in_ns("r", "tc", "-s", "qdisc", "show", "dev", f"{NAME}rb"),
                         capture_output=True, text=True).stdout
    for line in out.splitlines():
        line = line.strip()
        if line.startswith("Sent "):
            return int(line.split()[1])
    return 0

def run(cmd, change=None):
    before, t0 = tbf_bytes(), time.time()
    timer = None
    if change:
        timer = threading.Timer(change[0], lambda: lab("shape", NAME, change[1]))
        timer.start()
    p = subprocess.run(in_ns("a", *cmd), capture_output=True, text=True, timeout=60 + LONG)
    if timer:
        timer.join()
    took = time.time() - t0
    try:
        doc = json.loads(p.stdout)
    except ValueError:
        doc = {"error": p.stdout[-200:] + p.stderr[-200:]}
    return doc, tbf_bytes() - before, took

def figure(tool, doc):
    if "error" in doc:
        return None, "error"
    if tool == "iperf3":
        end = doc.get("end", {})
        s = end.get("sum_received") or end.get("sum") or {}
        return s.get("bits_per_second"), "-"
    if tool == "adaptive":
        a = doc.get("adaptive") or {}
        e = a.get("estimate") or {}
        reason = a.get("stop_reason", "?") + ("" if a.get("converged") else " (not converged)")
        return e.get("bits_per_second"), reason
    return doc.get("throughput_bits_per_second"), "-"

def tcp_truth(mbit):
    return mbit * 1e6 * 1448 / 1514

CASES = [
    # name, tbf Mbit/s, tbf limit bytes, loss %, probe flags, truth bit/s, change
    ("tcp 20M", 20, None, 0, [], tcp_truth(20), None),
    ("tcp 20M 0.5% loss", 20, None, 0.5, [], tcp_truth(20), None),
    ("tcp 200M", 200, None, 0, [], tcp_truth(200), None),
    ("tcp 200M 0.5% loss", 200, None, 0.5, [], tcp_truth(200), None),
    ("tcp 200M 100ms queue", 200, 2_500_000, 0, [], tcp_truth(200), None),
    ("tcp 1000M", 1000, None, 0, [], tcp_truth(1000), None),
    ("tcp 1000M 0.5% loss", 1000, None, 0.5, [], tcp_truth(1000), None),
    ("udp 100M under 200M", 200, None, 0, ["-u", "-b", "100m"], 100e6, None),
    ("udp 300M over 200M", 200, None, 0, ["-u", "-b", "300m"], 200e6 * 1448 / 1490, None),
    ("tcp 200M->50M at 1 s", 200, None, 0, [], tcp_truth(50), (1.0, "50mbit")),
]

lab("down", NAME, check=False)
lab("up", NAME)
addr_b = lab("addr", NAME, "b").strip()
resp = subprocess.Popen(in_ns("b", PP, "respond", "--port", PORT),
                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
iperf = subprocess.Popen(in_ns("b", "iperf3", "-s", "-p", IPORT),
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
time.sleep(1)
print(f"{'case':<24} {'tool':<9} {'error':>8} {'tbf MB':>9} {'time s':>7}  stop reason")
try:
    for name, mbit, limit, loss, flags, truth, change in CASES:
        if ONLY not in name:
            continue
        # The rate change must fall inside the adaptive probe, which would
        # otherwise converge on the first rate before it (as the lab test
        # does: at least 2.5 s).
        held = ["--min-duration", "2.5"] if change else []
        tbf_truth = truth
        for _ in range(ROUNDS):
            truth = tbf_truth
            if loss and LONG > 0:
                # A lossy path's truth: what a long run of it gets.
                lab("shape", NAME, f"{mbit}mbit", *([str(limit)] if limit else []))
                lab("drop", NAME, str(loss))
                doc, sent, took = run([PP, "probe", "-J", "-p", PORT, "-t", str(LONG), *flags, addr_b])
                bps, _ = figure("fixed", doc)
                if bps:
                    err = f"{(bps / truth - 1) * 100:+.2f}%"
                    print(f"{name:<24} {'long run':<9} {err:>8} {sent / 1e6:>9.2f} {took:>7.2f}  "
                          f"the truth of the rows below ({bps / 1e6:.1f} Mbit/s; error against tbf)",
                          flush=True)
                    truth = bps
            tools = [
                ("adaptive", [PP, "probe", "-J", "-p", PORT, "-t", "auto", *held, *flags, addr_b]),
                ("fixed", [PP, "probe", "-J", "-p", PORT, "-t", "5", "-O", "1", *flags, addr_b]),
                ("iperf3", ["iperf3", "-J", "-p", IPORT, "-t", "5", "-O", "1",
                            *[f for f in flags], "-c", addr_b]),
            ]
            for tool, cmd in tools:
                lab("shape", NAME, f"{mbit}mbit", *([str(limit)] if limit else []))
                lab("drop", NAME, str(loss)) if loss else lab("nodrop", NAME)
                doc, sent, took = run(cmd, change)
                bps, reason = figure(tool, doc)
                err = f"{(bps / truth - 1) * 100:+.2f}%" if bps else "-"
                print(f"{name:<24} {tool:<9} {err:>8} {sent / 1e6:>9.2f} {took:>7.2f}  {reason}",
                      flush=True)
finally:
    resp.kill(); iperf.kill()
    lab("down", NAME, check=False)
PY
