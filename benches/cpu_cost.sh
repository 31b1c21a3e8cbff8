#!/usr/bin/env bash
# CPU cost per GB moved on loopback, each end apart: pathprobe against
# iperf3 (3.21 when found), counted with `perf stat` (instructions, cycles
# and task-clock) on the client process and on the server process over
# each client run. Unlike throughput, what a GB costs in instructions
# barely moves when other work shares the machine, so runs on a busy host
# still compare (docs/PERFORMANCE.md). It does not measure throughput:
# benches/compare.sh does, on a quiet machine.
#
#   benches/cpu_cost.sh [CASE-REGEX]     (default: every case)
#
# Cases (names to filter on): udp5 (1400 B paced at 5 Gbit/s), udp20
# (at 20 Gbit/s), udp0
# (1400 B unpaced), tcp (1 stream), tcpR (1 stream, -R), tcpzc (TCP with
# each --zerocopy mode and iperf3's -Z and --skip-rx-copy), tcpRzc (the
# same, -R), tcp4zc (the same, 4 streams).
#
# Environment:
#   PP=/path/pathprobe   the build to measure (default target/release/pathprobe)
#   IPERF3=/path/iperf3  iperf3 to compare with (default /tmp/iperf-3.21/src/iperf3,
#                        else iperf3 from PATH)
#   ROUNDS=N             runs per tool and case, median shown (default 3)
#   T=S                  seconds per run (default 3)
#   PORT=N               first of the server ports (default 25401)
#   BASELINE=/path       another pathprobe build, run beside PP in the udp
#                        and tcp cases with its own responder (before/after)
#
# Each side is a whole process, runtime and control connection included,
# over the whole client run; the GB are what the receiver counted. Needs
# perf, python3, and root or kernel.perf_event_paranoid <= 0 for -p.
set -euo pipefail
cd "$(dirname "$0")/.."
die() { echo "cpu_cost.sh: $*" >&2; exit 1; }
command -v perf >/dev/null || die "perf is not installed"
command -v python3 >/dev/null || die "python3 is needed"
PP=${PP:-target/release/pathprobe}
[ -x "$PP" ] || die "$PP is not an executable (cargo build --release)"
IP=${IPERF3:-}
if [ -z "$IP" ]; then
  if [ -x /tmp/iperf-3.21/src/iperf3 ]; then IP=/tmp/iperf-3.21/src/iperf3; else IP=$(command -v iperf3 || true); fi
fi
[ -n "$IP" ] || die "no iperf3"
BASE=${BASELINE:-}
[ -z "$BASE" ] || [ -x "$BASE" ] || die "BASELINE=$BASE is not an executable"
[ -z "$BASE" ] || BASE=$(readlink -f "$BASE")
export PP=$(readlink -f "$PP") IP=$(readlink -f "$IP") BASE ROUNDS=${ROUNDS:-3} T=${T:-3} PORT=${PORT:-25401}
exec python3 - "${1:-.}" <<'PY'
import json, os, re, signal, socket, statistics, subprocess, sys, tempfile, time

PP, IP, ROUNDS, T, PORT = os.environ["PP"], os.environ["IP"], int(os.environ["ROUNDS"]), os.environ["T"], int(os.environ["PORT"])
BASE = os.environ.get("BASE", "")
ADDR = "127.0.0.1"
EVENTS = "instructions,cycles,task-clock,context-switches"
pick = re.compile(sys.argv[1])

