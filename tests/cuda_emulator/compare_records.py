#!/usr/bin/env python3
"""Compares the launch logs of two runs of one test binary on the emulated CUDA device
(BOOSTLM_CUDA_EMULATOR_RECORD, src/cuda_emulator/record.h) bit for bit: the same launches in the
same sequence, each writing the same bytes into every allocation its arguments point to. A
difference means a kernel whose output depends on the thread or block order (a race) or on memory
no thread wrote; the first differing launch is named.

Usage: compare_records.py FIRST.log SECOND.log
"""

import sys


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: compare_records.py FIRST.log SECOND.log")
    logs = []
    for path in sys.argv[1:]:
        try:
            with open(path, encoding="utf-8") as f:
                logs.append(f.read().splitlines())
        except OSError as e:
            sys.exit(f"compare_records: {e}")
    first, second = logs
    if not first:
        sys.exit(f"compare_records: {sys.argv[1]} records no launch (was the run recorded?)")
    for number, (a, b) in enumerate(zip(first, second), start=1):
        if a != b:
            print(f"launch {number} differs between the two orders:", file=sys.stderr)
            print(f"  {sys.argv[1]}: {a}", file=sys.stderr)
            print(f"  {sys.argv[2]}: {b}", file=sys.stderr)
            sys.exit(1)
    if len(first) != len(second):
        sys.exit(f"compare_records: {len(first)} launches against {len(second)}")
    print(f"{len(first)} launches, every output bit-identical between the two orders")


if __name__ == "__main__":
    main()
