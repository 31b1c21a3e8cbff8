#!/usr/bin/env bash
# Compares pathprobe with iperf3 (and nuttcp, when installed) on this host's
# loopback, in one run, and prints the ratios. Absolute figures depend on the
# machine; the ratios are the benchmark.
#
#   benches/compare.sh [SECONDS]      (default 5)
#
# Needs: cargo (it builds the release binary, wherever CARGO_TARGET_DIR
# puts it), iperf3, python3; nuttcp optional.
set -euo pipefail
cd "$(dirname "$0")/.."
T=${1:-5}
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

pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
}
trap cleanup EXIT
trap 'exit 130' INT TERM

PORT_PP=15301 PORT_IP=15201 PORT_NT=15101
$PP respond --listen 127.0.0.1 --port $PORT_PP >/dev/null 2>&1 & pids+=($!)
iperf3 -s -p $PORT_IP >/dev/null 2>&1 & pids+=($!)
# --nofork: nuttcp -S otherwise forks a daemon that outlives the pid recorded
# here, and keeps running after the script.
if command -v nuttcp >/dev/null; then
  nuttcp -S --nofork -P $PORT_NT -p $((PORT_NT + 1)) >/dev/null 2>&1 & pids+=($!)
fi
# Wait (bounded) for the servers to listen.
for _ in $(seq 50); do
  ss -ltn | grep -q ":$PORT_PP " && ss -ltn | grep -q ":$PORT_IP " && break
  sleep 0.1
done

# A figure from a tool's JSON; a clear message rather than a traceback when
# the tool printed none (it failed, or the output changed shape).
json_num() {
  python3 -c "
import json, sys
try:
    d = json.load(sys.stdin)
    print($1)
except Exception as e:
    sys.exit('compare.sh: no figure in the JSON output (%s: %s)' % (type(e).__name__, e))
"
}

median() { python3 -c "import sys,statistics; print(statistics.median(float(x) for x in sys.argv[1:]))" "$@"; }

# A single run lies: the tools take turns, ROUNDS times, and the medians are compared.
ROUNDS=${ROUNDS:-3}
echo "== TCP, 1 stream, ${T}s, loopback, median of $ROUNDS rounds =="
pp=() ip=() nt=()
for _ in $(seq "$ROUNDS"); do
  pp+=("$($PP probe -J -t "$T" 127.0.0.1:$PORT_PP | json_num 'd["throughput_bits_per_second"]/1e6')")
  ip+=("$(iperf3 -J -t "$T" -c 127.0.0.1 -p $PORT_IP | json_num 'd["end"]["sum_received"]["bits_per_second"]/1e6')")
  if command -v nuttcp >/dev/null; then
    nt+=("$(nuttcp -P $PORT_NT -p $((PORT_NT + 1)) -T "$T" -fparse 127.0.0.1 | sed -n 's/.*rate_Mbps=\([0-9.]*\).*/\1/p')")
  fi
done
pp_tcp=$(median "${pp[@]}"); ip_tcp=$(median "${ip[@]}")
echo "runs: pathprobe ${pp[*]} / iperf3 ${ip[*]} ${nt:+/ nuttcp ${nt[*]}}"
printf "pathprobe %10.1f Mbps\niperf3    %10.1f Mbps   ratio pathprobe/iperf3 = %.2f\n" "$pp_tcp" "$ip_tcp" "$(python3 -c "print($pp_tcp/$ip_tcp)")"
if [ ${#nt[@]} -gt 0 ]; then
  nt_tcp=$(median "${nt[@]}")
  printf "nuttcp    %10.1f Mbps   ratio pathprobe/nuttcp = %.2f\n" "$nt_tcp" "$(python3 -c "print($pp_tcp/$nt_tcp)")"
fi

echo "== UDP, 1400-byte datagrams, unpaced, ${T}s, loopback =="
pp_udp=$($PP probe -J -u -b 0 -l 1400 -t "$T" 127.0.0.1:$PORT_PP)
pp_pps=$(echo "$pp_udp" | json_num 'd["udp"]["packets_received"]/d["duration_seconds"]')
pp_loss=$(echo "$pp_udp" | json_num 'd["udp"]["loss_ratio"]*100')
pp_cpu=$(echo "$pp_udp" | json_num 'd["directions"][0]["sender_cpu_utilization"]*100')
ip_udp=$(iperf3 -J -u -b 0 -l 1400 -t "$T" -c 127.0.0.1 -p $PORT_IP)
ip_pps=$(echo "$ip_udp" | json_num 'd["end"]["sum"]["packets"]*(1-d["end"]["sum"]["lost_percent"]/100)/d["end"]["sum"]["seconds"]')
ip_loss=$(echo "$ip_udp" | json_num 'd["end"]["sum"]["lost_percent"]')
ip_cpu=$(echo "$ip_udp" | json_num 'd["end"]["cpu_utilization_percent"]["host_total"]')
printf "pathprobe %10.0f pkt/s received, %5.2f %% loss, sender %3.0f %% CPU\n" "$pp_pps" "$pp_loss" "$pp_cpu"
printf "iperf3    %10.0f pkt/s received, %5.2f %% loss, sender %3.0f %% CPU   ratio pathprobe/iperf3 = %.2f\n" "$ip_pps" "$ip_loss" "$ip_cpu" "$(python3 -c "print($pp_pps/$ip_pps)")"

echo "== UDP at 2 Gbit/s, 1400-byte datagrams, ${T}s: loss a steady sender should not see =="
pp2=$($PP probe -J -u -b 2g -l 1400 -t "$T" 127.0.0.1:$PORT_PP | json_num 'd["udp"]["loss_ratio"]*100')
ip2=$(iperf3 -J -u -b 2g -l 1400 -t "$T" -c 127.0.0.1 -p $PORT_IP | json_num 'd["end"]["sum"]["lost_percent"]')
printf "pathprobe %5.2f %% loss\niperf3    %5.2f %% loss\n" "$pp2" "$ip2"
