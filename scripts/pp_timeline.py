#!/usr/bin/env python3
"""Merges the per-rank pipeline timelines that STRATA_PP_TIMELINE=<prefix> writes
(<prefix>.0, <prefix>.1, ...; one block per step, see PipelineExecutor::write_timeline)
and prints, for one step: every rank's actions, each receive's wait split into the time
spent waiting for the peer to post the send and the latency after it, the critical path
of the step, and where its time went.

  rm -f /tmp/tl.*; STRATA_PP_TIMELINE=/tmp/tl OMP_NUM_THREADS=1 mpirun --allow-run-as-root \\
      --oversubscribe -np 2 build/strata bench pp --steps 5 --schedules 1f1b --microbatches 16 \\
      --exchanges inline
  python3 scripts/pp_timeline.py /tmp/tl [--step N] [--schedule 1f1b] [--m 16] [--events]

The clock is steady_clock (CLOCK_MONOTONIC), the same for every process of one host, so
the ranks' times compare directly. Times are printed in ms from the step's start.
"""
import argparse
import glob
import sys


def parse(path):
    steps, cur = [], None
    for line in open(path):
        f = line.split()
        if not f:
            continue
        if f[0] == "step":
            h = dict(zip(f[0::2], f[1::2]))
            cur = {"step": int(h["step"]), "schedule": h["schedule"], "m": int(h["m"]), "v": int(h["v"]),
                   "inline": int(h["inline"]), "rank": int(h["rank"]), "ev": [], "S": None}
            steps.append(cur)
        elif f[0] == "S":
            if cur is not None:
                cur["S"] = (int(f[1]), int(f[2]))
        else:
            kind, mb, stage, d, msg, peer, t0, t1, cpu = f
            cur["ev"].append({"k": kind, "mb": int(mb), "st": int(stage), "dir": d, "msg": msg, "peer": int(peer),
                              "t0": int(t0), "t1": int(t1), "cpu": int(cpu)})
    return steps


def label(e):
    if e["k"] in "FBG":  # G: a zb-h1 weight pass (W)
        return "%s%d@%d" % (e["k"], e["mb"], e["st"])
    if e["k"] == "L":
        return "loss exchange"
    what = "%s(%d,%d)" % ("act" if e["msg"] == "a" else "grad", e["mb"], e["st"])
    verb = "post" if e["k"] == "P" else "wait"
    return "%s %s %s" % (verb, "send" if e["dir"] == "s" else "recv", what)


