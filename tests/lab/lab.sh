#!/bin/sh
# pathprobe lab: three network namespaces in a line, a -- r -- b.
#
#   NAME-a  [NAME-ar] 10.201.X.2/24 ---- 10.201.X.1/24 [NAME-ra]  NAME-r
#   NAME-r  [NAME-rb] 10.202.X.1/24 ---- 10.202.X.2/24 [NAME-br]  NAME-b
#
# r forwards between a and b. Shaping (tbf) and random drops (nftables) are
# applied on r only: a veth keeps the sending socket's ownership across
# namespaces, so a qdisc on the sender's own veth would throttle the sending
# socket (TSQ / socket memory backpressure) instead of queueing and dropping
# like a real bottleneck. On r the packets are forwarded and owned by nobody.
#
# Subcommands:
#   up NAME                create the lab (fails if it already exists)
#   shape NAME RATE [LIMIT] tbf on both of r's egress interfaces, e.g. 200mbit;
#                          LIMIT (bytes) overrides the queue limit
#   unshape NAME           remove the shaping
#   drop NAME PERCENT      random drop of PERCENT % of forwarded packets on r
#   nodrop NAME            remove the random drop
#   drop-ab NAME PERCENT   as drop, of the packets r forwards from a towards b
#                          only (one way: the b -> a direction loses nothing)
#   drop-data NAME PERCENT as drop, sparing UDP datagrams of under 8 payload
#                          bytes: iperf3's UDP connect and its reply (4 bytes),
#                          which stock iperf3 sends once and waits 30 s for
#   down NAME              delete everything; idempotent, never fails
#   exec NAME a|r|b CMD... run CMD inside one of the namespaces
#   addr NAME a|b          print the address of an end
#
# A star instead of a line: N hosts around one router (issue 11's mesh lab):
#   star NAME N            create NAME-r and NAME-h1 .. NAME-hN; host i is
#                          10.(210+i).X.2/24 behind veth NAME-hI / NAME-rI
#   star-shape NAME N RATE [LIMIT]
#                          tbf on each of r's N egress veths: every host's
#                          downlink is its bottleneck; LIMIT as for shape
#   star-addr NAME I       print the address of host I
#   `down NAME` removes a star too; `exec NAME hI CMD...` runs in host I.
#
# NAME: 1-10 characters of [a-z0-9], so that interface names (NAME + 3)
# stay within the kernel's 15 character limit. The subnet index X is derived
# from NAME (or taken from LAB_INDEX, 1-254); addresses live inside the
# namespaces only, so two labs with the same X would still not collide.

set -eu

die() { echo "lab.sh: $*" >&2; exit 2; }

check_name() {
    case "$1" in
        ''|*[!a-z0-9]*) die "bad lab name '$1' (use [a-z0-9], 1-10 chars)" ;;
    esac
    [ "${#1}" -le 10 ] || die "lab name '$1' longer than 10 characters"
}

# Small stable index per name, 1..250.
lab_index() {
    if [ -n "${LAB_INDEX:-}" ]; then
        echo "$LAB_INDEX"
    else
        echo $(( $(printf '%s' "$1" | cksum | cut -d' ' -f1) % 250 + 1 ))
    fi
}

ns() { echo "$1-$2"; }                       # ns NAME a|r|b
nsx() { ip netns exec "$@"; }   # nsx NS CMD... (no variables: sh has no locals)

addr_of() {   # addr_of NAME a|b|ra|rb
    x=$(lab_index "$1")
    case "$2" in
        a)  echo "10.201.$x.2" ;;
        ra) echo "10.201.$x.1" ;;
        b)  echo "10.202.$x.2" ;;
        rb) echo "10.202.$x.1" ;;
        *)  die "unknown end '$2'" ;;
    esac
}

# Convert a tc-style rate (e.g. 200mbit, 1gbit, 500kbit, 50M) to bit/s.
rate_bps() {
    echo "$1" | awk '
        {
            s = tolower($0)
            if (match(s, /^[0-9]+(\.[0-9]+)?/) == 0) { exit 1 }
            v = substr(s, 1, RLENGTH); u = substr(s, RLENGTH + 1)
            if (u == "" || u == "bit") m = 1
            else if (u == "kbit" || u == "k") m = 1e3
            else if (u == "mbit" || u == "m") m = 1e6
            else if (u == "gbit" || u == "g") m = 1e9
            else exit 1
            printf "%.0f\n", v * m
        }' || die "cannot parse rate '$1' (use e.g. 200mbit)"
}

