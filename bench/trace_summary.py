"""Self time per operator of a LibTorch profiler trace (chrome://tracing JSON).

    KEYCLD_TORCH_PROFILE=/tmp/trace.json build/train_bench --benchmark_filter='BM_TrainStep/32/16/50/0/2/0/0/2/1/4/'
    python3 bench/trace_summary.py /tmp/trace.json --steps 10

train_bench writes the trace of 10 steps when KEYCLD_TORCH_PROFILE names a file. An event's self
time is its duration less that of the events nested directly inside it on the same thread;
the table lists the operators by self time per step, with their calls per step. The operators
that dispatch into others (aten::conv2d → mkldnn_convolution) show only their own overhead.
"""

import argparse
import collections
import json
import sys


def self_times(events):
    """{name: [self µs, calls]} over events (dicts with name, ts, dur, tid)."""
    totals = collections.defaultdict(lambda: [0.0, 0])
    by_thread = collections.defaultdict(list)
    for e in events:
        if e.get("ph") == "X" and "dur" in e:
            by_thread[(e.get("pid"), e.get("tid"))].append(e)
    wall = 0.0
    for thread_events in by_thread.values():
        thread_events.sort(key=lambda e: (e["ts"], -e["dur"]))
        stack = []  # open events: [end, name, child time]
        for e in thread_events:
            start, end = e["ts"], e["ts"] + e["dur"]
            while stack and stack[-1][0] <= start:
                done = stack.pop()
                totals[done[1]][0] += done[3] - done[2]
            if stack:
                stack[-1][2] += e["dur"]
            else:
                wall += e["dur"]
            totals[e["name"]][1] += 1
            stack.append([end, e["name"], 0.0, e["dur"]])
        while stack:
            done = stack.pop()
            totals[done[1]][0] += done[3] - done[2]
    return totals, wall


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trace")
    parser.add_argument("--steps", type=int, default=10, help="steps in the trace")
    parser.add_argument("--top", type=int, default=30)
    args = parser.parse_args()
    if args.steps < 1 or args.top < 1:
        sys.exit("trace_summary: --steps and --top must be at least 1")
    try:
        with open(args.trace) as f:
            text = f.read().rstrip().rstrip(",")
        events = json.loads(text if text.endswith("]") else text + "]")
    except (OSError, ValueError) as error:
        sys.exit(f"trace_summary: cannot read {args.trace}: {error}")
    if not isinstance(events, list):
        sys.exit(f"trace_summary: {args.trace} is not a trace (expected a JSON list of events)")
    totals, wall = self_times(events)
    if not totals:
        sys.exit(f"trace_summary: {args.trace} holds no complete ('X') events")
    ops = sorted(totals.items(), key=lambda item: -item[1][0])
    calls = sum(c for _, (_, c) in ops)
    print(f"{args.steps} steps: {wall / 1e3 / args.steps:.2f} ms/step inside top-level operators, "
          f"{calls / args.steps:.0f} operator calls/step")
    print(f"{'operator':45s} {'ms/step':>9s} {'calls/step':>11s}")
    for name, (micros, count) in ops[:args.top]:
        print(f"{name:45s} {micros / 1e3 / args.steps:9.3f} {count / args.steps:11.1f}")


if __name__ == "__main__":
    main()
