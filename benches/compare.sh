#!/usr/bin/env bash
# Compares pathprobe with iperf3 -- the distribution's and, when found, a
# 3.21 built from its public source (UDP GSO/GRO with --gsro) -- in one run,
# the tools taking turns, on this host's loopback and (as root) over a veth
# pair between two namespaces, unshaped. It prints, for each test and tool:
# throughput, loss, and CPU seconds per GB moved on each side (client and
# server processes, as the kernel accounts them). Absolute figures depend
# on the machine; compare within one run.
#
#   benches/compare.sh [SECONDS]      (default 4)
#
# Tests: UDP 1400 B unpaced, paced at 5 and 20 Gbit/s; TCP 1 and 4 streams,
# and 1 stream reversed (-R). pathprobe runs twice: as built (auto: MSG_TRUNC
# discard, and write on loopback, sendfile across veth) and with
# --zerocopy=on on both ends (its own responder: sendfile/discard), the
# figures that choose the default. iperf3 3.21 runs TCP plain, with -Z
# (sendfile), with --skip-rx-copy (MSG_TRUNC) and with both.
# CPU is per side: the client's and the server's process, each in CPU
# seconds per GB received; in -R the server is the sender. `spread` is
# the lowest and highest of the runs.
# Then the stock client (iperf3 -c) against pathprobe's responder (its
# iperf3 port) and against iperf3 -s, TCP 1 and 4 streams: the figures of
# `ratio pathprobe-responder/iperf3-s TCP`.
#
# Environment:
#   IPERF3=/path/to/iperf3   the 3.21 binary (else ./iperf3-3.21/src/iperf3
#                            or /tmp/iperf-3.21/src/iperf3 if present)
#   IPERF3_SRC=/path/src     an unpacked iperf3 source tree to build (once)
#                            with ./configure && make when no binary is found
#   ROUNDS=N                 runs per tool and test, median shown (default 3)
#   VETH=0                   skip the namespace comparison
#   TESTS=REGEX              only the tests whose names match (say, TESTS=UDP)
#   PORT=N                   first of the six server ports (default 25301)
#   BASELINE=/path/pathprobe another pathprobe build (say, main before a
#                            refactor) run as a fifth tool with its own
#                            responder, so that before and after share one
#                            run: its ratios to iperf3 print beside today's
#
# Needs: cargo, iperf3, python3; root for the veth part.
set -euo pipefail
cd "$(dirname "$0")/.."
T=${1:-4}
die() { echo "compare.sh: $*" >&2; exit 1; }
command -v python3 >/dev/null || die "python3 is needed for the arithmetic"
command -v iperf3 >/dev/null || die "iperf3 is not installed (apt-get install iperf3)"
# Where the binary is, as cargo itself says (CARGO_TARGET_DIR, .cargo/config
# and workspaces included): build, and take the executable it reports.
PP=$(cargo build --release --quiet --bin pathprobe --message-format=json \
  | grep '"reason":"compiler-artifact"' \
  | grep -o '"executable":"[^"]*"' | tail -n 1 | cut -d'"' -f4) \
  || die "cargo build --release failed"
[ -n "$PP" ] || die "cargo reported no pathprobe executable"
[ -x "$PP" ] || die "cargo reported $PP, which is not an executable"

# iperf3 3.21: given, found, or built from a given source tree.
IP_NEW=${IPERF3:-}
if [ -z "$IP_NEW" ]; then
  for c in ./iperf3-3.21/src/iperf3 /tmp/iperf-3.21/src/iperf3; do
    [ -x "$c" ] && { IP_NEW=$c; break; }
  done
fi
if [ -z "$IP_NEW" ] && [ -n "${IPERF3_SRC:-}" ]; then
  (cd "$IPERF3_SRC" && { [ -f Makefile ] || ./configure --quiet; } && make --quiet) >&2 \
    || die "building iperf3 in $IPERF3_SRC failed"
  IP_NEW=$IPERF3_SRC/src/iperf3
fi
if [ -n "$IP_NEW" ]; then
  [ -x "$IP_NEW" ] || die "IPERF3=$IP_NEW is not an executable"
  IP_NEW=$(readlink -f "$IP_NEW")
  "$IP_NEW" --help 2>&1 | grep -q -- --gsro || echo "note: $IP_NEW has no --gsro" >&2
