#!/bin/sh
# Validate the lab against iperf3: TCP goodput through tbf on r must equal
# rate x MSS/(MSS+66) (MSS 1448 with timestamps at MTU 1500), and a 1%
# nftables drop must show as ~1% UDP loss.
#
#   tests/lab/validate-iperf3.sh [OMIT_SECONDS] [RATES...]
#
# Prints one line per run: rate, variant, measured Mbit/s, formula, error %.
set -eu
here=$(dirname "$0")
L="$here/lab.sh"
name=${LAB_NAME:-val}
omit=${1:-0}
[ $# -gt 0 ] && shift
rates=${*:-50 200 800}

"$L" down "$name"
"$L" up "$name" >/dev/null
trap '"$L" down "$name"' EXIT
b=$("$L" addr "$name" b)
"$L" exec "$name" b iperf3 -s -D -p 5201 --pidfile "/tmp/$name-iperf3.pid"
# iperf3 -D returns once it has daemonized; wait until it accepts.
i=0
until "$L" exec "$name" a timeout 1 bash -c "exec 3<>/dev/tcp/$b/5201" 2>/dev/null; do
    i=$((i + 1)); [ $i -lt 50 ] || { echo "iperf3 -s not up" >&2; exit 1; }
    sleep 0.1
done

tcp_run() {   # tcp_run RATE_MBIT ARGS...
    rate=$1; shift
    out=$("$L" exec "$name" a timeout 30 iperf3 -c "$b" -p 5201 -t 5 -O "$omit" -J "$@")
    echo "$out" | python3 -c '
import json, sys
rate = float(sys.argv[1]); label = sys.argv[2]
d = json.load(sys.stdin)
got = d["end"]["sum_received"]["bits_per_second"] / 1e6
want = rate * 1448 / (1448 + 66)
retr = d["end"]["sum_sent"].get("retransmits", "-")
print("%5s Mbit %-8s measured %8.2f formula %8.2f err %+6.2f%% retr %s"
      % (int(rate), label, got, want, (got - want) / want * 100, retr))
' "$rate" "${*:-single}"
}

for rate in $rates; do
    "$L" shape "$name" "${rate}mbit" >/dev/null
    tcp_run "$rate"
    tcp_run "$rate" -R
    tcp_run "$rate" -P 4
    tcp_run "$rate" -P 4 -R
done
"$L" unshape "$name"

"$L" drop "$name" 1 >/dev/null
for dir in "" "-R"; do
    "$L" exec "$name" a timeout 30 iperf3 -c "$b" -p 5201 -u -b 100M -t 5 -J $dir | python3 -c '
import json, sys
d = json.load(sys.stdin)["end"]["sum"]
print("udp 100M 1%% drop %-3s lost %d/%d = %.4f%%" % (sys.argv[1], d["lost_packets"], d["packets"], d["lost_percent"]))
' "$dir"
done
"$L" exec "$name" r nft list chain inet lab forward | grep counter
"$L" nodrop "$name"
kill "$(cat "/tmp/$name-iperf3.pid")" 2>/dev/null || true
rm -f "/tmp/$name-iperf3.pid"
