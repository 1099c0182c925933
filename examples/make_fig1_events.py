"""Writes examples/fig1-events.jsonl: 60 s of the Fig. 1 sources on three servers a, b, c.

As in §VI-B, sources produce a tuple every half second: each server reports its CPU load and the
RTT it measured to each other server.  Values are a seeded random walk, so the file is
reproducible: ``python3 examples/make_fig1_events.py``.
"""

import json
import random
from pathlib import Path

START_US = 1_171_357_200_000_000      # 2007-02-13 09:00:00 UTC, the start of the paper's trace
SERVERS = ("a", "b", "c")
BASE_RTT_MS = {("a", "b"): 80.0, ("a", "c"): 110.0, ("b", "c"): 60.0}


def events(seconds: int = 60, seed: int = 2008) -> list[dict]:
    rng = random.Random(seed)
    load = {s: 0.5 for s in SERVERS}
    out = []
    for tick in range(seconds * 2):
        for server in SERVERS:
            # each source stamps with its own (well-synchronised) clock: a few ms of skew
            ts = START_US + tick * 500_000 + rng.randrange(0, 3_000)
            load[server] = min(1.0, max(0.0, load[server] + rng.uniform(-0.08, 0.08)))
            out.append({"stream": f"cpu_{server}", "ts": ts, "server": server, "load": round(load[server], 3)})
            for other in SERVERS:
                if other != server:
                    base = BASE_RTT_MS[tuple(sorted((server, other)))]
                    rtt = base * rng.uniform(0.9, 1.3) + (400.0 if rng.random() < 0.03 else 0.0)
                    out.append({"stream": f"ping_{server}", "ts": ts, "src": server, "dst": other,
                                "rtt_ms": round(rtt, 2)})
    out.sort(key=lambda e: e["ts"])
    return out


if __name__ == "__main__":
    path = Path(__file__).with_name("fig1-events.jsonl")
    path.write_text("".join(json.dumps(e) + "\n" for e in events()), encoding="utf-8")
    print(f"wrote {path}")