reach() {   # reach NS ADDR: connect to closed port 9 must be refused
    out=$(nsx "$1" timeout 3 bash -c "exec 3<>/dev/tcp/$2/9" 2>&1 || true)
    case "$out" in *refused*) return 0 ;; *) return 1 ;; esac
}

cmd_up() {
    name=$1
    a=$(ns "$name" a); r=$(ns "$name" r); b=$(ns "$name" b)
    for n in "$a" "$r" "$b"; do
        if ip netns list | awk '{print $1}' | grep -qx "$n"; then
            die "namespace $n already exists (run: lab.sh down $name)"
        fi
    done
    # From here on, a failure leaves a partial lab: tear it down.
    trap 'cmd_down "$name" >/dev/null 2>&1' EXIT
    for n in "$a" "$r" "$b"; do
        ip netns add "$n"
        ip -n "$n" link set lo up
        # IPv6 autoconfiguration only adds noise (RS/DAD/MLD packets).
        nsx "$n" sysctl -qw net.ipv6.conf.all.disable_ipv6=1
        nsx "$n" sysctl -qw net.ipv6.conf.default.disable_ipv6=1
    done
    # Create each veth pair directly inside its two namespaces, so the
    # interface names never appear in (or collide with) the root namespace.
    ip link add "${name}ar" netns "$a" type veth peer name "${name}ra" netns "$r"
    ip link add "${name}rb" netns "$r" type veth peer name "${name}br" netns "$b"

    ip -n "$a" addr add "$(addr_of "$name" a)/24" dev "${name}ar"
    ip -n "$r" addr add "$(addr_of "$name" ra)/24" dev "${name}ra"
    ip -n "$r" addr add "$(addr_of "$name" rb)/24" dev "${name}rb"
    ip -n "$b" addr add "$(addr_of "$name" b)/24" dev "${name}br"
    for pair in "$a:${name}ar" "$r:${name}ra" "$r:${name}rb" "$b:${name}br"; do
        ip -n "${pair%%:*}" link set "${pair#*:}" up
    done
    # Receive packet steering by flow hash on every veth. A veth delivers
    # to the backlog of whichever CPU transmitted, so a flow whose sender
    # moves between CPUs is reordered; unshaped TCP then saw ~1300-1900
    # spurious fast retransmits per 5 s (TCPOFOQueue, no drop anywhere).
    # With RPS over all CPUs a flow always lands on one CPU, in order, and
    # unshaped TCP has zero retransmits, as on a well-behaved path.
    cpus=$(awk '/^Cpus_allowed:/ { print $2 }' /proc/self/status)
    for pair in "$a:${name}ar" "$r:${name}ra" "$r:${name}rb" "$b:${name}br"; do
        nsx "${pair%%:*}" sh -c "echo $cpus > /sys/class/net/${pair#*:}/queues/rx-0/rps_cpus"
    done
    ip -n "$a" route add default via "$(addr_of "$name" ra)"
    ip -n "$b" route add default via "$(addr_of "$name" rb)"
    nsx "$r" sysctl -qw net.ipv4.ip_forward=1

    # The drop table exists from the start with an empty forward chain;
    # `drop` and `nodrop` only change its rules.
    nsx "$r" nft -f - <<EOF
table inet lab {
    chain forward {
        type filter hook forward priority filter; policy accept;
    }
    # Runs after the drop rule: short UDP datagrams (a probe's hellos and
    # FINs, not its data) that r passed on towards each end. A receiving
    # kernel's InDatagrams counts them too, and hellos are resent every
    # 20 ms until the control connection answers, so how many there are
    # depends on the loss of that connection's own segments.
    chain census {
        type filter hook forward priority filter + 10; policy accept;
        oifname "${name}ra" udp length < 128 counter comment "short-udp-to-a"
        oifname "${name}rb" udp length < 128 counter comment "short-udp-to-b"
    }
}
EOF
    # Prove the path (and resolve the neighbour entries now, so the first
    # probe packet is not delayed by ARP): a TCP connect to a closed port
    # must come back "refused", i.e. the SYN went through r and the RST
    # came back. There is no ping on the machine.
    reach "$a" "$(addr_of "$name" b)" || die "a cannot reach b through r"
    reach "$b" "$(addr_of "$name" a)" || die "b cannot reach a through r"
    trap - EXIT
    echo "lab $name up: a=$(addr_of "$name" a) b=$(addr_of "$name" b)"
}