def med(xs):
    xs = sorted(xs)
    return "n %4d p10 %7.1f p50 %7.1f p90 %7.1f us" % (len(xs), xs[len(xs) // 10] / 1e3, xs[len(xs) // 2] / 1e3,
                                                       xs[len(xs) * 9 // 10] / 1e3) if xs else "n 0"


def stats(ranks, pick):
    """Per rank: what posting a send / a receive costs, what completing a receive whose
    send was posted before the wait began costs (the receiver copies the data then: CMA),
    and, for receives waited for before the send was posted, send post -> completion."""
    for r, steps in enumerate(ranks):
        c = {"post send": [], "post recv": [], "wait recv, data posted before": [],
             "send post -> recv complete, receiver waiting": [], "wait send": [], "post send, CPU": [],
             "post recv, CPU": [], "wait recv, data posted before, CPU": []}
        for i in pick:
            s = steps[i]
            sends = {}
            for rr in ranks:
                for e in rr[i]["ev"]:
                    if e["k"] == "P" and e["dir"] == "s":
                        sends[(e["msg"], e["mb"], e["st"])] = e
            for e in s["ev"]:
                d = e["t1"] - e["t0"]
                if e["k"] == "P":
                    c["post send" if e["dir"] == "s" else "post recv"].append(d)
                    c["post send, CPU" if e["dir"] == "s" else "post recv, CPU"].append(e["cpu"])
                elif e["k"] == "W" and e["dir"] == "s":
                    c["wait send"].append(d)
                elif e["k"] == "W":
                    se = sends[(e["msg"], e["mb"], e["st"])]
                    if se["t1"] <= e["t0"]:
                        c["wait recv, data posted before"].append(d)
                        c["wait recv, data posted before, CPU"].append(e["cpu"])
                    else:
                        c["send post -> recv complete, receiver waiting"].append(e["t1"] - se["t1"])
        print("rank %d over %d step(s):" % (r, len(pick)))
        for k, v in c.items():
            print("  %-46s %s" % (k, med(v)))


def replay(st, durations, latency_ns=0):
    """Makespan of the ranks' compute orders as recorded, every compute taking
    durations[(rank, kind, mb, stage)], a message `latency_ns` from its producer's end to
    its consumer's start, nothing else (no posts, no waits, no gaps)."""
    order = [[e for e in s["ev"] if e["k"] in "FBG"] for s in st]
    owner = {(e["k"], e["mb"], e["st"]): r for r, o in enumerate(order) for e in o}
    S = 1 + max(k[2] for k in owner)
    end, pos, t = {}, [0] * len(order), [0] * len(order)
    progress = True
    while progress:
        progress = False
        for r, o in enumerate(order):
            while pos[r] < len(o):
                e = o[pos[r]]
                k, mb, sg = e["k"], e["mb"], e["st"]
                dep = (("F", mb, sg - 1) if k == "F" and sg > 0 else ("B", mb, sg + 1) if k == "B" and sg < S - 1
                       else ("B", mb, sg) if k == "G" else None)
                if dep is not None and dep not in end:
                    break
                start = t[r]
                if dep is not None:
                    start = max(start, end[dep] + (latency_ns if owner[dep] != r else 0))
                t[r] = start + durations[(r, k, mb, sg)]
                end[(k, mb, sg)] = t[r]
                pos[r] += 1
                progress = True
    if any(pos[r] < len(o) for r, o in enumerate(order)):
        sys.exit("replay: the recorded orders deadlock")
    return max(t)


def explain(st):
    """Splits the schedule's span into: the formula's ideal, the stages' imbalance, the
    compute times' variation (jitter), and everything else (exchanges, posts, gaps)."""
    order = [[e for e in s["ev"] if e["k"] in "FBG"] for s in st]
    actual = {(r, e["k"], e["mb"], e["st"]): e["t1"] - e["t0"] for r, o in enumerate(order) for e in o}
    means = {}
    for (r, k, mb, sg), d in actual.items():
        means.setdefault((r, k), []).append(d)
    means = {key: sum(v) / len(v) for key, v in means.items()}
    by_mean = {key: means[(key[0], key[1])] for key in actual}
    P = len(st)
    busy = [sum(d for key, d in actual.items() if key[0] == r) for r in range(P)]
    span = max(o[-1]["t1"] for o in order) - min(o[0]["t0"] for o in order)
    step = max(s["S"][1] - s["S"][0] for s in st) if all(s["S"] for s in st) else float("nan")
    m, v = st[0]["m"], st[0]["v"]
    formula = (P - 1) / (3 * m + P - 1) if st[0]["schedule"] == "zb-h1" else (P - 1) / (v * m + P - 1)
    ideal = max(busy) / (1 - formula)
    r_mean = replay(st, by_mean)
    r_act = replay(st, actual)
    print("where the step went (ms): busiest rank's compute %.2f; at the formula's bubble that is a step of %.2f;" %
          (max(busy) / 1e6, ideal / 1e6))
    print("  replayed with each rank's mean F / B time, no communication cost: %.2f (stage imbalance %+.2f)" %
          (r_mean / 1e6, (r_mean - ideal) / 1e6))
    print("  replayed with the measured F / B times, no communication cost:    %.2f (compute-time variation %+.2f)" %
          (r_act / 1e6, (r_act - r_mean) / 1e6))
    print("  the schedule as run (first compute start to last compute end):    %.2f (exchanges, posts, gaps %+.2f)" %
          (span / 1e6, (span - r_act) / 1e6))
    print("  the step (pipeline_step + finalize):                              %.2f (loss exchange, tied sum, "
          "finalize %+.2f)" % (step / 1e6, (step - span) / 1e6))
    return ideal, r_mean, r_act, span, step


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("prefix")
    ap.add_argument("--step", type=int, default=None, help="the step's index in the files (default: the last match)")
    ap.add_argument("--schedule", default=None)
    ap.add_argument("--m", type=int, default=None)
    ap.add_argument("--events", action="store_true", help="print every rank's events")
    ap.add_argument("--explain", action="store_true",
                    help="split every matching step's excess over the formula by cause (replays)")
    ap.add_argument("--stats", action="store_true",
                    help="medians of the per-exchange costs over every matching step (all ranks)")
    a = ap.parse_args()
    files = sorted(glob.glob(a.prefix + ".*"), key=lambda p: int(p.rsplit(".", 1)[1]))
    if not files:
        sys.exit("no files %s.*" % a.prefix)
    ranks = [parse(p) for p in files]
    n = min(len(r) for r in ranks)
    pick = [i for i in range(n) if (a.schedule is None or ranks[0][i]["schedule"] == a.schedule) and
            (a.m is None or ranks[0][i]["m"] == a.m)]
    if not pick:
        sys.exit("no step matches")
    if a.stats:
        stats(ranks, pick)
    if a.explain:
        rows = []
        for k in pick:
            print("step %d:" % k, end=" ")
            rows.append(explain([r[k] for r in ranks]))
        rows.sort(key=lambda x: x[4])
        med = rows[len(rows) // 2]
        print("median step %d of %d: formula step %.2f, + imbalance %.2f, + variation %.2f, + exchanges %.2f, "
              "+ after the schedule %.2f = %.2f ms" % (len(rows) // 2, len(rows), med[0] / 1e6, (med[1] - med[0]) / 1e6,
                                                      (med[2] - med[1]) / 1e6, (med[3] - med[2]) / 1e6,
                                                      (med[4] - med[3]) / 1e6, med[4] / 1e6))
    i = a.step if a.step is not None else pick[-1]
    st = [r[i] for r in ranks]
    P = len(st)
    T0 = min(s["S"][0] if s["S"] else s["ev"][0]["t0"] for s in st)
    ms = lambda t: (t - T0) / 1e6
    print("step %d: %s m %d v %d, %s exchanges, %d ranks" %
          (i, st[0]["schedule"], st[0]["m"], st[0]["v"], "inline" if st[0]["inline"] else "thread", P))

    # The peer's send of every message: key (msg, mb, stage) -> (rank, event).
    sends = {}
    for r, s in enumerate(st):
        for e in s["ev"]:
            if e["k"] == "P" and e["dir"] == "s":
                sends[(e["msg"], e["mb"], e["st"])] = (r, e)

    for r, s in enumerate(st):
        ev = s["ev"]
        comp = sum(e["t1"] - e["t0"] for e in ev if e["k"] in "FBG")
        post = sum(e["t1"] - e["t0"] for e in ev if e["k"] == "P")
        wait_peer = wait_lat = wait_send = 0
        lats = []
        for e in ev:
            if e["k"] != "W":
                continue
            if e["dir"] == "s":
                wait_send += e["t1"] - e["t0"]
                continue
            _, se = sends[(e["msg"], e["mb"], e["st"])]
            ready = max(e["t0"], se["t1"])
            wait_peer += max(0, min(se["t1"], e["t1"]) - e["t0"])
            lat = e["t1"] - ready
            wait_lat += max(0, lat)
            if se["t1"] > e["t0"]:
                lats.append(lat)  # the receiver was already waiting when the send was posted
        span = ev[-1]["t1"] - ev[0]["t0"]
        gaps = span - sum(e["t1"] - e["t0"] for e in ev)
        S = s["S"]
        lats.sort()
        q = lambda p: lats[min(len(lats) - 1, int(p * len(lats)))] / 1e3 if lats else float("nan")
        print("rank %d: step %.2f ms, schedule span %.2f (first event %.2f, loss exchange end %.2f): compute %.2f, "
              "posting %.2f, waiting for the peer's send %.2f, latency after it %.2f, waiting on sends %.2f, "
              "between events %.2f; after the executor %.2f" %
              (r, (S[1] - S[0]) / 1e6 if S else float("nan"), span / 1e6, ms(ev[0]["t0"]), ms(ev[-1]["t1"]), comp / 1e6,
               post / 1e6, wait_peer / 1e6, wait_lat / 1e6, wait_send / 1e6, gaps / 1e6,
               (S[1] - ev[-1]["t1"]) / 1e6 if S else float("nan")))
        print("  receives waited for before the send was posted: %d, send post -> receive complete us: "
              "p10 %.0f p50 %.0f p90 %.0f max %.0f" % (len(lats), q(0.1), q(0.5), q(0.9), q(1.0)))
        if a.events:
            for e in ev:
                extra = ""
                if e["k"] == "W" and e["dir"] == "r":
                    pr, se = sends[(e["msg"], e["mb"], e["st"])]
                    extra = "  (rank %d posted the send at %.3f; complete %.0f us after)" % (
                        pr, ms(se["t1"]), (e["t1"] - max(e["t0"], se["t1"])) / 1e3)
                print("    %9.3f %9.3f %8.3f  %s%s" % (ms(e["t0"]), ms(e["t1"]), (e["t1"] - e["t0"]) / 1e6, label(e), extra))

    # Critical path: from the end of the rank whose schedule ended last, walk back through
    # its events; a receive that waited for its peer jumps to the peer's send post.
    r = max(range(P), key=lambda k: st[k]["ev"][-1]["t1"])
    t = st[r]["ev"][-1]["t1"]
    path = []  # (rank, what, t0, t1)
    tot = {"compute": 0, "transfer": 0, "local": 0}
    guard = 0
    while guard < 100000:
        guard += 1
        ev = [e for e in st[r]["ev"] if e["t1"] <= t]
        if not ev:
            break
        e = ev[-1]
        if t > e["t1"]:
            path.append((r, "(between events)", e["t1"], t))
            tot["local"] += t - e["t1"]
        if e["k"] in "FB":
            path.append((r, label(e), e["t0"], e["t1"]))
            tot["compute"] += e["t1"] - e["t0"]
            t = e["t0"]
            continue
        if e["k"] == "W" and e["dir"] == "r":
            pr, se = sends[(e["msg"], e["mb"], e["st"])]
            if se["t1"] > e["t0"]:  # blocked on the peer: the path goes through its send
                path.append((r, label(e) + " after rank %d's post" % pr, se["t1"], e["t1"]))
                tot["transfer"] += e["t1"] - se["t1"]
                r, t = pr, se["t1"]
                continue
        path.append((r, label(e), e["t0"], e["t1"]))
        tot["local"] += e["t1"] - e["t0"]
        t = e["t0"]
    path.reverse()
    span = sum(tot.values())
    print("critical path (%.2f ms): compute %.2f, transfer (send post -> receive complete, receiver waiting) %.2f, "
          "local (posting, waits that did not block on the peer, gaps, loss exchange) %.2f" %
          (span / 1e6, tot["compute"] / 1e6, tot["transfer"] / 1e6, tot["local"] / 1e6))
    if a.events:
        for (rr, what, t0, t1) in path:
            if t1 - t0 > 0:
                print("    r%d %9.3f %8.3f  %s" % (rr, ms(t0), (t1 - t0) / 1e6, what))


if __name__ == "__main__":
    main()