servers = {}   # key -> (port, Popen)
def server(key, cmd):
    """A server for `key`, started once and kept for every run."""
    if key in servers:
        return servers[key]
    port = PORT + len(servers)
    p = subprocess.Popen([a.replace("{port}", str(port)) for a in cmd],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    # Ready when it accepts a TCP connection on its port.
    for _ in range(200):
        try:
            socket.create_connection((ADDR, port), timeout=0.2).close()
            break
        except OSError:
            if p.poll() is not None:
                sys.exit(f"server {cmd} exited (port {port} in use? set PORT=)")
            time.sleep(0.05)
    servers[key] = (port, p)
    return servers[key]

def perf_counts(path):
    """instructions, cycles (None where the VM has no counters), CPU
    seconds, context switches."""
    got = {}
    for line in open(path):
        f = line.strip().split(",")
        if len(f) < 3 or line.startswith("#"):
            continue
        try:
            got[f[2].split(":")[0]] = float(f[0])
        except ValueError:
            got[f[2].split(":")[0]] = None
    return (got.get("instructions"), got.get("cycles"), (got.get("task-clock") or 0) / 1e3,
            got.get("context-switches"))

def run(client, server_proc):
    with tempfile.TemporaryDirectory() as d:
        sf, cf = f"{d}/server", f"{d}/client"
        sp = subprocess.Popen(["perf", "stat", "-x,", "-e", EVENTS, "-o", sf, "-p", str(server_proc.pid)])
        time.sleep(0.3)  # perf attaches to the server's threads
        out = subprocess.run(["perf", "stat", "-x,", "-e", EVENTS, "-o", cf, "--"] + client,
                             capture_output=True, text=True, timeout=int(T) + 30)
        sp.send_signal(signal.SIGINT)
        sp.wait()
        if out.returncode != 0:
            raise RuntimeError(f"{' '.join(client)}: exit {out.returncode}: {out.stderr.strip()[:300]}")
        return json.loads(out.stdout), perf_counts(cf), perf_counts(sf)

def pathprobe(args, zc="auto", binary=PP):
    def go():
        port, p = server(("pp", zc, binary), [binary, "respond", "--listen", ADDR, "--port", "{port}", "--zerocopy", zc])
        d, c, s = run([binary, "probe", "-J", "-t", T, "-p", str(port)] + args + [ADDR], p)
        u = d.get("udp") or {}
        mode = f'{u.get("send_mode", "")}/{u.get("receive_mode", "")}' if u else ""
        tcp = d.get("tcp") or {}
        if tcp.get("send_mode"):
            mode = f'{tcp["send_mode"]}/{tcp.get("receive_mode", "?")}'
        return d["throughput_bits_per_second"], d["bytes"], u.get("loss_ratio", 0) * 100, c, s, mode
    return go

def iperf3(args, udp):
    def go():
        port, p = server(("ip",), [IP, "-s", "-B", ADDR, "-p", "{port}"])
        d, c, s = run([IP, "-J", "-t", T, "-c", ADDR, "-p", str(port)] + args, p)
        if "error" in d:
            raise RuntimeError(d["error"])
        if udp:
            e = d["end"]["sum"]
            loss = e.get("lost_percent", 0.0)
            got = e["bytes"] * (1 - loss / 100)
            return got * 8 / e["seconds"], got, loss, c, s, ""
        e = d["end"]["sum_received"]
        return e["bits_per_second"], e["bytes"], 0.0, c, s, ""
    return go

UDP, IPU = ["-u", "-l", "1400"], ["-u", "-l", "1400", "-w", "8M"]
cases = [
    ("udp5", [("pathprobe", pathprobe(UDP + ["-b", "5G"])),
              ("iperf3 --gsro", iperf3(IPU + ["-b", "5G", "--gsro"], True)),
              ("iperf3", iperf3(IPU + ["-b", "5G"], True))]),
    ("udp20", [("pathprobe", pathprobe(UDP + ["-b", "20G"])),
               ("iperf3 --gsro", iperf3(IPU + ["-b", "20G", "--gsro"], True))]),
    ("udp0", [("pathprobe", pathprobe(UDP + ["-b", "0"])),
              ("iperf3 --gsro", iperf3(IPU + ["-b", "0", "--gsro"], True)),
              ("iperf3", iperf3(IPU + ["-b", "0"], True))]),
    ("tcp", [("pathprobe", pathprobe([])), ("iperf3", iperf3([], False))]),
    ("tcpR", [("pathprobe -R", pathprobe(["-R"])), ("iperf3 -R", iperf3(["-R"], False))]),
]
if BASE:
    # The same cases with another build, in the same run: before and after.
    for name, tools in cases:
        args = {"udp5": UDP + ["-b", "5G"], "udp20": UDP + ["-b", "20G"], "udp0": UDP + ["-b", "0"],
                "tcp": [], "tcpR": ["-R"]}[name]
        tools.insert(1, ("pathprobe baseline", pathprobe(args, binary=BASE)))
for tag, extra in (("", []), ("R", ["-R"]), ("4", ["-P", "4"])):
    label = " ".join(extra)
    cases.append((f"tcp{tag}zc", [
        (f"pathprobe {label} zerocopy={z}", pathprobe(extra + [f"--zerocopy={z}"], z))
        for z in ("off", "on", "receive")
    ] + [(f"iperf3 {label} {v}", iperf3(extra + v.split(), False)) for v in ("", "-Z", "--skip-rx-copy", "-Z --skip-rx-copy")]))

print(f"== loopback, {T} s per run, median of {ROUNDS}; per GB received: instructions and cycles in 1e9 (n/a: no hardware counters), CPU s (task-clock), context switches in 1e3 ==")
print(f"{'case':<7} {'tool':<34} {'Gbit/s':>7} {'loss%':>6} {'cli Gi/GB':>9} {'srv Gi/GB':>9} {'cli Gc/GB':>9} {'srv Gc/GB':>9} {'cli s/GB':>8} {'srv s/GB':>8} {'cli kcs/GB':>10} {'srv kcs/GB':>10}  mode")
try:
    for name, tools in cases:
        if not pick.search(name):
            continue
        results = {t: [] for t, _ in tools}
        for _ in range(ROUNDS):
            for t, f in tools:
                try:
                    results[t].append(f())
                except Exception as e:
                    print(f"  {t}: {e}", file=sys.stderr)
        for t, rs in results.items():
            if not rs:
                print(f"{name:<7} {t:<34} (failed)")
                continue
            med = lambda f: statistics.median(f(r) for r in rs)
            scale = {0: 1e9, 1: 1e9, 2: 1, 3: 1e3}
            def per_gb(side, i, width=9):
                vals = [r[side][i] / (r[1] / 1e9) for r in rs if r[side][i] is not None and r[1] > 0]
                return f"{statistics.median(vals) / scale[i]:{width}.3f}" if vals else f"{'n/a':>{width}}"
            print(f"{name:<7} {t:<34} {med(lambda r: r[0]) / 1e9:7.2f} {med(lambda r: r[2]):6.2f} "
                  f"{per_gb(3, 0)} {per_gb(4, 0)} {per_gb(3, 1)} {per_gb(4, 1)} {per_gb(3, 2, 8)} {per_gb(4, 2, 8)} "
                  f"{per_gb(3, 3, 10)} {per_gb(4, 3, 10)}  {rs[0][5]}")
            # Every run's CPU s/GB, client/server, for the spread.
            spread = [f"{r[3][2] / (r[1] / 1e9):.3f}/{r[4][2] / (r[1] / 1e9):.3f}" for r in rs if r[1]]
            print(f"{'':<7} {'  runs (cli/srv s/GB)':<34} {' '.join(spread)}")
finally:
    for _, p in servers.values():
        p.terminate()
        p.wait()
PY