# tbf parameters, derived from the rate (measured with iperf3 on a 2-core
# machine, see tests/lab/validate-iperf3.sh):
#   burst = max(rate x 1 ms, 16 KiB) below 200 Mbit, rate x 10 ms from
#     200 Mbit. tbf refills tokens continuously and sleeps on an hrtimer, so
#     the bucket need not cover a jiffy; it must absorb the time r's CPU is
#     away: the watchdog and softirq wake-up latency, and on a virtual
#     machine the time the hypervisor takes the vCPU away (steal).
#     Capacity a stall leaves unused beyond a full bucket is lost for good,
#     with no drop and no retransmit: TCP arrives below the rate. At 800
#     Mbit a 1514 B bucket gave 354 Mbit/s instead of 765, 3028 B 691,
#     8000 B 755-761, 100 KB (1 ms) 764-765 on a quiet host but 675-745
#     while the hypervisor stole 3-17% of the CPUs; 1 MB (10 ms) gave the
#     rate in both. A full bucket's one-off burst is 0.2% of a 5 s probe's
#     bytes. Low rates keep the small bucket: at 50 Mbit with 4 streams a
#     bucket of 31 KB or 62 KB tripled the retransmits and cost 3-10% of
#     the goodput, while 16 KiB gave the rate.
#     The burst is also the largest packet tbf passes whole: bigger GSO
#     packets are segmented by tbf, and accounted per segment.
#   limit = max(rate x 20 ms, 2 x burst, 64 KiB) bytes of queue. The lab RTT
#     is far below 1 ms, so 20 ms is many bandwidth-delay products and TCP
#     keeps the queue non-empty through loss recovery. A limit below the
#     size of the GSO packets tbf lets through whole drops them wholesale:
#     at 800 Mbit, limit 50000 gave 27-148 Mbit/s.
tbf_args() {
    bps=$(rate_bps "$1")
    # LAB_TBF_BURST / LAB_TBF_LIMIT (bytes) override, for experiments.
    awk -v bps="$bps" -v xb="${LAB_TBF_BURST:-}" -v xl="${LAB_TBF_LIMIT:-}" 'BEGIN {
        burst = bps / 8 * (bps >= 200e6 ? 0.010 : 0.001)
        if (burst < 16384) burst = 16384
        limit = bps / 8 * 0.020
        if (limit < 2 * burst) limit = 2 * burst
        if (limit < 65536) limit = 65536
        if (xb != "") burst = xb
        if (xl != "") limit = xl
        printf "rate %sbit burst %d limit %d\n", bps, burst, limit
    }'
}

cmd_shape() {
    name=$1; rate=$2
    r=$(ns "$name" r)
    case "${3:-}" in
        '') ;;
        *[!0-9]*) die "bad queue limit '$3' (bytes)" ;;
        *) LAB_TBF_LIMIT=$3 ;;
    esac
    args=$(tbf_args "$rate")
    for dev in "${name}ra" "${name}rb"; do
        # A fresh qdisc rather than `replace`: changing a busy tbf's rate in
        # place sometimes left it dequeuing nothing for a minute or more (the
        # e2e test saw ARP fail across r after 200 -> 20 mbit).
        tc -n "$r" qdisc del dev "$dev" root 2>/dev/null || true
        # shellcheck disable=SC2086
        tc -n "$r" qdisc add dev "$dev" root tbf $args
    done
    echo "lab $name shaped: tbf $args on ${name}ra and ${name}rb"
}

cmd_unshape() {
    name=$1
    r=$(ns "$name" r)
    for dev in "${name}ra" "${name}rb"; do
        tc -n "$r" qdisc del dev "$dev" root 2>/dev/null || true
    done
}

# gso_max_segs of the end veths: 1 while dropping, the veth default else.
#   A GSO packet (TCP, or UDP with UDP_SEGMENT) of up to 45 segments is
#   forwarded through r as one skb, so the nftables rule would drop all its
#   segments at once and "1% random drop" would be a lumpy burst loss
#   (measured: 40 rule hits cost 800 UDP datagrams). With gso_max_segs 1 the
#   ends emit wire-sized packets, as a real NIC puts on the wire, and every
#   rule hit is exactly one lost packet (743 hits, 743 datagrams lost).
#   It is not the default: segmenting in software on both ends costs too
#   much CPU on 2 cores (800 Mbit shaped TCP fell to 370-520 Mbit/s).
#   TCP sockets read the limit when they connect: set drops before probing.
set_end_gso_segs() {
    ip -n "$(ns "$1" a)" link set "${1}ar" gso_max_segs "$2"
    ip -n "$(ns "$1" b)" link set "${1}br" gso_max_segs "$2"
}

