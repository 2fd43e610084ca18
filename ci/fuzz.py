"""Differential fuzzing of rammer's backends against the reference backend (docs/reliability.md).

    python ci/fuzz.py --minutes 60                         # the long run: both campaigns, every backend here
    python ci/fuzz.py --graphs 2000 --mutants 1000 --seed 7 --backends cpu
    python ci/fuzz.py --replay graphs:1234 --backends cpu  # one case again, minimised and printed
    python ci/fuzz.py --summarize a.jsonl b.jsonl           # the per-backend, per-campaign table of runs

Campaigns: "graphs" (valid random models: the backend must agree with reference) and "mutants" (broken
copies: run correctly or refused with an error naming the node, op or tensor).  Findings are printed
minimised; every case is one JSON line in --out.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time


def _replay(spec: str, backend: str) -> int:
    from rammer.fuzzing.campaign import build_case
    from rammer.fuzzing.minimize import as_text, minimize
    from rammer.fuzzing.oracle import FAILURES, run_case

    campaign, seed = spec.split(":")
    data, feeds, label = build_case(campaign, int(seed))
    out = run_case(data, feeds, backend)
    print(f"{campaign}:{seed} ({label}) on {backend}: {out.kind} {out.detail}")
    if out.kind not in FAILURES:
        return 0
    small, small_feeds = minimize(data, feeds, out.kind, lambda d, f: run_case(d, f, backend).kind)
    print(as_text(small, small_feeds))
    return 1


def _print_minimized(campaign: str, seed: int, kind: str, backend: str) -> None:
    from rammer.fuzzing.campaign import build_case
    from rammer.fuzzing.minimize import as_text, minimize
    from rammer.fuzzing.oracle import run_case

    data, feeds, _ = build_case(campaign, seed)
    if campaign == "graphs":
        data, feeds = minimize(data, feeds, kind, lambda d, f: run_case(d, f, backend).kind)
    print("    " + as_text(data, feeds).replace("\n", "\n    "), flush=True)


def _summarize(paths: list[str]) -> int:
    """Print the table of docs/reliability.md from the JSON lines of earlier runs (a case counted once)."""
    from collections import Counter, defaultdict

    from rammer.fuzzing.oracle import FAILURES

    seen: dict[tuple, str] = {}
    for path in paths:
        with open(path, encoding="utf-8") as f:
            for line in f:
                try:
                    r = json.loads(line)
                except ValueError:  # a run killed mid-line
                    continue
                seen[(r["backend"], r["campaign"], r["seed"])] = r["kind"]
    counts: dict[tuple, Counter] = defaultdict(Counter)
    for (backend, campaign, _), kind in seen.items():
        counts[(backend, campaign)][kind] += 1
    print("| backend | campaign | cases | ok | invalid (refused by name) | skipped | failures | failure kinds |")
    print("|---|---|---:|---:|---:|---:|---:|---|")
    bad = 0
    for (backend, campaign), c in sorted(counts.items()):
        fails = {k: v for k, v in c.items() if k in FAILURES}
        bad += sum(fails.values())
        kinds = ", ".join(f"{k} {v}" for k, v in sorted(fails.items())) or "-"
        print(f"| {backend} | {campaign} | {sum(c.values())} | {c.get('ok', 0)} | {c.get('invalid', 0)} | "
              f"{c.get('skipped', 0)} | {sum(fails.values())} | {kinds} |")
    return 1 if bad else 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--minutes", type=float, help="stop after this long (campaigns share it)")
    ap.add_argument("--graphs", type=int, default=None, help="random graphs per backend (default: until --minutes)")
    ap.add_argument("--mutants", type=int, default=None, help="mutated models per backend")
    ap.add_argument("--seed", type=int, default=0, help="first seed (cases are seed, seed+1, ...)")
    ap.add_argument("--backends", default=None, help="comma-separated (default: every available backend but "
                                                     "reference)")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--timeout", type=float, default=60.0, help="seconds before a case counts as a hang")
    ap.add_argument("--out", default="fuzz-results.jsonl", help="one JSON line per case")
    ap.add_argument("--replay", metavar="CAMPAIGN:SEED", help="rerun one case, minimise it if it fails")
    ap.add_argument("--no-minimize", action="store_true", help="print findings without minimising them")
    ap.add_argument("--summarize", nargs="+", metavar="JSONL", help="print the table of these runs' results")
    args = ap.parse_args()
    if args.summarize:
        return _summarize(args.summarize)
    import rammer

    backends = args.backends.split(",") if args.backends else sorted(
        n for n, b in rammer.plugins.backends().items() if n != "reference" and b.availability().ok
        and b.capabilities.device == "cpu")
    if args.replay:
        return max(_replay(args.replay, b) for b in backends)
    from rammer.fuzzing.campaign import run_campaign

    if args.graphs is None and args.mutants is None and args.minutes is None:
        ap.error("give --minutes, or --graphs/--mutants")
    deadline = time.time() + args.minutes * 60 if args.minutes else None
    plan = [("graphs", args.graphs), ("mutants", args.mutants)]
    if args.graphs is None and args.mutants is None:
        plan = [("graphs", None), ("mutants", None)]
    results = []
    with open(args.out, "a", encoding="utf-8") as log:
        for backend in backends:
            for k, (campaign, count) in enumerate(plan):
                if count == 0:
                    continue
                # with only --minutes, the campaigns (and backends) share the time evenly
                share = None
                if deadline is not None:
                    left = [(b, c) for b in backends[backends.index(backend):] for c in plan][k:]
                    share = time.time() + max(0.0, deadline - time.time()) / max(1, len(left))
                seeds = range(args.seed, args.seed + count) if count is not None else _forever(args.seed)
                print(f"{backend}: {campaign} from seed {args.seed}"
                      + (f", {count} cases" if count is not None else "") + " ...", flush=True)
                res = run_campaign(backend, campaign, seeds, workers=args.workers, timeout_s=args.timeout,
                                   deadline=share, log=log)
                results.append(res)
                print(json.dumps(res.summary()), flush=True)
                for n, f in enumerate(res.findings[:20]):
                    print(f"  {f['kind']}: {campaign}:{f['seed']} ({f.get('label', '')}) {f['detail'][:300]}")
                    # a crash or hang would take this process down with it: those are replayed by hand
                    if not args.no_minimize and n < 5 and f["kind"] not in ("crash", "hang"):
                        _print_minimized(campaign, f["seed"], f["kind"], backend)
    print("\n| backend | campaign | cases | ok | invalid | failures | kinds | seconds |")
    print("|---|---|---:|---:|---:|---:|---|---:|")
    for r in results:
        s = r.summary()
        kinds = ", ".join(f"{k} {v}" for k, v in sorted(s["counts"].items()) if k not in ("ok", "invalid"))
        print(f"| {r.backend} | {r.campaign} | {s['cases']} | {s['counts'].get('ok', 0)} | "
              f"{s['counts'].get('invalid', 0)} | {s['failures']} | {kinds or '-'} | {s['seconds']} |")
    return 1 if any(r.findings for r in results) else 0


def _forever(start: int):
    n = start
    while True:
        yield n
        n += 1


if __name__ == "__main__":
    os.environ.setdefault("NUMBA_NUM_THREADS", "2")
    sys.exit(main())
