#!/usr/bin/env bash
# MSG_ZEROCOPY against write and sendfile from a memfd (issue 26 point 1),
# on loopback and over a veth pair between two network namespaces: runs
# benches/zerocopy_send.rs on each and prints its tables, with the load
# before and after (the figures are only as quiet as the machine).
#
#   benches/zerocopy_send.sh [extra flags for zerocopy_send, e.g. --rounds 5 --seconds 2.5]
#
# Needs root (namespaces). The namespaces h1zc-s (sender) and h1zc-r
# (receiver) and the veth pair are made here and deleted on exit.
set -euo pipefail
cd "$(dirname "$0")/.."
die() { echo "zerocopy_send.sh: $*" >&2; exit 1; }
for f in /work/notes/bench-running /work/notes/ci-running; do
  [ ! -e "$f" ] || die "$f exists: another benchmark or CI run needs the machine quiet"
done
# Built as a release bench target; its path comes from cargo's JSON.
EXE=$(nice -n 15 cargo build --release --locked --bench zerocopy_send --message-format=json 2>/dev/null |
  python3 -c 'import json, sys
for l in sys.stdin:
    m = json.loads(l)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["name"] == "zerocopy_send":
        print(m["executable"])')
[ -x "$EXE" ] || die "could not build the zerocopy_send bench"

S=h1zc-s R=h1zc-r
cleanup() { ip netns del "$S" 2>/dev/null || true; ip netns del "$R" 2>/dev/null || true; }
trap cleanup EXIT
cleanup
ip netns add "$S"
ip netns add "$R"
ip link add h1zc-a netns "$S" type veth peer name h1zc-b netns "$R"
ip -n "$S" addr add 10.255.26.1/24 dev h1zc-a
ip -n "$R" addr add 10.255.26.2/24 dev h1zc-b
for ns in "$S" "$R"; do ip -n "$ns" link set lo up; done
ip -n "$S" link set h1zc-a up
ip -n "$R" link set h1zc-b up

echo "# $(date -u '+%Y-%m-%d %H:%M:%S UTC'), kernel $(uname -r), $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //')"
echo "# veth offloads: $(ip netns exec "$S" ethtool -k h1zc-a 2>/dev/null | grep -E '^(tcp-segmentation-offload|scatter-gather|generic-receive-offload):' | tr '\n' ' ' || echo 'ethtool not found')"
echo "# load before: $(uptime)"
"$EXE" --label loopback "$@"
echo "# load between: $(uptime)"
"$EXE" --label veth --addr 10.255.26.2 --send-netns /run/netns/"$S" --recv-netns /run/netns/"$R" "$@"
echo "# load after: $(uptime)"