cmd_drop() {
    name=$1; pct=$2; spare=${3:-}
    r=$(ns "$name" r)
    # PERCENT of 100000 buckets: 1 -> 1000, 0.5 -> 500.
    n=$(echo "$pct" | awk '/^[0-9]+(\.[0-9]+)?$/ { v = $0 * 1000;
            if (v > 100000) exit 1; printf "%.0f\n", v; next } { exit 1 }') \
        || die "bad drop percentage '$pct' (0-100)"
    nsx "$r" nft flush chain inet lab forward
    if [ "$n" -ge 100000 ]; then
        # A blackhole: everything goes, so batching does not matter.
        nsx "$r" nft add rule inet lab forward counter drop
    elif [ "$n" -gt 0 ]; then
        set_end_gso_segs "$name" 1
        if [ -n "$spare" ]; then
            # UDP length counts its own 8-byte header: 12 is a 4-byte
            # payload, and no data datagram of a probe is under 16.
            nsx "$r" nft add rule inet lab forward udp length '<' 16 accept
        fi
        nsx "$r" nft add rule inet lab forward numgen random mod 100000 '<' "$n" counter drop
    else
        set_end_gso_segs "$name" 65535
    fi
    echo "lab $name dropping $pct% (numgen random mod 100000 < $n) on r forward${spare:+, sparing UDP under 16 bytes}"
}

# One way only: packets r forwards that came in from a (its veth NAME-ra).
cmd_drop_ab() {
    name=$1; pct=$2
    r=$(ns "$name" r)
    n=$(echo "$pct" | awk '/^[0-9]+(\.[0-9]+)?$/ { v = $0 * 1000;
            if (v > 100000) exit 1; printf "%.0f\n", v; next } { exit 1 }') \
        || die "bad drop percentage '$pct' (0-100)"
    nsx "$r" nft flush chain inet lab forward
    set_end_gso_segs "$name" 1
    nsx "$r" nft add rule inet lab forward iifname "${name}ra" numgen random mod 100000 '<' "$n" counter drop
    echo "lab $name dropping $pct% of a -> b (numgen random mod 100000 < $n) on r forward"
}

cmd_nodrop() {
    name=$1
    nsx "$(ns "$name" r)" nft flush chain inet lab forward
    set_end_gso_segs "$name" 65535
}

cmd_down() {
    name=$1
    # a, r, b, and a star's hosts h1 .. hN.
    ends=$(ip netns list 2>/dev/null | awk -v p="$name-" '
        index($1, p) == 1 { e = substr($1, length(p) + 1); if (e ~ /^h[0-9]+$/) print e }')
    for end in a r b $ends; do
        n=$(ns "$name" "$end")
        # Kill anything still running inside, so the namespace really goes
        # away; deleting the namespace then deletes its veths and nft table.
        pids=$(ip netns pids "$n" 2>/dev/null || true)
        if [ -n "$pids" ]; then
            # shellcheck disable=SC2086
            kill -9 $pids 2>/dev/null || true
        fi
        ip netns del "$n" 2>/dev/null || true
    done
    return 0
}

star_addr() {   # star_addr NAME I [r]: host I's address, or r's side of it
    x=$(lab_index "$1")
    if [ "${3:-}" = r ]; then echo "10.$((210 + $2)).$x.1"; else echo "10.$((210 + $2)).$x.2"; fi
}

check_count() {
    case "$1" in ''|*[!0-9]*) die "bad host count '$1'" ;; esac
    [ "$1" -ge 2 ] && [ "$1" -le 40 ] || die "host count $1 not in 2..40"
}

