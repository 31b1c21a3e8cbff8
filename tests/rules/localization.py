#!/usr/bin/env python3
# Generates tests/rules/localization.yml (see its header).
from collections import defaultdict
R={"r1":"10.0.1.1","r2":"10.0.2.1","r3":"10.0.3.1"}
H={"a1":("r1","10.0.1.10"),"a2":("r1","10.0.1.11"),"b1":("r2","10.0.2.10"),"b2":("r2","10.0.2.11"),"c1":("r3","10.0.3.10"),"c2":("r3","10.0.3.11")}
# address of router `to` on the link from `frm` (member x or y for r1-r2)
def link(frm,to,member):
    pair="".join(sorted([frm[1],to[1]]))
    net={"12":{"x":"12","y":"21"},"13":{"x":"13"},"23":{"x":"23"}}[pair][member if pair=="12" else "x"]
    return f"10.0.{net}.{to[1]}"
def hops(s,d,member,silent):
    rs,ip_s=H[s]; rd,ip_d=H[d]
    if rs==rd: h=[ip_d]
    else: h=[R[rs], link(rs,rd,member), ip_d]
    return [None if (a in silent) else a for a in h]
def L(s,d,extra=""):
    return f'target="{d}",module="udp"{extra},instance="{s}:9813",job="pathprobe"'
def paths():
    for s in H:
        for d in H:
            if s!=d: yield s,d
def scenario(degraded, member=lambda s,d:"x", silent=lambda s,d:(), how="loss", n=20):
    out=[]; votes=defaultdict(lambda:[0.0,0.0,0])
    for s,d in paths():
        hh=hops(s,d,member(s,d),silent(s,d)); bad=degraded(s,d)
        out.append((f"pathprobe_path_hops{{{L(s,d)}}}", f"{len(hh)}x{n}"))
        for i,a in enumerate(hh):
            if a:
                out.append(("pathprobe_path_hop_info{%s}" % L(s,d,',hop="%d",address="%s"'%(i+1,a)), f"1x{n}"))
                v=votes[a]; v[1]+=1/len(hh)
                if bad: v[0]+=1/len(hh); v[2]+=1
        pl=',kind="udp",direction="send"'
        if how=="loss":
            out.append((f"pathprobe_probe_success{{{L(s,d,pl)}}}", f"1x{n}"))
            out.append(("pathprobe_udp_loss_ratio{%s}" % L(s,d,pl+',flow="send"'), f"0x5 {'0.05' if bad else '0'}x{n-5}"))
        elif how=="fail":
            out.append((f"pathprobe_probe_success{{{L(s,d,pl)}}}", f"1x5 {'0' if bad else '1'}x{n-5}"))
            if bad:
                out.append(("pathprobe_probe_failure_info{%s}" % L(s,d,pl+',reason="timeout"'), f"_x5 1x{n-5}"))
        elif how=="throughput":
            out.append((f"pathprobe_probe_success{{{L(s,d,pl)}}}", f"1x{n}"))
            out.append(("pathprobe_throughput_bytes_per_second{%s}" % L(s,d,pl+',flow="send"'), f"100000000x{n-12} {'40000000' if bad else '100000000'}x12"))
    score={a:(v[0]*v[0]/v[1] if v[1] else 0) for a,v in votes.items()}
    top=max(score.values())
    fire=sorted(a for a,v in votes.items() if top>0 and abs(score[a]-top)<1e-9 and v[2]>=2 and v[0]/v[1]>=0.5)
    rank=sorted(score.items(), key=lambda x:-x[1])[:4]
    return out, fire, score, rank
def ann(a,score):
    return ("Hop %s is the likeliest place of the degradation" % a,
      ("%.2f is the suspect score of %s: degraded paths cross it, and few healthy ones. "
       "First look at which paths cross it: pathprobe_path_hop_info{address=\"%s\"} joined with "
       "pathprobe_path:degraded:max, and at the router or link it names (a link shows as the address "
       "of the router at its far end, the interface the trace entered by). Runbook: "
       "docs/ALERTS.md#pathprobesuspecthop.") % (score,a,a))