else
  echo "note: no iperf3 3.21 (set IPERF3=/path or IPERF3_SRC=/src); comparing with $(iperf3 --version | head -n1) only" >&2
fi

BASE=${BASELINE:-}
if [ -n "$BASE" ]; then
  [ -x "$BASE" ] || die "BASELINE=$BASE is not an executable"
  BASE=$(readlink -f "$BASE")
fi
export PP IP_NEW BASE T ROUNDS=${ROUNDS:-3}
NS_A=ppbench-a NS_B=ppbench-b
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  if [ -n "${VETH_UP:-}" ]; then
    ip netns del $NS_A 2>/dev/null || true
    ip netns del $NS_B 2>/dev/null || true
  fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# Servers for one environment: ENV_NAME, ADDR, and a prefix that runs a
# command in the server's namespace (empty on loopback). `ip netns exec`
# execs the command, so $! is the server itself (its CPU is read by pid).
PORT=${PORT:-25301}
export PORT_PP=$PORT PORT_IP=$((PORT + 1)) PORT_IPN=$((PORT + 2)) PORT_PPI=$((PORT + 3)) PORT_BASE=$((PORT + 4)) PORT_PPZC=$((PORT + 5))
start_servers() {
  local addr=$1; shift
  "$@" "$PP" respond --listen "$addr" --port "$PORT_PP" --iperf3-port "$PORT_PPI" >/dev/null 2>&1 & pids+=($!); export PID_PP=$!
  "$@" "$PP" respond --listen "$addr" --port "$PORT_PPZC" --zerocopy on >/dev/null 2>&1 & pids+=($!); export PID_PPZC=$!
  "$@" iperf3 -s -B "$addr" -p "$PORT_IP" >/dev/null 2>&1 & pids+=($!); export PID_IP=$!
  if [ -n "$BASE" ]; then
    "$@" "$BASE" respond --listen "$addr" --port "$PORT_BASE" >/dev/null 2>&1 & pids+=($!); export PID_BASE=$!
  fi
  if [ -n "$IP_NEW" ]; then
    "$@" "$IP_NEW" -s -B "$addr" -p "$PORT_IPN" >/dev/null 2>&1 & pids+=($!); export PID_IPN=$!
  fi
  sleep 1
  # A server that could not listen (a port in use) has exited by now.
  for p in "${pids[@]}"; do
    kill -0 "$p" 2>/dev/null || die "a server exited at start (ports $PORT_PP-$PORT_PPZC in use? set PORT=)"
  done
}
stop_servers() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  pids=()
}