cmd_star() {
    name=$1; count=$2
    r=$(ns "$name" r)
    for n in $(seq 1 "$count") r; do
        if ip netns list | awk '{print $1}' | grep -qx "$name-$n"; then
            die "namespace $name-$n already exists (run: lab.sh down $name)"
        fi
    done
    trap 'cmd_down "$name" >/dev/null 2>&1' EXIT
    cpus=$(awk '/^Cpus_allowed:/ { print $2 }' /proc/self/status)
    ip netns add "$r"
    ip -n "$r" link set lo up
    nsx "$r" sysctl -qw net.ipv6.conf.all.disable_ipv6=1
    nsx "$r" sysctl -qw net.ipv6.conf.default.disable_ipv6=1
    nsx "$r" sysctl -qw net.ipv4.ip_forward=1
    for i in $(seq 1 "$count"); do
        h=$(ns "$name" "h$i")
        ip netns add "$h"
        ip -n "$h" link set lo up
        nsx "$h" sysctl -qw net.ipv6.conf.all.disable_ipv6=1
        nsx "$h" sysctl -qw net.ipv6.conf.default.disable_ipv6=1
        ip link add "${name}h$i" netns "$h" type veth peer name "${name}r$i" netns "$r"
        ip -n "$h" addr add "$(star_addr "$name" "$i")/24" dev "${name}h$i"
        ip -n "$r" addr add "$(star_addr "$name" "$i" r)/24" dev "${name}r$i"
        ip -n "$h" link set "${name}h$i" up
        ip -n "$r" link set "${name}r$i" up
        # RPS as in `up`: no reordering between CPU backlogs.
        nsx "$h" sh -c "echo $cpus > /sys/class/net/${name}h$i/queues/rx-0/rps_cpus"
        nsx "$r" sh -c "echo $cpus > /sys/class/net/${name}r$i/queues/rx-0/rps_cpus"
        ip -n "$h" route add default via "$(star_addr "$name" "$i" r)"
    done
    # Every host reaches every other through r (and the neighbour entries
    # are resolved before the first probe).
    for i in $(seq 1 "$count"); do
        for j in $(seq 1 "$count"); do
            [ "$i" = "$j" ] && continue
            reach "$(ns "$name" "h$i")" "$(star_addr "$name" "$j")" \
                || die "h$i cannot reach h$j through r"
        done
    done
    trap - EXIT
    echo "star $name up: $count hosts around $r"
}

cmd_star_shape() {
    name=$1; count=$2; rate=$3
    r=$(ns "$name" r)
    case "${4:-}" in
        '') ;;
        *[!0-9]*) die "bad queue limit '$4' (bytes)" ;;
        *) LAB_TBF_LIMIT=$4 ;;
    esac
    args=$(tbf_args "$rate")
    for i in $(seq 1 "$count"); do
        tc -n "$r" qdisc del dev "${name}r$i" root 2>/dev/null || true
        # shellcheck disable=SC2086
        tc -n "$r" qdisc add dev "${name}r$i" root tbf $args
    done
    echo "star $name shaped: tbf $args on ${name}r1 .. ${name}r$count"
}

[ $# -ge 2 ] || die "usage: lab.sh up|shape|unshape|drop|drop-ab|drop-data|nodrop|down|exec|addr|star|star-shape|star-addr NAME ..."
sub=$1; name=$2; shift 2
check_name "$name"
case "$sub" in
    up)      cmd_up "$name" ;;
    shape)   [ $# -ge 1 ] && [ $# -le 2 ] || die "usage: lab.sh shape NAME RATE [LIMIT]"
             cmd_shape "$name" "$@" ;;
    unshape) cmd_unshape "$name" ;;
    drop)    [ $# -eq 1 ] || die "usage: lab.sh drop NAME PERCENT"; cmd_drop "$name" "$1" ;;
    nodrop)  cmd_nodrop "$name" ;;
    drop-ab) [ $# -eq 1 ] || die "usage: lab.sh drop-ab NAME PERCENT"; cmd_drop_ab "$name" "$1" ;;
    drop-data) [ $# -eq 1 ] || die "usage: lab.sh drop-data NAME PERCENT"; cmd_drop "$name" "$1" spare ;;
    down)    cmd_down "$name" ;;
    star)    [ $# -eq 1 ] || die "usage: lab.sh star NAME N"; check_count "$1"; cmd_star "$name" "$1" ;;
    star-shape) [ $# -ge 2 ] && [ $# -le 3 ] || die "usage: lab.sh star-shape NAME N RATE [LIMIT]"
             check_count "$1"; cmd_star_shape "$name" "$@" ;;
    star-addr) [ $# -eq 1 ] || die "usage: lab.sh star-addr NAME I"
             case "$1" in ''|*[!0-9]*) die "bad host index '$1'" ;; esac
             star_addr "$name" "$1" ;;
    addr)    [ $# -eq 1 ] || die "usage: lab.sh addr NAME a|b"
             case "$1" in a|b) addr_of "$name" "$1" ;; *) die "addr: a or b" ;; esac ;;
    exec)
        [ $# -ge 2 ] || die "usage: lab.sh exec NAME a|r|b|hI CMD..."
        end=$1; shift
        case "$end" in a|r|b|h[0-9]|h[0-9][0-9]) ;; *) die "exec: end must be a, r, b or hI" ;; esac
        exec ip netns exec "$(ns "$name" "$end")" "$@" ;;
    *) die "unknown subcommand '$sub'" ;;
esac