def emit(name, sc, quiet_at, fire_at, expect):
    series,fire,score,rank=sc
    assert fire==sorted(expect), (name, fire, rank)
    print(name, [(a,round(s,2)) for a,s in rank])
    r=[f"  - name: {name}", "    interval: 1m",
       "    # Suspect scores, highest first: " + ", ".join("%s %.2f"%(a,s) for a,s in rank),
       "    input_series:"]
    for s,v in series:
        r.append(f"      - series: '{s}'"); r.append(f"        values: '{v}'")
    r.append("    alert_rule_test:")
    for t in quiet_at:
        r += [f"      - eval_time: {t}", "        alertname: PathprobeSuspectHop", "        exp_alerts: []"]
    if fire_at:
        r += [f"      - eval_time: {fire_at}", "        alertname: PathprobeSuspectHop", "        exp_alerts:"]
        for a in fire:
            su,de=ann(a,score[a])
            r += ["          - exp_labels:", "              severity: warning", f'              address: "{a}"',
                  "            exp_annotations:", f'              summary: "{su}"',
                  "              description: '%s'" % de]
    return "\n".join(r)
parts=[]
parts.append(emit("a healthy mesh names no suspect", scenario(lambda s,d:False), ["19m"], None, []))
parts.append(emit("a lossy link r1 to r2, the far end of the link ranks first",
  scenario(lambda s,d: H[s][0]=="r1" and H[d][0]=="r2"), ["8m"], "15m", ["10.0.12.2"]))
parts.append(emit("a failing router r1, its address ranks first",
  scenario(lambda s,d: (H[s][0]=="r1")!=(H[d][0]=="r1"), how="fail"), ["8m"], "15m", ["10.0.1.1"]))
mem=lambda s,d: "x" if s in ("a1","b1") else "y"
parts.append(emit("one ECMP member slow, the ends of that link rank first, not its twin",
  scenario(lambda s,d: {H[s][0],H[d][0]}=={"r1","r2"} and mem(s,d)=="x", member=mem, how="throughput", n=200),
  ["185m"], "199m", ["10.0.12.1","10.0.12.2"]))
parts.append(emit("a silent router and one that rate-limits its ICMP are not the suspect",
  scenario(lambda s,d: d=="b1", silent=lambda s,d: ("10.0.1.1","10.0.12.1","10.0.13.1") + (("10.0.3.1",) if s=="c2" else ())),
  [], "15m", ["10.0.2.10"]))
head='''# promtool unit tests for config/alerts.yml: the localization rules
# (group pathprobe_localization, 007's vote) and PathprobeSuspectHop.
# Run: promtool test rules tests/rules/*.yml (tests/integration/rules.rs does).
#
# Six hosts on three router LANs: a1, a2 (10.0.1.10, .11) behind r1
# (10.0.1.1), b1, b2 (10.0.2.10, .11) behind r2 (10.0.2.1), c1, c2
# (10.0.3.10, .11) behind r3 (10.0.3.1). The routers form a triangle:
# r1-r3 (10.0.13.0/24), r2-r3 (10.0.23.0/24), and r1-r2 over two
# equal-cost links, x (10.0.12.0/24) and y (10.0.21.0/24); .1 is r1's end,
# .2 r2's, .3 r3's. A router answers a trace from the interface the packet
# came in by: a path from a1 to b1 over x is 10.0.1.1, 10.0.12.2,
# 10.0.2.10; hosts on one LAN are one hop apart. Every host probes every
# other (module udp) and has traced each path.
#
# Each test injures one thing (a link's loss, a whole router's forwarding,
# one ECMP member's rate) and expects the injured hop, alone, to be named;
# the healthy mesh names none; a router that sends no ICMP (r1 in the
# last test) or rate-limits it (r3: c2's traces got no answer from it)
# gets no vote and is not named. The scores in the comments are the
# rules' arithmetic, done again for every hop by the generator of this
# file, tests/rules/localization.py (`python3 tests/rules/localization.py`
# rewrites it, and fails if its own arithmetic names another hop).

rule_files:
  - ../../config/alerts.yml

evaluation_interval: 1m

group_eval_order:
  - pathprobe_throughput
  - pathprobe_kernel
  - pathprobe_quality
  - pathprobe_rr
  - pathprobe_alerts
  - pathprobe_localization

tests:
'''
open(__import__("os").path.join(__import__("os").path.dirname(__file__), "localization.yml"),"w").write(head+"\n\n".join(parts)+"\n")