run_env() {   # run_env NAME ADDR [CLIENT-PREFIX...]
  local name=$1 addr=$2; shift 2
  ENV_NAME=$name ADDR=$addr python3 - "$@" <<'PY'
import json, os, resource, statistics, subprocess, sys

PP, IP_NEW, T = os.environ["PP"], os.environ.get("IP_NEW", ""), os.environ["T"]
BASE = os.environ.get("BASE", "")
ROUNDS, ADDR, ENV = int(os.environ["ROUNDS"]), os.environ["ADDR"], os.environ["ENV_NAME"]
prefix = sys.argv[1:]
TICK = os.sysconf("SC_CLK_TCK")

def proc_cpu(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK

def children_cpu():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime

def run(cmd, server_pid):
    s0, c0 = proc_cpu(server_pid), children_cpu()
    out = subprocess.run(prefix + cmd, capture_output=True, text=True, timeout=int(T) + 30)
    s1, c1 = proc_cpu(server_pid), children_cpu()
    if out.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: exit {out.returncode}: {out.stderr.strip()[:300]}")
    return json.loads(out.stdout), c1 - c0, s1 - s0

def pathprobe(args, binary=PP, port="PORT_PP", pid="PID_PP"):
    d, c, s = run([binary, "probe", "-J", "-t", T, "-p", os.environ[port]] + args + [ADDR], os.environ[pid])
    u = d.get("udp") or {}
    tcp = d.get("tcp") or {}
    mode = f'{u.get("send_mode", "")}/{u.get("receive_mode", "")}' if u else ""
    if tcp.get("send_mode"):
        mode = f'{tcp["send_mode"]}/{tcp.get("receive_mode", "?")}'
    if u.get("packets_coalesced"):
        mode += f' ({u["packets_coalesced"] / max(u["packets_received"], 1):.0%} coalesced)'
    return d["throughput_bits_per_second"], d["bytes"], u.get("loss_ratio", 0) * 100, c, s, mode

def iperf3(binary, port, pid, args, udp):
    d, c, s = run([binary, "-J", "-t", T, "-c", ADDR, "-p", str(port)] + args, pid)
    if "error" in d:
        raise RuntimeError(d["error"])
    if udp:
        e = d["end"]["sum"]
        loss = e.get("lost_percent", 0.0)
        got = e["bytes"] * (1 - loss / 100)
        return got * 8 / e["seconds"], got, loss, c, s, ""
    e = d["end"]["sum_received"]
    return e["bits_per_second"], e["bytes"], 0.0, c, s, ""

UDP = ["-u", "-l", "1400"]
# iperf3 gets 8 MB socket buffers, what pathprobe asks for on UDP up to
# 5 Gbit/s. pathprobe asks up to 32 MB (unpaced, and from 10 Gbit/s) with
# SO_RCVBUFFORCE as root; iperf3 refuses a -w above net.core.rmem_max
# ("socket buffer size not set correctly"), which this script leaves alone.
IPU = ["-u", "-l", "1400", "-w", "8M"]
tests = [
    ("UDP 1400 B unpaced", UDP + ["-b", "0"], IPU + ["-b", "0"], True),
    ("UDP 1400 B at 5 Gbit/s", UDP + ["-b", "5G"], IPU + ["-b", "5G"], True),
    ("UDP 1400 B at 20 Gbit/s", UDP + ["-b", "20G"], IPU + ["-b", "20G"], True),
    ("TCP 1 stream", [], [], False),
    ("TCP 4 streams", ["-P", "4"], ["-P", "4"], False),
    ("TCP 1 stream -R", ["-R"], ["-R"], False),
]
if os.environ.get("TESTS"):
    import re
    tests = [t for t in tests if re.search(os.environ["TESTS"], t[0])]
ver = (subprocess.run(["iperf3", "--version"], capture_output=True, text=True).stdout.split() + ["?", "?"])[1]
print(f"== {ENV}: {T} s per run, median of {ROUNDS} ==")
print(f"{'test':<24} {'tool':<30} {'Gbit/s':>7} {'spread':>11} {'loss %':>7} {'client s/GB':>11} {'server s/GB':>11} {'total':>6}  mode")
for name, pa, ia, udp in tests:
    tools = [("pathprobe", lambda: pathprobe(pa))]
    if not udp:
        tools.append(("pathprobe --zerocopy=on",
                      lambda: pathprobe(pa + ["--zerocopy=on"], PP, "PORT_PPZC", "PID_PPZC")))
    if BASE:
        tools.append(("pathprobe baseline", lambda: pathprobe(pa, BASE, "PORT_BASE", "PID_BASE")))
    tools.append((f"iperf3 {ver}", lambda: iperf3("iperf3", os.environ["PORT_IP"], os.environ["PID_IP"], ia, udp)))
    if IP_NEW:
        variants = [["--gsro"]] if udp else [[], ["-Z"], ["--skip-rx-copy"], ["-Z", "--skip-rx-copy"]]
        for extra in variants:
            label = " ".join(["iperf3 3.21"] + extra)
            tools.append((label, lambda extra=extra: iperf3(IP_NEW, os.environ["PORT_IPN"], os.environ["PID_IPN"], ia + extra, udp)))
    results = {t: [] for t, _ in tools}
    for _ in range(ROUNDS):
        for t, f in tools:
            try:
                results[t].append(f())
            except Exception as e:
                print(f"  {t}: {e}", file=sys.stderr)
    medians = {}
    for t, rs in results.items():
        if not rs:
            print(f"{name:<24} {t:<22} (failed)")
            continue
        rs.sort(key=lambda r: r[0])
        bps, nbytes, loss, c, s, mode = rs[len(rs) // 2]
        medians[t] = bps
        gb = nbytes / 1e9
        cg, sg = (c / gb, s / gb) if gb > 0 else (float("nan"),) * 2
        spread = f"{rs[0][0] / 1e9:.1f}-{rs[-1][0] / 1e9:.1f}"
        print(f"{name:<24} {t:<30} {bps / 1e9:7.2f} {spread:>11} {loss:7.2f} {cg:11.3f} {sg:11.3f} {cg + sg:6.3f}  {mode}")
    # The one figure to quote: throughput against each other tool, same run.
    # With a baseline build, its ratios print too: the same ratio before and
    # after a change, measured in one run, is what shows it changed nothing.
    for p in ("pathprobe", "pathprobe baseline"):
        for t, bps in medians.items():
            if not t.startswith("pathprobe") and p in medians and bps > 0:
                print(f"{name:<24} ratio {p}/{t}: {medians[p] / bps:.2f}")

# The stock client against pathprobe's responder and against iperf3 -s,
# taking turns. Throughput is the client's own count and clock (sum_sent),
# the same code for both servers; the server's CPU is its process's.
def stock_client(port, pid, args):
    d, c, s = run(["iperf3", "-J", "-t", T, "-c", ADDR, "-p", str(port)] + args, pid)
    if "error" in d:
        raise RuntimeError(d["error"])
    e = d["end"]["sum_sent"]
    return e["bits_per_second"], e["bytes"], 0.0, c, s, ""

servers = [
    ("pathprobe responder", os.environ["PORT_PPI"], os.environ["PID_PP"]),
    (f"iperf3 -s {ver}", os.environ["PORT_IP"], os.environ["PID_IP"]),
]
for name, args in [("iperf3 -c TCP 1 stream", []), ("iperf3 -c TCP 4 streams", ["-P", "4"])]:
    results = {t: [] for t, _, _ in servers}
    for _ in range(ROUNDS):
        for t, port, pid in servers:
            try:
                results[t].append(stock_client(port, pid, args))
            except Exception as e:
                print(f"  {name}, {t}: {e}", file=sys.stderr)
    medians = {}
    for t, rs in results.items():
        if not rs:
            print(f"{name:<24} {t:<22} (failed)")
            continue
        rs.sort(key=lambda r: r[0])
        bps, nbytes, loss, c, s, mode = rs[len(rs) // 2]
        gb = nbytes / 1e9
        cg, sg = (c / gb, s / gb) if gb > 0 else (float("nan"),) * 2
        medians[t] = (bps, sg)
        print(f"{name:<24} {t:<22} {bps / 1e9:7.2f} {loss:7.2f} {cg:11.3f} {sg:11.3f} {cg + sg:6.3f}")
    pr, ip = medians.get("pathprobe responder"), medians.get(f"iperf3 -s {ver}")
    if pr and ip and ip[0] > 0:
        print(f"{name:<24} ratio pathprobe-responder/iperf3-s TCP {pr[0] / ip[0]:.2f}")
        if ip[1] > 0:
            print(f"{name:<24} server s/GB pathprobe-responder/iperf3-s {pr[1] / ip[1]:.2f}")
PY
}

start_servers 127.0.0.1
run_env loopback 127.0.0.1
stop_servers

if [ "${VETH:-1}" != 0 ] && [ "$(id -u)" = 0 ]; then
  ip netns del $NS_A 2>/dev/null || true
  ip netns del $NS_B 2>/dev/null || true
  VETH_UP=1
  ip netns add $NS_A; ip netns add $NS_B
  ip link add ppbA netns $NS_A type veth peer name ppbB netns $NS_B
  ip -n $NS_A addr add 10.77.0.1/30 dev ppbA
  ip -n $NS_B addr add 10.77.0.2/30 dev ppbB
  for n in $NS_A $NS_B; do ip -n $n link set lo up; done
  ip -n $NS_A link set ppbA up; ip -n $NS_B link set ppbB up
  start_servers 10.77.0.2 ip netns exec $NS_B
  run_env "veth between two namespaces, unshaped" 10.77.0.2 ip netns exec $NS_A
  stop_servers
elif [ "${VETH:-1}" != 0 ]; then
  echo "note: the veth comparison needs root; skipped" >&2
fi
