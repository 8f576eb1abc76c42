"""Prints the answers of a schemathesis run by operation and status.

Usage: summary.py REPORT.ndjson. Reads the ndjson report of `schemathesis
run --report ndjson`; prints one line per operation and a total of requests.
"""

import collections
import json
import sys


def main(path):
    by_op = collections.defaultdict(collections.Counter)
    with open(path, encoding="utf-8") as f:
        for line in f:
            event = json.loads(line)
            done = event.get("ScenarioFinished")
            if not done:
                continue
            rec = done.get("recorder") or {}
            for inter in (rec.get("interactions") or {}).values():
                resp = inter.get("response")
                by_op[rec.get("label", "?")][resp["status_code"] if resp else "no answer"] += 1
    total = 0
    for op in sorted(by_op):
        n = sum(by_op[op].values())
        total += n
        statuses = " ".join(f"{s}:{c}" for s, c in sorted(by_op[op].items(), key=lambda x: str(x[0])))
        print(f"  {op:48} {n:6}  {statuses}")
    print(f"  {'requests':48} {total:6}")


if __name__ == "__main__":
    main(sys.argv[1])
